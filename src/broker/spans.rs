//! The spans a publish runs in. Their `tracing` name is `rillkit.publish`;
//! `otel.name`, `otel.kind` and the `messaging.*` fields make them
//! OpenTelemetry messaging spans (`send <destination>`, kind producer)
//! through the application's `tracing-opentelemetry` layer. The consumer's
//! process spans are made where the handlers start.

use tracing::Instrument;

/// The span a publish of `entries` entries (items, messages) to
/// `destination` (a stream, list or channel name) runs in, with [`run`].
pub(crate) fn send(destination: &str, entries: usize) -> tracing::Span {
    let span = tracing::info_span!(
        "rillkit.publish",
        destination = %destination,
        entries,
        "otel.name" = %format_args!("send {destination}"),
        "otel.kind" = "producer",
        "messaging.system" = "redis",
        "messaging.operation.name" = "send",
        "messaging.operation.type" = "send",
        "messaging.destination.name" = %destination,
        "messaging.message.id" = tracing::field::Empty,
        "messaging.batch.message_count" = tracing::field::Empty,
        "otel.status_code" = tracing::field::Empty,
    );
    if entries > 1 {
        // Signed: OpenTelemetry has no unsigned attribute.
        let count = i64::try_from(entries).unwrap_or(i64::MAX);
        span.record("messaging.batch.message_count", count);
    }
    span
}

/// Runs a publish's command in its send span; then records the entry id
/// when it added one entry, or the error status when it failed.
pub(crate) async fn run<T: Sent>(
    span: &tracing::Span,
    command: impl Future<Output = Result<T, crate::Error>>,
) -> Result<T, crate::Error> {
    let done = command.instrument(span.clone()).await;
    match &done {
        Ok(sent) => sent.record(span),
        Err(_) => {
            span.record("otel.status_code", "error");
        }
    }
    done
}

/// What a publish answers, recorded in its send span.
pub(crate) trait Sent {
    fn record(&self, _span: &tracing::Span) {}
}

impl Sent for Vec<crate::EntryId> {
    /// The entry id, when the publish added one entry.
    fn record(&self, span: &tracing::Span) {
        if let [id] = self.as_slice() {
            span.record("messaging.message.id", tracing::field::display(id));
        }
    }
}

/// A list's length or a channel's receivers: nothing to record.
impl Sent for u64 {}

/// Scheduled entries have no entry id yet: nothing to record.
impl Sent for Vec<crate::ScheduleId> {}
