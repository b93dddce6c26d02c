//! A Docker host as `serve --docker-host` names it: its address and the caps on what its nodes
//! may take together.

/// A host as `--docker-host` gives it: `URL[,cpus=N][,memory=MiB][,tls=DIR]`.
#[derive(Clone, Debug, PartialEq)]
pub struct HostSpec {
    pub url: String,
    /// For `tcp://` with TLS: a directory with the client's `cert.pem` and `key.pem` and the
    /// engine's `ca.pem`, as Docker's own DOCKER_CERT_PATH holds them.
    pub tls: Option<std::path::PathBuf>,
    /// The most CPUs (by their vmSizes) the host's nodes may have together; None: no cap.
    pub cpus: Option<f64>,
    /// The most memory (MiB) its nodes may have together; None: no cap.
    pub memory_mib: Option<i64>,
}

impl std::str::FromStr for HostSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let mut parts = text.split(',');
        let url = parts.next().unwrap_or_default().trim().to_string();
        let (mut tls, mut cpus, mut memory_mib) = (None, None, None);
        for part in parts {
            match part.trim().split_once('=') {
                Some(("cpus", n)) => {
                    cpus = Some(n.parse().map_err(|_| format!("cpus={n}: {CPUS}"))?)
                }
                Some(("memory", n)) => {
                    memory_mib = Some(n.parse().map_err(|_| format!("memory={n}: {MEMORY}"))?)
                }
                Some(("tls", dir)) if !dir.is_empty() => tls = Some(dir.into()),
                _ => {
                    return Err(format!(
                        "{part:?}: after the URL, give cpus=N, memory=MiB or tls=DIR"
                    ))
                }
            }
        }
        HostSpec::new(url, tls, cpus, memory_mib).map_err(|(field, e)| match field {
            HostField::Url | HostField::Tls => e,
            HostField::Cpus => format!("cpus={}: {e}", cpus.unwrap_or_default()),
            HostField::Memory => format!("memory={}: {e}", memory_mib.unwrap_or_default()),
        })
    }
}

/// The longest host URL taken: an address, not a document.
const MAX_URL: usize = 1024;
const CPUS: &str = "give a number above 0";
const MEMORY: &str = "give MiB above 0";

/// The part of a host's description that was wrong.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum HostField {
    Url,
    Tls,
    Cpus,
    Memory,
}

impl HostSpec {
    /// A host, checked: the same rules for `--docker-host`, `batchpool host add` and the
    /// operator's hosts route. An error names the part that was wrong.
    pub fn new(
        url: String,
        tls: Option<std::path::PathBuf>,
        cpus: Option<f64>,
        memory_mib: Option<i64>,
    ) -> Result<Self, (HostField, String)> {
        let schemes = ["unix://", "tcp://", "http://"];
        if url.len() > MAX_URL
            || !schemes
                .iter()
                .any(|s| url.len() > s.len() && url.starts_with(s))
        {
            let e = format!("{url:?}: a Docker host is unix://PATH or tcp://HOST:PORT");
            return Err((HostField::Url, e));
        }
        if cpus.is_some_and(|c| !(c > 0.0 && c.is_finite())) {
            return Err((HostField::Cpus, CPUS.into()));
        }
        if memory_mib.is_some_and(|m| m <= 0) {
            return Err((HostField::Memory, MEMORY.into()));
        }
        if tls.is_some() && !url.starts_with("tcp://") {
            return Err((HostField::Tls, format!("{url}: tls= is for tcp:// hosts")));
        }
        Ok(HostSpec {
            url,
            tls,
            cpus,
            memory_mib,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::HostSpec;

    #[test]
    fn a_host_is_a_url_with_optional_caps() {
        let h: HostSpec = "unix:///run/d.sock,cpus=2.5,memory=4096".parse().unwrap();
        assert_eq!(
            h,
            HostSpec {
                url: "unix:///run/d.sock".into(),
                tls: None,
                cpus: Some(2.5),
                memory_mib: Some(4096)
            }
        );
        let h: HostSpec = "tcp://10.0.0.2:2376".parse().unwrap();
        assert_eq!((h.cpus, h.memory_mib, h.tls), (None, None, None));
        let h: HostSpec = "tcp://10.0.0.2:2376,tls=/etc/certs/h2".parse().unwrap();
        assert_eq!(
            h.tls.as_deref(),
            Some(std::path::Path::new("/etc/certs/h2"))
        );
        assert!("unix:///d.sock,tls=/etc/certs".parse::<HostSpec>().is_err());
        assert!("docker.sock".parse::<HostSpec>().is_err());
        assert!("unix:///d.sock,cpus=0".parse::<HostSpec>().is_err());
        assert!("unix:///d.sock,gpus=1".parse::<HostSpec>().is_err());
    }
}
