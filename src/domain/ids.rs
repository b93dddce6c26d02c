//! Azure Batch identifier rules and the ids this server makes up itself.

/// Azure's rule for pool, job and task ids: letters, digits, hyphens and underscores, at most
/// 64 characters. Returns the reason when the id does not follow it.
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("the id must not be empty".into());
    }
    if id.chars().count() > 64 {
        return Err(format!(
            "the id is {} characters long; the maximum is 64",
            id.chars().count()
        ));
    }
    if let Some(bad) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "the id contains {bad:?}; only letters, digits, hyphens and underscores are allowed"
        ));
    }
    Ok(())
}

/// A node id in the shape Azure uses (`tvmps_<hex>_d`, `_d` for dedicated).
pub fn new_node_id() -> String {
    format!("tvmps_{}_d", uuid::Uuid::new_v4().simple())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_azure_ids() {
        assert!(check_id("pool-1_A").is_ok());
        assert!(check_id(&"a".repeat(64)).is_ok());
    }

    #[test]
    fn rejects_bad_ids_with_a_reason() {
        assert!(check_id("").unwrap_err().contains("empty"));
        assert!(check_id(&"a".repeat(65))
            .unwrap_err()
            .contains("65 characters"));
        assert!(check_id("a b").unwrap_err().contains("' '"));
        assert!(check_id("a/b").unwrap_err().contains("'/'"));
        assert!(check_id("é").is_err());
    }

    #[test]
    fn node_ids_are_unique_and_valid() {
        let (a, b) = (new_node_id(), new_node_id());
        assert_ne!(a, b);
        assert!(check_id(&a).is_ok());
    }
}
