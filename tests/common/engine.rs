//! A Docker engine of a test's own, started and stopped by the test: a host it can lose on
//! purpose without touching any other test's engine.

#![allow(dead_code)]

use super::common::{self, run_ok};

/// A Docker engine of the test's own, to lose and bring back: stopped gracefully (it stops its
/// containers, as a host going down does) and started again with the same state. On a unix
/// socket, or on a TCP port that requires TLS client certificates.
pub struct OwnEngine {
    dir: std::path::PathBuf,
    url: String,
    /// How dockerd listens, and what the docker CLI needs to reach it.
    listen: Vec<String>,
    cli_env: Vec<(String, String)>,
    /// Its own, apart from every other engine's.
    address_pool: String,
    child: Option<std::process::Child>,
    /// Its data (images, containers, volumes) on a tmpfs of its own, of a fixed size: a host's
    /// disk that can be filled without filling this machine's.
    disk: bool,
}

impl OwnEngine {
    pub fn start(dir: &str) -> Self {
        Self::start_in(dir, 209)
    }

    /// On a unix socket, its networks in 10.`octet`.0.0/16 (apart from other tests' engines).
    pub fn start_in(dir: &str, octet: u8) -> Self {
        let url = format!("unix://{dir}/docker.sock");
        let listen = vec!["-H".to_string(), url.clone()];
        let env = vec![("DOCKER_HOST".to_string(), url.clone())];
        Self::start_with(dir, url, listen, env, octet)
    }

    /// As [`OwnEngine::start_in`], its data on a disk of `mib` MiB (a tmpfs mounted at
    /// `<dir>/data`, kept while the engine stops and starts, as a host's disk is).
    pub fn start_on_disk(dir: &str, octet: u8, mib: u64) -> Self {
        let data = std::path::Path::new(dir).join("data");
        std::fs::create_dir_all(&data).unwrap();
        run_ok(
            std::process::Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
                .arg(&data),
        );
        let mut engine = Self::start_in(dir, octet);
        engine.disk = true;
        engine
    }

    /// Where its data is, as this machine sees it.
    pub fn data(&self) -> std::path::PathBuf {
        self.dir.join("data")
    }

    /// On 127.0.0.1:`port` with TLS: a CA, the engine's certificate and a client certificate
    /// made here; the client's are in `<dir>/client` as Docker's DOCKER_CERT_PATH holds them.
    pub fn start_tls(dir: &str, port: u16) -> Self {
        let certs = make_certificates(std::path::Path::new(dir));
        let url = format!("tcp://127.0.0.1:{port}");
        let listen = vec![
            "-H".to_string(),
            url.clone(),
            "--tlsverify".into(),
            format!("--tlscacert={}/ca.pem", certs.display()),
            format!("--tlscert={}/server-cert.pem", certs.display()),
            format!("--tlskey={}/server-key.pem", certs.display()),
        ];
        let env = vec![
            ("DOCKER_HOST".to_string(), url.clone()),
            ("DOCKER_TLS_VERIFY".into(), "1".into()),
            ("DOCKER_CERT_PATH".into(), format!("{dir}/client")),
        ];
        Self::start_with(dir, url, listen, env, 208)
    }

    fn start_with(
        dir: &str,
        url: String,
        listen: Vec<String>,
        cli_env: Vec<(String, String)>,
        pool: u8,
    ) -> Self {
        let mut engine = OwnEngine {
            dir: dir.into(),
            url,
            listen,
            cli_env,
            address_pool: format!("base=10.{pool}.0.0/16,size=24"),
            child: None,
            disk: false,
        };
        std::fs::create_dir_all(&engine.dir).unwrap();
        engine.launch();
        engine
    }

    pub fn url(&self) -> String {
        self.url.clone()
    }

    pub fn cli(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new("docker");
        cmd.envs(self.cli_env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    pub fn launch(&mut self) {
        use std::os::unix::process::CommandExt;
        let log = std::fs::File::create(self.dir.join("dockerd.log")).unwrap();
        let d = |name: &str| self.dir.join(name);
        let child = std::process::Command::new("dockerd")
            .args(&self.listen)
            .arg("--data-root")
            .arg(d("data"))
            .arg("--exec-root")
            .arg(d("exec"))
            .arg("--pidfile")
            .arg(d("docker.pid"))
            .args(["--bridge", "none", "--iptables=false", "--ip-masq=false"])
            .args(["--default-address-pool", &self.address_pool])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !self.cli().arg("info").output().unwrap().status.success() {
            assert!(
                std::time::Instant::now() < deadline,
                "the test's engine did not answer"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            child.wait().unwrap();
        }
    }

    /// This server's containers on the engine.
    pub fn containers(&self, server_id: &str) -> usize {
        let listed = run_ok(
            self.cli()
                .args(["ps", "-aq", "--filter"])
                .arg(format!("label=batchpool.server={server_id}")),
        );
        listed.split_whitespace().count()
    }

    /// The test node image, built on this engine (`host` as `--docker-host` names it).
    pub fn build_test_image(&self, host: &str) {
        run_ok(
            std::process::Command::new(env!("CARGO_BIN_EXE_batchpool")).args([
                "build-node-image",
                "--tag",
                common::TEST_IMAGE,
                "--docker-host",
                host,
            ]),
        );
    }
}

impl Drop for OwnEngine {
    fn drop(&mut self) {
        self.stop();
        if self.disk {
            let _ = std::process::Command::new("umount")
                .arg("--lazy")
                .arg(self.data())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Fills the disk `dir` is on with a file of zeros, as far as it takes, in 1 MiB writes: its
/// path, to remove to give the room back.
pub fn fill(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    use std::io::Write;
    let path = dir.join("filled-by-a-test");
    let mut file = std::fs::File::create(&path).ok()?;
    let zeros = vec![0u8; 1 << 20];
    while file.write_all(&zeros).is_ok() {}
    Some(path)
}

/// A CA, a certificate for an engine on 127.0.0.1 and a client certificate, made with openssl
/// in `<dir>/certs` and `<dir>/client`; returns the former.
fn make_certificates(dir: &std::path::Path) -> std::path::PathBuf {
    let (certs, client) = (dir.join("certs"), dir.join("client"));
    std::fs::create_dir_all(&certs).unwrap();
    std::fs::create_dir_all(&client).unwrap();
    let script = r#"set -e
cd "$1"
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca.pem -days 2 -subj /CN=batchpool-test-ca 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout server-key.pem -out server.csr -subj /CN=127.0.0.1 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out server-cert.pem -days 2 -extfile server.ext 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$2/key.pem" -out client.csr -subj /CN=batchpool 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' > client.ext
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out "$2/cert.pem" -days 2 -extfile client.ext 2>/dev/null
cp ca.pem "$2/ca.pem"
"#;
    run_ok(
        std::process::Command::new("sh")
            .args(["-c", script, "sh"])
            .arg(&certs)
            .arg(&client),
    );
    certs
}
