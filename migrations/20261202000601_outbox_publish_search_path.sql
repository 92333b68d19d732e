-- outbox_publish() resolves every name it uses (outbox_setting, outbox_event, starts_with, ...)
-- through a fixed search_path: pg_catalog, then the schema it lives in, then pg_temp last, never
-- the caller's. A caller whose search_path puts a schema someone else can write to first (or
-- whose temporary tables shadow the outbox's) can no longer make it read or write other objects.
-- ALTER FUNCTION ... SET changes only the function's settings, not its body, and takes effect at
-- the next call: online, and whatever signature the function has by now.
DO $$
DECLARE
    f record;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure AS signature, n.nspname AS schema
        FROM pg_proc p
        JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE p.proname = 'outbox_publish' AND n.nspname = current_schema()
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, %I, pg_temp',
                       f.signature, f.schema);
    END LOOP;
END;
$$;
