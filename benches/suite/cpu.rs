//! Where a run's CPU went, read from Linux's /proc before and after: the server's own, its
//! PostgreSQL's (the postmaster, its processes, and those that ended), its local nodes' agents'
//! own, and the tasks the agents started and reaped; next to the whole machine's busy and idle
//! time. Elsewhere than Linux every figure is zero.

use std::path::Path;

#[derive(Clone, Copy, Default)]
pub struct Split {
    server: u64,
    postgres: u64,
    agents: u64,
    tasks: u64,
    busy: u64,
    idle: u64,
}

/// utime + stime, and cutime + cstime (children reaped), in clock ticks.
struct Times {
    ppid: i32,
    own: u64,
    reaped: u64,
}

fn times(pid: i32) -> Option<Times> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command's name may hold spaces and parentheses: the fields start after the last ')'.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
    let n = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    Some(Times {
        ppid: fields.get(1)?.parse().ok()?,
        own: n(11)? + n(12)?,
        reaped: n(13)? + n(14)?,
    })
}

fn is_agent(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|b| *b == 0).nth(1) == Some(b"agent".as_slice()))
}

/// The machine's busy and idle ticks, from /proc/stat's first line.
fn machine() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    (at(0) + at(1) + at(2) + at(5) + at(6) + at(7), at(3) + at(4))
}

/// Now, for the server `server` whose data directory (and so PostgreSQL's) is `data_dir`.
pub fn sample(server: u32, data_dir: &Path) -> Split {
    let server = server as i32;
    let postmaster: i32 = std::fs::read_to_string(data_dir.join("postgres/postmaster.pid"))
        .ok()
        .and_then(|p| p.lines().next().and_then(|l| l.trim().parse().ok()))
        .unwrap_or(-1);
    let (busy, idle) = machine();
    let mut split = Split {
        busy,
        idle,
        ..Split::default()
    };
    let pids = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok());
    for pid in pids {
        let Some(t) = times(pid) else { continue };
        if pid == server {
            split.server += t.own;
        } else if pid == postmaster {
            split.postgres += t.own + t.reaped;
        } else if t.ppid == postmaster {
            split.postgres += t.own;
        } else if t.ppid == server && is_agent(pid) {
            split.agents += t.own;
            split.tasks += t.reaped;
        }
    }
    split
}

fn hz() -> f64 {
    // SAFETY: sysconf has no memory preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

impl Split {
    /// CPU seconds of the server and its PostgreSQL.
    pub fn server_and_postgres(&self) -> f64 {
        (self.server + self.postgres) as f64 / hz()
    }

    /// One line: the CPU time of each part for each of `tasks`, between `before` and now.
    pub fn since(&self, before: &Split, tasks: usize) -> String {
        let hz = hz();
        let per = |now: u64, then: u64| now.saturating_sub(then) as f64 / hz * 1e3 / tasks as f64;
        let (busy, idle) = (
            self.busy.saturating_sub(before.busy),
            self.idle.saturating_sub(before.idle),
        );
        format!(
            "tasks {:.2}, PostgreSQL {:.2}, agents {:.2}, server {:.2}; the machine busy {:.2} ({:.0}% idle)",
            per(self.tasks, before.tasks),
            per(self.postgres, before.postgres),
            per(self.agents, before.agents),
            per(self.server, before.server),
            per(self.busy, before.busy),
            100.0 * idle as f64 / (busy + idle).max(1) as f64
        )
    }
}

/// The CPU time (ms) this process's children that ended during `f` used, with what `f` returns.
pub fn children_ms<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let used = || {
        // SAFETY: an all-zero rusage is a valid value of the plain C struct, and getrusage
        // writes only into it.
        let mut r: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut r) };
        let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
        ms(r.ru_utime) + ms(r.ru_stime)
    };
    let before = used();
    let out = f();
    (out, used() - before)
}
