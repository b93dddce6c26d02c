//! Plain types, rules and validation. No I/O lives here.

pub mod duration;
pub mod ids;
pub mod metering;
pub mod pool;
pub mod vm_size;

pub use duration::IsoDuration;
