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
