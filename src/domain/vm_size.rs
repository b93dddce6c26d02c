//! The table that maps an Azure vmSize to the CPU and memory limits of a node container.

use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct VmSize {
    pub vcpus: f64,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
}

/// Sizes by lower-case name. Azure compares vmSize case-insensitively and reports it in lower case.
#[derive(Clone, Debug)]
pub struct VmSizeTable(BTreeMap<String, VmSize>);

impl VmSizeTable {
    /// A few common Azure sizes with their real vCPU and memory figures.
    pub fn builtin() -> Self {
        let sizes: &[(&str, f64, u64)] = &[
            ("standard_a1", 1.0, 1792),
            ("standard_a1_v2", 1.0, 2048),
            ("standard_a2_v2", 2.0, 4096),
            ("standard_a4_v2", 4.0, 8192),
            ("standard_d1_v2", 1.0, 3584),
            ("standard_d2_v2", 2.0, 7168),
            ("standard_d2s_v3", 2.0, 8192),
            ("standard_d4s_v3", 4.0, 16384),
            ("standard_d2_v3", 2.0, 8192),
            ("standard_d4_v3", 4.0, 16384),
            ("standard_f2s_v2", 2.0, 4096),
            ("standard_b1s", 1.0, 1024),
            ("standard_b1ms", 1.0, 2048),
            ("standard_b2s", 2.0, 4096),
        ];
        Self(
            sizes
                .iter()
                .map(|&(n, vcpus, memory_mib)| (n.to_string(), VmSize { vcpus, memory_mib }))
                .collect(),
        )
    }

    /// The built-in table with the sizes of a JSON file (`{"name": {"vcpus": 1, "memoryMiB": 512}}`)
    /// added or overriding.
    pub fn with_overrides(mut self, json: &str) -> anyhow::Result<Self> {
        let extra: BTreeMap<String, VmSize> = serde_json::from_str(json)?;
        for (name, size) in extra {
            anyhow::ensure!(
                size.vcpus > 0.0 && size.memory_mib >= 6,
                "vm size {name}: vcpus and memoryMiB must be positive (memory at least 6 MiB)"
            );
            self.0.insert(name.to_ascii_lowercase(), size);
        }
        Ok(self)
    }

    pub fn get(&self, name: &str) -> Option<(String, VmSize)> {
        let key = name.to_ascii_lowercase();
        self.0.get(&key).map(|s| (key, *s))
    }

    pub fn names(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_is_case_insensitive_and_reports_lower_case() {
        let t = VmSizeTable::builtin();
        let (name, size) = t.get("STANDARD_D2s_V3").unwrap();
        assert_eq!(name, "standard_d2s_v3");
        assert_eq!(
            size,
            VmSize {
                vcpus: 2.0,
                memory_mib: 8192
            }
        );
        assert_eq!(t.get("standard_a1").unwrap().1.memory_mib, 1792);
        assert!(t.get("huge").is_none());
    }

    #[test]
    fn overrides_add_sizes() {
        let t = VmSizeTable::builtin()
            .with_overrides(r#"{"Tiny": {"vcpus": 0.5, "memoryMiB": 128}}"#)
            .unwrap();
        assert_eq!(t.get("tiny").unwrap().1.vcpus, 0.5);
        assert!(VmSizeTable::builtin()
            .with_overrides(r#"{"bad": {"vcpus": 0, "memoryMiB": 128}}"#)
            .is_err());
    }
}
