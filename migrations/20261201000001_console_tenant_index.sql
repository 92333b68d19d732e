-- no-transaction
-- The console's event search by tenant (newest first). Built CONCURRENTLY, so producers keep
-- inserting while it builds on a table that already holds rows (one statement per file: an
-- index built concurrently cannot share a transaction).
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_event_tenant_idx
    ON outbox_event (tenant_id, id) WHERE tenant_id IS NOT NULL;
