//! The README's five-minute tour, run as written: each of its shell blocks in order (with the
//! quick start's `/var/lib/batchpool` read as this server's data directory, and `BATCH_URL`
//! naming this server, as the tour says to), and its Python block through azure-batch 15.1.0.
//! Each block must succeed, and print the lines the README shows after it: node ids and times
//! are the README's only variable parts, and a progress bar is what a terminal shows, not a log.

mod common;

use std::path::Path;

use common::{Rt, TestServer};

/// One block of the tour: its language, its code, and the output the README shows after it.
struct Block {
    lang: String,
    code: String,
    shown: Option<String>,
}

/// The fenced blocks of the README's tour, each with the plain block that follows it, if any.
fn tour() -> Vec<Block> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let start = readme.find("## A five-minute tour").expect("the tour");
    let end = start
        + readme[start..]
            .find("\n## ")
            .expect("a section after the tour");
    let mut lines = readme[start..end].lines().peekable();
    let mut fenced = Vec::new();
    while let Some(line) = lines.next() {
        let Some(lang) = line.strip_prefix("```") else {
            continue;
        };
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        fenced.push((lang.to_string(), body.join("\n")));
    }
    let mut blocks: Vec<Block> = Vec::new();
    for (lang, body) in fenced {
        match blocks.last_mut() {
            Some(last) if lang.is_empty() && last.shown.is_none() => last.shown = Some(body),
            _ => blocks.push(Block {
                lang,
                code: body,
                shown: None,
            }),
        }
    }
    blocks
}

/// `text` with its variable parts made constant: node ids (`tvmps_{32 hex}_d`) and RFC 3339
/// times; trailing blanks go.
fn settled(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if let Some(len) = node_id_at(rest) {
            out.push_str("<node>");
            rest = &rest[len..];
        } else if let Some(len) = time_at(rest) {
            out.push_str("<time>");
            rest = &rest[len..];
        } else {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out.lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

fn node_id_at(s: &str) -> Option<usize> {
    let hex = s.strip_prefix("tvmps_")?;
    let digits = hex.bytes().take_while(u8::is_ascii_hexdigit).count();
    (digits == 32 && hex[digits..].starts_with("_d")).then_some(6 + 32 + 2)
}

fn time_at(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let date = (0..4).all(digit) && b.get(4) == Some(&b'-') && b.get(10) == Some(&b'T');
    if !date {
        return None;
    }
    let len = b[11..]
        .iter()
        .take_while(|c| c.is_ascii_digit() || **c == b':' || **c == b'.')
        .count();
    (b.get(11 + len) == Some(&b'Z')).then_some(12 + len)
}

/// Whether every line the README shows (but a progress bar's) is in `printed`, in order.
fn shows(printed: &str, shown: &str) -> bool {
    let printed = settled(printed);
    let mut lines = printed.lines();
    settled(shown)
        .lines()
        .filter(|l| !l.starts_with("[#"))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_tour_runs_as_written() {
    let s = TestServer::start(Rt::Docker).await;
    // The checkout as the tour sees it: the binary in target/release, the scripts beside it.
    let checkout = tempfile::tempdir().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_batchpool")).parent().unwrap();
    std::fs::create_dir(checkout.path().join("target")).unwrap();
    std::os::unix::fs::symlink(bin, checkout.path().join("target/release")).unwrap();
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    std::os::unix::fs::symlink(scripts, checkout.path().join("scripts")).unwrap();
    let data_dir = s.data_dir.path().to_str().unwrap().to_string();
    let python = std::env::var("BATCHPOOL_SDK15_PYTHON")
        .expect("BATCHPOOL_SDK15_PYTHON: run the tests through scripts/test.sh");

    // What a block exports, the next ones see: the tour runs in one shell.
    let mut exports = String::new();
    for block in tour() {
        let mut command = match block.lang.as_str() {
            "sh" => {
                let code = block.code.replace("/var/lib/batchpool", &data_dir);
                let mut c = tokio::process::Command::new("bash");
                c.args(["-e", "-c", &format!("{exports}\n{code}")]);
                for line in code.lines().filter(|l| l.starts_with("export ")) {
                    exports.push_str(line);
                    exports.push('\n');
                }
                c
            }
            "python" => {
                let code = block.code.replace("http://127.0.0.1:8080", &s.base);
                let mut c = tokio::process::Command::new("bash");
                let run = format!("{exports}\nexec \"$PYTHON\" -c \"$CODE\"");
                c.args(["-e", "-c", &run])
                    .env("PYTHON", &python)
                    .env("CODE", code);
                c
            }
            other => panic!("a block of {other} in the tour"),
        };
        let home = tempfile::tempdir().unwrap();
        let out = command
            .current_dir(checkout.path())
            .env("HOME", home.path())
            .env("BATCH_URL", &s.base)
            .env_remove("BATCH_ACCOUNT")
            .env_remove("BATCH_KEY")
            .env_remove("BATCHPOOL_PROFILE")
            .env_remove("XDG_CONFIG_HOME")
            .output()
            .await
            .expect("bash");
        let printed = String::from_utf8_lossy(&out.stdout);
        let said = format!(
            "{}\n--- printed:\n{printed}\n--- stderr:\n{}",
            block.code,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{said}");
        let shown = block.shown.expect("the tour shows each block's output");
        assert!(
            shows(&printed, &shown),
            "{said}\n--- the README shows:\n{shown}"
        );
    }
}
