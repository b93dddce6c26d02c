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
    if let Some((path, reason)) = unstorable(bytes) {
        return Err(ApiError::invalid_property(&path, "", reason));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.inner();
        match inner.classify() {
            serde_json::error::Category::Data if path != "." => {
                let reason = inner.to_string();
                // A missing field's path is the object it is missing from: nothing to repeat.
                let value = match reason.starts_with("missing field") {
                    true => None,
                    false => value_at(bytes, e.path()),
                };
                ApiError::invalid_property(&path, value.unwrap_or_default(), reason)
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

/// The longest `PropertyValue` an error repeats of what was sent.
const MAX_SHOWN: usize = 200;

/// The value at `path` in a JSON body, as an error shows it: a string as it is, anything else as
/// JSON, cut to [`MAX_SHOWN`] bytes. None if the body has nothing there (a missing property).
fn value_at(bytes: &[u8], path: &serde_path_to_error::Path) -> Option<String> {
    use serde_path_to_error::Segment;
    let mut value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    for segment in path.iter() {
        value = match segment {
            Segment::Seq { index } => value.get_mut(*index)?.take(),
            Segment::Map { key } => value.get_mut(key.as_str())?.take(),
            Segment::Enum { .. } | Segment::Unknown => return None,
        };
    }
    let mut shown = match value {
        serde_json::Value::String(s) => s,
        other => other.to_string(),
    };
    if shown.len() > MAX_SHOWN {
        let mut end = MAX_SHOWN;
        while !shown.is_char_boundary(end) {
            end -= 1;
        }
        shown.truncate(end);
        shown.push_str("...");
    }
    Some(shown)
}

/// Why a string with a NUL is refused: PostgreSQL text cannot hold one.
pub const NUL_REASON: &str = "contains a NUL character (\\u0000), which is not allowed";

/// Why a number beyond 64-bit integers is refused: PostgreSQL keeps it exactly, and reading it
/// back as a 64-bit float can fail, which would make the stored object unreadable (a task whose
/// `exitConditions` held 1.7976931348623157e308 stopped every dispatch pass).
pub const HUGE_REASON: &str =
    "is a number beyond the 64-bit integer range (±9223372036854775807), which is not allowed";

/// The path (`environmentSettings[0].value`, as serde_path_to_error writes it) of the first
/// string or key in a JSON body that holds a NUL character, or of the first number too large to
/// store and read back, with the reason. Most bodies hold neither (JSON can only carry a NUL
/// escaped, and a huge number needs an exponent or 19 digits in a row), so they are not parsed a
/// second time.
pub fn unstorable(bytes: &[u8]) -> Option<(String, &'static str)> {
    let nul = bytes.windows(6).any(|w| w == br"\u0000");
    if !nul && !may_hold_huge_number(bytes) {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    unstorable_in(&value, String::new())
}

fn may_hold_huge_number(bytes: &[u8]) -> bool {
    let mut run = 0;
    for pair in bytes.windows(2) {
        if pair[0].is_ascii_digit() && matches!(pair[1], b'e' | b'E') {
            return true;
        }
        run = if pair[0].is_ascii_digit() { run + 1 } else { 0 };
        if run >= 19 {
            return true;
        }
    }
    false
}

fn unstorable_in(value: &serde_json::Value, path: String) -> Option<(String, &'static str)> {
    let named = |path: String| if path.is_empty() { ".".into() } else { path };
    match value {
        serde_json::Value::String(s) => s.contains('\0').then(|| (named(path), NUL_REASON)),
        serde_json::Value::Number(n) => {
            let huge = n.as_i64().is_none()
                && n.as_u64().is_none()
                && n.as_f64()
                    .is_some_and(|f| f.abs() >= 9.223_372_036_854_776e18);
            huge.then(|| (named(path), HUGE_REASON))
        }
        serde_json::Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| unstorable_in(v, format!("{path}[{i}]"))),
        serde_json::Value::Object(map) => map.iter().find_map(|(k, v)| {
            let key = k.replace('\0', "\\u0000");
            let here = if path.is_empty() {
                key
            } else {
                format!("{path}.{key}")
            };
            if k.contains('\0') {
                Some((here, NUL_REASON))
            } else {
                unstorable_in(v, here)
            }
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, unstorable, HUGE_REASON, NUL_REASON};

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    #[serde(rename_all = "camelCase")]
    struct Body {
        count: Option<i32>,
        items: Option<Vec<Item>>,
    }

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Item {
        name: String,
    }

    /// The error's PropertyName and PropertyValue for `body`.
    fn named(body: &str) -> (String, String) {
        let error = parse::<Body>(body.as_bytes()).unwrap_err();
        let of = |key: &str| {
            let found = error.values.iter().find(|(k, _)| k == key);
            found.map(|(_, v)| v.clone()).unwrap()
        };
        (of("PropertyName"), of("PropertyValue"))
    }

    #[test]
    fn a_value_of_the_wrong_type_is_repeated_in_the_error() {
        assert_eq!(
            named(r#"{"count": "many"}"#),
            ("count".into(), "many".into())
        );
        assert_eq!(named(r#"{"count": 1.5}"#), ("count".into(), "1.5".into()));
        let nested = named(r#"{"items": [{"name": "a"}, {"name": [1, 2]}]}"#);
        assert_eq!(nested, ("items[1].name".into(), "[1,2]".into()));
        let (_, long) = named(&format!(r#"{{"count": "{}"}}"#, "é".repeat(300)));
        assert!(long.len() <= 203 && long.ends_with("..."), "{long}");
        // A missing property has no value to show.
        assert_eq!(named(r#"{"items": [{}]}"#).1, "");
    }

    fn nul_path(bytes: &[u8]) -> Option<String> {
        unstorable(bytes).map(|(path, reason)| {
            assert_eq!(reason, NUL_REASON);
            path
        })
    }

    #[test]
    fn huge_numbers_are_found_with_their_path() {
        let at = |body: &str| unstorable(body.as_bytes());
        assert_eq!(at(r#"{"n": 1.5e3, "m": 12345678901234567890}"#), None);
        assert_eq!(at(r#"{"n": -9223372036854775808}"#), None);
        assert_eq!(
            at(r#"{"exitConditions": {"x": [1.7976931348623157e308]}}"#),
            Some(("exitConditions.x[0]".into(), HUGE_REASON))
        );
        assert_eq!(at(r#"{"a": -1e19}"#), Some(("a".into(), HUGE_REASON)));
        assert_eq!(
            at(r#"{"a": 100000000000000000000}"#),
            Some(("a".into(), HUGE_REASON))
        );
    }

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
