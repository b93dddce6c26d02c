//! An account's applications and their package versions.

use sqlx::PgExecutor;

/// An application with its versions, in version order.
pub struct ApplicationRow {
    pub id: String,
    pub display_name: Option<String>,
    pub default_version: Option<String>,
    pub versions: Vec<String>,
}

impl ApplicationRow {
    /// The version a reference to this application gets: the one it names, if the application
    /// has it, else the default; why not, when there is none.
    pub fn version_for(&self, requested: Option<&str>) -> Result<String, String> {
        match requested {
            Some(v) if self.versions.iter().any(|x| x == v) => Ok(v.to_string()),
            Some(v) => Err(format!(
                "the application {:?} has no version {v:?}",
                self.id
            )),
            None => self.default_version.clone().ok_or_else(|| {
                format!(
                    "the application {:?} has no default version; name one",
                    self.id
                )
            }),
        }
    }
}

/// Creates the application if it is new, and sets what is given of its display name and
/// default version; returns its id as it was first created.
pub async fn upsert(
    db: impl PgExecutor<'_>,
    account: &str,
    id: &str,
    display_name: Option<&str>,
    default_version: Option<&str>,
) -> sqlx::Result<String> {
    sqlx::query_scalar!(
        "INSERT INTO applications (account, id, display_name, default_version) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (account, lower(id)) DO UPDATE SET \
            display_name = coalesce(excluded.display_name, applications.display_name), \
            default_version = coalesce(excluded.default_version, applications.default_version) \
         RETURNING id",
        account,
        id,
        display_name,
        default_version,
    )
    .fetch_one(db)
    .await
}

/// Records a package version (its file is in place); replaces one of the same version.
pub async fn add_package(
    db: impl PgExecutor<'_>,
    account: &str,
    application_id: &str,
    version: &str,
    size_bytes: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO application_packages (account, application_id, version, size_bytes) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (account, application_id, version) DO UPDATE SET size_bytes = excluded.size_bytes, created_at = now()",
        account,
        application_id,
        version,
        size_bytes,
    )
    .execute(db)
    .await
    .map(|_| ())
}

/// The account's applications (one, if `id` is given), in id order.
pub async fn list(
    db: impl PgExecutor<'_>,
    account: &str,
    id: Option<&str>,
) -> sqlx::Result<Vec<ApplicationRow>> {
    sqlx::query_as!(
        ApplicationRow,
        r#"SELECT a.id, a.display_name, a.default_version,
                coalesce(array_agg(p.version ORDER BY p.version) FILTER (WHERE p.version IS NOT NULL), '{}') AS "versions!"
         FROM applications a
         LEFT JOIN application_packages p ON p.account = a.account AND p.application_id = a.id
         WHERE a.account = $1 AND ($2::text IS NULL OR lower(a.id) = lower($2))
         GROUP BY a.id, a.display_name, a.default_version ORDER BY lower(a.id)"#,
        account,
        id,
    )
    .fetch_all(db)
    .await
}
