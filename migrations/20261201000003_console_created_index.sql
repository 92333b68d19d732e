-- no-transaction
-- The console's time-range search (newest first within the range, keyset on created_at and id)
-- and its per-minute "published" chart.
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_event_created_idx
    ON outbox_event (created_at);
