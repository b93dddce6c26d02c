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

/// A file's module path below src/: `scheduler/task_files/mod.rs` is `scheduler::task_files`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut path: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|l| l == "mod") {
        path.pop();
    }
    path
}

/// The paths a line names through `crate::` or `super::`, made absolute from `module` (the
/// file's module), each group `{a, b::c}` opened.
fn named_paths(line: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let word = |c: char| c.is_alphanumeric() || c == '_';
    for (at, _) in line.match_indices(|c: char| c == 'c' || c == 's') {
        let rest = &line[at..];
        if at > 0 && line[..at].ends_with(|c: char| word(c) || c == ':') {
            continue;
        }
        let (mut base, mut rest) = if let Some(r) = rest.strip_prefix("crate::") {
            (Vec::new(), r)
        } else if rest.starts_with("super::") {
            (module.to_vec(), rest)
        } else {
            continue;
        };
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        let head: String = rest.chars().take_while(|c| word(*c) || *c == ':').collect();
        base.extend(head.split("::").filter(|s| !s.is_empty()).map(String::from));
        match rest[head.len()..].strip_prefix('{') {
            Some(group) => {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                for part in group.split(',') {
                    let mut path = base.clone();
                    path.extend(part.trim().split("::").map(String::from));
                    found.push(path);
                }
            }
            None => found.push(base),
        }
    }
    found
}

/// Two modules of one folder never import each other: a circle hides which of them is the
/// lower, and one of them holds what belongs to neither (issue 58).
#[test]
fn no_two_modules_of_a_folder_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let is_module = |path: &[String]| {
        let dir = path.iter().fold(src.clone(), |d, p| d.join(p));
        dir.with_extension("rs").is_file() || dir.join("mod.rs").is_file()
    };
    // (importer, imported) siblings -> where.
    let mut edges = std::collections::BTreeMap::<(String, String), String>::new();
    for file in source::rust_files(&src) {
        let module = module_of(&src, &file);
        let text = std::fs::read_to_string(&file).unwrap();
        // Tests' `super` is the file's own module.
        let text = &text[..text.find("#[cfg(test)]").unwrap_or(text.len())];
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for path in named_paths(line, &module) {
                let shared = module.iter().zip(&path).take_while(|(a, b)| a == b).count();
                if shared >= module.len() || shared >= path.len() || !is_module(&path[..=shared]) {
                    continue;
                }
                let (from, to) = (module[..=shared].join("::"), path[..=shared].join("::"));
                let at = format!("{}:{}", file.strip_prefix(&src).unwrap().display(), n + 1);
                edges.entry((from, to)).or_insert(at);
            }
        }
    }
    let circles: Vec<String> = edges
        .iter()
        .filter(|((from, to), _)| from < to && edges.contains_key(&(to.clone(), from.clone())))
        .map(|((from, to), at)| {
            let back = &edges[&(to.clone(), from.clone())];
            format!("{from} <-> {to} ({at}; {back})")
        })
        .collect();
    assert!(
        circles.is_empty(),
        "modules that import each other:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_circle_scanner_resolves_super_and_groups() {
    let module: Vec<String> = vec!["scheduler".into(), "execute".into()];
    let paths = named_paths(
        "use super::complete::{self, Outcome}; x(crate::ops::wake::notify)",
        &module,
    );
    let joined: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        joined,
        [
            "scheduler::complete::self",
            "scheduler::complete::Outcome",
            "ops::wake::notify"
        ]
    );
}
