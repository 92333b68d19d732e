-- no-transaction
-- The console's event search by tenant, newest first. Like every search index of the console it
-- holds finished rows only (done, failed, cancelled): an event enters it once, with its last
-- status change, instead of once per status change (pending, processing, done), which kept
-- the dispatcher's cost of these indexes to a few percent. Open rows are few and read from the
-- claim index. Built CONCURRENTLY, so producers keep inserting while it builds on a table that
-- already holds rows (one statement per file: an index built concurrently cannot share a
-- transaction).
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_event_tenant_idx
    ON outbox_event (tenant_id, id)
    WHERE tenant_id IS NOT NULL AND status IN ('done', 'failed', 'cancelled');
