//! A simulated node's files, in memory: what the server makes, writes, lists, reads and removes
//! there through the agent protocol (`FileOp`), and what its simulated commands leave (their
//! `stdout.txt`, `stderr.txt` and records). Paths are the node's own, absolute, with no `..`.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::domain::agent::{
    is_private, resolve_range, FileError, FileInfo, FileOp, ReplyHead, MAX_LISTING,
};

/// The most a simulated file holds: a resource file bigger than this is refused.
pub const MAX_FILE: usize = 1 << 20;

#[derive(Clone)]
enum Entry {
    Dir { at_ms: i64 },
    File { data: Bytes, at_ms: i64, mode: u32 },
}

/// One node's files, by absolute path.
#[derive(Default)]
pub struct Fs {
    entries: BTreeMap<String, Entry>,
}

/// What a [`FileOp`] answers: the head line, then the bytes it announces.
pub struct Answer {
    pub head: ReplyHead,
    pub body: Bytes,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// `root/rel`, or None if `rel` is not plain and relative.
pub fn join(root: &str, rel: &str) -> Option<String> {
    let root = root.trim_end_matches('/');
    if rel.is_empty() || rel == "." {
        return Some(root.to_string());
    }
    let plain = !rel.starts_with('/')
        && rel
            .split('/')
            .all(|p| !p.is_empty() && p != ".." && p != ".");
    plain.then(|| format!("{root}/{rel}"))
}

fn refused(error: FileError, message: impl Into<String>) -> Answer {
    Answer {
        head: ReplyHead::Error {
            error,
            message: message.into(),
        },
        body: Bytes::new(),
    }
}

impl Fs {
    /// Makes `path` a directory, with those above it (a file in the way is replaced).
    pub fn make_dir(&mut self, path: &str) {
        let mut at = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            at.push('/');
            at.push_str(part);
            if !matches!(self.entries.get(&at), Some(Entry::Dir { .. })) {
                self.entries
                    .insert(at.clone(), Entry::Dir { at_ms: now_ms() });
            }
        }
    }

    /// Writes the file at `path` anew, its directories made.
    pub fn write(&mut self, path: &str, data: Bytes, mode: Option<u32>) {
        if let Some((dir, _)) = path.rsplit_once('/') {
            self.make_dir(dir);
        }
        let mode = 0o100000 | mode.unwrap_or(0o644);
        let at_ms = now_ms();
        self.entries
            .insert(path.to_string(), Entry::File { data, at_ms, mode });
    }

    /// Adds `line` and a newline to the file at `path` (made if need be).
    pub fn append(&mut self, path: &str, line: &str) {
        let mut data = match self.entries.get(path) {
            Some(Entry::File { data, .. }) => data.to_vec(),
            _ => Vec::new(),
        };
        data.extend_from_slice(line.as_bytes());
        data.push(b'\n');
        self.write(path, data.into(), None);
    }

    /// Removes `path` and everything below it; whether it was there.
    pub fn remove_all(&mut self, path: &str) -> bool {
        let below = format!("{path}/");
        let gone: Vec<String> = self
            .entries
            .range(below.clone()..)
            .take_while(|(k, _)| k.starts_with(&below))
            .map(|(k, _)| k.clone())
            .collect();
        for key in gone {
            self.entries.remove(&key);
        }
        self.entries.remove(path).is_some()
    }

    fn info(&self, path: &str, name: String) -> Option<FileInfo> {
        Some(match self.entries.get(path)? {
            Entry::Dir { at_ms } => FileInfo {
                name,
                is_dir: true,
                len: 0,
                created_ms: *at_ms,
                modified_ms: *at_ms,
                mode: 0o040755,
            },
            Entry::File { data, at_ms, mode } => FileInfo {
                name,
                is_dir: false,
                len: data.len() as u64,
                created_ms: *at_ms,
                modified_ms: *at_ms,
                mode: *mode,
            },
        })
    }

