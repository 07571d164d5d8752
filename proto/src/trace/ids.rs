//! Trace context without an exporter: when no span leaves the process, a span needs only
//! its ids (the logs' `trace_id`, the `traceparent` a call passes on), not the
//! OpenTelemetry span that `tracing-opentelemetry` builds for each one (a builder at its
//! start, an SDK span at its end, a context looked up at every read), which cost about
//! 4 % of a gateway call's instructions and 4 % of a webhook delivery's. [`IdsLayer`]
//! gives each span a [`SpanContext`] of its own, in the same trace as its parent's;
//! [`super::continue_trace`] and [`super::inject_headers`] read and change it as they do
//! the OpenTelemetry layer's.

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
use tracing::span::{Attributes, Id};
use tracing::{Dispatch, Span, Subscriber};
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
        let parent = span.parent();
        let inherited = parent.as_ref().and_then(|parent| {
            let extensions = parent.extensions();
            let ids = extensions.get::<Ids>()?;
            Some(in_trace_of(&ids.0, generator.new_span_id()))
        });
        let ids = inherited.unwrap_or_else(|| {
            SpanContext::new(
                generator.new_trace_id(),
                generator.new_span_id(),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            )
        });
        span.extensions_mut().insert(Ids(ids));
    }
}

/// The ids of a span `span_id` in `parent`'s trace: its trace id, sampling decision and
/// state.
fn in_trace_of(parent: &SpanContext, span_id: SpanId) -> SpanContext {
    SpanContext::new(
        parent.trace_id(),
        span_id,
        parent.trace_flags(),
        false,
        parent.trace_state().clone(),
    )
}

/// Calls `change` with the ids of the span `id` of `dispatch`, if [`IdsLayer`] gave it
/// some: read through the registry, with no handle on the span (whose release would go
/// through every layer).
fn with_ids_of<R>(
    dispatch: &Dispatch,
    id: &Id,
    change: impl FnOnce(&mut SpanContext) -> R,
) -> Option<R> {
    let registry = dispatch.downcast_ref::<Registry>()?;
    let span = registry.span(id)?;
    let mut extensions = span.extensions_mut();
    extensions.get_mut::<Ids>().map(|ids| change(&mut ids.0))
}

/// Calls `change` with `span`'s ids, if [`IdsLayer`] gave it some.
fn with_ids<R>(span: &Span, change: impl FnOnce(&mut SpanContext) -> R) -> Option<R> {
    span.with_subscriber(|(id, dispatch)| with_ids_of(dispatch, id, change))
        .flatten()
}

/// Makes `span` part of `parent`'s trace (its own span id kept); false when `span` has no
/// ids of [`IdsLayer`]'s.
pub(super) fn set_parent(span: &Span, parent: &SpanContext) -> bool {
    with_ids(span, |ids| *ids = in_trace_of(parent, ids.span_id())).is_some()
}

/// `span`'s ids, if [`IdsLayer`] gave it some.
pub(super) fn span_context(span: &Span) -> Option<SpanContext> {
    with_ids(span, |ids| ids.clone())
}

/// The current span's ids, if [`IdsLayer`] gave it some.
pub(super) fn current_span_context() -> Option<SpanContext> {
    tracing::dispatcher::get_default(|dispatch| {
        with_ids_of(dispatch, dispatch.current_span().id()?, |ids| ids.clone())
    })
}
