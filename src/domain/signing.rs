//! Shared Key signatures: what Azure Batch requests and Azure Storage SAS tokens are signed with.

use base64::Engine as _;
use hmac::{Hmac, Mac};
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