    /// Answers `op` about `root/rel`, as an agent answers a `Work::File` (a write's bytes are
    /// the caller's to fetch: see [`Fs::write`]).
    pub fn answer(&mut self, root: &str, rel: &str, op: &FileOp) -> Answer {
        let Some(path) = join(root, rel) else {
            return refused(
                FileError::Failed,
                format!("{rel:?} is not a plain relative path"),
            );
        };
        let name = rel.rsplit('/').next().unwrap_or_default().to_string();
        if let FileOp::MakeDir = op {
            self.make_dir(&path);
        }
        let Some(info) = self.info(&path, name) else {
            return refused(FileError::NotFound, format!("{path} is not there"));
        };
        match op {
            FileOp::Stat | FileOp::MakeDir | FileOp::Write { .. } => Answer {
                head: ReplyHead::Info { info },
                body: Bytes::new(),
            },
            FileOp::List { recursive } => self.listing(&path, *recursive),
            FileOp::Read { range } => match &self.entries[&path] {
                Entry::Dir { .. } => {
                    refused(FileError::IsDirectory, format!("{path} is a directory"))
                }
                Entry::File { data, .. } => match resolve_range(*range, info.len) {
                    None => refused(
                        FileError::BadRange { len: info.len },
                        "the range lies outside the file",
                    ),
                    Some((start, count)) => Answer {
                        body: data.slice(start as usize..(start + count) as usize),
                        head: ReplyHead::Data { info, start, count },
                    },
                },
            },
            // A simulated command writes its output as it ends: what is there is all of it.
            FileOp::Follow { from, .. } => match &self.entries[&path] {
                Entry::Dir { .. } => {
                    refused(FileError::IsDirectory, format!("{path} is a directory"))
                }
                Entry::File { .. } if *from > info.len => {
                    refused(FileError::BadRange { len: info.len }, "past the file's end")
                }
                Entry::File { data, .. } => Answer {
                    body: data.slice(*from as usize..),
                    head: ReplyHead::Stream { info, start: *from },
                },
            },
            FileOp::Remove { recursive } => {
                let below = format!("{path}/");
                let has_children = self
                    .entries
                    .range(below.clone()..)
                    .next()
                    .is_some_and(|(k, _)| k.starts_with(&below));
                if info.is_dir && has_children && !recursive {
                    return refused(FileError::NotEmpty, format!("{path} is not empty"));
                }
                self.remove_all(&path);
                Answer {
                    head: ReplyHead::Info { info },
                    body: Bytes::new(),
                }
            }
        }
    }

    /// What is in the directory `path` (and below it, if `recursive`), a JSON line each.
    fn listing(&self, path: &str, recursive: bool) -> Answer {
        if !matches!(self.entries.get(path), Some(Entry::Dir { .. })) {
            return refused(FileError::NotFound, format!("{path} is not a directory"));
        }
        let below = format!("{path}/");
        let mut lines = Vec::new();
        let mut count = 0;
        for (key, _) in self
            .entries
            .range(below.clone()..)
            .take_while(|(k, _)| k.starts_with(&below))
        {
            let name = &key[below.len()..];
            // The agent's own files (records, trash) are never listed, nor what is in them.
            if (!recursive && name.contains('/')) || name.split('/').any(is_private) {
                continue;
            }
            if count == MAX_LISTING {
                return refused(
                    FileError::TooMany,
                    format!("more than {MAX_LISTING} entries"),
                );
            }
            if let Some(info) = self.info(key, name.to_string()) {
                serde_json::to_writer(&mut lines, &info).unwrap_or_default();
                lines.push(b'\n');
                count += 1;
            }
        }
        Answer {
            head: ReplyHead::Listing { count },
            body: lines.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_made_listed_read_by_range_and_removed() {
        let mut fs = Fs::default();
        fs.make_dir("/mnt/batch/tasks/shared");
        fs.write(
            "/mnt/batch/tasks/workitems/j/job-1/t/stdout.txt",
            Bytes::from("hello\n"),
            None,
        );
        // The agent's own record: never listed.
        fs.append(
            "/mnt/batch/tasks/workitems/j/job-1/t/.batchpool.1",
            "7 boot",
        );
        let read = fs.answer(
            "/mnt/batch/tasks",
            "workitems/j/job-1/t/stdout.txt",
            &FileOp::Read {
                range: Some((1, Some(3))),
            },
        );
        assert_eq!(&read.body[..], b"ell");
        let listed = fs.answer(
            "/mnt/batch/tasks",
            "workitems",
            &FileOp::List { recursive: true },
        );
        assert!(matches!(listed.head, ReplyHead::Listing { count: 4 }));
        let flat = fs.answer("/mnt/batch/tasks", "", &FileOp::List { recursive: false });
        assert!(matches!(flat.head, ReplyHead::Listing { count: 2 }));
        let refused = fs.answer(
            "/mnt/batch/tasks",
            "workitems",
            &FileOp::Remove { recursive: false },
        );
        assert!(matches!(
            refused.head,
            ReplyHead::Error {
                error: FileError::NotEmpty,
                ..
            }
        ));
        fs.answer(
            "/mnt/batch/tasks",
            "workitems",
            &FileOp::Remove { recursive: true },
        );
        let gone = fs.answer("/mnt/batch/tasks", "workitems/j", &FileOp::Stat);
        assert!(matches!(
            gone.head,
            ReplyHead::Error {
                error: FileError::NotFound,
                ..
            }
        ));
        assert!(join("/r", "../x").is_none() && join("/r", "/x").is_none());
    }
}
