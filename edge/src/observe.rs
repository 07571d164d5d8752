//! One middleware around every edge route: the request's server span, child of the
//! caller's `traceparent`, and the request metrics. Metrics are labelled by the matched
//! route's template (`/api/v1/conversations/{id}`), never the raw path, and by a known
//! method name, so that label values stay few whatever clients send.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http::Method;
use metrics::SharedString;
use tracing::Instrument;

/// The route label of requests that no route matched.
const UNMATCHED: &str = "unmatched";

/// Probes call it every few seconds: counted, not traced.
const HEALTH: &str = "/health";

/// Registers the edge's metrics with their help text (after the recorder is installed).
pub fn describe_metrics() {
    metrics::describe_counter!(
        "sandgate_http_requests_total",
        "REST requests answered by the edge, by route template, method and status"
    );
    metrics::describe_histogram!(
        "sandgate_http_request_duration_seconds",
        metrics::Unit::Seconds,
        "time from a REST request's arrival to its response headers, by route template and method"
    );
}

fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Label sets whose series [`RequestSeries`] keeps at most; past it, requests count
/// through the metrics macros (correct, dearer).
const MAX_KEPT: usize = 4096;

/// The series of one route template, method and status, registered once.
struct Series {
    requests: metrics::Counter,
    duration: metrics::Histogram,
}

impl Series {
    fn register(route: &str, method: &'static str, status: u16) -> Self {
        let route = SharedString::from(Arc::<str>::from(route));
        Self {
            requests: metrics::counter!(
                "sandgate_http_requests_total",
                "route" => route.clone(),
                "method" => method,
                "status" => status.to_string(),
            ),
            duration: metrics::histogram!(
                "sandgate_http_request_duration_seconds",
                "route" => route,
                "method" => method,
            ),
        }
    }
}

/// The series requests count in, each kept once registered: a metrics macro with labels
/// builds, hashes and looks up its key on every request (about 1.5 % of an LLM call's
/// instructions); a kept series is an atomic add. Made with the router, after the
/// recorder is installed (a series registered before counts nowhere). Route templates,
/// methods and statuses are few, so the map stays small.
#[derive(Default)]
pub struct RequestSeries(Mutex<foldhash::HashMap<String, ByAnswer>>);

/// A route's series, by method and status.
type ByAnswer = foldhash::HashMap<(&'static str, u16), Arc<Series>>;

impl RequestSeries {
    fn of(&self, route: &str, method: &'static str, status: u16) -> Arc<Series> {
        let Ok(mut kept) = self.0.lock() else {
            return Arc::new(Series::register(route, method, status));
        };
        if let Some(series) = kept.get(route).and_then(|by| by.get(&(method, status))) {
            return series.clone();
        }
        let series = Arc::new(Series::register(route, method, status));
        if kept.values().map(ByAnswer::len).sum::<usize>() < MAX_KEPT {
            kept.entry(route.to_owned())
                .or_default()
                .insert((method, status), series.clone());
        }
        series
    }

    /// A request answered with `status` (its headers) `elapsed` after it arrived.
    fn answered(&self, route: &str, method: &'static str, status: u16, elapsed: Duration) {
        let series = self.of(route, method, status);
        series.requests.increment(1);
        series.duration.record(elapsed);
    }
}

pub async fn observe(
    State(series): State<Arc<RequestSeries>>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let method = method_label(request.method());
    let matched = request.extensions().get::<MatchedPath>().cloned();
    let route = matched.as_ref().map_or(UNMATCHED, MatchedPath::as_str);
    let span = if route == HEALTH {
        tracing::Span::none()
    } else {
        tracing::info_span!(
            "request",
            otel.name = %format_args!("{method} {route}"),
            otel.kind = "server",
            trace_id = tracing::field::Empty,
        )
    };
    sandgate_proto::trace::set_attributes(&span, || {
        [
            ("http.request.method", method.into()),
            ("http.route", route.to_owned().into()),
        ]
    });
    sandgate_proto::trace::continue_trace(&span, request.headers());
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status().as_u16();
    sandgate_proto::trace::set_attributes(&span, || {
        [("http.response.status_code", i64::from(status).into())]
    });
    series.answered(route, method, status, started.elapsed());
    if span.is_none() {
        return response;
    }
    // The span lasts as long as the answer: a stream's ends after its last event, after
    // the upstream call's span (its child) has. Closing it (building the span an exporter
    // gets) is thus no longer between a stream's head and its client.
    response.map(|body| crate::body::holding(body, Answering(span)))
}

/// A request's span, ended when this is dropped.
struct Answering(tracing::Span);

impl Drop for Answering {
    fn drop(&mut self) {
        // A span's OpenTelemetry end time is the last time it was left: left once more
        // now, it ends with the answer rather than with the handler's future.
        let _entered = self.0.enter();
    }
}
