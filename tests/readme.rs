//! The README's five-minute tour and the pages of docs/, run as written: each shell block in
//! order, in what acts as one shell (with the quick start's `/var/lib/batchpool` read as this
//! server's data directory, and `BATCH_URL` naming this server, as the tour says to), and each
//! Python block through the azure-batch it imports. Each block must succeed, and print the lines
//! the page shows after it: ids, keys, ETags, times and task list tokens are the pages' only
//! variable parts, and a progress bar is what a terminal shows, not a log.

mod common;

use std::path::Path;

use common::{Rt, TestServer};

/// One block of a page: its language, its code, and the output the page shows after it.
struct Block {
    lang: String,
    code: String,
    shown: Option<String>,
}

/// The fenced blocks of `text` that run (`sh`, `python`), each with the block that opens on the
/// line after it closes, if that one is plain or `json`: the output the page shows for it.
fn blocks(text: &str) -> Vec<Block> {
    let mut lines = text.lines();
    let mut blocks: Vec<Block> = Vec::new();
    let mut after_code = false;
    while let Some(line) = lines.next() {
        let Some(lang) = line.strip_prefix("```") else {
            after_code = false;
            continue;
        };
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        let body = body.join("\n");
        let shows_output = after_code && (lang.is_empty() || lang == "json");
        after_code = false;
        if shows_output {
            blocks.last_mut().expect("a block before its output").shown = Some(body);
        } else if lang == "sh" || lang == "python" {
            after_code = true;
            blocks.push(Block {
                lang: lang.to_string(),
                code: body,
                shown: None,
            });
        }
    }
    blocks
}

fn read(doc: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(doc)).expect(doc)
}

/// The README's tour: the blocks of its section.
fn tour() -> Vec<Block> {
    let readme = read("README.md");
    let start = readme.find("## A five-minute tour").expect("the tour");
    let end = start
        + readme[start..]
            .find("\n## ")
            .expect("a section after the tour");
    blocks(&readme[start..end])
}

/// Where a variable part starts `s`, its length.
type Matcher = fn(&str) -> Option<usize>;

