-- Outbox schema: events, per-destination deliveries, worker heartbeats.

CREATE TABLE outbox_event (
    id               bigserial PRIMARY KEY,
    tenant_id        text,
    event_type       text        NOT NULL,
    event_version    int         NOT NULL DEFAULT 1,
    payload          jsonb       NOT NULL,
    headers          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    dispatch_key     text UNIQUE,
    ordering_key     text,
    status           text        NOT NULL DEFAULT 'pending',
    attempts         int         NOT NULL DEFAULT 0,
    available_at     timestamptz NOT NULL DEFAULT now(),
    claimed_by       text,
    claimed_at       timestamptz,
    claim_expires_at timestamptz,
    processed_at     timestamptz,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outbox_event_status_check
        CHECK (status IN ('pending', 'processing', 'done', 'failed', 'cancelled')),
    CONSTRAINT outbox_event_type_check
        CHECK (event_type ~ '^[a-z0-9_-]+(\.[a-z0-9_-]+)+$' AND length(event_type) <= 255),
    CONSTRAINT outbox_event_payload_object CHECK (jsonb_typeof(payload) = 'object'),
    CONSTRAINT outbox_event_headers_object CHECK (jsonb_typeof(headers) = 'object'),
    CONSTRAINT outbox_event_version_positive CHECK (event_version >= 1)
);

COMMENT ON COLUMN outbox_event.available_at IS
    'Next time the row may be claimed: the retry time for pending rows, the lease end (= claim_expires_at) for processing rows.';

-- The claim index: only claimable rows (pending, or processing with a lease that may expire),
-- ordered the way the claim query reads them. Done/failed rows never enter it, so a claim costs
-- the same with 10 rows or 10 million.
CREATE INDEX outbox_event_claimable_idx
    ON outbox_event (available_at, id)
    WHERE status IN ('pending', 'processing');

-- Retention deletes old done rows in batches.
CREATE INDEX outbox_event_done_idx ON outbox_event (processed_at) WHERE status = 'done';

-- Operator filters (requeue / stats) on dead letters.
CREATE INDEX outbox_event_failed_idx ON outbox_event (event_type, created_at) WHERE status IN ('failed', 'cancelled');

CREATE TABLE outbox_delivery (
    event_id     bigint      NOT NULL REFERENCES outbox_event (id) ON DELETE CASCADE,
    destination  text        NOT NULL,
    status       text        NOT NULL DEFAULT 'pending',
    attempts     int         NOT NULL DEFAULT 0,
    available_at timestamptz NOT NULL DEFAULT now(),
    last_error   text,
    stream_id    text,
    delivered_at timestamptz,
    PRIMARY KEY (event_id, destination),
    CONSTRAINT outbox_delivery_status_check CHECK (status IN ('pending', 'done', 'failed'))
);

CREATE TABLE outbox_worker (
    id          text PRIMARY KEY,
    host_name   text        NOT NULL,
    queue_group text,
    started_at  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now(),
    version     text        NOT NULL,
    counters    jsonb       NOT NULL DEFAULT '{}'::jsonb
);

-- Wake idle dispatchers: one notification per inserting statement (not per row).
CREATE FUNCTION outbox_event_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_event', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER outbox_event_notify_insert
    AFTER INSERT ON outbox_event
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_event_notify();

-- Publishing from any language, inside the caller's own transaction. Validates like the Rust
-- API and returns the new id, or the existing id when dispatch_key was already used.
CREATE FUNCTION outbox_publish(
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
    v_id bigint;
BEGIN
    IF p_event_type IS NULL OR p_event_type !~ '^[a-z0-9_-]+(\.[a-z0-9_-]+)+$' OR length(p_event_type) > 255 THEN
        RAISE EXCEPTION 'outbox_publish: invalid event type %: use lowercase dot-separated segments, at least two (e.g. mail.welcome)', quote_nullable(p_event_type)
            USING ERRCODE = '22023';
    END IF;
    IF p_payload IS NULL OR jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'outbox_publish: payload must be a JSON object, got %', coalesce(jsonb_typeof(p_payload), 'null')
            USING ERRCODE = '22023';
    END IF;
    IF octet_length(p_payload::text) > p_max_payload_bytes THEN
        RAISE EXCEPTION 'outbox_publish: payload is % bytes, over the limit of % bytes', octet_length(p_payload::text), p_max_payload_bytes
            USING ERRCODE = '22023';
    END IF;
    IF p_headers IS NOT NULL AND jsonb_typeof(p_headers) <> 'object' THEN
        RAISE EXCEPTION 'outbox_publish: headers must be a JSON object' USING ERRCODE = '22023';
    END IF;
    INSERT INTO outbox_event (event_type, payload, tenant_id, dispatch_key, headers, ordering_key, event_version, available_at)
    VALUES (p_event_type, p_payload, p_tenant_id, p_dispatch_key, coalesce(p_headers, '{}'::jsonb), p_ordering_key,
            coalesce(p_event_version, 1), coalesce(p_available_at, now()))
    ON CONFLICT (dispatch_key) DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NULL THEN
        SELECT id INTO v_id FROM outbox_event WHERE dispatch_key = p_dispatch_key;
    END IF;
    RETURN v_id;
END;
$$;
