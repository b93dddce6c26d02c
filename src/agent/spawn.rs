//! Starting a command as `posix_spawn` does (a child that shares this process's memory until
//! it runs the program), without what glibc's costs on every start: its child asks for the
//! handler of each of the 64 signals before it lets them go, and `std::process::Command`
//! copies this process's whole environment each time. On this project's benchmark machine that
//! was a tenth of what starting `sh -c true` cost, child included (BENCHMARKS.md).

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;

/// What the child needs, all made before it starts: it makes system calls only.
pub struct Launch<'a> {
    pub program: CString,
    pub argv: Vec<CString>,
    /// `key=value` each.
    pub env: Vec<&'a CStr>,
    /// Where the program starts; this process's own directory if None.
    pub dir: Option<CString>,
    /// Its standard input, output and error.
    pub stdio: [BorrowedFd<'a>; 3],
    /// The uid it runs as, with that gid and no other group; this process's own if None.
    pub user: Option<u32>,
}

/// Why a command did not start.
#[derive(Debug)]
pub enum NotStarted {
    /// Its directory could not be entered (gone, or not a directory).
    Dir(std::io::Error),
    /// Anything else: the program, its process group, its files.
    Other(std::io::Error),
}

/// A `key=value` entry of an environment.
pub fn env_entry(key: &OsStr, value: &OsStr) -> std::io::Result<CString> {
    let mut bytes = Vec::with_capacity(key.len() + value.len() + 1);
    bytes.extend_from_slice(key.as_bytes());
    bytes.push(b'=');
    bytes.extend_from_slice(value.as_bytes());
    CString::new(bytes).map_err(|_| std::io::Error::other("a NUL in the environment"))
}

/// The signals this process catches (the tokio runtime's SIGTERM and SIGINT), and SIGPIPE,
/// which Rust's runtime ignores: the child sets them back to their defaults before it lifts its
/// signal mask, so no handler of this process runs in it, and the program starts with SIGPIPE
/// as `std::process::Command` leaves it. A handler added to the agent must be added here.
const RESET: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGPIPE];

/// The child's stack until its program runs: a handful of system calls use it.
pub const STACK: usize = 64 * 1024;

/// What the child reads, and where it says why it failed.
struct Child {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    dir: *const libc::c_char,
    stdio: [libc::c_int; 3],
    mask: libc::sigset_t,
    /// The uid (and gid) to take, if not this process's.
    user: Option<libc::uid_t>,
    /// The errno of the step that failed, if one did.
    err: libc::c_int,
    /// Whether that step was entering the directory.
    in_dir: bool,
}

extern "C" fn child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `Child`, alive until this child runs its program or exits:
    // the parent waits for either (CLONE_VFORK). Only system calls from here on: no allocation,
    // no lock, nothing that returns into the parent's frames.
    unsafe {
        let c = &mut *arg.cast::<Child>();
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        for sig in RESET {
            libc::sigaction(sig, &default, std::ptr::null_mut());
        }
        if !c.user.is_none_or(|uid| become_user(uid)) {
            // Its error is read below.
        } else if !c.dir.is_null() && libc::chdir(c.dir) != 0 {
            c.in_dir = true;
        } else if libc::setpgid(0, 0) == 0
            && (0..3).all(|to| take_fd(c.stdio[to as usize], to))
            && libc::pthread_sigmask(libc::SIG_SETMASK, &c.mask, std::ptr::null_mut()) == 0
        {
            libc::execve(c.program, c.argv, c.envp);
        }
        c.err = *libc::__errno_location();
        libc::_exit(127)
    }
}

/// Makes the child `uid`, with the gid `uid` and no other group; whether it could. Raw
/// system calls: the C library's wrappers make every thread of the process take the new ids,
/// and this child shares the parent's memory, where its threads are listed.
///
/// # Safety
/// For the child between `clone` and `execve`: it makes system calls only.
unsafe fn become_user(uid: libc::uid_t) -> bool {
    let none: *const libc::gid_t = std::ptr::null();
    libc::syscall(libc::SYS_setgroups, 0, none) == 0
        && libc::syscall(libc::SYS_setresgid, uid, uid, uid) == 0
        && libc::syscall(libc::SYS_setresuid, uid, uid, uid) == 0
}

