-- Web service names belong to their account: two accounts may each have a service
-- `ns/svc`, and neither learns that the other's exists (issue 10, finding 11). BES requests
-- find their service by (namespace, id) and the Bearer key, which is one service's alone.
DROP INDEX services_namespace_id;
CREATE UNIQUE INDEX services_account_namespace_id ON services (account, lower(namespace), lower(id));
-- The BES lookup: every service of that name, whatever its account.
CREATE INDEX services_namespace_id ON services (lower(namespace), lower(id));
