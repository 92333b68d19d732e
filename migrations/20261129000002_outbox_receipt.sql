-- Receipts: what each handler made of each event, so an event's life does not end at
-- "handed to the queue". One row per (event, handler), updated on every attempt.
CREATE TABLE outbox_receipt (
    event_id      bigint      NOT NULL,
    handler       text        NOT NULL,
    queue         text        NOT NULL,
    result        text        NOT NULL,
    attempts      int         NOT NULL,
    duration_ms   double precision NOT NULL DEFAULT 0,
    published_ids bigint[]    NOT NULL DEFAULT '{}',
    error         text,
    duplicates    int         NOT NULL DEFAULT 0,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, handler),
    CONSTRAINT outbox_receipt_result_check CHECK (result IN ('ok', 'retry', 'dead'))
);

CREATE INDEX outbox_receipt_result_idx ON outbox_receipt (result, updated_at);
