-- A pool's upgradePolicy with mode `manual`: nothing on its nodes is upgraded by itself, and a
-- reimage gives a node the pool's image anew (Azure's manual upgrade). false: no policy given.
-- `automatic` and `rolling` are refused by the API.
ALTER TABLE pools ADD COLUMN manual_upgrades boolean NOT NULL DEFAULT false;
