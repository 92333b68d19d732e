-- Paused queues: a receiver of a queue listed here reads no new entries (those running finish).
-- One row per paused queue; resuming deletes it. Every change notifies `outbox_queue_pause`, so
-- running hosts see it at once (they also re-read the table every second).
CREATE TABLE outbox_queue_pause (
    queue     text        PRIMARY KEY,
    paused_at timestamptz NOT NULL DEFAULT now(),
    paused_by text        NOT NULL,
    reason    text,
    CONSTRAINT outbox_queue_pause_queue_check CHECK (length(queue) BETWEEN 1 AND 200),
    CONSTRAINT outbox_queue_pause_reason_check CHECK (reason IS NULL OR length(reason) <= 500)
);

CREATE FUNCTION outbox_queue_pause_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_queue_pause', COALESCE(NEW.queue, OLD.queue));
    RETURN NULL;
END;
$$;

CREATE TRIGGER outbox_queue_pause_notify
AFTER INSERT OR UPDATE OR DELETE ON outbox_queue_pause
FOR EACH ROW EXECUTE FUNCTION outbox_queue_pause_notify();
