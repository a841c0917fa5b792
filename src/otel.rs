//! Feature `otel`: OpenTelemetry trace context across Redis.
//!
//! * A consumer's `rillkit.handle` span becomes a child of the remote span
//!   the entry's `traceparent` field names, through the application's
//!   `tracing-opentelemetry` layer (`OpenTelemetrySpanExt::set_parent`), so
//!   the handler's work shows in the publisher's trace.
//! * [`Broker::publish`](crate::Broker::publish) (and `publish_batch`)
//!   writes the current span's OpenTelemetry context as the entry's
//!   `traceparent` when it is valid (the application traces with
//!   OpenTelemetry and a span is entered); `publish_traced` writes the one
//!   it is given.
//!
//! Without the layer installed both are no-ops.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::TraceParent;

/// Makes `span` a child of the remote span `tp` names.
pub(crate) fn link(span: &tracing::Span, tp: &TraceParent) {
    let (Ok(trace), Ok(parent)) = (
        TraceId::from_hex(tp.trace_id()),
        SpanId::from_hex(tp.parent_id()),
    ) else {
        return;
    };
    let flags = if tp.sampled() {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let remote = SpanContext::new(trace, parent, flags, true, TraceState::default());
    // Fails only when no OpenTelemetry layer is installed: nothing to link.
    let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
}

/// The current span's OpenTelemetry context as a `traceparent`, when there
/// is a valid one.
pub(crate) fn current() -> Option<TraceParent> {
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return None;
    }
    TraceParent::new(
        &sc.trace_id().to_string(),
        &sc.span_id().to_string(),
        sc.is_sampled(),
    )
    .ok()
}