/// The NULL-terminated array of pointers to `strings` that `execve` takes.
fn pointers<S: AsRef<CStr>>(strings: &[S]) -> Vec<*const libc::c_char> {
    let mut p: Vec<_> = strings.iter().map(|s| s.as_ref().as_ptr()).collect();
    p.push(std::ptr::null());
    p
}

/// Makes `from` the child's `to`, open across its `execve`; whether it could. `dup2` onto
/// itself would leave the descriptor's close-on-exec flag as it is.
///
/// # Safety
/// For the child between `clone` and `execve`: it makes system calls only.
unsafe fn take_fd(from: libc::c_int, to: libc::c_int) -> bool {
    if from == to {
        libc::fcntl(to, libc::F_SETFD, 0) == 0
    } else {
        libc::dup2(from, to) == to
    }
}

/// Starts `launch` in a process group of its own, on `stack` (at least [`STACK`] bytes, unused
/// by anything else meanwhile); returns its pid once it runs the program. A child that failed
/// has exited with 127, for whoever reaps this process's children.
pub fn spawn(launch: &Launch, stack: &mut [u8]) -> Result<i32, NotStarted> {
    assert!(
        stack.len() >= STACK,
        "a child's stack of {} bytes",
        stack.len()
    );
    let (argv, envp) = (pointers(&launch.argv), pointers(&launch.env));
    let mut c = Child {
        program: launch.program.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        dir: launch.dir.as_ref().map_or(std::ptr::null(), |d| d.as_ptr()),
        stdio: launch.stdio.map(|fd| fd.as_raw_fd()),
        // SAFETY: a plain C struct, filled in below.
        mask: unsafe { std::mem::zeroed() },
        user: launch.user,
        err: 0,
        in_dir: false,
    };
    // SAFETY: a plain C struct, and the calls that fill it. Every signal stays blocked in this
    // thread (and so in the child) until the child has let go of this process's handlers.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut c.mask);
    }
    // The stack grows down from its end, which must be 16-byte aligned.
    let top = (stack.as_mut_ptr() as usize + stack.len()) & !15;
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
    // SAFETY: `child` runs on `stack`, which nothing else uses until it returns, and reads `c`,
    // which outlives it: with CLONE_VFORK this thread resumes only once the child has run its
    // program (its memory is its own from then on) or exited.
    let pid = unsafe {
        let arg = std::ptr::addr_of_mut!(c).cast::<libc::c_void>();
        libc::clone(child, top as *mut libc::c_void, flags, arg)
    };
    let cloned = std::io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &c.mask, std::ptr::null_mut()) };
    if pid < 0 {
        return Err(NotStarted::Other(cloned));
    }
    // Written by the child, in this memory, before this thread resumed.
    // SAFETY: reads of plain fields of a live local.
    let (err, in_dir) = unsafe {
        (
            std::ptr::read_volatile(&c.err),
            std::ptr::read_volatile(&c.in_dir),
        )
    };
    match (err, in_dir) {
        (0, false) => Ok(pid),
        (err, true) => Err(NotStarted::Dir(std::io::Error::from_raw_os_error(err))),
        (err, false) => Err(NotStarted::Other(std::io::Error::from_raw_os_error(err))),
    }
}

#[cfg(test)]
mod tests {
    use super::{spawn, Launch, NotStarted, STACK};
    use std::ffi::CString;
    use std::os::fd::AsFd;

    /// Runs `sh -c script` in `dir` with `env`, output to a file; its exit code and output.
    fn run(script: &str, dir: Option<&str>, env: &[&str]) -> Result<(i32, String), NotStarted> {
        run_as(script, dir, env, None)
    }

