-- The dispatcher writes a history row for each attempt that did not hand the event off
-- (retried or failed), so `outbox trace` shows every attempt with its host, time and error. A
-- successful attempt is the row itself (claimed_by, processed_at), so the common path writes
-- nothing extra.

ALTER TABLE outbox_event_history DROP CONSTRAINT outbox_event_history_action_check;
ALTER TABLE outbox_event_history
    ADD CONSTRAINT outbox_event_history_action_check
    CHECK (action IN ('requeue', 'cancel', 'attempt'));
