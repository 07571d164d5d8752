//! W3C trace context (`traceparent`, `tracestate`) across Sandgate's hops, so that one
//! request is one trace: the edge opens a server span per request, child of the caller's
//! `traceparent`, and a remote gRPC call carries that span's context in its metadata;
//! every gRPC service opens its span as the child of the metadata's context, or, called
//! in-process, of the edge's span (one tower layer, [`traced`], around the services'
//! routes, in-process calls included); the model gateway
//! injects its upstream span's context into the upstream request. (In `sandgate serve` the
//! edge calls the model gateway's service itself, not its routes: the upstream span is
//! then the child of the edge's.)
//!
//! The spans are `tracing` spans. Their ids come from the `tracing-opentelemetry` layer
//! when spans are exported, or from [`IdsLayer`] when they go nowhere (ids only: no
//! OpenTelemetry span is built); the `sandgate` binary installs one or the other. Without
//! either, propagation quietly does nothing.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::service::Routes;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub use self::ids::IdsLayer;

mod ids;

/// The W3C header that carries a trace context.
static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// The W3C header that carries vendors' trace state beside it.
static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::try_from(value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// Whether spans' OpenTelemetry attributes are built: true unless the process said its
/// spans go nowhere ([`keep_attributes`]).
static ATTRIBUTES_KEPT: AtomicBool = AtomicBool::new(true);

/// Says whether spans leave the process (an exporter is configured). When they do not,
/// [`set_attributes`] builds nothing: attributes are read by exporters only (log lines
/// show spans' `tracing` fields, not their attributes), and building them (a key, a
/// value, often a copied string, pushed into the span's builder) cost about 1 % of an
/// LLM call's instructions.
pub fn keep_attributes(kept: bool) {
    ATTRIBUTES_KEPT.store(kept, Ordering::Relaxed);
}

/// Sets the attributes `attributes` makes on `span`, unless spans go nowhere.
pub fn set_attributes<const N: usize>(
    span: &Span,
    attributes: impl FnOnce() -> [(&'static str, opentelemetry::Value); N],
) {
    if span.is_none() || !ATTRIBUTES_KEPT.load(Ordering::Relaxed) {
        return;
    }
    for (key, value) in attributes() {
        span.set_attribute(key, value);
    }
}

/// [`set_attributes`] on the current span, which is not even looked up when spans go
/// nowhere (a handle on it is counted, then released through every layer).
pub fn set_current_attributes<const N: usize>(
    attributes: impl FnOnce() -> [(&'static str, opentelemetry::Value); N],
) {
    if ATTRIBUTES_KEPT.load(Ordering::Relaxed) {
        set_attributes(&Span::current(), attributes);
    }
}

/// Makes `span` the child of the trace context that `headers` carry, if they carry one;
/// then records the trace id in the span's `trace_id` field (log lines show it).
///
/// Spans keep few `tracing` fields (`otel.name`, `otel.kind`, `trace_id`): the log layer
/// formats every field of every span it sees, so the rest of what a trace shows goes in
/// as OpenTelemetry attributes, which only the trace layer handles.
pub fn continue_trace(span: &Span, headers: &HeaderMap) {
    // Most callers send no trace context: nothing to extract then (a `tracestate` alone
    // is no context).
    if headers.contains_key(&TRACEPARENT) {
        let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
        let remote = parent.span().span_context().clone();
        // Fails only without a trace layer, or for a disabled span: no trace.
        if remote.is_valid() && !ids::set_parent(span, &remote) {
            drop(span.set_parent(parent));
        }
    }
    let span_context = span_context(span);
    if span_context.is_valid() {
        span.record("trace_id", tracing::field::display(span_context.trace_id()));
    }
}

/// `span`'s ids: [`IdsLayer`]'s, or the OpenTelemetry layer's (invalid without either).
fn span_context(span: &Span) -> SpanContext {
    ids::span_context(span).unwrap_or_else(|| otel_span_context(span))
}

fn otel_span_context(span: &Span) -> SpanContext {
    span.context().span().span_context().clone()
}

/// Puts `span`'s trace context into HTTP headers (an outbound request's, a remote gRPC
/// call's), as OpenTelemetry's propagator writes it.
pub fn inject_headers(span: &Span, headers: &mut HeaderMap) {
    inject(&span_context(span), headers);
}

/// [`inject_headers`] for the current span, read without taking a handle on it when
/// [`IdsLayer`] gave it its ids.
pub fn inject_current(headers: &mut HeaderMap) {
    let span_context =
        ids::current_span_context().unwrap_or_else(|| otel_span_context(&Span::current()));
    inject(&span_context, headers);
}

fn inject(span_context: &SpanContext, headers: &mut HeaderMap) {
    if !span_context.is_valid() {
        return;
    }
    if let Some(traceparent) = traceparent_of(span_context) {
        headers.insert(&TRACEPARENT, traceparent);
    }
    let state = span_context.trace_state().header();
    // No state, no header: an empty one says nothing (and some upstreams refuse it).
    if state.is_empty() {
        headers.remove(&TRACESTATE);
    } else {
        HeaderInjector(headers).set(TRACESTATE.as_str(), state);
    }
}

/// `span_context`'s `traceparent`, as OpenTelemetry's propagator writes it
/// (`00-<trace id>-<span id>-<flags>`, only the sampled flag), in hex written into a
/// fixed buffer: it is on every upstream call's path, where `format!` through the ids'
/// `Display` was a few thousand instructions.
fn traceparent_of(span_context: &SpanContext) -> Option<HeaderValue> {
    let mut text = [b'-'; 55];
    let (version, rest) = text.split_at_mut(3);
    version.copy_from_slice(b"00-");
    let (trace_id, rest) = rest.split_at_mut(32);
    hex::encode_to_slice(span_context.trace_id().to_bytes(), trace_id).ok()?;
    let (span_id, rest) = rest.split_at_mut(17);
    hex::encode_to_slice(span_context.span_id().to_bytes(), &mut span_id[1..]).ok()?;
    let flags = (span_context.trace_flags() & TraceFlags::SAMPLED).to_u8();
    hex::encode_to_slice([flags], &mut rest[1..]).ok()?;
    HeaderValue::from_bytes(&text).ok()
}

/// `routes` with a server span around every call, child of the caller's trace context.
/// Applied once to everything a process serves over gRPC, and to what the edge calls
/// in-process, so every gRPC hop is one span whichever way it is reached.
pub fn traced(routes: Routes) -> Routes {
    Routes::from(routes.into_axum_router().layer(GrpcTraceLayer))
}

/// The tower layer of [`traced`].
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcTraceLayer;

impl<S> tower::Layer<S> for GrpcTraceLayer {
    type Service = GrpcTrace<S>;

    fn layer(&self, inner: S) -> GrpcTrace<S> {
        GrpcTrace { inner }
    }
}

#[derive(Clone, Debug)]
pub struct GrpcTrace<S> {
    inner: S,
}

/// The path prefix of gRPC health checks.
const HEALTH: &str = "/grpc.health.v1.Health/";

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, Infallible>> + Send>>;

impl<S, B, R> tower::Service<http::Request<B>> for GrpcTrace<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>, Error = Infallible>,
    S::Future: Send + 'static,
    R: 'static,
{
    type Response = http::Response<R>;
    type Error = Infallible;
    type Future = BoxFuture<http::Response<R>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // `/package.Service/Method`: bounded by the routes, except for unknown paths, which
        // are answered `unimplemented` at once.
        let path = request.uri().path();
        if path.starts_with(HEALTH) {
            // Probes call it every few seconds; a trace of each is noise.
            return Box::pin(self.inner.call(request));
        }
        let (service, method) = path
            .trim_start_matches('/')
            .split_once('/')
            .unwrap_or((path, ""));
        let span = tracing::info_span!(
            "grpc",
            otel.name = path.trim_start_matches('/'),
            otel.kind = "server",
            trace_id = tracing::field::Empty,
        );
        set_attributes(&span, || {
            [
                ("rpc.system", "grpc".into()),
                ("rpc.service", service.to_owned().into()),
                ("rpc.method", method.to_owned().into()),
            ]
        });
        // Called in-process, the call carries no trace context: the span stays the child
        // of the edge's span, which is current, and takes its trace id from it.
        continue_trace(&span, request.headers());
        let future = span.in_scope(|| self.inner.call(request));
        Box::pin(tracing::Instrument::instrument(
            async move {
                let response = future.await?;
                // A failed call answers trailers-only, its status in the headers; a
                // successful one's status comes in trailers, after this span's work.
                let code = response
                    .headers()
                    .get("grpc-status")
                    .and_then(|value| value.to_str().ok())
                    .and_then(|value| value.parse::<i64>().ok())
                    .unwrap_or(0);
                set_current_attributes(|| [("rpc.grpc.status_code", code.into())]);
                Ok(response)
            },
            span,
        ))
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn traceparent(headers: &HeaderMap) -> &str {
        headers
            .get("traceparent")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
    }

    /// Runs `check` under each of the trace layers the binary installs: OpenTelemetry's
    /// (spans exported) and [`IdsLayer`] (not).
    fn under_each_layer(check: impl Fn()) {
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let exported = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(exported, &check);
        let ids_only = tracing_subscriber::registry().with(IdsLayer);
        tracing::subscriber::with_default(ids_only, &check);
    }

    #[test]
    fn a_span_continues_the_callers_trace_and_passes_on_its_own_id() {
        under_each_layer(|| {
            let mut incoming = HeaderMap::new();
            incoming.insert("traceparent", HeaderValue::from_static(CALLER));
            let span = tracing::info_span!("request", trace_id = tracing::field::Empty);
            continue_trace(&span, &incoming);
            let mut passed = HeaderMap::new();
            inject_headers(&span, &mut passed);
            let sent = traceparent(&passed);
            assert!(
                sent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
                "{sent}"
            );
            assert!(
                sent.ends_with("-01"),
                "the caller's sampling decision: {sent}"
            );
            assert_ne!(sent, CALLER, "the span's own id, not the caller's");

            // The next hop's span is the child of the one that sent.
            let child = tracing::info_span!(parent: None, "grpc", trace_id = tracing::field::Empty);
            continue_trace(&child, &passed);
            let mut outbound = HeaderMap::new();
            inject_headers(&child, &mut outbound);
            let next = traceparent(&outbound);
            assert!(
                next.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
                "{next}"
            );
            assert_ne!(next, sent);
        });
    }

    #[test]
    fn a_child_span_is_in_its_parents_trace_and_a_new_root_in_a_trace_of_its_own() {
        under_each_layer(|| {
            let request = tracing::info_span!("request");
            let upstream = request.in_scope(|| tracing::info_span!("upstream"));
            let other = tracing::info_span!(parent: None, "request");
            let [request, upstream, other] = [&request, &upstream, &other].map(|span| {
                let mut headers = HeaderMap::new();
                headers.insert("tracestate", HeaderValue::from_static("stale=1"));
                inject_headers(span, &mut headers);
                assert!(
                    headers.get("tracestate").is_none(),
                    "a context without state sends none: {headers:?}"
                );
                let sent = traceparent(&headers).to_owned();
                let parts: Vec<String> = sent.split('-').map(str::to_owned).collect();
                assert_eq!(parts.len(), 4, "{sent}");
                assert_eq!(
                    (parts[0].as_str(), parts[3].as_str()),
                    ("00", "01"),
                    "{sent}"
                );
                (parts[1].clone(), parts[2].clone())
            });
            assert_eq!(upstream.0, request.0, "the child's trace is its parent's");
            assert_ne!(upstream.1, request.1, "the child has a span id of its own");
            assert_ne!(other.0, request.0, "a new root starts a new trace");
        });
    }

    #[test]
    fn a_callers_sampling_decision_and_trace_state_are_passed_on() {
        under_each_layer(|| {
            let mut incoming = HeaderMap::new();
            incoming.insert(
                "traceparent",
                HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
            );
            incoming.insert("tracestate", HeaderValue::from_static("vendor=abc"));
            let span = tracing::info_span!("request", trace_id = tracing::field::Empty);
            continue_trace(&span, &incoming);
            let child = span.in_scope(|| tracing::info_span!("upstream"));
            let mut passed = HeaderMap::new();
            inject_headers(&child, &mut passed);
            let sent = traceparent(&passed);
            assert!(
                sent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
                "{sent}"
            );
            assert!(
                sent.ends_with("-00"),
                "not sampled, as the caller said: {sent}"
            );
            assert_eq!(
                passed.get("tracestate").map(HeaderValue::as_bytes),
                Some(&b"vendor=abc"[..])
            );
        });
    }

    #[test]
    fn the_current_span_is_injected_as_a_handle_on_it_would_be() {
        under_each_layer(|| {
            let mut outside = HeaderMap::new();
            inject_current(&mut outside);
            assert!(outside.is_empty(), "no span, no context: {outside:?}");
            let span = tracing::info_span!("upstream");
            let mut by_handle = HeaderMap::new();
            inject_headers(&span, &mut by_handle);
            let mut current = HeaderMap::new();
            span.in_scope(|| inject_current(&mut current));
            assert!(!traceparent(&current).is_empty());
            assert_eq!(traceparent(&current), traceparent(&by_handle));
        });
    }

    /// What is injected is what OpenTelemetry's own propagator writes, sampled or not,
    /// with or without a trace state.
    #[test]
    fn the_headers_are_the_propagators_own() {
        use opentelemetry::trace::{SpanId, TraceId, TraceState};
        let states = [
            TraceState::default(),
            TraceState::from_key_value([("vendor", "abc"), ("other", "x1")]).unwrap_or_default(),
        ];
        for flags in [
            TraceFlags::SAMPLED,
            TraceFlags::default(),
            TraceFlags::new(0xff),
        ] {
            for state in &states {
                let span_context = SpanContext::new(
                    TraceId::from_hex("04bf92f3577b34da6a3ce929d0e0e473")
                        .unwrap_or(TraceId::INVALID),
                    SpanId::from_hex("00f067aa0ba902b7").unwrap_or(SpanId::INVALID),
                    flags,
                    true,
                    state.clone(),
                );
                let mut ours = HeaderMap::new();
                inject(&span_context, &mut ours);
                let mut theirs = HeaderMap::new();
                TraceContextPropagator::new().inject_context(
                    &opentelemetry::Context::new().with_remote_span_context(span_context),
                    &mut HeaderInjector(&mut theirs),
                );
                // The propagator sends an empty `tracestate`; Sandgate sends none.
                if theirs.get(&TRACESTATE).is_some_and(HeaderValue::is_empty) {
                    theirs.remove(&TRACESTATE);
                }
                assert_eq!(ours, theirs, "{flags:?} {state:?}");
            }
        }
    }

    #[test]
    fn without_the_opentelemetry_layer_nothing_is_injected() {
        let mut headers = HeaderMap::new();
        inject_headers(&Span::current(), &mut headers);
        assert!(headers.is_empty());
    }
}
