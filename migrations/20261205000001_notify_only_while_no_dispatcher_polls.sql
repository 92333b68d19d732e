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

-- The trigger runs in the producer's session, and a producer's role may be allowed nothing but
-- INSERT on outbox_event: the function reads the lease table with its owner's rights (SECURITY
-- DEFINER), and so resolves every name through a fixed search_path (pg_catalog, the schema it
-- lives in, pg_temp last) and names its table with that schema, never through the caller's.
DO $$
BEGIN
    EXECUTE format($body$
        CREATE OR REPLACE FUNCTION %1$I.outbox_event_notify() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, %1$I, pg_temp AS $fn$
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
