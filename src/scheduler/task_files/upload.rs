//! Output files up from a task's directory to SAS containers, per uploadCondition, with the
//! `fileuploadout.txt` and `fileuploaderr.txt` logs Azure's node agent leaves.

use std::path::PathBuf;

use futures_util::StreamExt;
use object_store::{Attribute, Attributes};

use super::{Fetcher, PARALLEL};
use crate::domain::files::{self, OutputFile, Pattern};
use crate::runtime::TaskFiles;
use crate::scheduler::complete::Failure;
use crate::scheduler::transfer;
use crate::storage::Container;

/// How deep below its fixed part a `**` pattern matches. How many entries are looked at is
/// bounded by the listing itself (`domain::agent::MAX_LISTING`).
const MAX_WALK_DEPTH: usize = 64;

/// One file to upload: where it is below the task directory, and the blob it becomes.
struct Upload<'a> {
    local: PathBuf,
    container: &'a Container,
    blob: String,
    headers: Attributes,
}

/// What the uploads did: the lines of `fileuploadout.txt` and `fileuploaderr.txt`, and the first
/// failure.
#[derive(Default)]
struct Report {
    log: String,
    errors: String,
    first: Option<Failure>,
}

impl Report {
    fn failed(&mut self, message: String) {
        self.errors.push_str(&message);
        self.errors.push('\n');
        self.first
            .get_or_insert(Failure::new("FileUploadMiscError", message));
    }
}

/// Uploads the output files whose uploadCondition `exit_code` meets, and writes
/// `fileuploadout.txt` (what went where) and `fileuploaderr.txt` (what failed) into the task
/// directory, as Azure's node agent does. The files are found and read by the task's node's
/// agent. The first failure is returned, after every other file has been tried.
pub async fn upload(
    fetcher: &Fetcher,
    files: TaskFiles<'_>,
    outputs: &[OutputFile],
    exit_code: i64,
) -> Result<(), Failure> {
    let wanted: Vec<&OutputFile> = outputs
        .iter()
        .filter(|o| o.upload_options.upload_condition.applies(exit_code))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let mut report = Report::default();
    let mut containers = Vec::new();
    for o in &wanted {
        containers.push(open(fetcher, o, &mut report).await);
    }
    let mut uploads = Vec::new();
    for (o, container) in wanted.iter().zip(&containers) {
        if let Some(container) = container {
            uploads.extend(planned(files, o, container, &mut report).await);
        }
    }
    let http = fetcher.http();
    let uploading: Vec<_> = uploads.into_iter().map(|u| put(http, files, u)).collect();
    let results: Vec<(String, String, Result<(), String>)> = futures_util::stream::iter(uploading)
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    for (local, blob, result) in results {
        match result {
            Ok(()) => report
                .log
                .push_str(&format!("Uploaded {local} to {blob}\n")),
            Err(e) => report.failed(format!("Uploading {local} to {blob} failed: {e}")),
        }
    }
    write_logs(files, report.log, report.errors).await;
    report.first.map_or(Ok(()), Err)
}

/// The container an output file goes to, if its URL may be used.
async fn open(fetcher: &Fetcher, o: &OutputFile, report: &mut Report) -> Option<Container> {
    let dest = o.destination.container.as_ref()?;
    let opened = match fetcher.check(&dest.container_url).await {
        Ok(()) => Container::open(&dest.container_url).map_err(|e| e.message),
        Err(why) => Err(why),
    };
    opened
        .map_err(|why| report.failed(format!("{}: {why}", o.file_pattern)))
        .ok()
}

/// The uploads an output file makes: each file its pattern matches, and the blob it becomes.
async fn planned<'a>(
    files: TaskFiles<'_>,
    o: &OutputFile,
    container: &'a Container,
    report: &mut Report,
) -> Vec<Upload<'a>> {
    let (Some(dest), Ok(pattern)) = (&o.destination.container, Pattern::parse(&o.file_pattern))
    else {
        // Checked when the task was added.
        return Vec::new();
    };
    let found = match matches(files, &pattern).await {
        Ok(found) => found,
        Err(e) => {
            report.failed(format!("{}: finding the files failed: {e}", o.file_pattern));
            return Vec::new();
        }
    };
    let headers = attributes(&dest.upload_headers);
    found
        .into_iter()
        .map(|(local, rel)| Upload {
            blob: blob_name(&pattern, dest.path.as_deref(), &rel),
            local,
            container,
            headers: headers.clone(),
        })
        .collect()
}

