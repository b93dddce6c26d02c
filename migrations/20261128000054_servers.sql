-- The servers of the installation, each as it says every two seconds: where the nodes' agents
-- reach it (its --agent-url, or its agents' port on the host they reach their server at). The
-- leader tells its agents of them all, so that an agent whose server is gone, or no longer
-- leads, finds the one that does (domain::endpoint). Rows of servers silent for an hour go.
CREATE TABLE servers (
    instance text PRIMARY KEY,
    agent_url text,
    agent_port integer NOT NULL CHECK (agent_port BETWEEN 1 AND 65535),
    seen timestamptz NOT NULL
);
