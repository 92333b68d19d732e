-- no-transaction
-- Dispatch keys are unique among the rows that have one, through a partial unique index that
-- holds only those rows. The UNIQUE constraint it replaces (outbox_event_dispatch_key_key, next
-- migration) indexed every row, NULL keys included: every event without a dispatch key added an
-- entry at its insert, at its claim and when it was done (an update that changes `status` is
-- never HOT, so every index gets a new entry), for nothing. Built CONCURRENTLY (one statement
-- per file).
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS outbox_event_dispatch_key_idx
    ON outbox_event (dispatch_key)
    WHERE dispatch_key IS NOT NULL;