/// Uploads one file: (its path, its blob, what happened).
async fn put(
    http: &reqwest::Client,
    files: TaskFiles<'_>,
    u: Upload<'_>,
) -> (String, String, Result<(), String>) {
    let result = match (u.container.blob(&u.blob), files.read(&u.local).await) {
        (Ok(target), Ok(data)) => transfer::upload_with(http, data, &target, u.headers)
            .await
            .map_err(|e| format!("{e:#}")),
        (Err(e), _) => Err(e.message),
        (_, Err(e)) => Err(e.message),
    };
    (u.local.display().to_string(), u.blob, result)
}

/// The blob a matched file becomes (Azure's rule): a pattern naming one file uploads to `path`
/// itself (or the file's name); a wildcard pattern uploads below `path` as a virtual directory,
/// keeping the file's path below the pattern's fixed part.
fn blob_name(pattern: &Pattern, path: Option<&str>, rel: &[String]) -> String {
    let path = path.unwrap_or_default().trim_end_matches('/');
    if pattern.wild.is_empty() {
        if !path.is_empty() {
            return path.to_string();
        }
        return pattern.fixed.last().cloned().unwrap_or_default();
    }
    let rest = rel.join("/");
    if path.is_empty() {
        rest
    } else {
        format!("{path}/{rest}")
    }
}

fn attributes(headers: &[files::UploadHeader]) -> Attributes {
    let mut out = Attributes::new();
    for h in headers {
        let key = match h.name.to_ascii_lowercase().as_str() {
            "content-type" => Attribute::ContentType,
            "content-encoding" => Attribute::ContentEncoding,
            "content-language" => Attribute::ContentLanguage,
            "content-disposition" => Attribute::ContentDisposition,
            "cache-control" => Attribute::CacheControl,
            // Refused when the task was added.
            _ => continue,
        };
        out.insert(key, h.value.clone().unwrap_or_default().into());
    }
    out
}

/// The regular files the pattern matches: (path below the task directory, names below the
/// pattern's fixed part), as the node's agent lists them: no link, none of the agent's records.
async fn matches(
    files: TaskFiles<'_>,
    pattern: &Pattern,
) -> Result<Vec<(PathBuf, Vec<String>)>, String> {
    let fixed: PathBuf = pattern.fixed.iter().collect();
    if pattern.wild.is_empty() {
        return Ok(match files.stat(&fixed).await.map_err(|e| e.message)? {
            Some(info) if !info.is_dir => vec![(fixed, Vec::new())],
            _ => Vec::new(),
        });
    }
    let depth = if pattern.wild.iter().any(|w| w == "**") {
        MAX_WALK_DEPTH
    } else {
        pattern.wild.len()
    };
    let Some(listed) = files.list(&fixed, depth > 1).await.map_err(|e| e.message)? else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    for info in listed {
        // A name that is not UTF-8 (shown with U+FFFD) is not one a pattern can name.
        if info.is_dir || info.name.contains('\u{FFFD}') {
            continue;
        }
        let names: Vec<String> = info.name.split('/').map(str::to_string).collect();
        let rel: Vec<&str> = names.iter().map(String::as_str).collect();
        if names.len() <= depth && pattern.matches(&rel) {
            found.push((fixed.join(&info.name), names));
        }
    }
    found.sort();
    Ok(found)
}

/// `fileuploadout.txt` and `fileuploaderr.txt` in the task directory (the latter only when
/// something failed), written by the node's agent; a failure to write them is logged, not the
/// task's.
async fn write_logs(files: TaskFiles<'_>, log: String, errors: String) {
    let mut logs = vec![("fileuploadout.txt", log)];
    if !errors.is_empty() {
        logs.push(("fileuploaderr.txt", errors));
    }
    for (name, text) in logs {
        let bytes = futures_util::stream::once(async move { Ok(bytes::Bytes::from(text)) });
        if let Err(e) = files.write(name.as_ref(), bytes.boxed(), None).await {
            tracing::warn!(task = %files.dirs.node, error = %e.message, "writing the file upload logs failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_names_follow_azure_s_rule() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let one = Pattern::parse("out/result.txt").unwrap();
        assert_eq!(blob_name(&one, None, &[]), "result.txt");
        assert_eq!(blob_name(&one, Some("r/final.txt"), &[]), "r/final.txt");
        let many = Pattern::parse("out/**/*.csv").unwrap();
        assert_eq!(blob_name(&many, None, &names(&["a", "b.csv"])), "a/b.csv");
        assert_eq!(
            blob_name(&many, Some("task1/"), &names(&["b.csv"])),
            "task1/b.csv"
        );
        let logs = Pattern::parse("../std*.txt").unwrap();
        assert_eq!(
            blob_name(&logs, Some("logs"), &names(&["stdout.txt"])),
            "logs/stdout.txt"
        );
    }
}
