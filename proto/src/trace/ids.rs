//! Trace context without an exporter: when no span leaves the process, a span needs only
//! its ids (the logs' `trace_id`, the `traceparent` a call passes on), not the
//! OpenTelemetry span that `tracing-opentelemetry` builds for each one (a builder at its
//! start, an SDK span at its end, a context looked up at every read), which cost about
//! 4 % of a gateway call's instructions and 4 % of a webhook delivery's. [`IdsLayer`]
//! gives each span a [`SpanContext`] of its own, in the same trace as its parent's;
//! [`super::continue_trace`] and [`super::inject_headers`] read and change it as they do
//! the OpenTelemetry layer's.

use opentelemetry::trace::{SpanContext, TraceFlags, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
use tracing::span::{Attributes, Id};
use tracing::{Span, Subscriber};
use tracing_subscriber::Registry;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// A span's ids, kept in its extensions by [`IdsLayer`].
struct Ids(SpanContext);

/// The layer that gives every span it sees its ids: a new trace for a span without a
/// parent, its parent's trace otherwise; sampled, as OpenTelemetry's default sampler
/// decides for a trace that starts here.
#[derive(Clone, Copy, Debug, Default)]
pub struct IdsLayer;

impl<S> tracing_subscriber::Layer<S> for IdsLayer
where
    S: Subscriber + for<'lookup> LookupSpan<'lookup>,
{
    fn on_new_span(&self, _attributes: &Attributes<'_>, id: &Id, context: Context<'_, S>) {
        let Some(span) = context.span(id) else {
            return;
        };
        let generator = RandomIdGenerator::default();
        let parent = span
            .parent()
            .and_then(|parent| parent.extensions().get::<Ids>().map(|ids| ids.0.clone()));
        let ids = match parent {
            Some(parent) => SpanContext::new(
                parent.trace_id(),
                generator.new_span_id(),
                parent.trace_flags(),
                false,
                parent.trace_state().clone(),
            ),
            None => SpanContext::new(
                generator.new_trace_id(),
                generator.new_span_id(),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
        };
        span.extensions_mut().insert(Ids(ids));
    }
}

/// Calls `change` with `span`'s ids, if [`IdsLayer`] gave it some.
fn with_ids<R>(span: &Span, change: impl FnOnce(&mut SpanContext) -> R) -> Option<R> {
    span.with_subscriber(|(id, dispatch)| {
        let registry = dispatch.downcast_ref::<Registry>()?;
        let span = registry.span(id)?;
        let mut extensions = span.extensions_mut();
        extensions.get_mut::<Ids>().map(|ids| change(&mut ids.0))
    })
    .flatten()
}

/// Makes `span` part of `parent`'s trace (its own span id kept); false when `span` has no
/// ids of [`IdsLayer`]'s.
pub(super) fn set_parent(span: &Span, parent: &SpanContext) -> bool {
    with_ids(span, |ids| {
        *ids = SpanContext::new(
            parent.trace_id(),
            ids.span_id(),
            parent.trace_flags(),
            false,
            parent.trace_state().clone(),
        );
    })
    .is_some()
}

/// `span`'s ids, if [`IdsLayer`] gave it some.
pub(super) fn span_context(span: &Span) -> Option<SpanContext> {
    with_ids(span, |ids| ids.clone())
}

/// The current span's ids, if [`IdsLayer`] gave it some: read through the registry, with
/// no handle on the span (whose release would go through every layer).
pub(super) fn current_span_context() -> Option<SpanContext> {
    tracing::dispatcher::get_default(|dispatch| {
        let current = dispatch.current_span();
        let registry = dispatch.downcast_ref::<Registry>()?;
        let span = registry.span(current.id()?)?;
        let extensions = span.extensions();
        extensions.get::<Ids>().map(|ids| ids.0.clone())
    })
}
