//! Metrics through the [`metrics`](https://docs.rs/metrics) facade: rillkit
//! records, the application installs the exporter it wants (none installed:
//! recording costs next to nothing). Every series is labelled `stream` and
//! `group`. The guide (Operating, Metrics) has the table.

/// A handler's span: `base` fields (ending with a comma), and with feature
/// `otel` the messaging fields of a `process <destination>` span.
macro_rules! process_span {
    (
        $name:literal,
        destination = $dest:expr,
        client = $client:expr,
        base { $($base:tt)* },
        otel { $($extra:tt)* } $(,)?
    ) => {{
        #[cfg(feature = "otel")]
        let span = tracing::info_span!(
            $name,
            $($base)*
            "otel.name" = %format_args!("process {}", $dest),
            "otel.kind" = "consumer",
            "messaging.system" = "redis",
            "messaging.operation.name" = "process",
            "messaging.operation.type" = "process",
            "messaging.client.id" = %$client,
            $($extra)*
        );
        #[cfg(not(feature = "otel"))]
        let span = tracing::info_span!($name, $($base)*);
        span
    }};
}
pub(crate) use process_span;

use metrics::{Counter, Gauge, Histogram};

/// Entries whose handler returned `Ok` (then acked).
pub(crate) const HANDLED: &str = "rillkit_entries_handled_total";
/// Runs that returned an error or panicked (the entry is retried or
/// dead-lettered).
pub(crate) const FAILED: &str = "rillkit_entries_failed_total";
/// Entries moved to the dead-letter stream.
pub(crate) const DEAD_LETTERED: &str = "rillkit_entries_dead_lettered_total";
/// Runs of entries delivered before (delivery count > 1).
pub(crate) const REDELIVERED: &str = "rillkit_entries_redelivered_total";
/// Old dead letters removed by the dead-letter stream's cap.
pub(crate) const DEAD_LETTERS_TRIMMED: &str = "rillkit_dead_letters_trimmed_total";
/// How long handlers ran, in seconds.
pub(crate) const HANDLER_DURATION: &str = "rillkit_handler_duration_seconds";
/// From the entry id's timestamp (when Redis added it) to the end of a
/// successful run, in seconds.
pub(crate) const END_TO_END: &str = "rillkit_end_to_end_latency_seconds";
/// `XACK` round trips, in seconds.
pub(crate) const ACK_ROUND_TRIP: &str = "rillkit_ack_round_trip_seconds";
/// Handlers running now.
pub(crate) const IN_FLIGHT: &str = "rillkit_handlers_in_flight";
/// Gauge: the concurrency in effect (as built, fleet-wide or autoscaled).
pub(crate) const CONCURRENCY: &str = "rillkit_concurrency";
/// Counter: changes of the autoscaler (label `direction`: up, down).
pub(crate) const AUTOSCALE_CHANGES: &str = "rillkit_autoscale_changes_total";
/// Counter: entries a consumer would have read and did not, for want of
/// permits under its group's rate limit (counted at each take).
pub(crate) const RATE_LIMITED: &str = "rillkit_entries_rate_limited_total";
/// Read connections opened again after a loss or a failover.
pub(crate) const RECONNECTS: &str = "rillkit_reconnects_total";
/// Consumers restarted by the supervisor after an unrecoverable error or a
/// panic.
pub(crate) const RESTARTS: &str = "rillkit_consumer_restarts_total";
/// Entries not yet delivered to the group (polled).
pub(crate) const LAG: &str = "rillkit_lag";
/// Entries delivered to the group and not acked (polled).
pub(crate) const PENDING: &str = "rillkit_pending";
/// Age of the oldest pending entry, in seconds (polled; 0 when none).
pub(crate) const OLDEST_PENDING_AGE: &str = "rillkit_oldest_pending_age_seconds";
/// Entries in the dead-letter stream (polled).
pub(crate) const DEAD_LETTERS: &str = "rillkit_dead_letters";
/// 1 for the state a subscription is in, 0 for the others.
pub(crate) const STATE: &str = "rillkit_subscription_state";
/// Consumers of a group (server-wide collector).
pub(crate) const CONSUMERS: &str = "rillkit_consumers";
/// Groups the server-wide collector exported at its last pass.
pub(crate) const SERVER_GROUPS: &str = "rillkit_server_metrics_groups";
/// Groups it left out at its last pass (its cap).
pub(crate) const SERVER_SKIPPED: &str = "rillkit_server_metrics_groups_skipped";

/// The `# HELP` text of the gauges the server-wide collector sets, shared
/// by [`describe`] and the collector's own text exposition, so both say
/// the same.
pub(crate) const LAG_HELP: &str = "Entries not yet delivered to the group (XINFO GROUPS lag; polled; absent while Redis cannot tell).";
pub(crate) const PENDING_HELP: &str = "Entries delivered to the group and not acked (polled).";
pub(crate) const OLDEST_PENDING_AGE_HELP: &str =
    "Age of the oldest pending entry, from its id (polled; 0 when none).";
