-- no-transaction
-- The console's time-range search and its per-minute "published" chart: `created_at` grows with
-- `id`, so a BRIN index (a few pages for millions of rows, next to no cost per insert or status
-- change, unlike a btree) finds a time range.
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_event_created_brin
    ON outbox_event USING brin (created_at);
