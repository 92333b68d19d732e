-- no-transaction
-- Validate the generation check added NOT VALID by the previous migration. VALIDATE CONSTRAINT
-- scans the table under a SHARE UPDATE EXCLUSIVE lock, so producers and dispatchers keep
-- inserting and updating while it runs (alone in its file: outside the transaction that added
-- the column, whose lock would block them for the whole scan).
ALTER TABLE outbox_event VALIDATE CONSTRAINT outbox_event_generation_nonnegative;
