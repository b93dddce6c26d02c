//! This process's own limits and use: the open files it may hold, and the CPU time and memory
//! it has used (for the figures of `fleet-sim`, which leave it out of the server's).

/// Raises the soft limit of open files to the hard one: a server with thousands of agents
/// connected, or a simulator of as many nodes, holds a socket for each. Returns the limit now.
pub fn raise_fd_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit with a valid pointer to an rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
    }
    limit.rlim_cur
}

/// The CPU time (user and kernel, ms) this process has used, and its resident memory (bytes).
pub fn own_usage() -> (u64, u64) {
    // SAFETY: sysconf with constant names.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK).max(1) as u64,
            libc::sysconf(libc::_SC_PAGESIZE).max(1) as u64,
        )
    };
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's name, which is in parentheses and may hold spaces.
    let fields: Vec<u64> = stat
        .rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .map(|f| f.parse().unwrap_or(0))
                .collect()
        })
        .unwrap_or_default();
    // utime and stime are the 14th and 15th fields; the rest starts at the 3rd.
    let cpu_ticks = fields.get(11).unwrap_or(&0) + fields.get(12).unwrap_or(&0);
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let resident: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    (cpu_ticks * 1000 / ticks, resident * page)
}
