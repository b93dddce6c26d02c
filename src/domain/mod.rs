//! Plain types, rules and validation. No I/O lives here.

/// An enum with Azure's exact wire strings.
macro_rules! wire_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub mod agent;
pub mod allowance;
pub mod autoscale;
pub mod bes;
pub mod budget;
pub mod container;
pub mod duration;
pub mod endpoint;
pub mod files;
pub mod fleet;
pub mod host;
pub mod ids;
pub mod kept_output;
pub mod lenient;
pub mod metering;
pub mod pool;
pub mod pricing;
pub mod run_as;
pub mod signing;
pub mod task_token;
pub mod vm_size;
pub mod waits;

pub use duration::IsoDuration;
pub mod job;
pub mod job_prep;
pub mod placement;
pub mod schedule;

/// RFC 3339 with microseconds, as the SDKs parse it.
pub fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}
