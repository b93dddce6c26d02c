-- The dashboard at /ui. A browser signs in with an account key or a read-only token and gets a
-- session cookie; the key itself never reaches the browser's storage. Only SHA-256 digests of
-- session ids and tokens are kept, so a copy of the database opens no session.
CREATE TABLE ui_sessions (
    digest bytea PRIMARY KEY,
    account text NOT NULL REFERENCES accounts(name) ON DELETE CASCADE,
    read_only boolean NOT NULL,
    -- The read-only token it was opened with: revoking the token ends the session.
    token_pk bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX ui_sessions_expiry ON ui_sessions (expires_at);

CREATE TABLE ui_tokens (
    pk bigserial PRIMARY KEY,
    account text NOT NULL REFERENCES accounts(name) ON DELETE CASCADE,
    digest bytea NOT NULL UNIQUE,
    name text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_used timestamptz
);
ALTER TABLE ui_sessions ADD FOREIGN KEY (token_pk) REFERENCES ui_tokens(pk) ON DELETE CASCADE;
