-- no-transaction
-- Retention deletes outbox_event_history rows by age. Attempt rows are found through
-- outbox_event_history_attempt_at_idx; this index finds the others (an operator's requeue or
-- cancel, one row per event changed), so a batch never scans the table. Built CONCURRENTLY
-- (one statement per file).
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_event_history_operator_at_idx
    ON outbox_event_history (at) WHERE action <> 'attempt';
