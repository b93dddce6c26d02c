//! Files of tasks and nodes: list (recursive or not), download (with `ocp-range`, answered with
//! 200 as the SDK requires) and properties (HEAD). A task's files are readable while it runs and
//! after it ends, also after its node is gone, until its retentionTime or its job's deletion.
//! No path leaves the directory it names.

use std::collections::HashMap;
use std::path::{Component, Path as FsPath, PathBuf};

use axum::extract::{Path, Query};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::api::error::{ApiError, ApiResult};
use crate::api::Ctx;
use crate::api::{header_value, odata, rfc1123, rfc3339, BaseUrl, ListQuery};
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

/// `full`, resolved, if it stays inside `root`: a link a task planted cannot lead outside.
async fn contained(root: &FsPath, full: &FsPath, path: &str) -> ApiResult<PathBuf> {
    let root = tokio::fs::canonicalize(root)
        .await
        .map_err(|_| file_not_found(path))?;
    let resolved = tokio::fs::canonicalize(full)
        .await
        .map_err(|_| file_not_found(path))?;
    if !resolved.starts_with(&root) {
        return Err(file_not_found(path));
    }
    Ok(resolved)
}

fn file_not_found(path: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "FileNotFound",
        format!("The specified file {path:?} does not exist."),
    )
}

/// The host directory of a task's files, if it ran.
async fn task_root(
    app: &Ctx,
    job_id: &str,
    task_id: &str,
) -> ApiResult<(String, String, Option<PathBuf>)> {
    let job = super::jobs::find(app, job_id).await?;
    let task = super::tasks::find(app, &job, task_id).await?;
    let dir = app
        .layout
        .job_dir(&job.account, &job.id)
        .join("job-1")
        .join(&task.id);
    let exists = task.node_id.is_some() && tokio::fs::metadata(&dir).await.is_ok();
    Ok((job.id, task.id, exists.then_some(dir)))
}

/// The host root and path of a node file: `workitems/...` lives in the account's task
/// directories, the rest under the node's root.
async fn node_path(
    app: &Ctx,
    pool_id: &str,
    node_id: &str,
    path: &FsPath,
) -> ApiResult<(PathBuf, PathBuf)> {
    let pool = super::pools::find(app, pool_id).await?;
    super::nodes::find_node(app, &pool, node_id).await?;
    let mut parts = path.components();
    Ok(match parts.next() {
        Some(first) if first.as_os_str() == "workitems" => {
            let root = app.layout.account_workitems(&pool.account);
            (root.clone(), root.join(parts.as_path()))
        }
        _ => {
            let root = app.layout.nodes.join(node_id);
            (root.clone(), root.join(path))
        }
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
        Some(root) => list_dir(&root, recursive(&query), &url).await?,
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
    let (root, _) = node_path(&app, &pool_id, &node_id, FsPath::new("")).await?;
    let url = format!("{base}/pools/{pool_id}/nodes/{node_id}/files");
    Ok(Json(
        json!({"value": list_dir(&root, recursive(&query), &url).await?}),
    ))
}

fn recursive(query: &HashMap<String, String>) -> bool {
    query
        .get("recursive")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Azure's BatchNodeFile entries under `root`, names relative to it with `/`.
async fn list_dir(root: &FsPath, recursive: bool, url: &str) -> ApiResult<Vec<Value>> {
    let mut out = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let Ok(mut entries) = tokio::fs::read_dir(root.join(&rel)).await else {
            continue;
        };
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(|e| ApiError::internal(e))?
        {
            let name = entry.file_name();
            if is_private(&name) {
                continue;
            }
            let rel_path = rel.join(&name);
            // Links are neither listed nor followed: a task could point one anywhere.
            let Ok(meta) = tokio::fs::symlink_metadata(entry.path()).await else {
                continue;
            };
            if meta.file_type().is_symlink() {
                continue;
            }
            let name = rel_path.to_string_lossy().replace('\\', "/");
            out.push(file_entry(&name, &meta, url));
            if meta.is_dir() && recursive {
                pending.push(rel_path);
            }
        }
    }
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
    let full = contained(&root, &root.join(rel), &path).await?;
    serve(&full, &path, &url, &method, &headers).await
}

pub async fn node_file(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    method: Method,
    headers: HeaderMap,
    Path((pool_id, node_id, path)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    let rel = relative(&path)?;
    let (root, full) = node_path(&app, &pool_id, &node_id, &rel).await?;
    let url = format!("{base}/pools/{pool_id}/nodes/{node_id}/files/{path}");
    let full = contained(&root, &full, &path).await?;
    serve(&full, &path, &url, &method, &headers).await
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
    full: &FsPath,
    path: &str,
    url: &str,
    method: &Method,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let meta = tokio::fs::metadata(full)
        .await
        .map_err(|_| file_not_found(path))?;
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
    let bytes = tokio::fs::read(full)
        .await
        .map_err(|_| file_not_found(path))?;
    let body = match range(headers, bytes.len() as u64)? {
        Some((start, end)) if !bytes.is_empty() => bytes[start as usize..=end as usize].to_vec(),
        _ => bytes,
    };
    Ok((StatusCode::OK, out, body).into_response())
}
