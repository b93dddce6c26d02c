//! The server's own PostgreSQL, for when no DATABASE_URL is given: a cluster in the data
//! directory made with the server binaries on this machine, listening only on a unix socket in
//! that directory (no TCP port), restarted if its postmaster dies, stopped when the server stops.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use sqlx::postgres::PgConnectOptions;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

const SUPERUSER: &str = "batchpool";
const DATABASE: &str = "batchpool";
const PORT: u16 = 5432;
/// How often the supervisor looks for the postmaster.
const SUPERVISE_EVERY: Duration = Duration::from_millis(500);
/// The pauses between failed restarts: doubling from the first to the longest.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(8);

pub struct EmbeddedPostgres {
    dir: PathBuf,
    /// Whether this process started it (and so stops it), or found it running.
    started_here: bool,
    /// PostgreSQL refuses to run as root; when we are root it runs as this (uid, gid).
    run_as: Option<(u32, u32)>,
}

impl EmbeddedPostgres {
    /// Creates the cluster on first use and starts it, or uses the one still running after a
    /// crash of a previous server.
    pub async fn start(data_dir: &Path) -> anyhow::Result<Self> {
        let dir = std::path::absolute(data_dir.join("postgres"))?;
        let socket = dir.join(format!(".s.PGSQL.{PORT}"));
        if socket.as_os_str().len() > 100 {
            bail!("the data directory path is too long for a unix socket ({}); choose a shorter --data-dir", socket.display());
        }
        let mut pg = Self {
            dir,
            started_here: false,
            run_as: unprivileged_user()?,
        };
        if let Some((uid, gid)) = pg.run_as {
            check_traversable(&pg.dir, uid)?;
            // Let the unprivileged user reach its directory through ours.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(data_dir, std::fs::Permissions::from_mode(0o711))?;
            std::fs::create_dir_all(&pg.dir)?;
            std::os::unix::fs::chown(&pg.dir, Some(uid), Some(gid))?;
        }
        if !pg.dir.join("PG_VERSION").exists() {
            pg.init().await?;
        }
        if pg.pg_ctl(&["status"]).await?.success() {
            tracing::info!(dir = %pg.dir.display(), "PostgreSQL already running; using it");
        } else {
            pg.start_postmaster().await?;
            tracing::info!(dir = %pg.dir.display(), "started PostgreSQL on a unix socket");
            pg.started_here = true;
        }
        pg.create_database().await?;
        Ok(pg)
    }

    /// A server or postmaster killed with SIGKILL leaves postmaster.pid behind; pg_ctl copes
    /// with a stale one.
    async fn start_postmaster(&self) -> anyhow::Result<()> {
        let log = self.dir.join("postgres.log");
        let log = log.to_str().context("non-UTF-8 path")?;
        let status = self.pg_ctl(&["start", "-w", "-t", "60", "-l", log]).await?;
        if !status.success() {
            bail!("PostgreSQL did not start; see {log}");
        }
        Ok(())
    }

    /// Restarts PostgreSQL whenever its postmaster is gone (killed, crashed), retrying with
    /// backoff while it does not start (the old backends may still hold its shared memory for a
    /// moment); until `cancel`. Call it before `stop`, and cancel it first.
    pub async fn supervise(&self, cancel: CancellationToken) {
        let mut restarts = 0u64;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(SUPERVISE_EVERY) => {}
            }
            if self.postmaster_alive() {
                continue;
            }
            tracing::warn!(dir = %self.dir.display(), "PostgreSQL's postmaster is gone; restarting it");
            let mut backoff = FIRST_BACKOFF;
            loop {
                match self.start_postmaster().await {
                    Ok(()) => {
                        restarts += 1;
                        tracing::warn!(restarts, "restarted PostgreSQL");
                        break;
                    }
                    Err(e) => {
                        tracing::error!(error = %format!("{e:#}"), retry_in = ?backoff, "restarting PostgreSQL failed")
                    }
                }
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }

