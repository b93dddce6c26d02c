//! A task's kept `stdout.txt` and `stderr.txt` (docs/data.md, "Output that outlives its
//! node"), served as the files API serves a node's file when the node can no longer give it:
//! gone from its pool, reimaged, preempted. `ocp-batchpool-kept-copy: true` says which copy it
//! is, with the attempt it is of and the file's length on the node.

use axum::body::Body;
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::{file_entry, file_headers, refusal};
use crate::api::error::{ApiError, ApiResult};
use crate::api::{header_value, Ctx};
use crate::domain::agent::{resolve_range, FileError, FileInfo};
use crate::domain::kept_output::plain;
use crate::store::{self, outputs::KeptRow};

/// The names of the files that are kept.
pub(super) fn is_kept(path: &str) -> bool {
    path == "stdout.txt" || path == "stderr.txt"
}

fn info(row: &KeptRow, len: u64) -> FileInfo {
    let at = row.kept_at.timestamp_millis();
    FileInfo {
        name: row.name.clone(),
        is_dir: false,
        len,
        created_ms: at,
        modified_ms: at,
        mode: 0o100644,
    }
}

/// The kept file `path` of task `task_pk`, as a download (ranged with `ocp-range`) or its
/// properties (HEAD); None if none is kept.
pub(super) async fn serve(
    app: &Ctx,
    (task_pk, path): (i64, &str),
    url: &str,
    method: &Method,
    range: Option<(u64, Option<u64>)>,
) -> ApiResult<Option<Response>> {
    let Some(row) = store::outputs::of_task(&app.db, task_pk, Some(path))
        .await?
        .pop()
    else {
        return Ok(None);
    };
    let bytes = plain(row.gzip, &row.data).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            format!("the kept copy of {path:?} cannot be read: {e}"),
        )
    })?;
    let len = bytes.len() as u64;
    let mut out = file_headers(&info(&row, len), url);
    out.insert("ocp-batchpool-kept-copy", header_value("true"));
    out.insert(
        "ocp-batchpool-kept-attempt",
        header_value(&row.attempt.to_string()),
    );
    out.insert(
        "ocp-batchpool-original-length",
        header_value(&row.len.to_string()),
    );
    out.insert(
        "ocp-batchpool-kept-cut",
        header_value(if row.cut { "true" } else { "false" }),
    );
    if *method == Method::HEAD {
        out.insert(header::CONTENT_LENGTH, header_value(&len.to_string()));
        return Ok(Some((StatusCode::OK, out).into_response()));
    }
    // As a node's agent reads a range: the same answers for the same file.
    let Some((start, count)) = resolve_range(range, len) else {
        return Err(refusal(path, FileError::BadRange { len }, String::new()));
    };
    let body = bytes[start as usize..(start + count) as usize].to_vec();
    out.insert(
        header::CONTENT_LENGTH,
        header_value(&body.len().to_string()),
    );
    Ok(Some(
        (StatusCode::OK, out, Body::from(body)).into_response(),
    ))
}

/// The kept files of task `task_pk` as a listing's entries, sorted by name.
pub(super) async fn entries(app: &Ctx, task_pk: i64, url: &str) -> ApiResult<Vec<Value>> {
    let rows = store::outputs::of_task(&app.db, task_pk, None).await?;
    Ok(rows
        .iter()
        .filter_map(|row| {
            let len = plain(row.gzip, &row.data).ok()?.len() as u64;
            Some(file_entry(&info(row, len), url))
        })
        .collect())
}
