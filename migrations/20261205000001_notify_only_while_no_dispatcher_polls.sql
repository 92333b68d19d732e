-- A producer's NOTIFY is skipped while a dispatcher is polling the table anyway.
--
-- PostgreSQL serialises the commits of notifying transactions: from the moment one queues its
-- notifications until its commit is flushed, it holds a lock every other notifying transaction
-- of the cluster waits for. With the insert trigger notifying on every statement, producers
-- committing one event per transaction went through one at a time (on the development machine
-- 4,790 commits/s from 8 clients with the trigger, 9,709 without), the host's dispatcher being
-- woken by each of them although it was already claiming as fast as they came.
--
-- A dispatcher that claims more than two thousand events a second now polls instead (it
-- looks again a millisecond after it caught up) and says so in outbox_dispatcher_polling, with a
-- lease it renews while it polls; the trigger notifies only while no such lease is current. A
-- dispatcher that stops polling deletes its row; a dead one's lease runs out by itself, so a
-- crashed host never leaves producers silent. The table is UNLOGGED: after a PostgreSQL crash it
-- is empty, which means "notify", the safe side.
CREATE UNLOGGED TABLE outbox_dispatcher_polling (
    worker_id text        PRIMARY KEY,
    until     timestamptz NOT NULL
);

-- The body names its table with the schema it lives in (resolved now, not through the inserting
-- session's search_path, which may not include it).
DO $$
BEGIN
    EXECUTE format($body$
        CREATE OR REPLACE FUNCTION %1$I.outbox_event_notify() RETURNS trigger
        LANGUAGE plpgsql AS $fn$
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM %1$I.outbox_dispatcher_polling
                           WHERE until > pg_catalog.clock_timestamp()) THEN
                PERFORM pg_catalog.pg_notify('outbox_event', '');
            END IF;
            RETURN NULL;
        END;
        $fn$
    $body$, current_schema());
END;
$$;
