-- A pool's applicationPackageReferences, each with the version it resolved to when the pool was
-- made (domain::files::PoolPackage): installed on every node as it joins.
ALTER TABLE pools ADD COLUMN application_packages jsonb;
