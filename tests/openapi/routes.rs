//! Reads the two sides the test compares: the operations under `paths:` in openapi/openapi.yaml,
//! and the `.route(...)`/`.nest(...)` registrations under src/api/ (see ../openapi.rs for why).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const METHODS: [&str; 6] = ["get", "put", "post", "patch", "delete", "head"];

/// (method, path shape) -> the path as written, e.g. ("get", "/pools/{}") -> "/pools/{poolId}".
pub type Operations = BTreeMap<(String, String), String>;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A path with its parameters' names dropped: `/pools/{pool_id}/files/{*path}` -> `/pools/{}/files/{}`.
fn shape(path: &str) -> String {
    let mut out = String::new();
    let mut in_param = false;
    for c in path.chars() {
        match c {
            '{' => {
                in_param = true;
                out.push_str("{}");
            }
            '}' => in_param = false,
            _ if !in_param => out.push(c),
            _ => {}
        }
    }
    out
}

/// Every (method, path) under `paths:` in openapi/openapi.yaml.
pub fn documented() -> Operations {
    let file = root().join("openapi/openapi.yaml");
    let text = std::fs::read_to_string(&file).expect("reading openapi/openapi.yaml");
    let mut ops = Operations::new();
    let (mut in_paths, mut path) = (false, None);
    for (n, line) in text.lines().enumerate() {
        let at = format!("openapi.yaml:{}", n + 1);
        if !line.is_empty() && !line.starts_with(' ') {
            in_paths = line.trim_end() == "paths:";
            continue;
        }
        let item = line.trim();
        if !in_paths || item.is_empty() || item.starts_with('#') {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        assert!(
            !(indent <= 4 && item.starts_with("$ref")),
            "{at}: a $ref path item, which this test does not read: {line}"
        );
        match (indent, item.strip_suffix(':')) {
            (2, Some(p)) => {
                let p = p.trim_matches(['\'', '"']);
                assert!(p.starts_with('/'), "{at}: not a path under paths: {line}");
                path = Some(p);
            }
            (2, None) => panic!("{at}: not a path under paths: {line}"),
            (4, Some(method)) if METHODS.contains(&method) => {
                let p = path.unwrap_or_else(|| panic!("{at}: an operation before any path"));
                ops.insert((method.to_string(), shape(p)), p.to_string());
            }
            _ => {}
        }
    }
    assert!(
        !ops.is_empty(),
        "no operations found under paths: in openapi.yaml"
    );
    ops
}

/// A Rust file under src/api/: its module path (`api::batch` for api/batch/mod.rs) and its text
/// up to its `#[cfg(test)] mod` (a test module may build routers of its own).
struct Source {
    module: Vec<String>,
    name: String,
    text: String,
}

fn sources(dir: &Path, module: &[String], out: &mut Vec<Source>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("reading src/api")
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let child = [module, std::slice::from_ref(&stem)].concat();
        if path.is_dir() {
            sources(&path, &child, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("reading a source file");
            let end = text
                .match_indices("#[cfg(test)]")
                .find(|(i, m)| text[i + m.len()..].trim_start().starts_with("mod "))
                .map_or(text.len(), |(i, _)| i);
            out.push(Source {
                module: if stem == "mod" {
                    module.to_vec()
                } else {
                    child
                },
                name: path.strip_prefix(root()).unwrap().display().to_string(),
                text: text[..end].to_string(),
            });
        }
    }
}

/// The arguments of the call whose `(` is at `open`, split at top-level commas.
fn call_args(text: &str, open: usize) -> Vec<String> {
    let (mut depth, mut in_str, mut escaped) = (0, false, false);
    let (mut args, mut arg) = (Vec::new(), String::new());
    for c in text[open..].chars() {
        if in_str {
            in_str = c != '"' || escaped;
            escaped = c == '\\' && !escaped;
        } else {
            match c {
                '"' => in_str = true,
                '(' | '[' | '{' => {
                    depth += 1;
                    if depth == 1 {
                        continue;
                    }
                }
                ')' | ']' | '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                ',' if depth == 1 => {
                    args.push(std::mem::take(&mut arg).trim().to_string());
                    continue;
                }
                _ => {}
            }
        }
        arg.push(c);
    }
    args.push(arg.trim().to_string());
    args.retain(|a| !a.is_empty());
    args
}

/// The string literals of `[...]` after the last `for <var> in` in `before`, if there is one.
fn loop_values(before: &str, var: &str) -> Option<Vec<String>> {
    let at = before.rfind(&format!("for {var} in ["))?;
    let list = &before[at..at + before[at..].find(']')?];
    Some(
        list.split('"')
            .skip(1)
            .step_by(2)
            .map(String::from)
            .collect(),
    )
}

/// The paths a path argument (`"/x"`, `&format!("{prefix}/x")`) stands for.
fn paths_of(arg: &str, before: &str, at: &str) -> Vec<String> {
    let literal = arg
        .trim_start_matches('&')
        .trim_start_matches("format!(")
        .trim_end_matches(')');
    let literal = literal
        .strip_prefix('"')
        .and_then(|l| l.strip_suffix('"'))
        .unwrap_or_else(|| panic!("{at}: cannot read the path {arg}"));
    let mut paths = vec![String::new()];
    let mut rest = literal;
    while let Some(c) = rest.chars().next() {
        if let Some(r) = rest.strip_prefix("{{").or(rest.strip_prefix("}}")) {
            paths.iter_mut().for_each(|p| p.push(c));
            rest = r;
        } else if c == '{' && arg.contains("format!") {
            let end = rest.find('}').unwrap();
            let var = &rest[1..end];
            let values = loop_values(before, var)
                .unwrap_or_else(|| panic!("{at}: no `for {var} in [...]` to expand {{{var}}}"));
            paths = paths
                .iter()
                .flat_map(|p| values.iter().map(move |v| format!("{p}{v}")))
                .collect();
            rest = &rest[end + 1..];
        } else {
            paths.iter_mut().for_each(|p| p.push(c));
            rest = &rest[c.len_utf8()..];
        }
    }
    paths
}

