-- Batch accounts and their Shared Key keys (base64 of 64 random bytes). The keys must be kept as
-- they are: Shared Key is an HMAC with the key itself, so a hash would not do. They are never
-- logged, never returned by the API, and compared in constant time.
CREATE TABLE accounts (
    name text PRIMARY KEY,
    primary_key text NOT NULL,
    secondary_key text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    keys_rotated_at timestamptz
);
