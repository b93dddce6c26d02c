//! Files of tasks and nodes: list (recursive or not), download (with `ocp-range`, answered with
//! 200 as the SDK requires) and properties (HEAD). A task's files are readable while it runs and
//! after it ends, until its retentionTime, its job's deletion, or its node's removal: they live
//! on the node, as on Azure. They are asked of the node's agent, which reads them from inside
//! the node (`Runtime::file`): everything below a node's root is the tasks' to write, so
//! nothing is followed through a link. Downloads stream, so a large file or range costs
//! no memory.

use std::collections::HashMap;
use std::path::Path as FsPath;

use axum::body::Body;
use axum::extract::{Path, Query};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

mod follow;
mod kept;
mod place;

use place::{ask, file_not_found, node_path, odd_answer, refusal, relative, task_root, Place};
use place::{TaskAt, TaskRoot};

use crate::api::error::{ApiError, ApiResult};
use crate::api::Ctx;
use crate::api::{header_value, odata, rfc1123, rfc3339, BaseUrl, ListQuery};
use crate::domain::agent::{FileError, FileInfo, FileOp};
use crate::runtime::agents::FileAnswer;

pub async fn list_task_files(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path((job_id, task_id)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let list = list_query(&query)?;
    let at = task_root(&app, &job_id, &task_id).await?;
    let path = format!("/jobs/{}/tasks/{}/files", at.job_id, at.task_id);
    let url = format!("{base}{path}");
    let entries = match &at.root {
        TaskRoot::OnNode(place) => list_dir(&app, place, &query, &url).await?,
        TaskRoot::NodeGone(_) if !at.expired => kept::entries(&app, at.task_pk, &url).await?,
        TaskRoot::NodeGone(_) => Vec::new(),
        TaskRoot::NotRun => Vec::new(),
    };
    Ok(Json(page(&list, &base, &path, entries)))
}

pub async fn list_node_files(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    Path((pool_id, node_id)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let list = list_query(&query)?;
    let place = node_path(&app, &pool_id, &node_id, FsPath::new("")).await?;
    let path = format!("/pools/{pool_id}/nodes/{node_id}/files");
    let entries = list_dir(&app, &place, &query, &format!("{base}{path}")).await?;
    Ok(Json(page(&list, &base, &path, entries)))
}

/// A file list's OData options; its pages' links keep `recursive`, so every page is of the
/// same listing.
fn list_query(query: &HashMap<String, String>) -> ApiResult<ListQuery> {
    Ok(ListQuery::from_query(query, odata::FILE_PROPERTIES)?.carrying(query, "recursive"))
}

/// One page of a listing sorted by name, the name being the page's token.
fn page(list: &ListQuery, base: &str, path: &str, entries: Vec<Value>) -> Value {
    let named = entries
        .into_iter()
        .map(|e| (e["name"].as_str().unwrap_or_default().to_string(), e));
    list.page_of(base, path, named)
}

/// `follow=true`: the file as the task writes it, until it completes ([`follow`]).
fn following(query: &HashMap<String, String>) -> ApiResult<bool> {
    match query
        .get("follow")
        .map(|v| v.to_ascii_lowercase())
        .as_deref()
    {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(ApiError::invalid_property(
            "follow",
            query["follow"].as_str(),
            "must be true or false",
        )),
    }
}

fn recursive(query: &HashMap<String, String>) -> bool {
    query
        .get("recursive")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Azure's BatchNodeFile entries below `place` (all of them with `recursive=true`), names
/// relative to it with `/`, sorted by name; none if it is not there.
async fn list_dir(
    app: &Ctx,
    place: &Place,
    query: &HashMap<String, String>,
    url: &str,
) -> ApiResult<Vec<Value>> {
    let op = FileOp::List {
        recursive: recursive(query),
    };
    let mut out: Vec<Value> = match ask(app, place, op).await? {
        FileAnswer::Listing(infos) => infos.iter().map(|info| file_entry(info, url)).collect(),
        FileAnswer::Refused {
            error: FileError::NotFound,
            ..
        } => Vec::new(),
        FileAnswer::Refused { error, message } => {
            return Err(refusal(&place.at.rel.display().to_string(), error, message))
        }
        _ => return Err(odd_answer(place)),
    };
    out.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Ok(out)
}

fn times(info: &FileInfo) -> (DateTime<Utc>, DateTime<Utc>) {
    let at = |ms| DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_default();
    (at(info.created_ms), at(info.modified_ms))
}

fn file_entry(info: &FileInfo, url: &str) -> Value {
    let (created, modified) = times(info);
    json!({
        "name": info.name,
        "url": format!("{url}/{}", info.name),
        "isDirectory": info.is_dir,
        "properties": {
            "creationTime": rfc3339(created),
            "lastModified": rfc3339(modified),
            "contentLength": info.len.to_string(),
            "contentType": "application/octet-stream",
            "fileMode": format!("{:o}", info.mode),
        },
    })
}

pub async fn task_file(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    method: Method,
    headers: HeaderMap,
    Path((job_id, task_id, path)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let rel = relative(&path)?;
    let at = task_root(&app, &job_id, &task_id).await?;
    if following(&query)? {
        let from = match range(&headers)? {
            None => 0,
            Some((first, None)) => first,
            Some(_) => {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "InvalidRange",
                    "A follow (follow=true) has no end: its range is bytes=N-.",
                ))
            }
        };
        if method == Method::GET {
            return Ok(follow::serve(app, &at, &path, rel, from));
        }
    }
    let url = format!(
        "{base}/jobs/{}/tasks/{}/files/{path}",
        at.job_id, at.task_id
    );
    let served = match &at.root {
        TaskRoot::OnNode(place) => {
            serve(&app, &place.join(&rel), &path, &url, (&method, &headers)).await
        }
        TaskRoot::NodeGone(node) => Err(at.node_gone(node)),
        TaskRoot::NotRun => Err(file_not_found(&path)),
    };
    match served {
        // Its node is gone, or no longer has it (reimaged, say): the kept copy, if there is one.
        Err(e)
            if e.code != "InvalidRange"
                && kept::is_kept(&path)
                && e.status.is_client_error()
                && !at.expired =>
        {
            kept_or(&app, &at, (&path, &url), (&method, &headers), e).await
        }
        served => served,
    }
}

/// The kept copy of `path`, or `missing` if there is none.
async fn kept_or(
    app: &Ctx,
    at: &TaskAt,
    (path, url): (&str, &str),
    (method, headers): (&Method, &HeaderMap),
    missing: ApiError,
) -> ApiResult<Response> {
    let range = range(headers)?;
    kept::serve(app, (at.task_pk, path), url, method, range)
        .await?
        .ok_or(missing)
}

pub async fn node_file(
    app: Ctx,
    BaseUrl(base): BaseUrl,
    method: Method,
    headers: HeaderMap,
    Path((pool_id, node_id, path)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    if following(&query)? {
        return Err(ApiError::invalid_query(
            "follow",
            "true",
            "a node's files are not followed: follow a task's (/jobs/{job}/tasks/{task}/files/...)",
        ));
    }
    let rel = relative(&path)?;
    let place = node_path(&app, &pool_id, &node_id, &rel).await?;
    let url = format!("{base}/pools/{pool_id}/nodes/{node_id}/files/{path}");
    serve(&app, &place, &path, &url, (&method, &headers)).await
}

pub async fn delete_task_file(
    app: Ctx,
    Path((job_id, task_id, path)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<StatusCode> {
    let rel = relative(&path)?;
    let at = task_root(&app, &job_id, &task_id).await?;
    if kept::is_kept(&path) {
        // Deleted, it is not read back from the kept copy either.
        crate::store::outputs::forget(&app.db, at.task_pk, &path).await?;
    }
    match &at.root {
        TaskRoot::OnNode(place) => delete(&app, &place.join(&rel), &path, recursive(&query)).await,
        TaskRoot::NodeGone(node) => Err(at.node_gone(node)),
        TaskRoot::NotRun => Err(file_not_found(&path)),
    }
}

pub async fn delete_node_file(
    app: Ctx,
    Path((pool_id, node_id, path)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<StatusCode> {
    let rel = relative(&path)?;
    let place = node_path(&app, &pool_id, &node_id, &rel).await?;
    delete(&app, &place, &path, recursive(&query)).await
}

/// Deletes a file, or a directory (empty, or with `recursive`), on the node that holds it.
async fn delete(app: &Ctx, place: &Place, path: &str, recursive: bool) -> ApiResult<StatusCode> {
    if place.at.rel.as_os_str().is_empty() {
        return Err(ApiError::invalid_property(
            "filePath",
            path,
            "names the directory of all the files; delete what is in it",
        ));
    }
    match ask(app, place, FileOp::Remove { recursive }).await? {
        FileAnswer::Info(_) => Ok(StatusCode::OK),
        FileAnswer::Refused { error, message } => Err(refusal(path, error, message)),
        _ => Err(odd_answer(place)),
    }
}

/// `ocp-range: bytes=a-b` (inclusive; `a-` to the end): its first and last byte.
fn range(headers: &HeaderMap) -> ApiResult<Option<(u64, Option<u64>)>> {
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
            format!("The range {text:?} is not of the form bytes=first-last or bytes=first-."),
        )
    };
    let spec = text.strip_prefix("bytes=").ok_or_else(bad)?;
    let (start, end) = spec.split_once('-').ok_or_else(bad)?;
    let start: u64 = start.trim().parse().map_err(|_| bad())?;
    let end = match end.trim() {
        "" => None,
        end => Some(end.parse().map_err(|_| bad())?),
    };
    Ok(Some((start, end)))
}

/// The file's properties as Azure's headers.
fn file_headers(info: &FileInfo, url: &str) -> HeaderMap {
    let (created, modified) = times(info);
    let mut out = HeaderMap::new();
    let h = header_value;
    out.insert("ocp-creation-time", h(&rfc1123(created)));
    out.insert(
        "ocp-batch-file-isdirectory",
        h(if info.is_dir { "true" } else { "false" }),
    );
    out.insert("ocp-batch-file-url", h(url));
    out.insert("ocp-batch-file-mode", h(&format!("{:o}", info.mode)));
    out.insert(header::LAST_MODIFIED, h(&rfc1123(modified)));
    out.insert(header::CONTENT_TYPE, h("application/octet-stream"));
    out
}

async fn serve(
    app: &Ctx,
    place: &Place,
    path: &str,
    url: &str,
    (method, headers): (&Method, &HeaderMap),
) -> ApiResult<Response> {
    let op = if *method == Method::HEAD {
        FileOp::Stat
    } else {
        FileOp::Read {
            range: range(headers)?,
        }
    };
    match ask(app, place, op).await? {
        FileAnswer::Info(info) => {
            let mut out = file_headers(&info, url);
            let len = if info.is_dir { 0 } else { info.len };
            out.insert(header::CONTENT_LENGTH, header_value(&len.to_string()));
            Ok((StatusCode::OK, out).into_response())
        }
        FileAnswer::Data {
            info, count, bytes, ..
        } => {
            let mut out = file_headers(&info, url);
            out.insert(header::CONTENT_LENGTH, header_value(&count.to_string()));
            Ok((StatusCode::OK, out, Body::from_stream(bytes)).into_response())
        }
        FileAnswer::Refused { error, message } => Err(refusal(path, error, message)),
        FileAnswer::Listing(_) | FileAnswer::Stream { .. } => Err(odd_answer(place)),
    }
}
