//! `GET /jobs/{job}/tasks/{task}/files/{path}?follow=true` (docs/data.md, "Following a task's
//! output"): the file as the task writes it, in one chunked response, from each attempt to the
//! next, ending when the task completes. The node's agent streams the file's growth
//! (`FileOp::Follow`) and this server relays it; no read is repeated. When an attempt ends
//! (or its node is lost) its last bytes come from its kept copy, and the next attempt follows
//! after a line `==> attempt N on node X <==`.

use std::path::PathBuf;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use tokio::sync::mpsc;

use super::place::{ask, Place, TaskAt};
use crate::api::{header_value, Ctx};
use crate::domain::agent::{FileError, FileOp};
use crate::domain::job::TaskState;
use crate::domain::kept_output::{after, plain};
use crate::runtime::agents::FileAnswer;
use crate::store::outputs::{self, FollowView};

/// How often the task is looked at while its output streams (to see an attempt its node's
/// agent can no longer end: the node lost or frozen).
const LOOK_EVERY: Duration = Duration::from_secs(2);
/// How often a task that does not run is looked at, for its next attempt.
const WAIT_EVERY: Duration = Duration::from_millis(500);

/// The response, whose body the follow writes as it goes.
pub(super) fn serve(app: Ctx, at: &TaskAt, name: &str, rel: PathBuf, from: u64) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(8);
    let follower = Follower {
        app,
        job_id: at.job_id.clone(),
        task_id: at.task_id.clone(),
        task_pk: at.task_pk,
        name: name.to_string(),
        rel,
        tx,
        followed: None,
        drained: false,
        offset: from,
        line_ended: true,
    };
    tokio::spawn(follower.run());
    let body = stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?;
        Some((Ok::<_, std::io::Error>(chunk), rx))
    });
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        header_value("application/octet-stream"),
    );
    headers.insert("ocp-batchpool-follow", header_value("true"));
    headers.insert(header::CACHE_CONTROL, header_value("no-store"));
    (StatusCode::OK, headers, Body::from_stream(body)).into_response()
}

struct Follower {
    app: Ctx,
    job_id: String,
    task_id: String,
    task_pk: i64,
    name: String,
    rel: PathBuf,
    tx: mpsc::Sender<Bytes>,
    /// The attempt whose output this is, once one began.
    followed: Option<i32>,
    /// Whether the followed attempt's last bytes were sent.
    drained: bool,
    /// How far into the followed attempt's file.
    offset: u64,
    line_ended: bool,
}

/// How the stream of an attempt's output ended.
enum Streamed {
    /// Its node's agent saw the attempt end, and sent all it wrote.
    Whole,
    /// Cut off (the node lost or silent, the attempt ended elsewhere): the rest is looked for
    /// in the kept copy once the attempt is over.
    Broken,
    /// The file is not there yet (the attempt waits for its slots or its resource files).
    NotYet,
    /// The node's agent is of a build that does not follow: read in ranges instead.
    Unsupported,
    /// Whoever followed let go.
    Gone,
}

impl Follower {
    async fn run(mut self) {
        loop {
            let view = match outputs::follow_view(&self.app.db, self.task_pk).await {
                Ok(Some(view)) => view,
                Ok(None) => return,
                Err(_) if self.pause(Duration::from_secs(1)).await => continue,
                Err(_) => return,
            };
            let on_node = TaskState::ON_NODE.contains(&view.state) && view.node_pk.is_some();
            // The attempt followed is over: its last bytes, before anything of the next.
            let moved_on = self.followed != Some(view.attempt) || !on_node;
            if self.followed.is_some() && !self.drained && moved_on {
                self.rest_of_followed(&view).await;
            }
            if view.attempt > 0
                && self.followed != Some(view.attempt)
                && (on_node || view.state == TaskState::Completed)
                && !self.begin(&view).await
            {
                return;
            }
            let keep_on = match (&view.node_id, on_node) {
                _ if view.state == TaskState::Completed => {
                    if !self.drained {
                        self.rest_of_followed(&view).await;
                    }
                    return;
                }
                (Some(node), true) => self.on_node(node, view.attempt).await,
                _ if view.job_ending => false,
                _ => self.pause(WAIT_EVERY).await,
            };
            if !keep_on {
                return;
            }
        }
    }

    /// Follows the attempt on its node, until it ends or is cut off; whether to go on.
    async fn on_node(&mut self, node: &str, attempt: i32) -> bool {
        match self.stream(node, attempt).await {
            Streamed::Whole => self.until_over(attempt).await,
            Streamed::Broken => self.pause(WAIT_EVERY).await,
            Streamed::NotYet => self.pause(WAIT_EVERY).await,
            Streamed::Unsupported => {
                self.read_from_node(node).await && self.pause(Duration::from_secs(1)).await
            }
            Streamed::Gone => false,
        }
    }

