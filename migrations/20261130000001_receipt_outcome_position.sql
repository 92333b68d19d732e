-- Where a receipt row's outcome came from: the position of its entry in the receipts stream
-- (the Redis stream id `<ms>-<seq>`, assigned in the same step that recorded the outcome, so
-- later outcomes of one (event, handler) always have higher positions). A receipt written again,
-- or adopted late from a writer that died, never overwrites a newer outcome. NULL: written
-- without a position (`write_receipts`), which applies as the latest.
ALTER TABLE outbox_receipt
    ADD COLUMN outcome_ms  bigint,
    ADD COLUMN outcome_seq bigint;
