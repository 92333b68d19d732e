-- The partial unique index of the previous migration now keeps dispatch keys unique; the UNIQUE
-- constraint that indexed every row goes.
--
-- An INSERT ... ON CONFLICT infers a partial unique index only from a conflict target that
-- states its predicate, so outbox_publish() gets `ON CONFLICT (dispatch_key) WHERE dispatch_key
-- IS NOT NULL`: its stored definition (pg_get_functiondef: body, defaults, search_path, as the
-- earlier migrations left them) is rewritten in that one place and nothing else. The host's own
-- publish (host/src/store/publish.rs) states the predicate too. A publisher built before this
-- migration whose INSERT names `ON CONFLICT (dispatch_key)` without it fails with "there is no
-- unique or exclusion constraint matching the ON CONFLICT specification": upgrade publishers
-- that embed the host library together with the host that migrates.
DO $$
DECLARE
    f record;
    definition text;
BEGIN
    FOR f IN
        SELECT p.oid
        FROM pg_proc p
        JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE p.proname = 'outbox_publish' AND n.nspname = current_schema()
    LOOP
        definition := pg_get_functiondef(f.oid);
        IF strpos(definition, 'ON CONFLICT (dispatch_key) DO NOTHING') = 0 THEN
            RAISE EXCEPTION 'outbox_publish() has no "ON CONFLICT (dispatch_key) DO NOTHING" to rewrite: %', f.oid::regprocedure;
        END IF;
        EXECUTE replace(definition, 'ON CONFLICT (dispatch_key) DO NOTHING',
                        'ON CONFLICT (dispatch_key) WHERE dispatch_key IS NOT NULL DO NOTHING');
    END LOOP;
END;
$$;

ALTER TABLE outbox_event DROP CONSTRAINT IF EXISTS outbox_event_dispatch_key_key;
