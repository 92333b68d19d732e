-- The generation of an event: 0 for what a producer publishes, and one more than its parent for
-- each event a handler publishes (set by the host's child path only; outbox_publish() takes no
-- generation, so every producer's event is 0). Past OUTBOX_MAX_EVENT_GENERATION the host refuses
-- a handler's child, which ends a handler feedback loop.
--
-- Online on PostgreSQL 11+: a column with a constant default is added to the catalog only (no
-- table rewrite), and the check is added NOT VALID (no scan under this statement's lock; every
-- existing row holds the default 0, and new rows are checked at once). The next migration
-- validates it without blocking writers.
ALTER TABLE outbox_event ADD COLUMN generation int NOT NULL DEFAULT 0;

ALTER TABLE outbox_event
    ADD CONSTRAINT outbox_event_generation_nonnegative CHECK (generation >= 0) NOT VALID;

COMMENT ON COLUMN outbox_event.generation IS
    '0 for a producer''s event; a handler''s child is its parent''s generation + 1 (set by the host only). Children past OUTBOX_MAX_EVENT_GENERATION are refused.';
