//! The layers of src/ import one way only (../shared/DESIGN.md, "Layout and layers"): `main` ->
//! `app` -> `api`, `scheduler` (never each other) -> `ops` -> `store`, `storage`, `runtime`,
//! `embedded_pg` (never each other) -> `domain`; `runtime`, `api` and `agent` may use `sys` (OS
//! helpers, which use `domain` alone); `api` and `scheduler` count into `metrics` (which imports
//! nothing). `cli`, the client commands, uses `domain` alone; `sim` (`batchpool fleet-sim`) uses
//! `agent`'s parts, `domain` and `sys`; `config` names its commands and is read by `app` alone.
//! A `use` that
//! runs the wrong way fails here with its file and line. Crate-root items (`crate::install_tls`)
//! belong to no layer.

#[path = "common/source.rs"]
mod source;

use std::path::Path;

/// Each layer and the layers it may import.
const ALLOWED: &[(&str, &[&str])] = &[
    (
        "app",
        &[
            "config",
            "api",
            "scheduler",
            "ops",
            "store",
            "storage",
            "runtime",
            "embedded_pg",
            "domain",
            "sys",
            "metrics",
        ],
    ),
    ("config", &["domain", "cli"]),
    ("cli", &["domain"]),
    ("agent", &["domain", "sys"]),
    // `batchpool fleet-sim`: simulated nodes' agents, with the agent's own parts.
    ("sim", &["agent", "domain", "sys"]),
    (
        "api",
        &[
            "ops", "store", "storage", "runtime", "domain", "sys", "metrics",
        ],
    ),
    (
        "scheduler",
        &["ops", "store", "storage", "runtime", "domain", "metrics"],
    ),
    ("ops", &["store", "storage", "runtime", "domain"]),
    ("store", &["domain"]),
    ("storage", &["domain"]),
    ("runtime", &["domain", "sys"]),
    ("embedded_pg", &["domain"]),
    ("domain", &[]),
    ("sys", &["domain"]),
    ("metrics", &[]),
];

fn layer_names() -> Vec<&'static str> {
    ALLOWED.iter().map(|(name, _)| *name).collect()
}

/// The layer a file of src/ belongs to: its top-level module.
fn layer_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_string())
}

/// The layers a line names as `crate::LAYER`, including inside `use crate::{a, b::c}`.
fn named_layers(line: &str, layers: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            group.split(',').map(|part| part.trim()).collect()
        } else {
            vec![rest]
        };
        for name in names {
            let head: String = name
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if layers.contains(&head.as_str()) {
                found.push(head);
            }
        }
    }
    found
}

#[test]
fn imports_run_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layers = layer_names();
    let files = source::rust_files(&src);
    let mut wrong = Vec::new();
    for file in &files {
        let Some(layer) = layer_of(&src, file) else {
            continue;
        };
        let Some((_, allowed)) = ALLOWED.iter().find(|(name, _)| *name == layer) else {
            // main.rs and lib.rs wire the crate together.
            assert!(
                ["main", "lib"].contains(&layer.as_str()),
                "{} is in no layer: add its module to ALLOWED",
                file.display()
            );
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for named in named_layers(line, &layers) {
                if named != layer && !allowed.contains(&named.as_str()) {
                    wrong.push(format!(
                        "{}:{}: {layer} imports {named}: {}",
                        file.strip_prefix(&src).unwrap().display(),
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run the wrong way:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_scanner_sees_grouped_and_nested_paths() {
    let layers = layer_names();
    assert_eq!(
        named_layers(
            "use crate::{api, scheduler::Wakeups, install_tls};",
            &layers
        ),
        ["api", "scheduler"]
    );
    assert_eq!(
        named_layers("    crate::ops::jobs::ended_by(crate::domain::x)", &layers),
        ["ops", "domain"]
    );
    assert!(named_layers("use crate::install_tls;", &layers).is_empty());
}
