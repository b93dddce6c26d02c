//! The Azure Batch data plane: paths, JSON shapes and status codes as the official SDKs expect.

pub mod account;
pub mod applications;
pub mod files;
pub mod identity;
pub mod jobs;
pub mod node_logs;
pub mod nodes;
pub mod pools;
pub mod schedules;
pub mod stats;
pub mod support;
pub mod tasks;
pub mod waits;

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use crate::api::state::AppState;

pub fn router() -> Router<Arc<AppState>> {
    pool_routes()
        .merge(job_routes())
        .merge(schedule_routes())
        .route("/applications", get(applications::list))
        .route("/applications/{application_id}", get(applications::get))
        .route(
            "/batchpool/applications/{application_id}/versions/{version}",
            axum::routing::put(applications::put_version),
        )
        .route("/nodecounts", get(account::node_counts))
        .route("/supportedimages", get(account::supported_images))
        .route("/nodeagentskus", get(account::node_agent_skus))
        .route("/poolusagemetrics", get(account::pool_usage_metrics))
        .route("/lifetimejobstats", get(stats::lifetime_jobs))
        .route("/lifetimepoolstats", get(stats::lifetime_pools))
}

fn pool_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/pools", post(pools::create).get(pools::list))
        .route(
            "/pools/{pool_id}",
            get(pools::get).delete(pools::delete).patch(pools::patch),
        )
        .route("/pools/{pool_id}/resize", post(pools::resize))
        .route("/pools/{pool_id}/stopresize", post(pools::stop_resize))
        .route(
            "/pools/{pool_id}/enableautoscale",
            post(pools::enable_auto_scale),
        )
        .route(
            "/pools/{pool_id}/disableautoscale",
            post(pools::disable_auto_scale),
        )
        .route(
            "/pools/{pool_id}/evaluateautoscale",
            post(pools::evaluate_formula),
        )
        .route(
            "/pools/{pool_id}/updateproperties",
            post(pools::update_properties),
        )
        .route("/pools/{pool_id}/nodes", get(nodes::list))
        .route("/pools/{pool_id}/nodes/{node_id}", get(nodes::get))
        .route(
            "/pools/{pool_id}/nodes/{node_id}/disablescheduling",
            post(nodes::disable_scheduling),
        )
        .route(
            "/pools/{pool_id}/nodes/{node_id}/enablescheduling",
            post(nodes::enable_scheduling),
        )
        .route(
            "/pools/{pool_id}/nodes/{node_id}/files",
            get(files::list_node_files),
        )
        .route(
            "/pools/{pool_id}/nodes/{node_id}/files/{*path}",
            get(files::node_file)
                .head(files::node_file)
                .delete(files::delete_node_file),
        )
        .route("/pools/{pool_id}/removenodes", post(pools::remove_nodes))
        .route(
            "/pools/{pool_id}/nodes/{node_id}/reboot",
            post(nodes::reboot),
        )
        .route(
            "/pools/{pool_id}/nodes/{node_id}/reimage",
            post(nodes::reimage),
        )
        .route(
            "/pools/{pool_id}/nodes/{node_id}/deallocate",
            post(nodes::deallocate),
        )
        .route("/pools/{pool_id}/nodes/{node_id}/start", post(nodes::start))
        .route(
            "/pools/{pool_id}/nodes/{node_id}/uploadbatchservicelogs",
            post(node_logs::upload),
        )
}

fn schedule_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route(
            "/jobschedules",
            post(schedules::create).get(schedules::list),
        )
        .route(
            "/jobschedules/{schedule_id}",
            get(schedules::get)
                .delete(schedules::delete)
                .patch(schedules::patch)
                .put(schedules::replace),
        )
        .route("/jobschedules/{schedule_id}/jobs", get(schedules::jobs))
        .route(
            "/jobschedules/{schedule_id}/disable",
            post(schedules::disable),
        )
        .route(
            "/jobschedules/{schedule_id}/enable",
            post(schedules::enable),
        )
        .route(
            "/jobschedules/{schedule_id}/terminate",
            post(schedules::terminate),
        )
}

fn job_routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/jobs", post(jobs::create).get(jobs::list))
        .route(
            "/jobs/{job_id}",
            get(jobs::get)
                .delete(jobs::delete)
                .patch(jobs::patch)
                .put(jobs::replace),
        )
        .route("/jobs/{job_id}/terminate", post(jobs::terminate))
        .route("/jobs/{job_id}/disable", post(jobs::disable))
        .route("/jobs/{job_id}/enable", post(jobs::enable))
        .route("/jobs/{job_id}/taskcounts", get(jobs::task_counts))
        .route(
            "/jobs/{job_id}/jobpreparationandreleasetaskstatus",
            get(jobs::preparation_status),
        )
        .route("/jobs/{job_id}/tasks", post(tasks::add).get(tasks::list))
        .route(
            "/jobs/{job_id}/addtaskcollection",
            post(tasks::add_collection),
        )
        .route(
            "/jobs/{job_id}/tasks/{task_id}",
            get(tasks::get).delete(tasks::delete).put(tasks::update),
        )
        .route(
            "/jobs/{job_id}/tasks/{task_id}/terminate",
            post(tasks::terminate),
        )
        .route(
            "/jobs/{job_id}/tasks/{task_id}/reactivate",
            post(tasks::reactivate),
        )
        .route(
            "/jobs/{job_id}/tasks/{task_id}/files",
            get(files::list_task_files),
        )
        .route(
            "/jobs/{job_id}/tasks/{task_id}/files/{*path}",
            get(files::task_file)
                .head(files::task_file)
                .delete(files::delete_task_file),
        )
}