    /// Starts on the attempt the task is at: a line that says so, after an earlier one.
    async fn begin(&mut self, view: &FollowView) -> bool {
        if self.followed.is_some() {
            let node = view.node_id.as_deref().unwrap_or("?");
            let lead = if self.line_ended { "" } else { "\n" };
            let line = format!("{lead}==> attempt {} on node {node} <==\n", view.attempt);
            if !self.send(Bytes::from(line)).await {
                return false;
            }
            self.offset = 0;
        }
        self.followed = Some(view.attempt);
        self.drained = false;
        true
    }

    /// Relays the attempt's output as its node's agent streams it.
    async fn stream(&mut self, node: &str, attempt: i32) -> Streamed {
        let (place, dirs) = self.place(node);
        let record = dirs.record(attempt).rel.to_string_lossy().into_owned();
        let op = FileOp::Follow {
            from: self.offset,
            record,
        };
        let mut bytes = match ask(&self.app, &place, op).await {
            Ok(FileAnswer::Stream { bytes, .. }) => bytes,
            Ok(FileAnswer::Refused {
                error: FileError::Unsupported,
                ..
            }) => return Streamed::Unsupported,
            Ok(FileAnswer::Refused {
                error: FileError::NotFound | FileError::BadRange { .. },
                ..
            }) => return Streamed::NotYet,
            _ => return Streamed::Broken,
        };
        let mut look = tokio::time::interval(LOOK_EVERY);
        let mut over_since_looked = false;
        loop {
            tokio::select! {
                chunk = bytes.next() => match chunk {
                    Some(Ok(chunk)) => if !self.send(chunk).await { return Streamed::Gone },
                    Some(Err(_)) => return Streamed::Broken,
                    None => return Streamed::Whole,
                },
                _ = look.tick() => {
                    // Over by the task's record twice in a row: its agent will not end it.
                    let over = self.over(attempt).await;
                    if over && over_since_looked {
                        return Streamed::Broken;
                    }
                    over_since_looked = over;
                }
                () = self.tx.closed() => return Streamed::Gone,
            }
        }
    }

    /// Whether the attempt is over as the task's record has it.
    async fn over(&self, attempt: i32) -> bool {
        match outputs::follow_view(&self.app.db, self.task_pk).await {
            Ok(Some(view)) => {
                view.attempt != attempt
                    || !TaskState::ON_NODE.contains(&view.state)
                    || view.node_pk.is_none()
            }
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// Waits for the task's record to have the attempt over (its node's agent saw it end
    /// first); whether to go on.
    async fn until_over(&mut self, attempt: i32) -> bool {
        while !self.over(attempt).await {
            if !self.pause(Duration::from_millis(100)).await {
                return false;
            }
        }
        true
    }

    /// The followed attempt's last bytes: from its kept copy, or (the task completed on a node
    /// still there, and nothing kept) from the node.
    async fn rest_of_followed(&mut self, view: &FollowView) {
        self.drained = true;
        let Some(attempt) = self.followed else {
            return;
        };
        let kept = outputs::of_task(&self.app.db, self.task_pk, Some(&self.name)).await;
        if let Some(row) = kept.ok().and_then(|mut rows| rows.pop()) {
            if row.attempt == attempt {
                if let Ok(bytes) = plain(row.gzip, &row.data) {
                    let rest = after(&bytes, row.len as u64, row.cut, self.offset).to_vec();
                    self.send(Bytes::from(rest)).await;
                    self.offset = row.len as u64;
                }
                return;
            }
        }
        let done_here = view.attempt == attempt && view.state == TaskState::Completed;
        if let (Some(node), Some(_), true) = (&view.node_id, view.node_pk, done_here) {
            self.read_from_node(node).await;
        }
    }

    /// What the file on `node` holds past the offset, in one read; whether to go on.
    async fn read_from_node(&mut self, node: &str) -> bool {
        let (place, _) = self.place(node);
        let op = FileOp::Read {
            range: Some((self.offset, None)),
        };
        let Ok(FileAnswer::Data { mut bytes, .. }) = ask(&self.app, &place, op).await else {
            return true;
        };
        while let Some(Ok(chunk)) = bytes.next().await {
            if !self.send(chunk).await {
                return false;
            }
        }
        true
    }

    /// Where the followed file is on `node`, and the task's directories there.
    fn place(&self, node: &str) -> (Place, crate::runtime::TaskDirs) {
        let dirs = self
            .app
            .runtime
            .task_dirs(node, &self.job_id, &self.task_id);
        let place = Place {
            at: dirs.host.join(&self.rel),
            node: node.to_string(),
        };
        (place, dirs)
    }

    /// Sends `chunk` on; false once nobody reads it.
    async fn send(&mut self, chunk: Bytes) -> bool {
        if chunk.is_empty() {
            return !self.tx.is_closed();
        }
        self.offset += chunk.len() as u64;
        self.line_ended = chunk.ends_with(b"\n");
        self.tx.send(chunk).await.is_ok()
    }

    /// Waits `time`; false if whoever followed let go meanwhile.
    async fn pause(&self, time: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(time) => true,
            () = self.tx.closed() => false,
        }
    }
}
