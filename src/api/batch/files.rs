//! Files of tasks and nodes: list (recursive or not), download (with `ocp-range`, answered with
//! 200 as the SDK requires) and properties (HEAD). A task's files are readable while it runs and
//! after it ends, also after its node is gone, until its retentionTime or its job's deletion.
//! No path leaves the directory it names: everything below a node's root or an account's
//! workitems is the tasks' to write, so it is read through `safe_fs`, which follows no link.
//! Downloads stream from the file, so a large file or range costs no memory.

use std::collections::HashMap;
use std::io::SeekFrom;
use std::path::{Component, Path as FsPath, PathBuf};

use axum::body::Body;
use axum::extract::{Path, Query};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::api::error::{ApiError, ApiResult};
use crate::api::Ctx;
use crate::api::{header_value, odata, rfc1123, rfc3339, BaseUrl, ListQuery};
use crate::runtime::safe_fs::Below;
use crate::runtime::STATE_DIR;

/// A request path made safe: relative, no `..`, no root.
fn relative(path: &str) -> ApiResult<PathBuf> {
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
fn is_private(name: &std::ffi::OsStr) -> bool {
    name.to_string_lossy().starts_with(".batchpool") || name == STATE_DIR
}

fn file_not_found(path: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "FileNotFound",
        format!("The specified file {path:?} does not exist."),
    )
}

/// The directory of a task's files, if it ran and it is there.
async fn task_root(
    app: &Ctx,
    job_id: &str,
    task_id: &str,
) -> ApiResult<(String, String, Option<Below>)> {
    let job = super::jobs::find(app, job_id).await?;
    let task = super::tasks::find(app, &job, task_id).await?;
    let dir = app.layout.task_dir(&job.account, &job.id, &task.id);
    let exists = task.node_id.is_some()
        && dir
            .with(|root, rel| root.open_dir(rel).map(|_| ()))
            .await
            .is_ok();
    Ok((job.id, task.id, exists.then_some(dir)))
}

/// Where a node file lives: `workitems/...` in the account's task directories, the rest under
/// the node's root.
async fn node_path(app: &Ctx, pool_id: &str, node_id: &str, path: &FsPath) -> ApiResult<Below> {
    let pool = super::pools::find(app, pool_id).await?;
    super::nodes::find_node(app, &pool, node_id).await?;
    let mut parts = path.components();
    Ok(match parts.next() {
        Some(first) if first.as_os_str() == "workitems" => Below {
            root: app.layout.account_workitems(&pool.account),
            rel: parts.as_path().to_path_buf(),
        },
        _ => Below {
            root: app.layout.nodes.join(node_id),
            rel: path.to_path_buf(),
        },
    })
}

