//! Shared Key signing on the client side, as the Azure SDKs sign: `ocp-date`, `Content-Length`
//! and `Authorization: SharedKey account:signature`. The tests and the benchmark (benches/suite,
//! through `#[path]`) sign with the CLI's own signer, which uses the server's string-to-sign.

/// Adds ocp-date, Content-Length and the Authorization header to a built request.
pub fn sign(req: &mut reqwest::Request, account: &str, key: &str) {
    batchpool::cli::client::sign(req, account, key);
}
