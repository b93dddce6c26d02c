//! Blob storage for the tests: Azurite (started by scripts/test.sh), its account, blobs put and
//! read with the account key, and fresh containers with a SAS URL.

use chrono::{Duration, Utc};
use object_store::{ObjectStoreExt, PutPayload};

use batchpool::domain::bes::DataReference;
use batchpool::storage::{self, Roots};

pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

pub fn azurite() -> String {
    std::env::var("BATCHPOOL_TEST_AZURITE")
        .expect("BATCHPOOL_TEST_AZURITE: run the tests through scripts/test.sh (it starts Azurite)")
}

pub fn connection_string() -> String {
    format!(
        "BlobEndpoint={}/;AccountName=devstoreaccount1;AccountKey={AZURITE_KEY};",
        azurite()
    )
}

pub fn blob(relative: &str) -> storage::Blob {
    let r = DataReference {
        connection_string: Some(connection_string()),
        relative_location: Some(relative.into()),
        ..Default::default()
    };
    storage::resolve(&r, &Roots::default()).unwrap()
}

pub async fn put_blob(relative: &str, content: &str) {
    let b = blob(relative);
    b.ensure_container(&reqwest::Client::new()).await.unwrap();
    b.store
        .put(&b.path, PutPayload::from(content.as_bytes().to_vec()))
        .await
        .unwrap();
}

/// A blob's bytes and its Content-Type, or None if it is not there.
pub async fn get_blob(relative: &str) -> Option<(String, Option<String>)> {
    let b = blob(relative);
    let got = b.store.get(&b.path).await.ok()?;
    let content_type = got
        .attributes
        .get(&object_store::Attribute::ContentType)
        .map(|v| v.to_string());
    let bytes = got.bytes().await.ok()?;
    Some((String::from_utf8_lossy(&bytes).into_owned(), content_type))
}

/// A fresh container (made) and its URL with a SAS of `permissions`.
pub async fn container(permissions: &str) -> (String, String) {
    let name = format!("c{}", uuid::Uuid::new_v4().simple());
    blob(&format!("{name}/x"))
        .ensure_container(&reqwest::Client::new())
        .await
        .unwrap();
    let account = storage::parse_connection_string(&connection_string()).unwrap();
    let sas = storage::container_sas(
        &account,
        &name,
        permissions,
        // A day: a soak of an hour and its drain read and write through it to the end.
        Utc::now() + Duration::days(1),
    );
    (name.clone(), format!("{}/{name}{sas}", azurite()))
}
