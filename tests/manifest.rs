//! Cargo.toml tells the truth: its `rust-version` is at least what every locked dependency
//! declares it needs, and the license it names is in the repository.

use std::path::Path;

/// `1.89` and `1.89.0` alike: major, minor, patch.
fn version(text: &str) -> [u32; 3] {
    let mut parts = text.split('.').map(|n| n.parse().unwrap_or(0));
    [0; 3].map(|_| parts.next().unwrap_or(0))
}

#[test]
fn rust_version_covers_every_locked_dependency() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Not --offline: cargo metadata reads every locked package's manifest, also those of optional
    // dependencies no build here downloads (valuable, under tracing's cfg(tracing_unstable)).
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(root)
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = metadata["packages"].as_array().unwrap();
    let ours = packages
        .iter()
        .find(|p| p["name"] == "batchpool")
        .and_then(|p| p["rust_version"].as_str())
        .expect("Cargo.toml names a rust-version");
    let (needed, by) = packages
        .iter()
        .filter(|p| p["name"] != "batchpool")
        .filter_map(|p| Some((p["rust_version"].as_str()?, p["name"].as_str()?)))
        .max_by_key(|(v, _)| version(v))
        .unwrap();
    assert!(
        version(ours) >= version(needed),
        "rust-version {ours} is older than the {needed} that {by} needs"
    );
}

#[test]
fn the_license_cargo_toml_names_is_in_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains("license = \"MIT\""),
        "Cargo.toml names MIT"
    );
    let license = std::fs::read_to_string(root.join("LICENSE")).expect("a LICENSE file");
    assert!(license.starts_with("MIT License"), "{license}");
}
