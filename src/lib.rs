//! batchpool: self-hosted batch pools with the Azure Batch API. See DESIGN.md for the picture.

pub mod api;
pub mod app;
pub mod config;
pub mod domain;
pub mod postgres;
pub mod runtime;
pub mod scheduler;
pub mod store;
