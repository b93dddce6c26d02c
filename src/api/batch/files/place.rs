//! Where a file of the files API is, and who is asked about it: the agent of the node it is on
//! (through the leader, for a server that does not lead), or this host's disk for a task whose
//! node is gone.

use std::path::{Component, Path as FsPath, PathBuf};

use axum::http::StatusCode;

use crate::api::error::{ApiError, ApiResult};
use crate::api::Ctx;
use crate::domain::agent::{is_private as private_name, FileError, FileOp, PeerFile, PeerRoot};
use crate::runtime::agents::FileAnswer;
use crate::runtime::safe_fs::Below;
use crate::runtime::NodeError;
use crate::store;

/// A request path made safe: relative, no `..`, no root.
pub(super) fn relative(path: &str) -> ApiResult<PathBuf> {
    let p = FsPath::new(path.trim_start_matches('/'));
    if path.is_empty() || p.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(ApiError::invalid_property(
            "filePath",
            path,
            "must be a relative path without '..'",
        ));
    }
    if p.components().any(|c| is_private(c.as_os_str())) {
        return Err(file_not_found(path));
    }
    Ok(p.to_path_buf())
}

/// The server's own bookkeeping beside a task's or node's files: never listed, never served.
pub(super) fn is_private(name: &std::ffi::OsStr) -> bool {
    private_name(&name.to_string_lossy())
}

pub(super) fn file_not_found(path: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "FileNotFound",
        format!("The specified file {path:?} does not exist."),
    )
}

/// Where files are: a path on this host below a node's root or an account's workitems, and the
/// node whose agent serves them (None: no node holds them any more).
pub(super) struct Place {
    pub at: Below,
    pub node: Option<String>,
    pub account: String,
}

impl Place {
    pub fn join(&self, rel: &FsPath) -> Place {
        Place {
            at: self.at.join(rel),
            node: self.node.clone(),
            account: self.account.clone(),
        }
    }
}

/// Asks `op` of the files at `place`: of this server's runtime if the node's agent connects
/// here or this server leads, else of the leader, whose nodes they are.
pub(super) async fn ask(app: &Ctx, place: &Place, op: FileOp) -> ApiResult<FileAnswer> {
    let node = place.node.as_deref();
    let conflict = |e: NodeError| ApiError::new(StatusCode::CONFLICT, e.code, e.message);
    let ours = node.is_some_and(|n| app.runtime.serves(n)) || app.probes.leads();
    if !ours {
        let leader = store::leader::peer_url(&app.db)
            .await
            .map_err(ApiError::internal)?;
        if let Some(url) = leader.filter(|url| *url != app.peers.url) {
            let question = PeerFile {
                node: place.node.clone(),
                account: place.account.clone(),
                root: if place.at.root == app.layout.account_workitems(&place.account) {
                    PeerRoot::Workitems
                } else {
                    PeerRoot::Node
                },
                rel: place.at.rel.to_string_lossy().into_owned(),
                op,
            };
            return app.peers.file(&url, &question).await.map_err(conflict);
        }
    }
    app.runtime
        .file(node, &place.account, &place.at, op)
        .await
        .map_err(conflict)
}

/// A refusal the user should see: what was asked, and why it was not answered.
pub(super) fn refusal(path: &str, error: FileError, message: String) -> ApiError {
    match error {
        FileError::NotFound => file_not_found(path),
        FileError::IsDirectory => ApiError::new(
            StatusCode::BAD_REQUEST,
            "FileIsDirectory",
            format!("{path:?} is a directory; list it instead."),
        ),
        FileError::BadRange { len } => ApiError::new(
            StatusCode::RANGE_NOT_SATISFIABLE,
            "InvalidRange",
            format!("The range asked for is not satisfiable for a file of {len} bytes."),
        ),
        FileError::TooMany => ApiError::new(
            StatusCode::BAD_REQUEST,
            "TooManyFiles",
            format!("{path:?} holds {message}: list it with recursive=false."),
        ),
        FileError::NotEmpty => ApiError::new(
            StatusCode::CONFLICT,
            "DirectoryNotEmpty",
            format!("{path:?} is a directory with files in it; delete it with recursive=true."),
        ),
        FileError::Failed => ApiError::new(
            StatusCode::CONFLICT,
            "FileUnreadable",
            format!("{path:?} could not be read on its node: {message}"),
        ),
    }
}

/// An answer that is not one to the question asked: only an agent gone wrong gives one.
pub(super) fn odd_answer(place: &Place) -> ApiError {
    let node = place.node.as_deref().unwrap_or("-");
    ApiError::new(
        StatusCode::CONFLICT,
        "NodeAgentUnreachable",
        format!("node {node}'s agent answered another question than the one asked"),
    )
}

/// The directory of a task's files, if it ran.
pub(super) async fn task_root(
    app: &Ctx,
    job_id: &str,
    task_id: &str,
) -> ApiResult<(String, String, Option<Place>)> {
    let job = super::super::jobs::find(app, job_id).await?;
    let task = super::super::tasks::find(app, &job, task_id).await?;
    let place = task.node_id.clone().map(|node| Place {
        at: app.layout.task_dir(&job.account, &job.id, &task.id),
        node: Some(node),
        account: job.account.clone(),
    });
    Ok((job.id, task.id, place))
}

/// Where a node file lives: `workitems/...` in the account's task directories, the rest under
/// the node's root.
pub(super) async fn node_path(
    app: &Ctx,
    pool_id: &str,
    node_id: &str,
    path: &FsPath,
) -> ApiResult<Place> {
    let pool = super::super::pools::find(app, pool_id).await?;
    super::super::nodes::find_node(app, &pool, node_id).await?;
    let mut parts = path.components();
    let at = match parts.next() {
        Some(first) if first.as_os_str() == "workitems" => Below {
            root: app.layout.account_workitems(&pool.account),
            rel: parts.as_path().to_path_buf(),
        },
        _ => Below {
            root: app.layout.nodes.join(node_id),
            rel: path.to_path_buf(),
        },
    };
    Ok(Place {
        at,
        node: Some(node_id.to_string()),
        account: pool.account,
    })
}