    /// Whether the pid in postmaster.pid is a live process. A zombie (under a parent that does
    /// not reap) counts as gone.
    fn postmaster_alive(&self) -> bool {
        let Some(pid) = std::fs::read_to_string(self.dir.join("postmaster.pid"))
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse::<libc::pid_t>().ok())
        else {
            return false;
        };
        // SAFETY: signal 0 sends nothing; it only asks whether the process exists.
        let exists = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        });
        exists && !zombie
    }

    pub fn connect_options(&self) -> PgConnectOptions {
        PgConnectOptions::new()
            .socket(&self.dir)
            .port(PORT)
            .username(SUPERUSER)
            .database(DATABASE)
    }

    /// Stops PostgreSQL if this process started it; one found running is left so.
    pub async fn stop_if_started_here(&self) {
        if self.started_here {
            self.stop().await;
        }
    }

    pub async fn stop(&self) {
        match self.pg_ctl(&["stop", "-m", "fast", "-w"]).await {
            Ok(s) if s.success() => tracing::info!("stopped PostgreSQL"),
            Ok(s) => tracing::warn!(%s, "pg_ctl stop failed"),
            Err(e) => tracing::warn!(error = %e, "pg_ctl stop failed"),
        }
    }

    async fn init(&self) -> anyhow::Result<()> {
        tracing::info!(dir = %self.dir.display(), "creating a PostgreSQL cluster (first run)");
        let dir = self.dir.to_str().context("non-UTF-8 path")?;
        let out = self
            .command("initdb")
            .args([
                "-D",
                dir,
                "-U",
                SUPERUSER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-instructions",
            ])
            .output()
            .await
            .context("running initdb (is PostgreSQL's server package installed?)")?;
        if !out.status.success() {
            bail!("initdb failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        // Only the socket in the cluster's own directory; durability stays on (fsync is default).
        let settings = format!(
            "\n# batchpool: no TCP port, a socket only its owner (and root) can use\n\
             listen_addresses = ''\nunix_socket_directories = '{dir}'\nunix_socket_permissions = 0700\nport = {PORT}\n\
             max_connections = 100\n"
        );
        use std::io::Write;
        std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join("postgresql.conf"))?
            .write_all(settings.as_bytes())?;
        Ok(())
    }

    async fn create_database(&self) -> anyhow::Result<()> {
        use sqlx::{ConnectOptions, Connection};
        let mut conn = self
            .connect_options()
            .database("postgres")
            .connect()
            .await
            .context("connecting to PostgreSQL")?;
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
                .bind(DATABASE)
                .fetch_one(&mut conn)
                .await?;
        if !exists {
            sqlx::query(&format!("CREATE DATABASE {DATABASE}"))
                .execute(&mut conn)
                .await?;
        }
        conn.close().await?;
        Ok(())
    }

    async fn pg_ctl(&self, args: &[&str]) -> anyhow::Result<std::process::ExitStatus> {
        let dir = self.dir.to_str().context("non-UTF-8 path")?;
        self.command("pg_ctl")
            .args(["-D", dir, "-s"])
            .args(args)
            .stdout(std::process::Stdio::null())
            .status()
            .await
            .context("running pg_ctl")
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(find_binary(program));
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        cmd.current_dir(self.dir.parent().unwrap_or(&self.dir));
        cmd
    }
}

/// PostgreSQL runs as `uid`: every directory above its own must let that user pass, or initdb
/// fails with a baffling permission error.
fn check_traversable(dir: &Path, uid: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    // The data directory itself is made traversable below; its ancestors are checked here.
    for ancestor in dir.ancestors().skip(2) {
        let Ok(meta) = std::fs::metadata(ancestor) else {
            continue;
        };
        let passable = meta.mode() & 0o001 != 0 || (meta.uid() == uid && meta.mode() & 0o100 != 0);
        if !passable {
            bail!(
                "running as root, PostgreSQL runs as uid {uid}, which cannot enter {} (mode {:o}); \
                 choose a --data-dir outside it (e.g. /var/lib/batchpool) or use DATABASE_URL",
                ancestor.display(),
                meta.mode() & 0o7777
            );
        }
    }
    Ok(())
}

/// A PostgreSQL server binary: on PATH, else in Debian's versioned directory (the newest).
fn find_binary(program: &str) -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(program))
                .any(|p| p.is_file())
        })
        .unwrap_or(false);
    if on_path {
        return PathBuf::from(program);
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin").join(program))
        .filter(|p| p.is_file())
        .collect();
    versions.sort_by_key(|p| {
        p.components()
            .nth(4)
            .and_then(|v| v.as_os_str().to_str()?.parse::<u32>().ok())
            .unwrap_or(0)
    });
    versions.pop().unwrap_or_else(|| PathBuf::from(program))
}

/// When running as root: the `postgres` user if the machine has one, else `nobody`.
fn unprivileged_user() -> anyhow::Result<Option<(u32, u32)>> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    for name in ["postgres", "nobody"] {
        let cname = std::ffi::CString::new(name)?;
        // SAFETY: getpwnam takes a valid C string; the result is read at once, before any other
        // call that could reuse its static buffer.
        let pw = unsafe { libc::getpwnam(cname.as_ptr()) };
        if !pw.is_null() {
            let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
            return Ok(Some((uid, gid)));
        }
    }
    bail!("running as root, and neither a postgres nor a nobody user exists to run PostgreSQL as")
}
