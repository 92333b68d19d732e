-- Operator identities with a role, and the audit trail of destructive operator commands.
-- Only a SHA-256 of each token is stored; the token itself is shown once, when it is made.

CREATE TABLE outbox_operator (
    name         text        PRIMARY KEY,
    role         text        NOT NULL,
    token_sha256 text        NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    created_by   text        NOT NULL,
    revoked_at   timestamptz,
    CONSTRAINT outbox_operator_name_check CHECK (name ~ '^[A-Za-z0-9_.@-]{1,64}$'),
    CONSTRAINT outbox_operator_role_check CHECK (role IN ('admin', 'viewer'))
);

CREATE TABLE outbox_audit (
    id            bigserial   PRIMARY KEY,
    at            timestamptz NOT NULL DEFAULT now(),
    operator      text        NOT NULL,
    command       text        NOT NULL,
    arguments     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    dry_run       boolean     NOT NULL,
    rows_affected bigint      NOT NULL
);

CREATE INDEX outbox_audit_at_idx ON outbox_audit (at);
