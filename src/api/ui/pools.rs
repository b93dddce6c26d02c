//! The pools page: each pool's size and state, and a heat map of its nodes (a cell per node,
//! coloured by state and filled by the share of its task slots in use).

use std::fmt::Write as _;

use super::html::{page, Esc, Section, Seg};
use super::jobs::{counts_text, progress};
use super::{unavailable, Page, Ui};
use crate::domain::job::JobState;
use crate::store;
use crate::store::nodes::NodeRow;
use crate::store::pools::PoolRow;

/// Cells per row of a heat map.
const ROW: usize = 24;
const CELL: usize = 30;

pub async fn list(ui: Ui) -> Page {
    let db = &ui.app.db;
    let pools = store::pools::list(db, &ui.s.account)
        .await
        .map_err(unavailable)?;
    let mut main = String::from("<h1>Pools</h1>");
    if pools.is_empty() {
        main += "<p class=\"empty\">No pools yet. Create one with <code>batchpool pool create</code>.</p>";
    }
    let jobs = store::jobs::list(db, &ui.s.account, None, 200)
        .await
        .map_err(unavailable)?;
    for pool in &pools {
        let nodes = store::nodes::list_for_pool(db, pool.pk)
            .await
            .map_err(unavailable)?;
        let mut on_pool = String::new();
        let running = jobs
            .iter()
            .filter(|j| j.state != JobState::Completed && j.pool_id.eq_ignore_ascii_case(&pool.id));
        for job in running {
            let c = store::tasks::counts(db, job.pk)
                .await
                .map_err(unavailable)?;
            let _ = write!(
                on_pool,
                "<li><a href=\"/ui/jobs/{}\">{}</a> {} <span class=\"counts\">{}</span></li>",
                Seg(&job.id),
                Esc(&job.id),
                progress(&c),
                counts_text(&c)
            );
        }
        main += &pool_section(&ui, pool, &nodes, &on_pool);
    }
    main += LEGEND;
    Ok(page(&ui.s, Section::Pools, "Pools", 3, &main))
}

const LEGEND: &str = "<p class=\"legend\">Nodes: <span class=\"key n-idle\"></span>idle \
    <span class=\"key n-running\"></span>running (darker: more slots in use) \
    <span class=\"key n-starting\"></span>starting <span class=\"key n-leavingpool\"></span>leaving, preempted or deallocated \
    <span class=\"key n-unusable\"></span>unusable or failed</p>";

/// A pool: its facts, its heat map, the jobs on it (`jobs`, list items) and its resize form.
fn pool_section(ui: &Ui, pool: &PoolRow, nodes: &[NodeRow], jobs: &str) -> String {
    let used: i32 = nodes
        .iter()
        .map(|n| n.running_of(pool.task_slots_per_node).1)
        .sum();
    let slots = pool.task_slots_per_node as i64 * nodes.len() as i64;
    let mut out = format!(
        "<section class=\"pool\" id=\"pool-{id}\"><h2>{id}</h2><p class=\"facts\">\
         <span>{vm}</span><span>{slots_per} slots a node</span>\
         <span>{current} of {target} nodes{low}</span><span>{used} of {slots} slots in use</span>\
         <span class=\"state\">{alloc}</span>{plan}</p>",
        id = Esc(&pool.id),
        vm = Esc(&pool.vm_size),
        slots_per = pool.task_slots_per_node,
        current = pool.current_dedicated_nodes,
        target = pool.target_dedicated_nodes,
        low = low_priority(pool),
        alloc = pool.allocation_state.as_str(),
        plan = pool
            .billing_plan
            .as_deref()
            .map(|p| format!("<span>plan {}</span>", Esc(p)))
            .unwrap_or_default(),
    );
    if let Some(message) = pool
        .resize_errors
        .as_array()
        .and_then(|e| e.first())
        .and_then(|e| e["message"].as_str())
    {
        let _ = write!(out, "<p class=\"error\">Resize error: {}</p>", Esc(message));
    }
    out += &heat_map(pool, nodes);
    if !jobs.is_empty() {
        let _ = write!(out, "<ul class=\"jobs\">{jobs}</ul>");
    }
    if pool.enable_auto_scale {
        let results = pool
            .auto_scale_run
            .as_ref()
            .and_then(|r| r["results"].as_str())
            .unwrap_or("");
        let _ = write!(
            out,
            "<p class=\"facts\"><span>sized by its autoscale formula</span><span>last run: <code>{}</code></span></p>",
            Esc(results)
        );
    } else if !ui.s.read_only {
        let _ = write!(
            out,
            "<form class=\"resize\" data-api=\"/ui/api/pools/{seg}/resize\">\
             <label>Target nodes <input type=\"number\" name=\"targetDedicatedNodes\" min=\"0\" value=\"{target}\"></label>\
             <label>low-priority <input type=\"number\" name=\"targetLowPriorityNodes\" min=\"0\" value=\"{low}\"></label>\
             <button>Resize</button><output></output></form>",
            seg = Seg(&pool.id),
            target = pool.target_dedicated_nodes,
            low = pool.target_low_priority_nodes,
        );
    }
    out + "</section>"
}

/// ", and N of M low-priority" for a pool that has or wants low-priority nodes.
fn low_priority(pool: &PoolRow) -> String {
    if pool.current_low_priority_nodes == 0 && pool.target_low_priority_nodes == 0 {
        return String::new();
    }
    format!(
        ", and {} of {} low-priority",
        pool.current_low_priority_nodes, pool.target_low_priority_nodes
    )
}

fn heat_map(pool: &PoolRow, nodes: &[NodeRow]) -> String {
    if nodes.is_empty() {
        return "<p class=\"empty\">No nodes.</p>".into();
    }
    let cols = nodes.len().min(ROW);
    let rows = nodes.len().div_ceil(ROW);
    let (w, h) = (cols * CELL, rows * CELL);
    let mut svg = format!(
        "<svg class=\"heat\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"nodes of {}\">",
        Esc(&pool.id)
    );
    let slots = pool.task_slots_per_node.max(1);
    for (i, n) in nodes.iter().enumerate() {
        let (x, y) = ((i % ROW) * CELL, (i / ROW) * CELL);
        // How much of the cell is filled: the share of the node's slots in use.
        let used = n.running_of(pool.task_slots_per_node).1;
        let share = (used.clamp(0, slots) as f64) / slots as f64;
        let fill = (share * (CELL - 4) as f64).round();
        let _ = write!(
            svg,
            "<g class=\"node n-{state}\"><title>{id}: {state}, {used} of {slots} slots in use</title>\
             <rect x=\"{x}\" y=\"{y}\" width=\"{c}\" height=\"{c}\" rx=\"2\"/>\
             <rect class=\"use\" x=\"{x}\" y=\"{fy}\" width=\"{c}\" height=\"{fill}\"/>\
             <text x=\"{tx}\" y=\"{ty}\" text-anchor=\"middle\">{used}</text></g>",
            state = n.state.as_str(),
            id = Esc(&n.id),
            c = CELL - 4,
            fy = y as f64 + (CELL - 4) as f64 - fill,
            tx = x + (CELL - 4) / 2,
            ty = y + (CELL - 4) / 2 + 4,
        );
    }
    svg + "</svg>"
}
