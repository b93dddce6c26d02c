//! The table that maps an Azure vmSize to the CPU and memory limits of a node container.

use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct VmSize {
    pub vcpus: f64,
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
    /// The size's GPUs, where known (the catalog has no count for some sizes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
}

impl VmSize {
    /// Whether the size carries GPUs (or, for the N-series with no count, other accelerators),
    /// which batchpool does not give nodes.
    pub fn accelerated(&self, name: &str) -> bool {
        match self.gpus {
            Some(gpus) => gpus > 0,
            None => name.starts_with("standard_n") || name.starts_with("standard_pb"),
        }
    }
}

/// Sizes by lower-case name. Azure compares vmSize case-insensitively and reports it in lower case.
#[derive(Clone, Debug)]
pub struct VmSizeTable(BTreeMap<String, VmSize>);

/// One size of data/vm-sizes.json.
#[derive(serde::Deserialize)]
struct CatalogSize {
    name: String,
    vcpus: f64,
    #[serde(rename = "memoryMiB")]
    memory_mib: u64,
    gpus: Option<u32>,
}

impl VmSizeTable {
    /// Azure's catalog of VM sizes (data/vm-sizes.json; data/vm-sizes.md says where it is from
    /// and when it was taken).
    pub fn builtin() -> Self {
        let catalog: Vec<CatalogSize> =
            serde_json::from_str(include_str!("../../data/vm-sizes.json"))
                .expect("data/vm-sizes.json is checked by the unit tests");
        Self(
            catalog
                .into_iter()
                .map(|s| {
                    let size = VmSize {
                        vcpus: s.vcpus,
                        memory_mib: s.memory_mib,
                        gpus: s.gpus,
                    };
                    (s.name, size)
                })
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
            // The operator's size has the GPUs it says, none unless it says so.
            let gpus = Some(size.gpus.unwrap_or(0));
            self.0
                .insert(name.to_ascii_lowercase(), VmSize { gpus, ..size });
        }
        Ok(self)
    }

    /// The size a pool may have, by any case of its name; why not, for one it may not: one
    /// that is not in the table, or one with GPUs, which nodes are not given.
    pub fn usable(&self, name: &str) -> Result<(String, VmSize), String> {
        let Some((key, size)) = self.get(name) else {
            return Err(format!(
                "unknown vmSize: it is not among the {} Azure sizes batchpool knows (data/vm-sizes.json); add it with `batchpool serve --vm-sizes FILE`, a JSON object such as {{\"{}\": {{\"vcpus\": 2, \"memoryMiB\": 8192}}}}",
                self.len(),
                name.to_ascii_lowercase()
            ));
        };
        if size.accelerated(&key) {
            let gpus = size
                .gpus
                .map_or("accelerators".to_string(), |n| format!("{n} GPU(s)"));
            return Err(format!(
                "the size {key} has {gpus}: batchpool does not give nodes GPUs or other accelerators, so such sizes are refused; choose a size without them, or give one with `--vm-sizes` to run GPU-less nodes of that shape"
            ));
        }
        Ok((key, size))
    }

    pub fn get(&self, name: &str) -> Option<(String, VmSize)> {
        let key = name.to_ascii_lowercase();
        self.0.get(&key).map(|s| (key, *s))
    }

    /// How many sizes it knows.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
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
                memory_mib: 8192,
                gpus: Some(0),
            }
        );
        assert_eq!(t.get("standard_a1").unwrap().1.memory_mib, 1792);
        assert!(t.get("huge").is_none());
    }

    #[test]
    fn the_catalog_holds_azure_s_sizes_and_knows_which_carry_gpus() {
        let t = VmSizeTable::builtin();
        assert_eq!(t.len(), 804);
        // Microsoft's Python quickstart's size, as it writes it.
        let (name, ds1) = t.get("STANDARD_DS1_V2").unwrap();
        assert_eq!((ds1.vcpus, ds1.memory_mib), (1.0, 3584));
        assert!(!ds1.accelerated(&name));
        let (name, nc) = t.get("Standard_NC6s_v3").unwrap();
        assert_eq!((nc.vcpus, nc.gpus), (6.0, Some(1)));
        assert!(nc.accelerated(&name));
        let (name, old_nc) = t.get("standard_nc6").unwrap();
        assert!(old_nc.gpus.is_none() && old_nc.accelerated(&name));
        for (name, size) in &t.0 {
            assert!(
                size.vcpus >= 1.0 && size.memory_mib >= 512,
                "{name}: {size:?}"
            );
            assert_eq!(*name, name.to_ascii_lowercase());
        }
    }

    #[test]
    fn overrides_add_sizes() {
        let t = VmSizeTable::builtin()
            .with_overrides(r#"{"Tiny": {"vcpus": 0.5, "memoryMiB": 128}}"#)
            .unwrap();
        assert_eq!(t.get("tiny").unwrap().1.vcpus, 0.5);
        // A GPU size given again is a GPU-less node of that shape.
        let t = VmSizeTable::builtin()
            .with_overrides(r#"{"standard_nc6": {"vcpus": 6, "memoryMiB": 57344}}"#)
            .unwrap();
        assert!(t.usable("Standard_NC6").is_ok());
        assert!(VmSizeTable::builtin().usable("Standard_NC6").is_err());
        assert!(VmSizeTable::builtin()
            .with_overrides(r#"{"bad": {"vcpus": 0, "memoryMiB": 128}}"#)
            .is_err());
    }
}
