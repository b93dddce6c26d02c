//! What the server counts as it runs, for `/metrics` (OpenMetrics text through
//! `prometheus-client`, written by `api::metrics` together with what it reads from the database
//! at each scrape): HTTP requests by route, method and status, with their durations, the
//! dispatcher's pass times, how long tasks waited to start and nodes took to start. Imports
//! nothing of the crate.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upper bounds of the duration histograms, in seconds.
const BOUNDS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// A histogram of durations over [`BOUNDS`], in seconds.
#[derive(Clone)]
pub struct Timings(Histogram);

impl Default for Timings {
    fn default() -> Self {
        Self(seconds())
    }
}

impl Timings {
    pub fn observe(&self, took: Duration) {
        self.0.observe(took.as_secs_f64());
    }
}

fn seconds() -> Histogram {
    Histogram::new(BOUNDS)
}

/// A request's labels: the route's pattern (never the path: ids stay out of labels), and a
/// method of a fixed few, so a client's made-up methods add no series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Request {
    route: String,
    method: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Route {
    route: String,
}

/// Every route's requests, counted and timed.
struct Http {
    requests: Family<Request, Counter>,
    seconds: Family<Route, Histogram>,
}

static HTTP: LazyLock<Http> = LazyLock::new(|| Http {
    requests: Family::default(),
    seconds: Family::new_with_constructor(seconds),
});

/// The dispatcher's passes.
pub static DISPATCH_PASS: LazyLock<Timings> = LazyLock::new(Timings::default);

/// From a task's creation to the start of its first attempt (placed on a node, `running` or
/// `preparing`), as the dispatcher of this server placed it.
pub static SUBMIT_TO_RUNNING: LazyLock<Timings> = LazyLock::new(Timings::default);

/// From a node's allocation (the resize that asked for it) to its start: its container or
/// directory made and its agent answering, so it takes tasks or its start task.
pub static NODE_START: LazyLock<Timings> = LazyLock::new(Timings::default);

/// Counts a request to `route` (the route's pattern).
pub fn http_request(route: &str, method: &'static str, status: u16, took: Duration) {
    let request = Request {
        route: route.to_string(),
        method,
        status,
    };
    HTTP.requests.get_or_create(&request).inc();
    let route = Route {
        route: request.route,
    };
    HTTP.seconds
        .get_or_create(&route)
        .observe(took.as_secs_f64());
}

/// Registers the families counted in process (the registry's prefix names them `batchpool_`).
pub fn register_process(registry: &mut Registry) {
    registry.register(
        "http_requests",
        "HTTP requests served, by route pattern, method and status",
        HTTP.requests.clone(),
    );
    registry.register(
        "http_request_duration_seconds",
        "Time to answer HTTP requests (to the response's head), by route pattern",
        HTTP.seconds.clone(),
    );
    let timings: [(&str, &str, &Timings); 3] = [
        (
            "dispatch_pass_seconds",
            "Time of each pass of the dispatcher (claiming and placing tasks), on the leading server",
            &DISPATCH_PASS,
        ),
        (
            "task_submit_to_running_seconds",
            "From a task's creation to its first attempt's start, as this server placed it",
            &SUBMIT_TO_RUNNING,
        ),
        (
            "node_start_seconds",
            "From a node's allocation to its start (made, its agent answering), on the leading server",
            &NODE_START,
        ),
    ];
    for (name, help, timings) in timings {
        registry.register(name, help, timings.0.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_counts_into_every_bucket_its_value_fits() {
        let timings = Timings::default();
        timings.observe(Duration::from_millis(3));
        timings.observe(Duration::from_secs(10));
        let mut registry = Registry::with_prefix("x");
        registry.register("t", "t", timings.0.clone());
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        assert!(out.contains("x_t_bucket{le=\"0.001\"} 0\n"), "{out}");
        assert!(out.contains("x_t_bucket{le=\"0.005\"} 1\n"), "{out}");
        assert!(out.contains("x_t_bucket{le=\"5.0\"} 1\n"), "{out}");
        assert!(out.contains("x_t_bucket{le=\"+Inf\"} 2\n"), "{out}");
        assert!(out.contains("x_t_count 2\n"), "{out}");
    }
}
