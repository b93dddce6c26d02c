//! Where a file of the files API is, and who is asked about it: the agent of the node it is on
//! (through the leader, for a server that does not lead). A task's files are on the node that
//! ran it, and go with it, as on Azure.

use std::path::{Component, Path as FsPath, PathBuf};

use axum::http::StatusCode;

use crate::api::error::{ApiError, ApiResult};
use crate::api::Ctx;
use crate::domain::agent::{is_private as private_name, FileError, FileOp, PeerFile};
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

/// Where files are: a path below a node's root (as this host names it), and the node whose
/// agent serves them.
pub(super) struct Place {
    pub at: Below,
    pub node: String,
}

impl Place {
    pub fn join(&self, rel: &FsPath) -> Place {
        Place {
            at: self.at.join(rel),
            node: self.node.clone(),
        }
    }
}

/// Asks `op` of the files at `place`: of this server's runtime if the node's agent connects
/// here or this server leads, else of the leader, whose nodes they are.
pub(super) async fn ask(app: &Ctx, place: &Place, op: FileOp) -> ApiResult<FileAnswer> {
    let node = place.node.as_str();
    let conflict = |e: NodeError| ApiError::new(StatusCode::CONFLICT, e.code, e.message);
    let ours = app.runtime.serves(node) || app.probes.leads();
    if !ours {
        let leader = store::leader::peer_url(&app.db)
            .await
            .map_err(ApiError::internal)?;
        if let Some(url) = leader.filter(|url| *url != app.peers.url) {
            let question = PeerFile {
                node: place.node.clone(),
                rel: place.at.rel.to_string_lossy().into_owned(),
                op,
            };
            return app.peers.file(&url, &question).await.map_err(conflict);
        }
    }
    app.runtime
        .file(Some(node), &place.at, op)
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
        FileError::Unfinished => ApiError::new(
            StatusCode::CONFLICT,
            "OperationUnfinished",
            format!("{path:?} was only partly deleted on its node before the time for it ran out; delete it again for the rest."),
        ),
        FileError::Unsupported => ApiError::new(
            StatusCode::CONFLICT,
            "FeatureNotSupportedByNode",
            format!("{path:?}: {message}"),
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
    let node = &place.node;
    ApiError::new(
        StatusCode::CONFLICT,
        "NodeAgentUnreachable",
        format!("node {node}'s agent answered another question than the one asked"),
    )
}

/// A task, and where its files are.
pub(super) struct TaskAt {
    pub job_id: String,
    pub task_id: String,
    pub task_pk: i64,
    pub root: TaskRoot,
    /// Whether its retentionTime has run out: then no copy of its files is kept either.
    pub expired: bool,
}

pub(super) enum TaskRoot {
    /// It has not run: it has no files.
    NotRun,
    /// Its directory on the node that ran it, still in its pool.
    OnNode(Place),
    /// Its node left its pool, and its files went with it: all but its kept stdout.txt and
    /// stderr.txt ([`super::kept`]).
    NodeGone(String),
}

impl TaskAt {
    /// 404 `NodeNotFound`: the task's node is gone, and `path` with it.
    pub fn node_gone(&self, node: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "NodeNotFound",
            format!(
                "The node {node:?} that ran task {:?} has left its pool, and the task's files went with it, \
                 but for its stdout.txt and stderr.txt, which are kept. Keep others with the task's outputFiles.",
                self.task_id
            ),
        )
    }
}

/// The task, and where its files are.
pub(super) async fn task_root(app: &Ctx, job_id: &str, task_id: &str) -> ApiResult<TaskAt> {
    let job = app.job(job_id).await?;
    let task = super::super::tasks::find(app, &job, task_id).await?;
    let root = match (task.node_id.clone(), task.node_pk) {
        (None, _) => TaskRoot::NotRun,
        (Some(node), None) => TaskRoot::NodeGone(node),
        (Some(node), Some(_)) => TaskRoot::OnNode(Place {
            at: app.runtime.task_dirs(&node, &job.id, &task.id).host,
            node,
        }),
    };
    let retention = chrono::Duration::microseconds(task.retention_ticks / 10);
    let expired = task
        .end_time
        .and_then(|end| end.checked_add_signed(retention))
        .is_some_and(|until| until < chrono::Utc::now());
    Ok(TaskAt {
        job_id: job.id,
        task_id: task.id,
        task_pk: task.pk,
        root,
        expired,
    })
}

/// Where a node file lives: below the node's root, its tasks' directories (`workitems`)
/// included.
pub(super) async fn node_path(
    app: &Ctx,
    pool_id: &str,
    node_id: &str,
    path: &FsPath,
) -> ApiResult<Place> {
    let pool = super::super::pools::find(app, pool_id).await?;
    super::super::nodes::find_node(app, &pool, node_id).await?;
    let at = Below {
        root: app.runtime.host_root(node_id),
        rel: path.to_path_buf(),
    };
    Ok(Place {
        at,
        node: node_id.to_string(),
    })
}
