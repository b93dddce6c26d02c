//! Operations of the Azure Batch API that this server does not offer. They are answered with 400
//! `OperationNotSupported` naming the operation, not with the 404 `ResourceNotFound` that the SDKs
//! report as a missing pool or job. (A 4xx, not 501: the request is well formed, but it asks for
//! something this server does not do, and no 5xx ever means anything but a server fault here.)

use axum::http::{Method, StatusCode, Uri};

use crate::api::error::ApiError;

/// The operation a request asks for, if it is one Azure has and this server lacks.
pub fn operation(path: &str) -> Option<&'static str> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["jobschedules", ..] => Some("job schedules"),
        ["certificates", ..] => Some("certificates"),
        ["lifetimepoolstats"] | ["lifetimejobstats"] => Some("lifetime statistics"),
        ["pools", _, "nodes", _, rest @ ..] => node_operation(rest),
        ["jobs", _, "tasks", _, "subtasksinfo"] => Some("multi-instance tasks"),
        _ => None,
    }
}

fn node_operation(rest: &[&str]) -> Option<&'static str> {
    match rest {
        ["reimage"] => Some("reimaging nodes"),
        ["uploadbatchservicelogs"] => Some("uploading a node's service logs"),
        ["users", ..] => Some("user accounts on nodes"),
        ["remoteloginsettings"] | ["rdp"] => Some("remote login to nodes"),
        ["extensions", ..] => Some("VM extensions"),
        ["start"] | ["deallocate"] => Some("starting and deallocating nodes"),
        _ => None,
    }
}

/// The router's fallback: 400 for an operation this server lacks, else 404.
pub async fn fallback(method: Method, uri: Uri) -> ApiError {
    match operation(uri.path()) {
        Some(what) => ApiError::new(
            StatusCode::BAD_REQUEST,
            "OperationNotSupported",
            format!(
                "This server does not offer {what} ({method} {}); see its compatibility page.",
                uri.path()
            ),
        ),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "ResourceNotFound",
            "The specified resource does not exist.",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_azure_has_are_named_and_others_are_not() {
        let cases = [
            (Method::GET, "/jobschedules", Some("job schedules")),
            (
                Method::POST,
                "/jobschedules/s/terminate",
                Some("job schedules"),
            ),
            (Method::GET, "/certificates", Some("certificates")),
            (
                Method::POST,
                "/pools/p/nodes/n/reimage",
                Some("reimaging nodes"),
            ),
            (Method::POST, "/pools/p/nodes/n/disablescheduling", None),
            (Method::POST, "/pools/p/evaluateautoscale", None),
            (Method::GET, "/pools/p/nodes/n/files/x", None),
            (Method::GET, "/nonsense", None),
            (Method::DELETE, "/jobs/j/tasks/t/files", None),
            (Method::GET, "/pools/p/nodes/n/other", None),
        ];
        for (method, path, want) in cases {
            assert_eq!(operation(path), want, "{method} {path}");
        }
    }
}