/// `text` with its variable parts made constant: node ids (`tvmps_{32 hex}_d`), request ids,
/// keys, generated job ids, ETags, times (RFC 3339, RFC 1123, Python's, `ls -l`'s and a log's)
/// and the task list's `$skiptoken` (a task's number in the whole database); trailing blanks go.
fn settled(text: &str) -> String {
    let masks: [(&str, Matcher); 11] = [
        ("<node>", node_id_at),
        ("<time>", time_at),
        ("<time>", http_date_at),
        ("<id>", uuid_at),
        ("<etag>", etag_at),
        ("$skiptoken=<n>", task_token_at),
        ("<key>", key_at),
        ("<key>", pool_service_key_at),
        ("<time>", ls_time_at),
        ("<clock>", clock_at),
        ("<job>", job_id_at),
    ];
    let mut out = String::new();
    let mut rest = text;
    'text: while let Some(c) = rest.chars().next() {
        for (mask, at) in masks {
            if let Some(len) = at(rest) {
                out.push_str(mask);
                rest = &rest[len..];
                continue 'text;
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out.lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

fn hex_run(s: &str) -> usize {
    s.bytes().take_while(u8::is_ascii_hexdigit).count()
}

/// A node id, or the host name of its container: `tvmps-{32 hex}-d`.
fn node_id_at(s: &str) -> Option<usize> {
    let sep = s
        .strip_prefix("tvmps")?
        .chars()
        .next()
        .filter(|c| matches!(c, '_' | '-'))?;
    let hex = &s[6..];
    let digits = hex_run(hex);
    (digits == 32 && hex[digits..].starts_with(&format!("{sep}d"))).then_some(6 + 32 + 2)
}

/// `2026-11-24T17:33:24.289575Z`, or as Python prints it, `2026-11-24 17:33:24.289575+00:00`.
fn time_at(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let date =
        (0..4).all(digit) && b.get(4) == Some(&b'-') && matches!(b.get(10), Some(b'T' | b' '));
    if !date || !digit(11) {
        return None;
    }
    let len = b[11..]
        .iter()
        .take_while(|c| c.is_ascii_digit() || **c == b':' || **c == b'.')
        .count();
    let zone = &s[11 + len..];
    if zone.starts_with('Z') {
        Some(12 + len)
    } else {
        zone.starts_with("+00:00").then_some(17 + len)
    }
}

/// `Mon, 23 Nov 2026 05:32:11 GMT`
fn http_date_at(s: &str) -> Option<usize> {
    const DAYS: [&str; 7] = [
        "Mon, ", "Tue, ", "Wed, ", "Thu, ", "Fri, ", "Sat, ", "Sun, ",
    ];
    if !DAYS.iter().any(|d| s.starts_with(d)) {
        return None;
    }
    let end = s.find(" GMT")? + 4;
    (end <= 30
        && s[5..end]
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b' ' || c == b':'))
    .then_some(end)
}

/// A request id: `95985586-fe4f-4ae3-a568-a4a447a2ea26`.
fn uuid_at(s: &str) -> Option<usize> {
    let mut at = 0;
    for (i, len) in [8, 4, 4, 4, 12].into_iter().enumerate() {
        if hex_run(&s[at..]) != len {
            return None;
        }
        at += len;
        if i < 4 {
            s[at..].strip_prefix('-')?;
            at += 1;
        }
    }
    Some(at)
}

fn task_token_at(s: &str) -> Option<usize> {
    let digits = s
        .strip_prefix("$skiptoken=")?
        .bytes()
        .take_while(u8::is_ascii_digit)
        .count();
    (digits > 0).then_some("$skiptoken=".len() + digits)
}

/// An account key: 64 bytes in base64.
fn key_at(s: &str) -> Option<usize> {
    let b64 = s
        .bytes()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/')
        .count();
    (b64 == 86 && s[86..].starts_with("==")).then_some(88)
}

/// A Pool Service key: 32 bytes in hex.
fn pool_service_key_at(s: &str) -> Option<usize> {
    (hex_run(s) == 64).then_some(64)
}

/// A time as `ls -l` shows it: `Nov 23 05:20`.
fn ls_time_at(s: &str) -> Option<usize> {
    const MONTHS: &str = "JanFebMarAprMayJunJulAugSepOctNovDec";
    let b = s.as_bytes();
    let month = s
        .get(..3)
        .is_some_and(|m| MONTHS.as_bytes().chunks(3).any(|c| c == m.as_bytes()));
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let day = b.get(3) == Some(&b' ') && (digit(4) || b.get(4) == Some(&b' ')) && digit(5);
    let time = b.get(6) == Some(&b' ')
        && digit(7)
        && digit(8)
        && b.get(9) == Some(&b':')
        && digit(10)
        && digit(11);
    (month && day && time).then_some(12)
}

/// A time of day, as `batchpool job watch` starts a line in a log with it: `12:35:06`.
fn clock_at(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let clock = [0, 1, 3, 4, 6, 7].into_iter().all(digit)
        && b.get(2) == Some(&b':')
        && b.get(5) == Some(&b':');
    (clock && !digit(8)).then_some(8)
}

/// The id `batchpool job submit` gives a job it names: `job-20261127-123505-e8f7`.
fn job_id_at(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let digits =
        |from: usize, n: usize| (from..from + n).all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    let id = s.starts_with("job-")
        && digits(4, 8)
        && b.get(12) == Some(&b'-')
        && digits(13, 6)
        && b.get(19) == Some(&b'-');
    (id && hex_run(&s[20..]) == 4).then_some(24)
}

/// An ETag: `0x1DD7B0BFD1DC154`.
fn etag_at(s: &str) -> Option<usize> {
    let hex = s.strip_prefix("0x")?;
    let digits = hex_run(hex);
    (digits >= 12).then_some(2 + digits)
}

/// Whether every line a page shows is in `printed`, in order: all but a progress bar's, and `...`
/// (lines the page leaves out).
fn shows(printed: &str, shown: &str) -> bool {
    let printed = settled(printed);
    let mut lines = printed.lines();
    settled(shown)
        .lines()
        .filter(|l| !l.starts_with("[#") && *l != "...")
        .all(|want| lines.any(|got| got == want))
}

#[test]
fn the_readme_tour_is_found_whole() {
    let blocks = tour();
    let langs: Vec<&str> = blocks.iter().map(|b| b.lang.as_str()).collect();
    assert_eq!(langs, ["sh", "sh", "sh", "sh", "python", "sh"]);
    assert!(blocks.iter().all(|b| b.shown.is_some()));
    assert_eq!(
        settled("on tvmps_4c991d0131c24dc9a8ee4a806da2f923_d at 2026-11-24T17:33:24.289575Z  "),
        "on <node> at <time>"
    );
    assert!(shows("a\n[## ] 1/2\nb\nc", "[##] 2/2\nb\nc"));
    assert!(!shows("c\nb", "b\nc"));
}

#[test]
fn the_api_walk_is_found_whole() {
    let blocks = blocks(&read("docs/api.md"));
    assert!(blocks.len() > 20, "{} blocks", blocks.len());
    assert!(blocks[0].code.starts_with("export BATCH_KEY=") && blocks[0].shown.is_none());
    assert!(blocks[1..].iter().all(|b| b.shown.is_some()));
    assert_eq!(
        settled("etag: 0x1DD7B0BFD1DC154\ndate: Mon, 23 Nov 2026 05:32:11 GMT\nid 95985586-fe4f-4ae3-a568-a4a447a2ea26 at 2026-11-23 05:32:34.420196+00:00"),
        "etag: <etag>\ndate: <time>\nid <id> at <time>"
    );
}

const QUICK_START_IMAGE: &str = "batchpool/node:latest";

fn test_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name}: run the tests through scripts/test.sh"))
}

