-- Docker hosts added while servers run (`batchpool host add`): the leader's runtime takes each
-- within seconds, and stops placing nodes on one whose row is deleted (`batchpool host remove`).
-- Hosts given with --docker-host are not here. cpus and memory_mib cap what a host's nodes take
-- together (null: no cap); tls_dir holds the client certificates for a tcp:// host.
CREATE TABLE docker_hosts (
    url text PRIMARY KEY,
    cpus double precision,
    memory_mib bigint,
    tls_dir text,
    added_at timestamptz NOT NULL DEFAULT now()
);