/// The methods of a method router (`get(a).post(b)`): calls at its top level, by last name.
fn methods_of(arg: &str, at: &str) -> Vec<String> {
    let (mut depth, mut name, mut methods) = (0, String::new(), Vec::new());
    for c in arg.chars() {
        match c {
            '(' if depth == 0 => {
                let method = name.rsplit("::").next().unwrap().to_string();
                assert!(
                    METHODS.contains(&method.as_str()),
                    "{at}: `{name}(` is not a method this test reads ({METHODS:?})"
                );
                methods.push(method);
                depth += 1;
            }
            '(' => depth += 1,
            ')' => depth -= 1,
            c if depth == 0 && (c.is_alphanumeric() || c == '_' || c == ':') => name.push(c),
            _ if depth == 0 => name.clear(),
            _ => {}
        }
    }
    assert!(!methods.is_empty(), "{at}: no method in {arg}");
    methods
}

/// The function a position in a file lies in.
fn enclosing_fn(text: &str, pos: usize) -> String {
    let before = &text[..pos];
    let at = before
        .match_indices("fn ")
        .filter(|(i, _)| *i == 0 || before[..*i].ends_with(char::is_whitespace))
        .last()
        .map(|(i, _)| i + 3)
        .expect("a route outside any function");
    before[at..]
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .next()
        .unwrap()
        .to_string()
}

/// A function that builds a router: its module path and its name.
type RouterFn = (Vec<String>, String);

/// `.route(path, methods)` in `site`.
struct Route {
    site: RouterFn,
    path: String,
    methods: Vec<String>,
}

/// `.nest(prefix, target())` in `site`.
struct Nest {
    site: RouterFn,
    prefix: String,
    target: RouterFn,
}

/// The router function a `.nest` names (`billing::router`, `super::x::router`, `crate::api::...`),
/// seen from `module`.
fn router_fn(name: &str, module: &[String]) -> RouterFn {
    let mut segments: Vec<&str> = name.split("::").collect();
    let function = segments.pop().unwrap().to_string();
    let mut path = if segments.first() == Some(&"crate") {
        segments.remove(0);
        Vec::new()
    } else {
        module.to_vec()
    };
    for segment in segments {
        match segment {
            "super" => drop(path.pop()),
            "self" => {}
            _ => path.push(segment.to_string()),
        }
    }
    (path, function)
}

/// Every `.route(...)` and `.nest(...)` in `file`; a call this test cannot read fails it.
fn registrations(file: &Source, routes: &mut Vec<Route>, nests: &mut Vec<Nest>) {
    let calls = file.text.match_indices('.').filter_map(|(i, _)| {
        let rest = &file.text[i + 1..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        rest[name.len()..].starts_with('(').then_some((i, name))
    });
    for (pos, call) in calls {
        let at = format!("{}:{}", file.name, file.text[..pos].lines().count());
        let before = &file.text[..pos];
        let site = (file.module.clone(), enclosing_fn(&file.text, pos));
        let args = || {
            let args = call_args(&file.text, pos + 1 + call.len());
            assert_eq!(args.len(), 2, "{at}: cannot read this .{call}: {args:?}");
            args
        };
        match call.as_str() {
            "route" => {
                let args = args();
                let methods = methods_of(&args[1], &at);
                for path in paths_of(&args[0], before, &at) {
                    let (site, methods) = (site.clone(), methods.clone());
                    routes.push(Route {
                        site,
                        path,
                        methods,
                    });
                }
            }
            "nest" => {
                let args = args();
                let target = args[1].strip_suffix("()").unwrap_or_else(|| {
                    panic!("{at}: the nested router is not a call without arguments")
                });
                let target = router_fn(target, &file.module);
                for prefix in paths_of(&args[0], before, &at) {
                    let (site, target) = (site.clone(), target.clone());
                    nests.push(Nest {
                        site,
                        prefix,
                        target,
                    });
                }
            }
            "route_service" | "nest_service" | "fallback_service" => {
                panic!("{at}: `.{call}(` is not read by this test")
            }
            _ => {}
        }
    }
}

/// The prefixes the routes of `of` are served under: those of each `.nest` of it, after the
/// prefixes of the router that nests it.
fn prefixes(of: &RouterFn, nests: &[Nest]) -> Vec<String> {
    let sites: Vec<&Nest> = nests.iter().filter(|n| &n.target == of).collect();
    if sites.is_empty() {
        return vec![String::new()];
    }
    sites
        .iter()
        .flat_map(|n| {
            prefixes(&n.site, nests)
                .into_iter()
                .map(move |p| format!("{p}{}", n.prefix))
        })
        .collect()
}

/// Every route the router defines, read from src/api/ (see the top of this file).
pub fn routed_in_source() -> Operations {
    let mut files = Vec::new();
    sources(&root().join("src/api"), &["api".to_string()], &mut files);
    let (mut routes, mut nests) = (Vec::new(), Vec::new());
    for file in &files {
        registrations(file, &mut routes, &mut nests);
    }
    for nest in &nests {
        assert!(
            routes.iter().any(|r| r.site == nest.target),
            "a nested router that registers no route read here: {:?}",
            nest.target
        );
    }
    let mut ops = Operations::new();
    for route in &routes {
        for prefix in prefixes(&route.site, &nests) {
            let full = format!("{prefix}{}", route.path);
            for m in &route.methods {
                ops.insert((m.clone(), shape(&full)), full.clone());
            }
        }
    }
    ops
}
