//! One middleware around every edge route: the request's server span, child of the
//! caller's `traceparent`, and the request metrics. Metrics are labelled by the matched
//! route's template (`/api/v1/conversations/{id}`), never the raw path, and by a known
//! method name, so that label values stay few whatever clients send.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use http::Method;
use metrics::SharedString;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

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

pub async fn observe(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(request.method());
    // One copy, shared by the span and the metrics.
    let route: Arc<str> = request
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED, MatchedPath::as_str)
        .into();
    let span = if &*route == HEALTH {
        tracing::Span::none()
    } else {
        tracing::info_span!(
            "request",
            otel.name = %format_args!("{method} {route}"),
            otel.kind = "server",
            trace_id = tracing::field::Empty,
        )
    };
    span.set_attribute("http.request.method", method);
    span.set_attribute("http.route", route.clone());
    sandgate_proto::trace::continue_trace(&span, request.headers());
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status().as_u16();
    span.set_attribute("http.response.status_code", i64::from(status));
    let route = SharedString::from(route);
    metrics::counter!(
        "sandgate_http_requests_total",
        "route" => route.clone(),
        "method" => method,
        "status" => status.to_string(),
    )
    .increment(1);
    metrics::histogram!(
        "sandgate_http_request_duration_seconds",
        "route" => route,
        "method" => method,
    )
    .record(started.elapsed());
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
