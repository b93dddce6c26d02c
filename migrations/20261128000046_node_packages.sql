-- The application packages installed on a node: its pool's, as they were when the node last
-- started. A pool's packages may change (PATCH, updateproperties); as on Azure, a node gets the
-- new ones when it is made, rebooted or reimaged, and its tasks see what it has.
ALTER TABLE nodes ADD COLUMN application_packages jsonb;
UPDATE nodes n SET application_packages = p.application_packages FROM pools p WHERE p.pk = n.pool_pk;