pub(crate) const DEAD_LETTERS_HELP: &str = "Entries in the dead-letter stream (polled).";
pub(crate) const CONSUMERS_HELP: &str =
    "Consumers of the group (server-wide collector; XINFO GROUPS).";
pub(crate) const SERVER_GROUPS_HELP: &str =
    "Groups the server-wide collector exported at its last pass.";
pub(crate) const SERVER_SKIPPED_HELP: &str =
    "Groups the server-wide collector left out at its last pass (max_groups).";

/// Every series' `# HELP` text and unit, given to the installed recorder
/// (an exporter prints them). Called at each start: a recorder installed
/// after the broker was built still gets them.
pub(crate) fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        HANDLED,
        Unit::Count,
        "Entries whose handler returned Ok (then acked)."
    );
    describe_counter!(
        FAILED,
        Unit::Count,
        "Handler runs that returned an error or panicked (the entry is retried or dead-lettered)."
    );
    describe_counter!(
        DEAD_LETTERED,
        Unit::Count,
        "Entries moved to the dead-letter stream."
    );
    describe_counter!(
        REDELIVERED,
        Unit::Count,
        "Runs of entries delivered before (delivery count > 1)."
    );
    describe_counter!(
        DEAD_LETTERS_TRIMMED,
        Unit::Count,
        "Old dead letters removed by the dead-letter stream's length cap."
    );
    describe_counter!(
        RECONNECTS,
        Unit::Count,
        "Read connections dropped to be opened again (a loss, a failover, a slot move)."
    );
    describe_counter!(
        RESTARTS,
        Unit::Count,
        "Consumers restarted by the supervisor after an unrecoverable error or a panic."
    );
    describe_histogram!(HANDLER_DURATION, Unit::Seconds, "How long handlers ran.");
    describe_histogram!(
        END_TO_END,
        Unit::Seconds,
        "From the entry id's timestamp (when Redis added it) to the end of a successful run."
    );
    describe_histogram!(ACK_ROUND_TRIP, Unit::Seconds, "XACK round trips.");
    describe_gauge!(IN_FLIGHT, Unit::Count, "Handlers running now.");
    describe_gauge!(
        CONCURRENCY,
        Unit::Count,
        "Handlers the subscription may run at once now (as built, set fleet-wide, or autoscaled)."
    );
    describe_counter!(
        AUTOSCALE_CHANGES,
        Unit::Count,
        "Concurrency changes of the autoscaler (label direction: up, down)."
    );
    describe_counter!(
        RATE_LIMITED,
        Unit::Count,
        "Permits a consumer asked its group's rate limit for and did not get yet (entries held back; one waiting through several takes counts at each)."
    );
    describe_gauge!(LAG, Unit::Count, LAG_HELP);
    describe_gauge!(PENDING, Unit::Count, PENDING_HELP);
    describe_gauge!(OLDEST_PENDING_AGE, Unit::Seconds, OLDEST_PENDING_AGE_HELP);
    describe_gauge!(DEAD_LETTERS, Unit::Count, DEAD_LETTERS_HELP);
    describe_gauge!(CONSUMERS, Unit::Count, CONSUMERS_HELP);
    describe_gauge!(SERVER_GROUPS, Unit::Count, SERVER_GROUPS_HELP);
    describe_gauge!(SERVER_SKIPPED, Unit::Count, SERVER_SKIPPED_HELP);
    describe_gauge!(
        STATE,
        "1 for the state the subscription is in (label state: starting, running, reconnecting, restarting, waiting_for_lease, failed, stopped, paused), 0 for the others."
    );
}

/// Counts an autoscaler's change and sets the concurrency gauge.
pub(crate) fn autoscaled(stream: &str, group: &str, direction: &'static str, concurrency: usize) {
    metrics::counter!(AUTOSCALE_CHANGES, "stream" => stream.to_owned(), "group" => group.to_owned(), "direction" => direction)
        .increment(1);
    self::concurrency(stream, group, concurrency);
}

/// Sets the concurrency gauge of a subscription.
pub(crate) fn concurrency(stream: &str, group: &str, concurrency: usize) {
    metrics::gauge!(CONCURRENCY, "stream" => stream.to_owned(), "group" => group.to_owned())
        .set(concurrency as f64);
}

/// Sets a group's consumer count (server-wide collector).
pub(crate) fn consumers(stream: &str, group: &str, consumers: u64) {
    metrics::gauge!(CONSUMERS, "stream" => stream.to_owned(), "group" => group.to_owned())
        .set(consumers as f64);
}

/// Records a server-wide collector's pass.
pub(crate) fn server_metrics_pass(groups: usize, skipped: usize) {
    describe();
    metrics::gauge!(SERVER_GROUPS).set(groups as f64);
    metrics::gauge!(SERVER_SKIPPED).set(skipped as f64);
}

