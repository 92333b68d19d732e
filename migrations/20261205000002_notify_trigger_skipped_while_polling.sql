-- The insert trigger's question "does a dispatcher poll?", answered before the trigger runs.
--
-- While a dispatcher polls, the trigger notified nobody, but each inserting statement still ran
-- it: a PL/pgSQL call as its owner with its own search_path and a query of
-- outbox_dispatcher_polling. For a producer committing one event per transaction that was about
-- 50 µs of the machine's CPU out of 380 (8 pgbench clients at 3,000 commits/s). The latest
-- polling lease end announced is now also kept in a sequence, in milliseconds since the Unix
-- epoch, and the trigger's WHEN condition reads it: a function call in the executor, no
-- PL/pgSQL and no query. While that end lies ahead the trigger does not run at all. Once it has
-- passed, or when no dispatcher announced one, the trigger runs as before and the lease rows
-- decide (a host of the previous version announces in the table only, and is still heard).
--
-- The sequence only ever silences producers until a lease end that was announced: a dispatcher
-- sets it when it announces or renews its lease (never lower than it was), and sets it to the
-- latest lease end still in the table when it withdraws; a host that dies leaves an end at most
-- one lease ahead, as its row does.
CREATE SEQUENCE outbox_dispatcher_polling_until_ms MINVALUE 0 START WITH 0;

COMMENT ON SEQUENCE outbox_dispatcher_polling_until_ms IS
    'The latest polling lease end announced in outbox_dispatcher_polling (ms since the Unix epoch); the insert trigger does not run before it.';

-- Every producer's role evaluates the trigger's condition, so every role may read the value.
GRANT SELECT ON SEQUENCE outbox_dispatcher_polling_until_ms TO PUBLIC;

DROP TRIGGER outbox_event_notify_insert ON outbox_event;

CREATE TRIGGER outbox_event_notify_insert
    AFTER INSERT ON outbox_event
    FOR EACH STATEMENT
    WHEN (coalesce(pg_catalog.pg_sequence_last_value('outbox_dispatcher_polling_until_ms'::regclass), 0)
          OPERATOR(pg_catalog.<=)
          (pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000)::bigint)
    EXECUTE FUNCTION outbox_event_notify();
