-- no-transaction
-- The console's event search by type prefix (`LIKE 'mail.%'`), newest first; finished rows only
-- (see 20261201000001).
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_event_type_idx
    ON outbox_event (event_type text_pattern_ops, id)
    WHERE status IN ('done', 'failed', 'cancelled');