/// Sets a subscription's state gauges: 1 for `current`, 0 for every other
/// state of `all`, so each state's series exists from the start.
pub(crate) fn state(stream: &str, group: &str, current: &str, all: &[&'static str]) {
    for &name in all {
        metrics::gauge!(STATE, "stream" => stream.to_owned(), "group" => group.to_owned(), "state" => name)
            .set(if name == current { 1.0 } else { 0.0 });
    }
}

/// One subscription's figures as polled from the server.
pub(crate) struct Polled {
    pub lag: Option<u64>,
    pub pending: u64,
    pub oldest_pending_age: Option<std::time::Duration>,
    pub dead_letters: u64,
}

/// Sets the polled gauges of one subscription. The dead letters are the
/// dead-letter stream's (`dlq`), which the stream's groups share: their
/// series is labelled by it instead of a group, so a sum over groups does
/// not count them once per group.
pub(crate) fn polled(stream: &str, group: &str, dlq: &str, f: Polled) {
    let labels = [("stream", stream.to_owned()), ("group", group.to_owned())];
    if let Some(lag) = f.lag {
        metrics::gauge!(LAG, &labels).set(lag as f64);
    }
    metrics::gauge!(PENDING, &labels).set(f.pending as f64);
    metrics::gauge!(OLDEST_PENDING_AGE, &labels)
        .set(f.oldest_pending_age.map_or(0.0, |d| d.as_secs_f64()));
    let dlq_labels = [("stream", stream.to_owned()), ("dlq", dlq.to_owned())];
    metrics::gauge!(DEAD_LETTERS, &dlq_labels).set(f.dead_letters as f64);
}

/// One subscription's series, registered once.
#[derive(Clone)]
pub(crate) struct ConsumerMetrics {
    pub handled: Counter,
    pub failed: Counter,
    pub dead_lettered: Counter,
    pub redelivered: Counter,
    pub dead_letters_trimmed: Counter,
    pub handler_duration: Histogram,
    pub end_to_end: Histogram,
    pub ack_round_trip: Histogram,
    pub in_flight: Gauge,
    pub reconnects: Counter,
    pub rate_limited: Counter,
}

impl ConsumerMetrics {
    pub(crate) fn new(stream: &str, group: &str) -> Self {
        let labels = [("stream", stream.to_owned()), ("group", group.to_owned())];
        ConsumerMetrics {
            handled: metrics::counter!(HANDLED, &labels),
            failed: metrics::counter!(FAILED, &labels),
            dead_lettered: metrics::counter!(DEAD_LETTERED, &labels),
            redelivered: metrics::counter!(REDELIVERED, &labels),
            dead_letters_trimmed: metrics::counter!(DEAD_LETTERS_TRIMMED, &labels),
            handler_duration: metrics::histogram!(HANDLER_DURATION, &labels),
            end_to_end: metrics::histogram!(END_TO_END, &labels),
            ack_round_trip: metrics::histogram!(ACK_ROUND_TRIP, &labels),
            in_flight: metrics::gauge!(IN_FLIGHT, &labels),
            reconnects: metrics::counter!(RECONNECTS, &labels),
            rate_limited: metrics::counter!(RATE_LIMITED, &labels),
        }
        .with_restarts_at_zero(&labels)
    }

    /// Registers the restart counter too (incremented elsewhere, by the
    /// supervisor), so an alert on its `increase()` sees a 0 before the
    /// first restart.
    fn with_restarts_at_zero(self, labels: &[(&'static str, String); 2]) -> Self {
        metrics::counter!(RESTARTS, labels).increment(0);
        self
    }

    /// The series of a list or channel subscription (labelled with its
    /// name as `stream` and an empty `group`): the counts and handler
    /// durations; the stream-only series are not registered.
    pub(crate) fn for_items(name: &str) -> Self {
        let labels = [("stream", name.to_owned()), ("group", String::new())];
        ConsumerMetrics {
            handled: metrics::counter!(HANDLED, &labels),
            failed: metrics::counter!(FAILED, &labels),
            dead_lettered: metrics::counter!(DEAD_LETTERED, &labels),
            redelivered: Counter::noop(),
            dead_letters_trimmed: Counter::noop(),
            handler_duration: metrics::histogram!(HANDLER_DURATION, &labels),
            end_to_end: Histogram::noop(),
            ack_round_trip: Histogram::noop(),
            in_flight: Gauge::noop(),
            reconnects: Counter::noop(),
            rate_limited: Counter::noop(),
        }
        .with_restarts_at_zero(&labels)
    }

    /// Records a successful run's end-to-end latency: the age of its entry
    /// id (when Redis added it).
    pub(crate) fn record_end_to_end(&self, id: &crate::stream::EntryId) {
        if let Some(age) = id.age() {
            self.end_to_end.record(age.as_secs_f64());
        }
    }
}

/// Counts a consumer restart.
pub(crate) fn restarted(stream: &str, group: &str) {
    metrics::counter!(RESTARTS, "stream" => stream.to_owned(), "group" => group.to_owned())
        .increment(1);
}

/// A subscription's read connection was opened again.
pub(crate) fn reconnected(stream: &str, group: &str) {
    metrics::counter!(RECONNECTS, "stream" => stream.to_owned(), "group" => group.to_owned())
        .increment(1);
}
