//! batchpool: self-hosted batch pools with the Azure Batch API. See DESIGN.md for the picture.

pub mod agent;
pub mod api;
pub mod app;
pub mod cli;
pub mod config;
pub mod domain;
pub mod embedded_pg;
pub mod metrics;
pub mod ops;
pub mod runtime;
pub mod scheduler;
pub mod sim;
pub mod storage;
pub mod store;
pub mod sys;

/// TLS for outgoing HTTPS (blob storage) uses rustls with ring; install it once per process
/// before any HTTP client is built.
pub fn install_tls() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
