//! A task's `stdout.txt` and `stderr.txt`, kept as its attempt ends (docs/data.md, "Output
//! that outlives its node"): from what its node's agent sent with `Exited`, or else read from
//! the node (its first and last parts only); bounded to the first and last `each_end` bytes,
//! with a line saying how much was cut between them; gzip-compressed when that saves anything.
//! Nothing a task writes makes the server hold or keep more than that.

use std::path::Path;

use crate::domain::agent::ExitOutput;
use crate::domain::kept_output::{bounded, compressed, joined, KeptFile};
use crate::runtime::TaskFiles;

/// The files as kept, from what the agent `sent` if it did, else read through `on`; files
/// that are empty or not there are not kept. Files the node cannot give are left out (and
/// said so in the log): the attempt's outcome does not wait on them.
pub async fn keep(on: TaskFiles<'_>, sent: Option<ExitOutput>, each_end: u64) -> Vec<KeptFile> {
    if each_end == 0 {
        return Vec::new();
    }
    let (stdout, stderr) = match sent {
        Some(o) => (Some(o.stdout), Some(o.stderr)),
        None => (None, None),
    };
    let mut kept = Vec::new();
    for (name, captured) in [("stdout.txt", stdout), ("stderr.txt", stderr)] {
        let got = match captured.as_ref().map(|c| (c.len, c.bytes())) {
            Some((0, _)) => continue,
            Some((len, Some(bytes))) => Ok(Some((len, bounded(bytes, len, each_end)))),
            _ => read(on, name, each_end).await,
        };
        match got {
            Ok(Some((len, (data, cut)))) => kept.push(compressed(name, len, data, cut)),
            Ok(None) => {}
            Err(e) => tracing::info!(file = name, error = %e, "a task's output could not be kept"),
        }
    }
    kept
}

/// Reads the file's first and last `each_end` bytes from the node; None if it is empty or not
/// there.
async fn read(
    on: TaskFiles<'_>,
    name: &str,
    each_end: u64,
) -> Result<Option<(u64, (Vec<u8>, bool))>, crate::runtime::NodeError> {
    let rel = Path::new(name);
    let Some(info) = on.stat(rel).await?.filter(|i| !i.is_dir && i.len > 0) else {
        return Ok(None);
    };
    let len = info.len;
    if len <= 2 * each_end {
        let whole = on.head(rel, len).await?;
        let read = whole.len() as u64;
        return Ok(Some((len, bounded(whole, read, each_end))));
    }
    let head = on.head(rel, each_end).await?;
    let tail = on.tail(rel, each_end).await?;
    Ok(Some((len, (joined(&head, len, &tail), true))))
}