/// The reader's checkout: the binary in `target/release`, the scripts beside it, and `bin/az`.
fn checkout() -> tempfile::TempDir {
    let checkout = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_batchpool")).parent().unwrap();
    std::fs::create_dir(checkout.path().join("target")).unwrap();
    std::os::unix::fs::symlink(bin, checkout.path().join("target/release")).unwrap();
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    std::os::unix::fs::symlink(scripts, checkout.path().join("scripts")).unwrap();
    // `az` for the reader's PATH: the Azure CLI the test script installs.
    std::fs::create_dir(checkout.path().join("bin")).unwrap();
    let az = test_env("BATCHPOOL_AZ");
    std::os::unix::fs::symlink(az, checkout.path().join("bin/az")).unwrap();
    checkout
}

/// A shell that runs a document's blocks against one server, in order, as its reader's would.
struct Reader<'a> {
    server: &'a TestServer,
    checkout: tempfile::TempDir,
    home: tempfile::TempDir,
    python: String,
    python14: String,
}

/// What a block leaves for the next ones: its variables (the reader's shell is one), but bash's
/// own.
const KEEP_STATE: &str = r#"declare -p | grep -Ev '^declare -[^ ]*r|^declare -[^ ]* (BASH|PIPESTATUS|SHLVL|PWD|OLDPWD|SECONDS|RANDOM|SRANDOM|EPOCH|LINENO|HIST|COLUMNS|LINES|GROUPS|FUNCNAME|DIRSTACK|_=)' > .reader-state"#;

/// What the blocks before left, taken up by the next.
const RESTORE_STATE: &str = "[ -e .reader-state ] && { source .reader-state || true; }";

impl<'a> Reader<'a> {
    fn new(server: &'a TestServer) -> Self {
        Reader {
            server,
            checkout: checkout(),
            home: tempfile::tempdir().unwrap(),
            python: test_env("BATCHPOOL_SDK15_PYTHON"),
            python14: test_env("BATCHPOOL_SDK14_PYTHON"),
        }
    }

