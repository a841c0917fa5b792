//! Feature `otel`: OpenTelemetry trace context across Redis, by the
//! OpenTelemetry semantic conventions for messaging spans, through the
//! application's `tracing-opentelemetry` layer.
//!
//! The spans themselves are `tracing` spans, made with or without this
//! feature; their OpenTelemetry name and kind come from the fields
//! `otel.name` and `otel.kind`, which `tracing-opentelemetry` reads, and
//! their `messaging.*` fields become the span's attributes
//! (`messaging.system` is `"redis"`). The `tracing` names are kept, so log
//! lines and filters written for them still match:
//!
//! | `tracing` span | OpenTelemetry name | kind | made by |
//! |----------------|--------------------|------|---------|
//! | `rillkit.publish` | `send <stream>` | producer | `publish`, `publish_traced`, `publish_batch`, `publish_keyed`, `publish_list`, `publish_list_batch`, `publish_channel` |
//! | `rillkit.handle` | `process <stream>` (list, channel) | consumer | an entry's (item's, message's) handler |
//! | `rillkit.handle_batch` | `process <stream>` | consumer | a stream's batch handler |
//!
//! What this module adds with the feature:
//!
//! * A stream consumer's process span carries a span link to the remote
//!   span the entry's `traceparent` field names
//!   (`OpenTelemetrySpanExt::add_link`), or, with
//!   [`TraceLinking::Parent`](crate::TraceLinking::Parent), is its child
//!   (`OpenTelemetrySpanExt::set_parent`).
//! * [`Broker::publish`](crate::Broker::publish) (and `publish_batch`,
//!   `publish_keyed`), called inside a span with a valid OpenTelemetry
//!   context, writes its send span's context as the entry's `traceparent`
//!   (the caller's span's context when the send span is filtered out), so
//!   the consumer's span links to the send span. Called outside such a span
//!   it writes none. `publish_traced` writes the `traceparent` it is given
//!   and makes its send span a child of it.
//!
//! Without the layer installed all of this does nothing.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::{TraceLinking, TraceParent};

/// The remote span context `tp` names.
fn remote(tp: &TraceParent) -> Option<SpanContext> {
    let trace = TraceId::from_hex(tp.trace_id()).ok()?;
    let span = SpanId::from_hex(tp.parent_id()).ok()?;
    let flags = if tp.sampled() {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    Some(SpanContext::new(
        trace,
        span,
        flags,
        true,
        TraceState::default(),
    ))
}

/// Makes `span` a child of the remote span `tp` names.
pub(crate) fn set_parent(span: &tracing::Span, tp: &TraceParent) {
    if let Some(remote) = remote(tp) {
        // Fails only when no OpenTelemetry layer is installed (or the span
        // is disabled): nothing to parent.
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
    }
}

/// Relates a consumer's `span` to the producer's span `tp` names: a link,
/// or its parent.
pub(crate) fn follow(span: &tracing::Span, tp: &TraceParent, linking: TraceLinking) {
    match linking {
        TraceLinking::Parent => set_parent(span, tp),
        TraceLinking::Link => add_link(span, tp),
    }
}

/// Relates a batch's `span` to the producer spans its entries name: links
/// to each; with [`TraceLinking::Parent`], the first is its parent instead.
pub(crate) fn follow_all(
    span: &tracing::Span,
    tps: impl IntoIterator<Item = TraceParent>,
    linking: TraceLinking,
) {
    let mut tps = tps.into_iter();
    if linking == TraceLinking::Parent {
        if let Some(first) = tps.next() {
            set_parent(span, &first);
        }
    }
    for tp in tps {
        add_link(span, &tp);
    }
}

fn add_link(span: &tracing::Span, tp: &TraceParent) {
    if let Some(remote) = remote(tp) {
        span.add_link(remote);
    }
}

/// The `traceparent` a publish running in the send span `send` writes:
/// none outside a span with a valid OpenTelemetry context; else the send
/// span's context, or the caller's when the send span is filtered out.
/// Called before `send` is entered.
pub(crate) fn for_send(send: &tracing::Span) -> Option<TraceParent> {
    let caller = tracing::Span::current();
    let caller_tp = of(&caller)?;
    Some(of(send).unwrap_or(caller_tp))
}

/// `span`'s OpenTelemetry context as a `traceparent`, when it is valid.
fn of(span: &tracing::Span) -> Option<TraceParent> {
    let cx = span.context();
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
