-- Servers on one database serve each other's node files: a server that does not lead asks the
-- leader (whose nodes' agents connect to it) at the leader's peer URL, and proves it is one of
-- the installation's servers with the installation's peer secret (256 random bits, hex).
ALTER TABLE leader ADD COLUMN peer_url text;
ALTER TABLE installation ADD COLUMN peer_secret text NOT NULL
    DEFAULT replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '');
