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
        if !(url.starts_with("unix://") || url.starts_with("tcp://") || url.starts_with("http://"))
        {
            return Err(format!(
                "{url:?}: a Docker host is unix://PATH or tcp://HOST:PORT"
            ));
        }
        let mut host = HostSpec {
            url,
            tls: None,
            cpus: None,
            memory_mib: None,
        };
        for part in parts {
            match part.trim().split_once('=') {
                Some(("cpus", n)) => {
                    host.cpus = Some(
                        n.parse()
                            .ok()
                            .filter(|c: &f64| *c > 0.0)
                            .ok_or_else(|| format!("cpus={n}: give a number above 0"))?,
                    )
                }
                Some(("memory", n)) => {
                    host.memory_mib = Some(
                        n.parse()
                            .ok()
                            .filter(|m: &i64| *m > 0)
                            .ok_or_else(|| format!("memory={n}: give MiB above 0"))?,
                    )
                }
                Some(("tls", dir)) if !dir.is_empty() => host.tls = Some(dir.into()),
                _ => {
                    return Err(format!(
                        "{part:?}: after the URL, give cpus=N, memory=MiB or tls=DIR"
                    ))
                }
            }
        }
        if host.tls.is_some() && !host.url.starts_with("tcp://") {
            return Err(format!("{}: tls= is for tcp:// hosts", host.url));
        }
        Ok(host)
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
