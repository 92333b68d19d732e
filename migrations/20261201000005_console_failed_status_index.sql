-- no-transaction
-- The console's counts of failed and cancelled rows: an index-only count (the rows an operator
-- acts on; an event enters it only if it fails or is cancelled).
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_event_failed_status_idx
    ON outbox_event (status) WHERE status IN ('failed', 'cancelled');
