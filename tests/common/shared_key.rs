//! Shared Key signing on the client side, as the Azure SDKs sign: `ocp-date`, `Content-Length`
//! and `Authorization: SharedKey account:signature`, with the server's own string-to-sign and
//! HMAC. The tests and the benchmark (benches/suite, through `#[path]`) both sign with this.

/// Adds ocp-date, Content-Length and the Authorization header to a built request.
pub fn sign(req: &mut reqwest::Request, account: &str, key: &str) {
    let date = chrono::Utc::now()
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    req.headers_mut().insert("ocp-date", date.parse().unwrap());
    if let Some(len) = req.body().and_then(|b| b.as_bytes()).map(<[u8]>::len) {
        req.headers_mut()
            .insert("content-length", len.to_string().parse().unwrap());
    }
    let uri: axum_http::Uri = req.url()[url::Position::BeforePath..].parse().unwrap();
    let sts = batchpool::api::auth::string_to_sign(req.method(), &uri, req.headers(), account);
    let sig = batchpool::domain::signing::signature(key, &sts).unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("SharedKey {account}:{sig}").parse().unwrap(),
    );
}
