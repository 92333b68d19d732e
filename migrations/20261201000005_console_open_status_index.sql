-- no-transaction
-- The console's counts of pending, processing, failed and cancelled rows: an index-only count
-- of the rows that are not done (done rows, the bulk of the table, never enter it).
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_event_open_status_idx
    ON outbox_event (status) WHERE status <> 'done';
