//! A PostgreSQL of a test's own, for tests that restart or kill it (the shared test server must
//! stay up for everyone else): initdb and pg_ctl in a temporary directory, listening only on a
//! unix socket there. Stopped when dropped.

use std::process::Command;

pub struct OwnPostgres {
    dir: tempfile::TempDir,
    /// PostgreSQL refuses to run as root: then it runs as the `postgres` user.
    run_as: Option<(u32, u32)>,
}

impl OwnPostgres {
    pub fn start() -> Self {
        super::require_test_env();
        let dir = tempfile::Builder::new()
            .prefix("bppg")
            .tempdir()
            .expect("tempdir");
        let pg = OwnPostgres {
            dir,
            run_as: postgres_user(),
        };
        if let Some((uid, gid)) = pg.run_as {
            std::os::unix::fs::chown(pg.dir.path(), Some(uid), Some(gid)).expect("chown");
        }
        let data = pg.data_dir();
        pg.run(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-instructions",
            ],
        );
        let conf = format!(
            "listen_addresses = ''\nunix_socket_directories = '{}'\nfsync = off\n",
            pg.dir.path().display()
        );
        use std::io::Write;
        std::fs::OpenOptions::new()
            .append(true)
            .open(format!("{data}/postgresql.conf"))
            .and_then(|mut f| f.write_all(conf.as_bytes()))
            .expect("postgresql.conf");
        pg.pg_ctl(&["start", "-w", "-t", "60"]);
        pg
    }

    fn data_dir(&self) -> String {
        format!("{}/data", self.dir.path().display())
    }

    fn log(&self) -> String {
        format!("{}/postgres.log", self.dir.path().display())
    }

    /// A new empty database; its URL.
    pub async fn fresh_database(&self) -> String {
        let name = format!("bp_{}", uuid::Uuid::new_v4().simple());
        let admin = sqlx::PgPool::connect(&self.url("postgres"))
            .await
            .expect("connecting to the test's own PostgreSQL");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .expect("create database");
        admin.close().await;
        self.url(&name)
    }

    pub fn url(&self, database: &str) -> String {
        format!(
            "postgres://postgres@localhost/{database}?host={}",
            self.dir.path().display()
        )
    }

    /// `pg_ctl restart -m fast`: every connection drops, advisory locks with them.
    pub fn restart(&self) {
        self.pg_ctl(&["restart", "-m", "fast", "-w", "-t", "60"]);
    }

    /// SIGKILL to the postmaster, then started again once its children are gone (as a
    /// supervisor would): every connection drops, and a new server takes the data directory.
    pub fn kill_postmaster(&self) {
        let pid_file = format!("{}/postmaster.pid", self.data_dir());
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.lines().next()?.trim().parse().ok())
            .expect("the postmaster's pid");
        // SAFETY: a signal to the PostgreSQL this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        // Its backends notice their postmaster is gone and end; until then a new one refuses
        // to start over their shared memory.
        for _ in 0..100 {
            let mut cmd = Command::new(binary("pg_ctl"));
            cmd.args([
                "-D",
                &self.data_dir(),
                "-l",
                &self.log(),
                "start",
                "-w",
                "-t",
                "10",
            ])
            .current_dir(self.dir.path());
            if let Some((uid, gid)) = self.run_as {
                use std::os::unix::process::CommandExt;
                cmd.uid(uid).gid(gid);
            }
            let started = cmd.output().is_ok_and(|o| o.status.success());
            if started {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        panic!("PostgreSQL did not start again after its postmaster was killed");
    }

    fn pg_ctl(&self, args: &[&str]) {
        let (data, log) = (self.data_dir(), self.log());
        let mut all = vec!["-D", &data, "-l", &log];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all);
    }

    fn run(&self, program: &str, args: &[&str]) {
        let mut cmd = Command::new(binary(program));
        cmd.args(args).current_dir(self.dir.path());
        if let Some((uid, gid)) = self.run_as {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(gid);
        }
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("running {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.log()).unwrap_or_default()
        );
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let (data, log) = (self.data_dir(), self.log());
        let mut cmd = Command::new(binary("pg_ctl"));
        cmd.args(["-D", &data, "-l", &log, "stop", "-m", "immediate"]);
        if let Some((uid, gid)) = self.run_as {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(gid);
        }
        let _ = cmd.output();
    }
}

/// On PATH, else PostgreSQL 15's directory on Debian.
fn binary(program: &str) -> String {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()));
    if on_path {
        program.to_string()
    } else {
        format!("/usr/lib/postgresql/15/bin/{program}")
    }
}

/// Root runs PostgreSQL as the `postgres` user.
fn postgres_user() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions; getpwnam takes a valid C string and its result is
    // read at once.
    unsafe {
        if libc::geteuid() != 0 {
            return None;
        }
        let pw = libc::getpwnam(c"postgres".as_ptr());
        assert!(
            !pw.is_null(),
            "running as root needs a postgres user to run PostgreSQL as"
        );
        Some(((*pw).pw_uid, (*pw).pw_gid))
    }
}
