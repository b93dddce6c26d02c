//! What the server counts as it runs, for `/metrics` (Prometheus' text format, written by
//! `api::metrics` together with what it reads from the database at each scrape): HTTP requests
//! by route, method and status, with their durations, the dispatcher's pass times, and how long
//! tasks waited to start. Plain
//! atomics and a mutex-guarded map; imports nothing of the crate.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

/// Upper bounds of the duration histograms, in seconds.
const BOUNDS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// A histogram of durations over [`BOUNDS`].
#[derive(Default)]
pub struct Histogram {
    buckets: [AtomicU64; BOUNDS.len()],
    count: AtomicU64,
    micros: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        for (bucket, bound) in self.buckets.iter().zip(BOUNDS) {
            if seconds <= bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Its lines, `name` with `labels` (`a="b",...`, or empty).
    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (bucket, bound) in self.buckets.iter().zip(BOUNDS) {
            let n = bucket.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {n}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let sum = self.micros.load(Ordering::Relaxed) as f64 / 1e6;
        let braces = |s: &str| {
            if s.is_empty() {
                String::new()
            } else {
                format!("{{{s}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {sum}", braces(labels));
        let _ = writeln!(out, "{name}_count{} {count}", braces(labels));
    }
}

/// A route's requests: a count per (method, status), and their durations.
#[derive(Default)]
struct Route {
    counts: Vec<(&'static str, u16, u64)>,
    seconds: Histogram,
}

/// Every route's requests, by the route's pattern.
static HTTP: LazyLock<Mutex<BTreeMap<String, Route>>> = LazyLock::new(Mutex::default);

/// The dispatcher's passes.
pub static DISPATCH_PASS: LazyLock<Histogram> = LazyLock::new(Histogram::default);

/// From a task's creation to the start of its first attempt (placed on a node, `running` or
/// `preparing`), as the dispatcher of this server placed it.
pub static SUBMIT_TO_RUNNING: LazyLock<Histogram> = LazyLock::new(Histogram::default);

/// From a node's allocation (the resize that asked for it) to its start: its container or
/// directory made and its agent answering, so it takes tasks or its start task.
pub static NODE_START: LazyLock<Histogram> = LazyLock::new(Histogram::default);

/// Counts a request to `route` (the route's pattern, never the path: ids stay out of labels).
/// `method` is one of a fixed few, so a client's made-up methods add no series. Allocates only
/// for a route's first request.
pub fn http_request(route: &str, method: &'static str, status: u16, took: Duration) {
    let mut http = HTTP.lock().unwrap_or_else(|e| e.into_inner());
    if !http.contains_key(route) {
        http.insert(route.to_string(), Route::default());
    }
    let Some(route) = http.get_mut(route) else {
        return;
    };
    route.seconds.observe(took);
    match route
        .counts
        .iter_mut()
        .find(|(m, s, _)| *m == method && *s == status)
    {
        Some((_, _, n)) => *n += 1,
        None => route.counts.push((method, status, 1)),
    }
}

/// A label value as the text format writes it.
pub fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A family's `# HELP` and `# TYPE` lines.
pub fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The families counted in process, in the text format.
pub fn write_process(out: &mut String) {
    let http = HTTP.lock().unwrap_or_else(|e| e.into_inner());
    family(
        out,
        "batchpool_http_requests_total",
        "counter",
        "HTTP requests served, by route pattern, method and status.",
    );
    for (route, counts) in http.iter() {
        let route = escape(route);
        for (method, status, n) in &counts.counts {
            let _ = writeln!(
                out,
                "batchpool_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}} {n}"
            );
        }
    }
    family(
        out,
        "batchpool_http_request_duration_seconds",
        "histogram",
        "Time to answer HTTP requests (to the response's head), by route pattern.",
    );
    for (route, counts) in http.iter() {
        let labels = format!("route=\"{}\"", escape(route));
        counts
            .seconds
            .write(out, "batchpool_http_request_duration_seconds", &labels);
    }
    drop(http);
    family(
        out,
        "batchpool_dispatch_pass_seconds",
        "histogram",
        "Time of each pass of the dispatcher (claiming and placing tasks), on the leading server.",
    );
    DISPATCH_PASS.write(out, "batchpool_dispatch_pass_seconds", "");
    family(
        out,
        "batchpool_task_submit_to_running_seconds",
        "histogram",
        "From a task's creation to its first attempt's start, as this server placed it.",
    );
    SUBMIT_TO_RUNNING.write(out, "batchpool_task_submit_to_running_seconds", "");
    family(
        out,
        "batchpool_node_start_seconds",
        "histogram",
        "From a node's allocation to its start (made, its agent answering), on the leading server.",
    );
    NODE_START.write(out, "batchpool_node_start_seconds", "");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_counts_into_every_bucket_its_value_fits() {
        let h = Histogram::default();
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(10));
        let mut out = String::new();
        h.write(&mut out, "x", "a=\"b\"");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.001\"} 0\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.005\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"5\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"+Inf\"} 2\n"), "{out}");
        assert!(out.contains("x_count{a=\"b\"} 2\n"), "{out}");
        assert_eq!(escape("a\"b\\"), "a\\\"b\\\\");
    }
}
