//! A task's `stdout.txt` and `stderr.txt`, read as its command ends, for its `Exited`: below the
//! directory the server made for its directories (`MakeDirs::base`), following no link, and
//! only up to [`INLINE_OUTPUT`] bytes (a longer one is sent as its length alone; the server
//! reads its parts from the node).

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::domain::agent::{Captured, ExitOutput, TaskLaunch, INLINE_OUTPUT};
use crate::sys::safe_fs::Dir;

/// Where a task's output files are: the trusted base, and the task's directory below it.
#[derive(Clone, Debug)]
pub struct Capture {
    base: PathBuf,
    dir: PathBuf,
}

impl Capture {
    /// For a task whose directories the agent makes (its working directory is `<dir>/wd`).
    pub fn of(task: &TaskLaunch) -> Option<Self> {
        let make = task.make.as_ref()?;
        let wd = Path::new(make.dirs.first()?);
        if wd.file_name()? != "wd" {
            return None;
        }
        Some(Self {
            base: PathBuf::from(&make.base),
            dir: wd.parent()?.to_path_buf(),
        })
    }

    /// Both files as they are now; None if they cannot be read (the server asks the node).
    pub fn read(&self) -> Option<ExitOutput> {
        let base = Dir::open_root_in_node(&self.base).ok()?;
        let one = |name: &str| -> Option<Captured> {
            let file = base.open_file(&self.dir.join(name)).ok()?;
            let len = file.metadata().ok()?.len();
            if len > INLINE_OUTPUT {
                return Some(Captured { len, base64: None });
            }
            let mut bytes = Vec::with_capacity(len as usize);
            file.take(INLINE_OUTPUT + 1).read_to_end(&mut bytes).ok()?;
            Some(Captured::of(&bytes))
        };
        Some(ExitOutput {
            stdout: one("stdout.txt")?,
            stderr: one("stderr.txt")?,
        })
    }
}
