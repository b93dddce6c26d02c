//! The official Azure Batch SDKs, from PyPI, drive the running server along a whole script's
//! flow (tests/sdk/conformance.py): 15.1.0 on the Docker runtime, 14.2.0 on the local one.

#[macro_use]
mod common;

use common::{Rt, TestServer};

async fn conformance(sdk_env: &str, rt: Rt) {
    let python = std::env::var(sdk_env)
        .unwrap_or_else(|_| panic!("{sdk_env} is not set: run the tests through scripts/test.sh"));
    let s = TestServer::start(rt).await;
    let (account, key) = s
        .http
        .credentials
        .lock()
        .unwrap()
        .clone()
        .expect("credentials");
    let out = tokio::process::Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/sdk/conformance.py"
        ))
        .env("BATCHPOOL_URL", &s.base)
        .env("BATCHPOOL_ACCOUNT", account)
        .env("BATCHPOOL_KEY", key)
        .env("BATCHPOOL_BULK", "1000")
        .output()
        .await
        .expect("running the conformance script");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the SDK flow failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("conformance flow passed"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_batch_15_runs_unchanged() {
    conformance("BATCHPOOL_SDK15_PYTHON", Rt::Docker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_batch_14_runs_unchanged() {
    conformance("BATCHPOOL_SDK14_PYTHON", Rt::Local).await;
}