    /// Runs each block of `doc`: it must succeed and print the lines the page shows after it.
    async fn run(&self, doc: &str, blocks: Vec<Block>) {
        let data_dir = self.server.data_dir.path().to_str().unwrap().to_string();
        let base = &self.server.base;
        // On Docker, the test image stands in for the quick start's (which the tests do not
        // build, to leave an engine's own copy alone).
        let image = match self.server.runtime {
            Rt::Docker => common::TEST_IMAGE,
            Rt::Local => QUICK_START_IMAGE,
        };
        // `az`, as the pages take it, first on the reader's PATH.
        let path = format!(
            "{}:{}",
            self.checkout.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        for block in blocks {
            let mut command = tokio::process::Command::new("bash");
            let code = block
                .code
                .replace("/var/lib/batchpool", &data_dir)
                .replace("http://127.0.0.1:8080", base)
                .replace(QUICK_START_IMAGE, image);
            match block.lang.as_str() {
                "sh" => {
                    command.args([
                        "-e",
                        "-c",
                        &format!("{RESTORE_STATE}\n{code}\n{KEEP_STATE}"),
                    ]);
                }
                "python" => {
                    // azure-batch 14.x is the one with `BatchServiceClient`.
                    let python = if code.contains("BatchServiceClient") {
                        &self.python14
                    } else {
                        &self.python
                    };
                    command
                        .args([
                            "-e",
                            "-c",
                            &format!("{RESTORE_STATE}\nexec \"$PYTHON\" -c \"$CODE\""),
                        ])
                        .env("PYTHON", python)
                        .env("CODE", code);
                }
                other => panic!("a block of {other} in {doc}"),
            }
            let run = command
                .kill_on_drop(true)
                .current_dir(self.checkout.path())
                .env("PATH", &path)
                .env("HOME", self.home.path())
                .env("BATCH_URL", base)
                .env_remove("BATCH_ACCOUNT")
                .env_remove("BATCH_KEY")
                .env_remove("BATCHPOOL_PROFILE")
                .env_remove("XDG_CONFIG_HOME")
                .output();
            // A block that waits for a state (`until ...`) must not wait for ever.
            let out = tokio::time::timeout(std::time::Duration::from_secs(300), run)
                .await
                .unwrap_or_else(|_| panic!("{doc}: still running after 5 minutes:\n{}", block.code))
                .expect("bash");
            // The page shows the quick start's address and data directory.
            let printed = String::from_utf8_lossy(&out.stdout)
                .replace(base, "http://127.0.0.1:8080")
                .replace(&data_dir, "/var/lib/batchpool")
                .replace(image, QUICK_START_IMAGE);
            let said = format!(
                "{doc}:\n{}\n--- printed:\n{printed}\n--- stderr:\n{}",
                block.code,
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.status.success(), "{said}");
            if let Some(shown) = block.shown {
                assert!(shows(&printed, &shown), "{said}\n--- {doc} shows:\n{shown}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_tour_runs_as_written() {
    let s = TestServer::start(Rt::Docker).await;
    Reader::new(&s).run("README.md", tour()).await;
}

/// The pages of docs/ run after the tour, each on a server as the quick start's (on the local
/// runtime, its own PostgreSQL in its data directory and the default image) on a runtime, with
/// the flags the page says to start it with. The local runtime is where the pages' answers come from; nodes.md's
/// examples need Docker's, the quick start's where an engine answers.
const PAGES: &[(&str, Rt, &[&str])] = &[
    ("docs/api.md", Rt::Local, &[]),
    ("docs/authentication.md", Rt::Local, &[]),
    ("docs/bes.md", Rt::Local, &["--allow-local-urls"]),
    ("docs/cli.md", Rt::Local, &[]),
    ("docs/clients.md", Rt::Local, &[]),
    ("docs/configuration.md", Rt::Local, &[]),
    ("docs/data.md", Rt::Local, &["--allow-local-urls"]),
    ("docs/low-priority.md", Rt::Local, &[]),
    ("docs/metering.md", Rt::Local, &[]),
    ("docs/autoscale.md", Rt::Local, &[]),
    ("docs/nodes.md", Rt::Docker, &[]),
    ("docs/schedules.md", Rt::Local, &[]),
];

/// Pages with commands that no test runs, and why.
const EXCUSED: &[(&str, &str)] = &[
    (
        "docs/deploy.md",
        "its compose file pulls PostgreSQL's image from Docker Hub; tests/deploy.rs checks the image and the file instead",
    ),
    (
        "docs/development.md",
        "its commands are the test suite's and the benchmarks' own",
    ),
];

/// Runs `doc`'s blocks after the tour, on the server [`PAGES`] says.
async fn after_the_tour(doc: &str) {
    let &(_, runtime, flags) = PAGES
        .iter()
        .find(|(page, ..)| *page == doc)
        .unwrap_or_else(|| panic!("{doc} is not in PAGES"));
    let mut extra = flags.to_vec();
    let database = match runtime {
        Rt::Local => {
            extra.extend(["--default-image", QUICK_START_IMAGE]);
            None
        }
        // A database of the test's own, by which the test removes its node containers after it.
        Rt::Docker => Some(common::fresh_database().await),
    };
    let s = TestServer::start_with(runtime, database, &extra).await;
    let reader = Reader::new(&s);
    reader.run("README.md", tour()).await;
    reader.run(doc, blocks(&read(doc))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_walk_runs_as_written() {
    after_the_tour("docs/api.md").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_authentication_page_runs_as_written() {
    after_the_tour("docs/authentication.md").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bes_page_runs_as_written() {
    after_the_tour("docs/bes.md").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_page_runs_as_written() {
    after_the_tour("docs/cli.md").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_page_runs_as_written() {
    after_the_tour("docs/clients.md").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configuration_page_runs_as_written() {
    after_the_tour("docs/configuration.md").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_page_runs_as_written() {
    after_the_tour("docs/data.md").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_low_priority_page_runs_as_written() {
    after_the_tour("docs/low-priority.md").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metering_page_runs_as_written() {
    after_the_tour("docs/metering.md").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_autoscale_page_runs_as_written() {
    after_the_tour("docs/autoscale.md").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nodes_page_runs_as_written() {
    after_the_tour("docs/nodes.md").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedules_page_runs_as_written() {
    after_the_tour("docs/schedules.md").await;
}

/// Every page of docs/ with commands is in [`PAGES`] or [`EXCUSED`], and each page of
/// [`PAGES`] has a test above.
#[test]
fn every_page_with_commands_is_run() {
    let this = read("tests/readme.rs");
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    for entry in std::fs::read_dir(docs).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let page = format!("docs/{name}");
        if !name.ends_with(".md") || blocks(&read(&page)).is_empty() {
            continue;
        }
        let run = PAGES.iter().any(|(p, ..)| *p == page);
        let excused = EXCUSED.iter().any(|(p, _)| *p == page);
        assert!(
            run != excused,
            "{page}: its commands are run by no test here (or run, and still excused)"
        );
    }
    for (page, ..) in PAGES {
        assert!(
            this.contains(&format!("    after_the_tour(\"{page}\").await;")),
            "{page}: no test runs it"
        );
    }
}