pub async fn list_task_files(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path((job_id, task_id)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let (job_id, task_id, root) = task_root(&app, &job_id, &task_id).await?;
    let url = format!("{base}/jobs/{job_id}/tasks/{task_id}/files");
    let entries = match root {
        Some(root) => list_dir(root, recursive(&query), &url).await?,
        None => Vec::new(),
    };
    let list = ListQuery::from_query(&query, odata::FILE_PROPERTIES)?;
    let path = format!("/jobs/{job_id}/tasks/{task_id}/files");
    Ok(Json(
        list.page_of(
            &base,
            &path,
            entries
                .into_iter()
                .map(|e| (e["name"].as_str().unwrap_or_default().to_string(), e)),
        ),
    ))
}

pub async fn list_node_files(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path((pool_id, node_id)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let root = node_path(&app, &pool_id, &node_id, FsPath::new("")).await?;
    let url = format!("{base}/pools/{pool_id}/nodes/{node_id}/files");
    Ok(Json(
        json!({"value": list_dir(root, recursive(&query), &url).await?}),
    ))
}

fn recursive(query: &HashMap<String, String>) -> bool {
    query
        .get("recursive")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Azure's BatchNodeFile entries under `dir`, names relative to it with `/`.
async fn list_dir(dir: Below, recursive: bool, url: &str) -> ApiResult<Vec<Value>> {
    let url = url.to_string();
    let listed = dir.with(move |root, top| {
        let mut out = Vec::new();
        let mut pending = vec![PathBuf::new()];
        while let Some(rel) = pending.pop() {
            // A directory that went (or became a link) meanwhile has nothing to list.
            let Ok(entries) = root.open_dir(&top.join(&rel)).and_then(|d| d.entries()) else {
                continue;
            };
            for (name, meta) in entries {
                // Links are neither listed nor followed: a task could point one anywhere.
                if is_private(&name) || meta.file_type().is_symlink() {
                    continue;
                }
                let rel_path = rel.join(&name);
                let name = rel_path.to_string_lossy().replace('\\', "/");
                out.push(file_entry(&name, &meta, &url));
                if meta.is_dir() && recursive {
                    pending.push(rel_path);
                }
            }
        }
        Ok(out)
    });
    let mut out = listed.await.map_err(ApiError::internal)?;
    out.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Ok(out)
}

fn times(meta: &std::fs::Metadata) -> (DateTime<Utc>, DateTime<Utc>) {
    let modified = meta
        .modified()
        .map(DateTime::<Utc>::from)
        .unwrap_or_else(|_| Utc::now());
    let created = meta
        .created()
        .map(DateTime::<Utc>::from)
        .unwrap_or(modified);
    (created, modified)
}

fn mode(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!("{:o}", meta.mode())
}

fn file_entry(name: &str, meta: &std::fs::Metadata, url: &str) -> Value {
    let (created, modified) = times(meta);
    json!({
        "name": name,
        "url": format!("{url}/{}", name),
        "isDirectory": meta.is_dir(),
        "properties": {
            "creationTime": rfc3339(created),
            "lastModified": rfc3339(modified),
            "contentLength": meta.len().to_string(),
            "contentType": "application/octet-stream",
            "fileMode": mode(meta),
        },
    })
}

pub async fn task_file(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    method: Method,
    headers: HeaderMap,
    Path((job_id, task_id, path)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    let rel = relative(&path)?;
    let (job_id, task_id, root) = task_root(&app, &job_id, &task_id).await?;
    let root = root.ok_or_else(|| file_not_found(&path))?;
    let url = format!("{base}/jobs/{job_id}/tasks/{task_id}/files/{path}");
    serve(root.join(&rel), &path, &url, &method, &headers).await
}

pub async fn node_file(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    method: Method,
    headers: HeaderMap,
    Path((pool_id, node_id, path)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    let rel = relative(&path)?;
    let file = node_path(&app, &pool_id, &node_id, &rel).await?;
    let url = format!("{base}/pools/{pool_id}/nodes/{node_id}/files/{path}");
    serve(file, &path, &url, &method, &headers).await
}

/// `ocp-range: bytes=a-b` (inclusive; `a-` to the end).
fn range(headers: &HeaderMap, len: u64) -> ApiResult<Option<(u64, u64)>> {
    let Some(value) = headers
        .get("ocp-range")
        .or_else(|| headers.get(header::RANGE))
    else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default();
    let bad = || {
        ApiError::new(
            StatusCode::RANGE_NOT_SATISFIABLE,
            "InvalidRange",
            format!("The range {text:?} is not satisfiable for a file of {len} bytes."),
        )
    };
    let spec = text.strip_prefix("bytes=").ok_or_else(bad)?;
    let (start, end) = spec.split_once('-').ok_or_else(bad)?;
    let start: u64 = start.trim().parse().map_err(|_| bad())?;
    let end: u64 = if end.trim().is_empty() {
        len.saturating_sub(1)
    } else {
        end.trim().parse().map_err(|_| bad())?
    };
    if start > end || (len > 0 && start >= len) {
        return Err(bad());
    }
    Ok(Some((start, end.min(len.saturating_sub(1)))))
}

async fn serve(
    file: Below,
    path: &str,
    url: &str,
    method: &Method,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    // A link is not a file of the task's, wherever it points.
    let meta = file
        .with(|root, rel| root.metadata(rel))
        .await
        .ok()
        .filter(|m| !m.file_type().is_symlink())
        .ok_or_else(|| file_not_found(path))?;
    let (created, modified) = times(&meta);
    let mut out = HeaderMap::new();
    let h = header_value;
    out.insert("ocp-creation-time", h(&rfc1123(created)));
    out.insert(
        "ocp-batch-file-isdirectory",
        h(if meta.is_dir() { "true" } else { "false" }),
    );
    out.insert("ocp-batch-file-url", h(url));
    out.insert("ocp-batch-file-mode", h(&mode(&meta)));
    out.insert(header::LAST_MODIFIED, h(&rfc1123(modified)));
    out.insert(header::CONTENT_TYPE, h("application/octet-stream"));
    if meta.is_dir() {
        if *method == Method::HEAD {
            out.insert(header::CONTENT_LENGTH, h("0"));
            return Ok((StatusCode::OK, out).into_response());
        }
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "FileIsDirectory",
            format!("{path:?} is a directory; list it instead."),
        ));
    }
    if *method == Method::HEAD {
        out.insert(header::CONTENT_LENGTH, h(&meta.len().to_string()));
        return Ok((StatusCode::OK, out).into_response());
    }
    // The file as opened, not as looked at: it may have grown or been replaced since.
    let std_file = file
        .with(|root, rel| root.open_file(rel))
        .await
        .map_err(|_| file_not_found(path))?;
    let len = std_file.metadata().map_err(ApiError::internal)?.len();
    let (start, count) = match range(headers, len)? {
        Some((start, end)) if len > 0 => (start, end - start + 1),
        _ => (0, len),
    };
    let mut f = tokio::fs::File::from_std(std_file);
    f.seek(SeekFrom::Start(start))
        .await
        .map_err(ApiError::internal)?;
    out.insert(header::CONTENT_LENGTH, h(&count.to_string()));
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(f.take(count)));
    Ok((StatusCode::OK, out, body).into_response())
}
