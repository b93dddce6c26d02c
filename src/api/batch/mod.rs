//! The Azure Batch data plane: paths, JSON shapes and status codes as the official SDKs expect.

pub mod nodes;
pub mod pools;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use crate::app::AppState;

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/pools", post(pools::create).get(pools::list))
        .route(
            "/pools/{pool_id}",
            get(pools::get).delete(pools::delete).patch(pools::patch),
        )
        .route("/pools/{pool_id}/resize", post(pools::resize))
        .route("/pools/{pool_id}/stopresize", post(pools::stop_resize))
        .route(
            "/pools/{pool_id}/updateproperties",
            post(pools::update_properties),
        )
        .route("/pools/{pool_id}/nodes", get(nodes::list))
        .route("/pools/{pool_id}/nodes/{node_id}", get(nodes::get))
        .route(
            "/pools/{pool_id}/nodes/{node_id}/files/{*path}",
            get(nodes::get_file),
        )
}
