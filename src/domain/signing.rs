//! Shared Key signatures: what Azure Batch requests and Azure Storage SAS tokens are signed with.
//! The server checks requests with these, and the CLI signs its own (`cli::client`).

use base64::Engine as _;
use hmac::{Hmac, Mac};
use http::{HeaderMap, Method, Uri};
use sha2::Sha256;

/// base64(HMAC-SHA256(base64-decoded key, string)).
pub fn signature(key_base64: &str, string_to_sign: &str) -> Option<String> {
    let key = base64::engine::general_purpose::STANDARD
        .decode(key_base64)
        .ok()?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).ok()?;
    mac.update(string_to_sign.as_bytes());
    Some(base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes()))
}

const SIGNED_HEADERS: [&str; 11] = [
    "content-encoding",
    "content-language",
    "content-length",
    "content-md5",
    "content-type",
    "date",
    "if-modified-since",
    "if-match",
    "if-none-match",
    "if-unmodified-since",
    "range",
];

/// The canonical string the SDK signs.
pub fn string_to_sign(method: &Method, uri: &Uri, headers: &HeaderMap, account: &str) -> String {
    let length = signed_length(method, header(headers, "content-length"));
    canonical(method, uri, headers, account, length)
}

/// Every canonical string an official SDK may have signed for this request. A request without
/// a body is signed with `0` on its Content-Length line by Python's SDK and `az` (and `0` is
/// what arrives), and with an empty line by others (the JavaScript SDK's DELETE): both are
/// taken, and nothing else.
pub fn strings_to_sign(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    account: &str,
) -> Vec<String> {
    let given = header(headers, "content-length");
    let ours = signed_length(method, given);
    if !matches!(given, "" | "0") {
        return vec![canonical(method, uri, headers, account, ours)];
    }
    let other = if ours == "0" { "" } else { "0" };
    [ours, other]
        .map(|length| canonical(method, uri, headers, account, length))
        .to_vec()
}

/// The Content-Length line as Python's SDK signs it: `0` for a request without a body that is
/// not a GET or HEAD, else the header as it came.
fn signed_length<'a>(method: &Method, given: &'a str) -> &'a str {
    if given.is_empty() && method != Method::GET && method != Method::HEAD {
        "0"
    } else {
        given
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// The canonical string with `length` on the Content-Length line.
fn canonical(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    account: &str,
    length: &str,
) -> String {
    let mut s = format!("{}\n", method.as_str());
    for name in SIGNED_HEADERS {
        let v = if name == "content-length" {
            length
        } else {
            header(headers, name)
        };
        s.push_str(v);
        s.push('\n');
    }
    let mut ocp: Vec<(String, &str)> = headers
        .iter()
        .filter_map(|(n, v)| {
            let name = n.as_str().to_ascii_lowercase();
            let v = v.to_str().ok()?;
            (name.contains("ocp-") && !v.is_empty()).then_some((name, v))
        })
        .collect();
    ocp.sort();
    for (name, v) in ocp {
        s.push_str(&format!("{name}:{v}\n"));
    }
    s.push_str(&format!("/{account}{}", uri.path()));
    let mut query: Vec<(String, String)> = Vec::new();
    for (name, v) in form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()) {
        if !v.is_empty() && !query.iter().any(|(n, _)| *n == name) {
            query.push((name.into_owned(), v.into_owned()));
        }
    }
    query.sort();
    for (name, v) in query {
        s.push_str(&format!("\n{name}:{v}"));
    }
    s
}
