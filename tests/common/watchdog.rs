//! A bound on a test server's life. A test that hangs (a request never answered, an engine
//! that no longer answers the docker CLI, a removal that never returns) fails with what was
//! running and what its server last logged, instead of holding CI to its limit and showing
//! nothing.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

/// Dropped with its test server; until then a thread waits for it, up to the bound.
pub struct Watchdog(#[allow(dead_code)] mpsc::Sender<()>);

/// How long a test server may live: `BATCHPOOL_TEST_HANG_SECONDS` (20 minutes unless set; the
/// longest test takes 4 on this machine), plus a soak's own length where one is asked for.
fn bound() -> Duration {
    let seconds = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let own = seconds("BATCHPOOL_TEST_HANG_SECONDS").unwrap_or(1200);
    Duration::from_secs(own + seconds("BATCHPOOL_SOAK_SECONDS").unwrap_or(0))
}

impl Watchdog {
    /// Arms the watchdog of the server logging to `log`. Past the bound it prints the log's
    /// tail and the processes still running, and ends the test binary as a failure.
    pub fn arm(log: PathBuf) -> Self {
        let (tx, rx) = mpsc::channel::<()>();
        let bound = bound();
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(bound) {
                report_hang(&log, bound);
                // Its servers (and any docker CLI) end with it, not to run on beside the next
                // test binary.
                let me = std::process::id().to_string();
                let _ = std::process::Command::new("pkill")
                    .args(["-KILL", "-P", &me])
                    .status();
                std::process::exit(101);
            }
        });
        Watchdog(tx)
    }
}

fn report_hang(log: &std::path::Path, bound: Duration) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(80)..].join("\n");
    let processes = std::process::Command::new("ps")
        .args(["-eo", "pid,ppid,etimes,args"])
        .output()
        .map(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.contains("docker") || l.contains("batchpool") || l.contains("PID"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    // What this machine's engine said last (scripts/test-env.sh starts it logging there).
    let engine_log = std::env::var("BATCHPOOL_DOCKERD_LOG")
        .unwrap_or_else(|_| "/tmp/batchpool-dockerd.log".into());
    let engine_said = std::fs::read_to_string(&engine_log).unwrap_or_default();
    // Its errors and warnings, but for the shim clean-up each container's end writes.
    let engine_lines: Vec<&str> = engine_said
        .lines()
        .filter(|l| l.contains("level=error") || l.contains("level=warning"))
        .filter(|l| !l.contains("shim") && !l.contains("cleanup warnings"))
        .collect();
    let engine_tail = engine_lines[engine_lines.len().saturating_sub(30)..].join("\n");
    // Straight to the standard error: the test harness captures `eprintln!`, even from this
    // thread, and would show nothing of a binary that exits.
    let report = format!(
        "---- a test server lived past {} s: the test hangs ----\n\
         ---- server log ({}) ----\n{tail}\n---- processes ----\n{processes}\n\
         ---- engine log ({engine_log}) ----\n{engine_tail}\n",
        bound.as_secs(),
        log.display()
    );
    use std::io::Write;
    let _ = std::io::stderr().write_all(report.as_bytes());
}
