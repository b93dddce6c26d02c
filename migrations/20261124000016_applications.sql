-- An account's applications and their package versions (zip files kept in
-- <data-dir>/applications/<account>/<application, lower case>/<version>.zip).
CREATE TABLE applications (
    account text NOT NULL,
    id text NOT NULL,
    display_name text,
    -- The version a reference without one gets.
    default_version text,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX applications_account_id ON applications (account, lower(id));

CREATE TABLE application_packages (
    account text NOT NULL,
    -- The application's id as it was created.
    application_id text NOT NULL,
    version text NOT NULL,
    size_bytes bigint NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, application_id, version)
);
