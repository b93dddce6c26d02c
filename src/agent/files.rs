//! The agent's answers to the server's questions about files (`Work::File`): what a file is, what
//! a directory holds, a file's bytes. They are read from inside the node, below the directory the
//! server names, following no link (`sys::file_answer`): whatever a task linked, the answer is its
//! own node's. Each answer is streamed to the replies route, so a large file costs no memory.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_util::stream::{self, BoxStream, StreamExt};
use tokio::io::AsyncReadExt;

use super::{trash, Link};
use crate::domain::agent::{FileError, FileOp, ReplyHead, BODIES_PATH, REPLIES_PATH};
use crate::sys::file_answer::{self, Payload};

/// Answers `op` about `rel` below `root` on the replies route, in a task of its own.
///
/// An answer that does not reach the server is sent again (made again, as its body is a stream),
/// up to three times: a pooled connection the server has just closed (it does so after refusing
/// an answer it no longer waits for) fails the next answer sent on it. A removal is sent once:
/// made again, it would say the file is not there. A directory's removal moves it aside, out of
/// its path, at once, and removes it in the background (`trash`). Nothing is begun after
/// `until`, and a removal in place stops there (the server no longer waits for its answer then).
pub fn answer(
    link: Arc<Link>,
    id: u64,
    (root, rel): (String, String),
    op: FileOp,
    until: Option<Instant>,
) {
    tokio::spawn(async move {
        // Made again, a removal would say the file is not there; a follow, once the server
        // let go of it, is no longer waited for.
        let attempts = if matches!(op, FileOp::Remove { .. } | FileOp::Follow { .. }) {
            1
        } else {
            3
        };
        for attempt in 1..=attempts {
            match send(&link, id, (&root, &rel), op.clone(), until).await {
                Ok(()) => return,
                Err(e) if attempt < attempts => {
                    tracing::debug!(error = %e, id, "a file answer did not reach the server; again");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(e) => tracing::debug!(error = %e, id, "a file answer did not reach the server"),
            }
        }
    });
}

/// Writes the file from the bytes the server holds for `id`, then says what it is (or why it
/// is not) on the replies route. Sent once: the bytes are the server's to give once.
pub fn write(link: Arc<Link>, id: u64, root: String, rel: String, mode: Option<u32>) {
    tokio::spawn(async move {
        let head = match written(&link, id, (&root, &rel), mode).await {
            Ok(info) => ReplyHead::Info { info },
            Err(e) => ReplyHead::Error {
                error: FileError::Failed,
                message: format!("{e:#}"),
            },
        };
        if let Err(e) = post(&link, id, head, stream::empty().boxed()).await {
            tracing::debug!(error = %e, id, "a write's answer did not reach the server");
        }
    });
}

async fn written(
    link: &Link,
    id: u64,
    (root, rel): (&str, &str),
    mode: Option<u32>,
) -> anyhow::Result<crate::domain::agent::FileInfo> {
    let bytes = body(link, id)
        .await?
        .bytes_stream()
        .map(|c| c.map_err(std::io::Error::other));
    let (root, rel) = (PathBuf::from(root), PathBuf::from(rel));
    Ok(crate::sys::file_write::write(&root, &rel, bytes, mode).await?)
}

/// The bytes the server holds for the write `id`, as they come. A request that got no answer
/// is sent again, twice at most: a connection kept from a server that restarted on the same
/// port is reset as it is used, and the server that asked for the write holds the bytes still.
/// One that reached the server, which gives the bytes once, is answered 404 the second time.
pub(crate) async fn body(link: &Link, id: u64) -> reqwest::Result<reqwest::Response> {
    let mut attempt = 1;
    loop {
        let sent = link
            .streams
            .get(format!("{}{BODIES_PATH}/{id}", link.url()))
            .header("authorization", &link.authorization)
            .send()
            .await;
        match sent {
            Ok(response) => return response.error_for_status(),
            Err(e) if attempt < 3 => {
                tracing::debug!(error = %e, id, "a write's bytes did not come; asking again");
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Makes the answer and streams it to the server.
async fn send(
    link: &Link,
    id: u64,
    (root, rel): (&str, &str),
    op: FileOp,
    until: Option<Instant>,
) -> reqwest::Result<()> {
    let (root, rel) = (PathBuf::from(root), PathBuf::from(rel));
    let following = match &op {
        FileOp::Follow { record, .. } => Some(super::follow::Attempt {
            root: root.clone(),
            record: PathBuf::from(record),
            boot: link.boot.clone(),
        }),
        _ => None,
    };
    let answered = tokio::task::spawn_blocking(move || {
        if let FileOp::Remove { recursive: true } = op {
            if let Some(info) = trash::move_aside(&root, &rel) {
                trash::empty(&root);
                return (ReplyHead::Info { info }, Payload::None);
            }
        }
        file_answer::answer(&root, &rel, op, until)
    })
    .await;
    let (head, payload) = answered.unwrap_or_else(|e| {
        let error = FileError::Failed;
        let message = e.to_string();
        (ReplyHead::Error { error, message }, Payload::None)
    });
    let count = match &head {
        ReplyHead::Data { count, .. } => *count,
        _ => 0,
    };
    let rest: BoxStream<'static, std::io::Result<Bytes>> = match payload {
        Payload::None => stream::empty().boxed(),
        Payload::Listing(infos) => {
            let mut lines = Vec::new();
            for info in &infos {
                serde_json::to_writer(&mut lines, info).unwrap_or_default();
                lines.push(b'\n');
            }
            stream::once(async move { Ok(Bytes::from(lines)) }).boxed()
        }
        Payload::File(file) if matches!(head, ReplyHead::Stream { .. }) => match following {
            Some(attempt) => super::follow::grow(file, attempt),
            None => stream::empty().boxed(),
        },
        Payload::File(file) => {
            let file = tokio::fs::File::from_std(file).take(count);
            tokio_util::io::ReaderStream::with_capacity(file, file_answer::CHUNK).boxed()
        }
    };
    post(link, id, head, rest).await
}

/// Streams an answer to the replies route: its head line, then `rest`.
pub(crate) async fn post(
    link: &Link,
    id: u64,
    head: ReplyHead,
    rest: BoxStream<'static, std::io::Result<Bytes>>,
) -> reqwest::Result<()> {
    let mut line = serde_json::to_vec(&head).unwrap_or_default();
    line.push(b'\n');
    let head = stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(line)) });
    link.streams
        .post(format!("{}{REPLIES_PATH}/{id}", link.url()))
        .header("authorization", &link.authorization)
        .body(reqwest::Body::wrap_stream(head.chain(rest)))
        .send()
        .await
        .map(|_| ())
}

/// Makes a task's directories below a root the server made, following no link (one a task
/// left where a directory should be is replaced): what it names to remove goes, if it is
/// there, then its directories are made. `safe_fs` refuses a path that is not plain and
/// relative.
pub fn make_dirs(make: &crate::domain::agent::MakeDirs) -> std::io::Result<()> {
    use std::path::Path;
    let base = crate::sys::safe_fs::Dir::open_root_in_node(Path::new(&make.base))?;
    // What goes, first: most often its directory is not there yet (a task's first attempt),
    // which one lookup tells. Behind a link or a file, it is not there either: making the
    // directories replaces what is in their way with empty ones.
    for gone in &make.remove {
        base.discard(Path::new(gone))?;
    }
    for dir in &make.dirs {
        base.create_dir_all(Path::new(dir))?;
    }
    Ok(())
}

/// Gives a non-administrator's task its directories, made by [`make_dirs`] (the first of its
/// `dirs` is the task's working directory): the task directory (closed to the node's other
/// users if `user` is private), and its working directory with everything in it (the resource
/// files, what earlier attempts left). No link is followed.
pub fn give_to_user(
    task: &crate::domain::agent::TaskLaunch,
    user: crate::domain::run_as::TaskUser,
) -> std::io::Result<()> {
    use std::path::Path;
    let unnamed = || std::io::Error::other("the task's directories are not named");
    let make = task.make.as_ref().ok_or_else(unnamed)?;
    let wd = Path::new(make.dirs.first().ok_or_else(unnamed)?);
    let base = crate::sys::safe_fs::Dir::open_root_in_node(Path::new(&make.base))?;
    let mode = if user.private { 0o700 } else { 0o755 };
    base.open_dir(wd.parent().ok_or_else(unnamed)?)?
        .give(user.uid, mode)?;
    base.open_dir(wd)?.give_all(user.uid)
}

#[cfg(test)]
mod tests {
    use super::make_dirs;
    use crate::domain::agent::MakeDirs;

    /// A server that resets the first connection, as a kept connection to a server that
    /// restarted is reset, and answers on the next: the bytes come (the hour on Docker, seed 7,
    /// failed a task for a reset body request to a server that had just restarted).
    #[tokio::test]
    async fn a_body_request_reset_before_any_answer_is_sent_again() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        crate::install_tls();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (first, _) = listener.accept().await.unwrap();
            first.set_zero_linger().unwrap();
            drop(first);
            let (mut next, _) = listener.accept().await.unwrap();
            let mut head = [0u8; 1024];
            let _ = next.read(&mut head).await.unwrap();
            let answer = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nbytes";
            next.write_all(answer.as_bytes()).await.unwrap();
        });
        let clients = (reqwest::Client::new(), reqwest::Client::new());
        let link = super::Link::new(&url, "BatchpoolNode n:s".into(), clients);
        let body = super::body(&link, 7).await.expect("the bytes, asked again");
        assert_eq!(body.text().await.unwrap(), "bytes");
    }

    fn make(base: &std::path::Path, remove: &[&str], dirs: &[&str]) -> std::io::Result<()> {
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        make_dirs(&MakeDirs {
            base: base.display().to_string(),
            remove: owned(remove),
            dirs: owned(dirs),
        })
    }

    #[test]
    fn a_task_directory_is_made_below_its_base_and_nowhere_else() {
        let tmp = tempfile::tempdir().unwrap();
        let (base, outside) = (tmp.path().join("base"), tmp.path().join("outside"));
        std::fs::create_dir_all(base.join("j/job-1/t/.state")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(base.join("j/job-1/t/.state/1"), "old record").unwrap();
        make(
            &base,
            &["j/job-1/t/.state/1"],
            &["j/job-1/t/.state", "j/job-1/t/wd"],
        )
        .unwrap();
        assert!(base.join("j/job-1/t/wd").is_dir());
        assert!(
            !base.join("j/job-1/t/.state/1").exists(),
            "the old record went"
        );

        // A link a task left where a directory goes is replaced, never followed.
        std::os::unix::fs::symlink(&outside, base.join("j/job-1/u")).unwrap();
        make(&base, &[], &["j/job-1/u/wd"]).unwrap();
        assert!(!outside.join("wd").exists(), "nothing made outside");
        assert!(base.join("j/job-1/u/wd").is_dir());
        assert!(!base.join("j/job-1/u").is_symlink());
        assert!(make(&base, &[], &["../escape"]).is_err());
        assert!(make(&base, &[], &["/abs"]).is_err());
        assert!(!tmp.path().join("escape").exists());
    }
}
