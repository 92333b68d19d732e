-- A handler that does not support an event's version finishes the entry without running:
-- its receipt says so (`skipped_unsupported_version`), distinct from a success or a failure.
ALTER TABLE outbox_receipt DROP CONSTRAINT outbox_receipt_result_check;
ALTER TABLE outbox_receipt ADD CONSTRAINT outbox_receipt_result_check
    CHECK (result IN ('ok', 'skipped_unsupported_version', 'retry', 'dead'));
