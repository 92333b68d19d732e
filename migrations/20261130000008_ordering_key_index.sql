-- Per-key ordering: a row with an ordering key is claimable only while no earlier row (lower id)
-- of the same key is pending or processing (see CLAIM_SQL in host/src/store/mod.rs). This index
-- holds only such rows, so that check is one index probe per candidate, and finished rows
-- (done, failed, cancelled) and rows without a key never enter it: it stays as small as the
-- backlog of keyed events, whatever the size of the table.
CREATE INDEX outbox_event_ordering_idx
    ON outbox_event (ordering_key, id)
    WHERE status IN ('pending', 'processing') AND ordering_key IS NOT NULL;
