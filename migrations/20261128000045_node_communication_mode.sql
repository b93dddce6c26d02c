-- A pool's targetNodeCommunicationMode (Azure's BatchNodeCommunicationMode), as given: `default`
-- or `simplified`. Either way a node's agent connects out to the server, which is what Azure
-- calls simplified communication (its currentNodeCommunicationMode); `classic`, the service
-- reaching into its nodes, is refused by the API.
ALTER TABLE pools
    ADD COLUMN node_communication_mode text NOT NULL DEFAULT 'default'
        CONSTRAINT pools_node_communication_mode_word
            CHECK (node_communication_mode IN ('default', 'simplified'));
