-- The history of an outbox row beyond its current state: what an operator's requeue or cancel
-- changed, with the status, attempts and last error the row had before, so a repair never loses
-- them. One row per change; an event's rows in id order are its history.

CREATE TABLE outbox_event_history (
    id          bigserial   PRIMARY KEY,
    event_id    bigint      NOT NULL REFERENCES outbox_event (id) ON DELETE CASCADE,
    at          timestamptz NOT NULL DEFAULT now(),
    action      text        NOT NULL,
    actor       text        NOT NULL,
    from_status text        NOT NULL,
    to_status   text        NOT NULL,
    attempts    int         NOT NULL,
    last_error  text,
    detail      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    CONSTRAINT outbox_event_history_action_check CHECK (action IN ('requeue', 'cancel'))
);

CREATE INDEX outbox_event_history_event_idx ON outbox_event_history (event_id, id);
