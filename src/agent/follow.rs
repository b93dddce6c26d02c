//! Following a file as a task writes it (`FileOp::Follow`): its bytes as they come, until the
//! attempt that writes it has ended (its record says so) and everything it wrote is sent, as
//! `tail -f` follows a file but with an end. What the file holds is looked at every
//! [`EVERY`]: a read that finds nothing new costs one `read(2)`, and the record is read only
//! then.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{self, BoxStream, StreamExt};
use tokio::io::AsyncReadExt;

use crate::domain::agent::record_says_over;
use crate::sys::file_answer::CHUNK;
use crate::sys::safe_fs::Dir;

/// How often a followed file that brought nothing new is looked at again.
const EVERY: Duration = Duration::from_millis(200);

/// The most bytes of a record read: two short lines.
const RECORD_MAX: u64 = 128;

/// Where the attempt's record is, and whose boot this agent's is.
pub(super) struct Attempt {
    pub root: PathBuf,
    pub record: PathBuf,
    pub boot: String,
}

struct Following {
    file: tokio::fs::File,
    attempt: Attempt,
    /// The attempt has ended: what is left to read is the last of it.
    over: bool,
}

/// The bytes of `file` (open where the follow starts) as they are written, until `attempt`
/// has ended and they are all sent.
pub(super) fn grow(
    file: std::fs::File,
    attempt: Attempt,
) -> BoxStream<'static, std::io::Result<Bytes>> {
    let following = Following {
        file: tokio::fs::File::from_std(file),
        attempt,
        over: false,
    };
    stream::unfold(Some(following), |state| async move {
        let mut f = state?;
        loop {
            let mut buf = vec![0; CHUNK];
            match f.file.read(&mut buf).await {
                Ok(0) => {}
                Ok(n) => {
                    buf.truncate(n);
                    return Some((Ok(Bytes::from(buf)), Some(f)));
                }
                Err(e) => return Some((Err(e), None)),
            }
            if f.over {
                return None;
            }
            if over(&f.attempt).await {
                // One more read: what was written before the end.
                f.over = true;
                continue;
            }
            tokio::time::sleep(EVERY).await;
        }
    })
    .boxed()
}

/// Whether the attempt's record says it has ended. No record yet: it has not started (it
/// waits for a slot), and the server gives up on it if it never does.
async fn over(attempt: &Attempt) -> bool {
    let (root, record, boot) = (
        attempt.root.clone(),
        attempt.record.clone(),
        attempt.boot.clone(),
    );
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let Ok(file) = Dir::open_root(&root).and_then(|d| d.open_file(&record)) else {
            return false;
        };
        let mut text = String::new();
        if file.take(RECORD_MAX).read_to_string(&mut text).is_err() {
            return false;
        }
        record_says_over(&text, &boot)
    })
    .await
    .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_follow_sends_what_is_written_until_the_record_has_an_exit_code() {
        use std::io::Write;
        let tmp = tempfile::tempdir().unwrap();
        let (out, record) = (tmp.path().join("stdout.txt"), tmp.path().join(".rec"));
        let mut writer = std::fs::File::create(&out).unwrap();
        writer.write_all(b"one\n").unwrap();
        let attempt = Attempt {
            root: tmp.path().to_path_buf(),
            record: PathBuf::from(".rec"),
            boot: "b1".into(),
        };
        let mut bytes = grow(std::fs::File::open(&out).unwrap(), attempt);
        assert_eq!(&bytes.next().await.unwrap().unwrap()[..], b"one\n");
        std::fs::write(&record, "42 b1\n").unwrap();
        writer.write_all(b"two\n").unwrap();
        assert_eq!(&bytes.next().await.unwrap().unwrap()[..], b"two\n");
        let pending = tokio::time::timeout(Duration::from_millis(600), bytes.next()).await;
        assert!(pending.is_err(), "it waits while the attempt runs");
        writer.write_all(b"three\n").unwrap();
        std::fs::write(&record, "42 b1\n0\n").unwrap();
        let mut rest = Vec::new();
        while let Some(chunk) = bytes.next().await {
            rest.extend_from_slice(&chunk.unwrap());
        }
        assert_eq!(rest, b"three\n", "the last bytes, then the end");
    }

    #[test]
    fn a_record_of_an_earlier_boot_is_over() {
        assert!(!record_says_over("", "b1"));
        assert!(!record_says_over("42 b1\n", "b1"));
        assert!(
            !record_says_over("42\n", "b1"),
            "a wrapper's record: no boot"
        );
        assert!(record_says_over("42 b0\n", "b1"));
        assert!(record_says_over("42 b1\n0\n", "b1"));
        assert!(!record_says_over("42 b1\n0", "b1"), "a line half written");
    }
}
