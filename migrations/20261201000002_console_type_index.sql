-- no-transaction
-- The console's event search by type prefix (`LIKE 'mail.%'`, newest first).
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_event_type_idx
    ON outbox_event (event_type text_pattern_ops, id);
