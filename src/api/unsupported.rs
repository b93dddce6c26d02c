//! Operations of the Azure Batch API that this server does not offer. They are answered with 400
//! `OperationNotSupported` naming the operation and what to do instead, not with the 404
//! `ResourceNotFound` that the SDKs
//! report as a missing pool or job. (A 4xx, not 501: the request is well formed, but it asks for
//! something this server does not do, and no 5xx ever means anything but a server fault here.)

use axum::http::{Method, StatusCode, Uri};

use crate::api::error::ApiError;

/// An operation this server lacks: what it is, and what to do instead.
type Lacking = (&'static str, &'static str);

/// Where a node is reached without remote login.
const INTO_A_NODE: &str = "run the command as a task, or read the node's files through the files API; \
    an operator can `docker exec` into the node's container (batchpool-<server id>-<node id>) on its host";

/// The operation a request asks for, if it is one Azure has and this server lacks.
pub fn operation(path: &str) -> Option<Lacking> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["certificates", ..] => Some((
            "certificates",
            "give tasks their secrets in environmentSettings, or as resource files from a SAS URL",
        )),
        ["pools", _, "nodes", _, rest @ ..] => node_operation(rest),
        ["jobs", _, "tasks", _, "subtasksinfo"] => {
            Some(("multi-instance tasks", "run one task per part of the work"))
        }
        _ => None,
    }
}

fn node_operation(rest: &[&str]) -> Option<Lacking> {
    match rest {
        ["users", ..] => Some(("user accounts on nodes", INTO_A_NODE)),
        ["remoteloginsettings"] | ["rdp"] => Some(("remote login to nodes", INTO_A_NODE)),
        ["extensions", ..] => Some((
            "VM extensions",
            "install what the nodes need with the pool's start task or in its image",
        )),
        _ => None,
    }
}

/// The router's fallback: 400 for an operation this server lacks, else 404.
pub async fn fallback(method: Method, uri: Uri) -> ApiError {
    match operation(uri.path()) {
        Some((what, instead)) => ApiError::new(
            StatusCode::BAD_REQUEST,
            "OperationNotSupported",
            format!(
                "This server does not offer {what} ({method} {}). Instead: {instead}. See docs/compatibility.md.",
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
            (Method::GET, "/jobschedules", None),
            (Method::POST, "/jobschedules/s/terminate", None),
            (Method::GET, "/certificates", Some("certificates")),
            (Method::POST, "/pools/p/nodes/n/reimage", None),
            (
                Method::POST,
                "/pools/p/nodes/n/uploadbatchservicelogs",
                None,
            ),
            (Method::GET, "/lifetimepoolstats", None),
            (
                Method::POST,
                "/pools/p/nodes/n/users",
                Some("user accounts on nodes"),
            ),
            (Method::POST, "/pools/p/nodes/n/disablescheduling", None),
            (Method::POST, "/pools/p/evaluateautoscale", None),
            (Method::GET, "/pools/p/nodes/n/files/x", None),
            (Method::GET, "/nonsense", None),
            (Method::DELETE, "/jobs/j/tasks/t/files", None),
            (Method::GET, "/pools/p/nodes/n/other", None),
        ];
        for (method, path, want) in cases {
            assert_eq!(
                operation(path).map(|(what, _)| what),
                want,
                "{method} {path}"
            );
        }
    }
}
