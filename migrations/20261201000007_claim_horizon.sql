-- Flat claim cost as events pass through the table.
--
-- 1. outbox_publish() stores an available_at in the past as now() (the event is due at once
--    either way). Every writer of available_at then sets it to its own transaction's now() or
--    later, which is what lets the dispatcher read the claim index from its claim horizon (the
--    oldest live row, or the start of the oldest open transaction) instead of from the start,
--    past the entries every finished event leaves behind. Otherwise the function is unchanged.
-- 2. Per-table autovacuum settings for outbox_event: vacuum after a fixed number of changed
--    rows (not a fifth of the table, the default, which on a table of millions lets millions of
--    dead row versions pile up), without the cost delay (the table is hot and its vacuums
--    short). They take effect where autovacuum runs; the horizon keeps claims flat without it.

-- 3. A claim no longer moves a row's available_at to its lease end: the lease is in
--    claim_expires_at alone. The index entry a finished event leaves then stays where the row
--    was due (behind the horizon), not at its lease end, where later claims would walk it.
COMMENT ON COLUMN outbox_event.available_at IS
    'Next time the row may be claimed: the publish or retry time of a pending row; a processing row keeps it (its lease end is claim_expires_at).';

ALTER TABLE outbox_event SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 20000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 20000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

CREATE OR REPLACE FUNCTION outbox_publish(
    p_event_type    text,
    p_payload       jsonb,
    p_tenant_id     text DEFAULT NULL,
    p_dispatch_key  text DEFAULT NULL,
    p_headers       jsonb DEFAULT '{}'::jsonb,
    p_ordering_key  text DEFAULT NULL,
    p_event_version int DEFAULT 1,
    p_available_at  timestamptz DEFAULT NULL,
    p_max_payload_bytes int DEFAULT 262144
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_id        bigint;
    v_ceiling   bigint;
    v_limit     bigint;
    v_type      text;
    v_tenant    text;
    v_payload   jsonb;
    v_differs   text[] := '{}';
    v_prefix    text;
BEGIN
    SELECT value INTO v_ceiling FROM outbox_setting WHERE name = 'max_payload_bytes';
    v_ceiling := coalesce(v_ceiling, 262144);
    v_limit := least(coalesce(p_max_payload_bytes, v_ceiling), v_ceiling);
    IF p_event_type IS NULL OR p_event_type !~ '^[a-z0-9_-]+(\.[a-z0-9_-]+)+$' OR length(p_event_type) > 255 THEN
        RAISE EXCEPTION 'outbox_publish: invalid event type %: use lowercase dot-separated segments, at least two (e.g. mail.welcome)', quote_nullable(p_event_type)
            USING ERRCODE = '22023';
    END IF;
    IF p_payload IS NULL OR jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'outbox_publish: payload must be a JSON object, got %', coalesce(jsonb_typeof(p_payload), 'null')
            USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_payload::text) > v_limit THEN
        RAISE EXCEPTION 'outbox_publish: payload of % is % bytes, over the limit of % bytes', p_event_type, octet_length(p_payload::text), v_limit
            USING ERRCODE = '22023';
    END IF;
    IF p_tenant_id = '' THEN
        RAISE EXCEPTION 'outbox_publish: tenant_id of % must not be empty (leave it out for no tenant)', p_event_type
            USING ERRCODE = '22023';
    END IF;
    IF p_headers IS NOT NULL AND jsonb_typeof(p_headers) <> 'object' THEN
        RAISE EXCEPTION 'outbox_publish: headers must be a JSON object' USING ERRCODE = '22023';
    END IF;
    IF p_dispatch_key IS NOT NULL
       AND (octet_length(p_dispatch_key) NOT BETWEEN 1 AND 512 OR p_dispatch_key !~ '^[!-~]+$') THEN
        RAISE EXCEPTION 'outbox_publish: dispatch_key of % must be 1 to 512 bytes of printable ASCII without spaces', p_event_type
            USING ERRCODE = '22023';
    END IF;
    IF p_ordering_key IS NOT NULL
       AND (octet_length(p_ordering_key) NOT BETWEEN 1 AND 512 OR p_ordering_key !~ '^[!-~]+$') THEN
        RAISE EXCEPTION 'outbox_publish: ordering_key of % must be 1 to 512 bytes of printable ASCII without spaces', p_event_type
            USING ERRCODE = '22023';
    END IF;
    FOREACH v_prefix IN ARRAY ARRAY['child:', 'denied:'] LOOP
        IF starts_with(p_dispatch_key, v_prefix) THEN
            RAISE EXCEPTION 'outbox_publish: dispatch_key of % starts with %, a prefix reserved for the host''s own events', p_event_type, v_prefix
                USING ERRCODE = '22023';
        END IF;
    END LOOP;
    INSERT INTO outbox_event (event_type, payload, tenant_id, dispatch_key, headers, ordering_key, event_version, available_at)
    VALUES (p_event_type, p_payload, p_tenant_id, p_dispatch_key, coalesce(p_headers, '{}'::jsonb), p_ordering_key,
            coalesce(p_event_version, 1), greatest(coalesce(p_available_at, now()), now()))
    ON CONFLICT (dispatch_key) DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NULL THEN
        SELECT id, event_type, tenant_id, payload INTO v_id, v_type, v_tenant, v_payload
        FROM outbox_event WHERE dispatch_key = p_dispatch_key;
        IF v_type IS DISTINCT FROM p_event_type THEN
            v_differs := v_differs || 'event type'::text;
        END IF;
        IF v_tenant IS DISTINCT FROM p_tenant_id THEN
            v_differs := v_differs || 'tenant'::text;
        END IF;
        IF v_payload IS DISTINCT FROM p_payload THEN
            v_differs := v_differs || 'payload'::text;
        END IF;
        IF cardinality(v_differs) > 0 THEN
            RAISE EXCEPTION 'outbox_publish: dispatch_key % already names event % with a different %', p_dispatch_key, v_id, array_to_string(v_differs, ', ')
                USING ERRCODE = '23505';
        END IF;
    END IF;
    RETURN v_id;
END;
$$;
