//! A JSON body extractor whose errors name the property that was wrong, in Azure's error shape.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::error::ApiError;

pub struct AzureJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for AzureJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            let status = e.status();
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    status,
                    "RequestBodyTooLarge",
                    "The request body is too large.",
                )
            } else {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "InvalidRequestBody",
                    format!("The request body could not be read: {e}"),
                )
            }
        })?;
        parse(&bytes).map(AzureJson)
    }
}

pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if let Some(path) = nul_path(bytes) {
        return Err(ApiError::invalid_property(&path, "", NUL_REASON));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.inner();
        match inner.classify() {
            serde_json::error::Category::Data if path != "." => {
                ApiError::invalid_property(&path, "", inner.to_string())
            }
            _ => ApiError::new(
                StatusCode::BAD_REQUEST,
                "InvalidRequestBody",
                format!("The specified request body is not syntactically valid JSON: {inner}"),
            )
            .with("Reason", inner.to_string()),
        }
    })
}

/// Why a string with a NUL is refused: PostgreSQL text cannot hold one.
pub const NUL_REASON: &str = "contains a NUL character (\\u0000), which is not allowed";

/// The path (`environmentSettings[0].value`, as serde_path_to_error writes it) of the first string
/// or key in a JSON body that holds a NUL character. JSON can only carry one escaped, so a body
/// without `\u0000` is not parsed a second time.
pub fn nul_path(bytes: &[u8]) -> Option<String> {
    if !bytes.windows(6).any(|w| w == br"\u0000") {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    nul_in(&value, String::new())
}

fn nul_in(value: &serde_json::Value, path: String) -> Option<String> {
    let named = |path: String| if path.is_empty() { ".".into() } else { path };
    match value {
        serde_json::Value::String(s) => s.contains('\0').then(|| named(path)),
        serde_json::Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| nul_in(v, format!("{path}[{i}]"))),
        serde_json::Value::Object(map) => map.iter().find_map(|(k, v)| {
            let key = k.replace('\0', "\\u0000");
            let here = if path.is_empty() {
                key
            } else {
                format!("{path}.{key}")
            };
            if k.contains('\0') {
                Some(here)
            } else {
                nul_in(v, here)
            }
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::nul_path;

    #[test]
    fn nul_is_found_with_its_path() {
        let at = |body: &str| nul_path(body.as_bytes());
        assert_eq!(at(r#"{"id": "a"}"#), None);
        assert_eq!(
            at(r#"{"id": "a\\u0000"}"#),
            None,
            "an escaped backslash, then u0000"
        );
        assert_eq!(at(r#"{"id": "a\u0000"}"#).as_deref(), Some("id"));
        assert_eq!(
            at(r#"{"environmentSettings": [{"name": "A", "value": "x\u0000y"}]}"#).as_deref(),
            Some("environmentSettings[0].value")
        );
        assert_eq!(
            at(r#"{"a": {"b\u0000": 1}}"#).as_deref(),
            Some(r"a.b\u0000")
        );
        assert_eq!(at(r#""\u0000""#).as_deref(), Some("."));
    }
}
