-- no-transaction
-- The console's per-minute "failed attempts" chart reads the attempt history by time.
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_event_history_attempt_at_idx
    ON outbox_event_history (at) WHERE action = 'attempt';