    /// As [`run`], as `user`.
    fn run_as(
        script: &str,
        dir: Option<&str>,
        env: &[&str],
        user: Option<u32>,
    ) -> Result<(i32, String), NotStarted> {
        let out = tempfile::NamedTempFile::new().unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        let c = |s: &str| CString::new(s).unwrap();
        let env: Vec<CString> = env.iter().map(|e| c(e)).collect();
        let launch = Launch {
            program: c("/bin/sh"),
            argv: vec![c("sh"), c("-c"), c(script)],
            env: env.iter().map(CString::as_c_str).collect(),
            dir: dir.map(c),
            stdio: [null.as_fd(), out.as_file().as_fd(), out.as_file().as_fd()],
            user,
        };
        let pid = spawn(&launch, &mut vec![0; STACK])?;
        let mut status = 0;
        // SAFETY: waits for our own child, with a valid pointer.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        let text = std::fs::read_to_string(out.path()).unwrap();
        Ok((libc::WEXITSTATUS(status), text))
    }

    #[test]
    fn a_command_runs_where_and_with_what_it_is_given() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().to_str().unwrap();
        let (code, out) = run(r#"echo "$X"; pwd; exit 3"#, Some(at), &["X=given"]).unwrap();
        assert_eq!(code, 3);
        assert_eq!(out, format!("given\n{at}\n"));
    }

    #[test]
    fn a_command_leads_its_own_process_group_with_no_signal_blocked_or_ignored() {
        // This test's process ignores SIGPIPE (Rust's runtime does): the command must not.
        // The masks are read by the command's own process, grep run by `exec` (which keeps
        // them): the shell blocks every signal for a moment each time it forks, so a child
        // that read the shell's could see that moment.
        let script = r#"set -- $(cut -d' ' -f5 /proc/$$/stat); test "$1" = $$ || echo "group $1";
exec grep -E '^Sig(Blk|Ign)' /proc/self/status"#;
        let (code, out) = run(script, None, &[]).unwrap();
        assert_eq!(code, 0, "{out}");
        let mask = |name: &str| {
            let line = out.lines().find_map(|l| l.strip_prefix(name)).unwrap();
            u64::from_str_radix(line.trim(), 16).unwrap()
        };
        assert_eq!(mask("SigBlk:"), 0, "{out}");
        // What the process that ran this test ignored it may pass on; SIGPIPE is not.
        let pipe = 1u64 << (libc::SIGPIPE - 1);
        assert_eq!(mask("SigIgn:") & pipe, 0, "{out}");
    }

    #[test]
    fn a_command_given_a_user_runs_as_that_user_alone() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: only root can start a command as another user");
            return;
        }
        let script =
            r#"echo "$(id -u) $(id -g) $(id -G)"; grep -E '^Cap(Eff|Prm)' /proc/$$/status"#;
        let (code, out) = run_as(script, None, &[], Some(1_000_123)).unwrap();
        assert_eq!(code, 0, "{out}");
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some("1000123 1000123 1000123"), "{out}");
        for cap in lines {
            assert!(cap.ends_with("0000000000000000"), "{out}");
        }
        // This process stays as it was.
        // SAFETY: as above.
        assert_eq!(unsafe { (libc::geteuid(), libc::getegid()) }, (0, 0));
    }

    #[test]
    fn what_cannot_start_says_why() {
        let gone = "/nonexistent/dir";
        assert!(matches!(
            run("true", Some(gone), &[]),
            Err(NotStarted::Dir(_))
        ));
        let null = std::fs::File::open("/dev/null").unwrap();
        let c = |s: &str| CString::new(s).unwrap();
        let launch = Launch {
            program: c("/nonexistent/program"),
            argv: vec![c("program")],
            env: Vec::new(),
            dir: None,
            stdio: [null.as_fd(), null.as_fd(), null.as_fd()],
            user: None,
        };
        match spawn(&launch, &mut vec![0; STACK]) {
            Err(NotStarted::Other(e)) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
            other => panic!("{other:?}"),
        }
    }
}
