//! What the operating system gives that several layers need and none owns: paths walked below a
//! trusted directory without following links (`safe_fs`, `listing`), and the answers to the
//! questions about files a node's agent is asked (`file_answer`), used by the server and the
//! node agent alike. Of the crate it imports only `domain`.

pub mod file_answer;
pub mod file_write;
pub mod listing;
pub mod process;
pub mod safe_fs;
