//! `filePattern`s: the names they reach below the task directory, and Azure's wildcards.

/// A checked `filePattern`: its names below the task directory (a leading `../` from the working
/// directory reaches the task directory itself, as on Azure: `../std*.txt` are the task's logs),
/// split where the first wildcard begins.
#[derive(Clone, Debug, PartialEq)]
pub struct Pattern {
    /// The names before the first wildcard: the directory the walk starts in (or the one file).
    pub fixed: Vec<String>,
    /// The rest, matched name by name; empty when the pattern names one file.
    pub wild: Vec<String>,
}

impl Pattern {
    pub fn parse(pattern: &str) -> Result<Pattern, String> {
        if pattern.trim().is_empty() {
            return Err("must not be empty".into());
        }
        if pattern.starts_with('/') {
            return Err("give the pattern relative to the task's working directory ('../' reaches the task directory)".into());
        }
        // Relative to the task directory: `wd/` then the pattern, with `..` taken lexically.
        let mut names: Vec<String> = vec!["wd".into()];
        for part in pattern.replace('\\', "/").split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    if names.pop().is_none() {
                        return Err("must stay inside the task directory".into());
                    }
                }
                name => names.push(name.to_string()),
            }
        }
        if names.is_empty() {
            return Err("names no file".into());
        }
        let first_wild = names
            .iter()
            .position(|n| n.contains(['*', '?']))
            .unwrap_or(names.len());
        let wild = names.split_off(first_wild);
        Ok(Pattern { fixed: names, wild })
    }

    /// Whether `rel` (names below the fixed part) matches the wildcard part.
    pub fn matches(&self, rel: &[&str]) -> bool {
        let wild: Vec<&str> = self.wild.iter().map(String::as_str).collect();
        match_names(&wild, rel)
    }
}

fn match_names(pattern: &[&str], names: &[&str]) -> bool {
    match pattern.split_first() {
        None => names.is_empty(),
        Some((&"**", rest)) => (0..=names.len()).any(|skip| match_names(rest, &names[skip..])),
        Some((p, rest)) => names.split_first().is_some_and(|(n, more)| {
            match_name(p.as_bytes(), n.as_bytes()) && match_names(rest, more)
        }),
    }
}

/// `*` (any run) and `?` (one character) within one name.
fn match_name(p: &[u8], n: &[u8]) -> bool {
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_stay_in_the_task_directory() {
        let p = Pattern::parse("../std*.txt").unwrap();
        assert_eq!(p.fixed, Vec::<String>::new());
        assert_eq!(p.wild, vec!["std*.txt"]);
        let p = Pattern::parse("out/**/*.csv").unwrap();
        assert_eq!(p.fixed, vec!["wd", "out"]);
        assert_eq!(p.wild, vec!["**", "*.csv"]);
        let p = Pattern::parse("result.txt").unwrap();
        assert_eq!(
            (p.fixed, p.wild.len()),
            (vec!["wd".into(), "result.txt".into()], 0)
        );
        for bad in ["../../etc/passwd", "/etc/passwd", "", "../.."] {
            assert!(Pattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wildcards_match_as_azure_documents() {
        let m = |p: &str, path: &str| {
            let p = Pattern::parse(p).unwrap();
            let names: Vec<&str> = path.split('/').collect();
            let rel = &names[p.fixed.len()..];
            p.matches(rel)
        };
        assert!(m("*.txt", "wd/a.txt"));
        assert!(!m("*.txt", "wd/sub/a.txt"));
        assert!(m("**/*.txt", "wd/a.txt"));
        assert!(m("**/*.txt", "wd/sub/deeper/a.txt"));
        assert!(m("out/**", "wd/out/x/y"));
        assert!(m("a?c", "wd/abc"));
        assert!(!m("a?c", "wd/abbc"));
        assert!(m("*", "wd/anything"));
        assert!(m("../std*.txt", "stdout.txt"));
    }
}
