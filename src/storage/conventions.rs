//! The Batch File Conventions' names: where a job's outputs and its tasks' logs go.

/// The Batch File Conventions' container of a job's outputs: `job-{id}` when that is a valid
/// container name, else a readable prefix and the SHA-1 of the id.
pub fn job_container(job_id: &str) -> String {
    let id = job_id.to_lowercase();
    let valid = id.len() <= 59
        && id
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !id.ends_with('-')
        && !id.contains("--");
    if valid {
        return format!("job-{id}");
    }
    let hash: String = sha1_hex(id.as_bytes());
    let mut safe = String::new();
    for c in id.chars() {
        if matches!(c, ':' | '_' | '-') {
            if !safe.ends_with('-') {
                safe.push('-');
            }
        } else {
            safe.push(c);
        }
    }
    let mut safe = safe.trim_matches('-').to_string();
    if safe.len() > 15 {
        safe.truncate(15);
        safe = safe.trim_matches('-').to_string();
    } else if safe.is_empty() {
        safe = "job".into();
    }
    format!("job-{safe}-{hash}")
}

/// SHA-1, which the conventions' container names fix, as 40 lower-case hex digits.
fn sha1_hex(data: &[u8]) -> String {
    use sha1::{Digest, Sha1};
    Sha1::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conventions_container_names_match_the_standard() {
        // The examples of the conventions' README, and cases worked out from its code.
        assert_eq!(job_container("MyTerrificJob"), "job-myterrificjob");
        assert_eq!(
            job_container("my-_EVEN_MORE_-terrific-job"),
            "job-my-even-more-te-68b05a7d8aa6aa65b9a6892c667a6c406a16ad65"
        );
        assert_eq!(
            job_container("__"),
            "job-job-9cccc847b29090d252ba07a00934a0946c6a9d07"
        );
        assert!(job_container(&"a".repeat(60)).starts_with("job-aaaaaaaaaaaaaaa-13d9560"));
        assert_eq!(sha1_hex(b"abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
    }
}
