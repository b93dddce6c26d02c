-- An account's linked storage account (an Azure Storage connection string; a secret), which
-- resource files name with autoStorageContainerName. Null: none linked.
ALTER TABLE accounts ADD COLUMN storage text;
