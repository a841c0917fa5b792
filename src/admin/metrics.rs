//! Server-wide metrics: the figures of every stream and consumer group on the
//! server, not only those this process consumes, exported through the same
//! `metrics` facade and series names as a broker's own polled gauges.

use std::time::Duration;

use super::Admin;
use crate::error::Error;
use crate::telemetry;

/// A collector of every stream's and consumer group's figures on the server:
/// lag, pending entries, the age of the oldest pending entry, consumers, and
/// the dead-letter stream's length, as the gauges `rillkit_lag`,
/// `rillkit_pending`, `rillkit_oldest_pending_age_seconds`,
/// `rillkit_consumers` and `rillkit_dead_letters` (labels `stream`,
/// `group`) that a broker sets for its own subscriptions. A lagging group of
/// another service shows up beside this one's.
///
/// Off unless the application runs it (it walks the keyspace: `SCAN … TYPE
/// stream` on every master each period, then `XINFO GROUPS`, one
/// `XPENDING … 1` per group with pending entries and one `XLEN` per
/// stream). Streams that are another stream's default dead-letter stream are
/// not reported as streams. At most [`max_groups`](Self::max_groups) groups
/// are exported per pass (label cardinality stays bounded); the rest are
/// counted in `rillkit_server_metrics_groups_skipped`. A deleted stream's
/// series keep their last values (the `metrics` facade cannot remove them).
///
/// ```no_run
/// # async fn f(broker: rillkit::Broker) -> Result<(), rillkit::Error> {
/// use rillkit::admin::{Admin, ServerMetrics};
///
/// let admin = Admin::for_broker(&broker).await?;
/// actix_rt::spawn(ServerMetrics::new().with_max_groups(500).run(admin));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ServerMetrics {
    period: Duration,
    max_groups: usize,
}

impl Default for ServerMetrics {
    fn default() -> Self {
        ServerMetrics {
            period: Duration::from_secs(30),
            max_groups: 200,
        }
    }
}

/// What one pass of [`ServerMetrics::collect`] exported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Collected {
    /// Streams found (dead-letter streams excluded).
    pub streams: usize,
    /// Groups whose gauges were set.
    pub groups: usize,
    /// Groups left out by the cap.
    pub skipped: usize,
}

impl ServerMetrics {
    /// Every 30 s, at most 200 groups.
    pub fn new() -> Self {
        Self::default()
    }

    /// How often [`run`](Self::run) collects (default 30 s; at least 1 s).
    #[must_use]
    pub fn with_period(mut self, period: Duration) -> Self {
        self.period = period.max(Duration::from_secs(1));
        self
    }

    /// The most groups exported per pass (default 200), in the order of
    /// their stream's name.
    #[must_use]
    pub fn with_max_groups(mut self, groups: usize) -> Self {
        self.max_groups = groups;
        self
    }

    /// The period, set with [`with_period`](Self::with_period).
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The cap, set with [`with_max_groups`](Self::with_max_groups).
    pub fn max_groups(&self) -> usize {
        self.max_groups
    }

    /// Collects every [`period`](Self::period) until the future is
    /// dropped. A failed pass is logged (WARN) and tried again next period.
    pub async fn run(self, admin: Admin) {
        loop {
            if let Err(e) = self.collect(&admin).await {
                tracing::warn!(error = %e, "server-wide metrics: the pass failed; trying again next period");
            }
            tokio::time::sleep(self.period).await;
        }
    }

    /// One pass: finds every stream and group and sets their gauges.
    ///
    /// # Errors
    /// A connection error, or [`Error::Redis`] when the ACL user may not run
    /// `SCAN`, `XINFO GROUPS`, `XPENDING` or `XLEN` (a key that changed type
    /// meanwhile is skipped).
    pub async fn collect(&self, admin: &Admin) -> Result<Collected, Error> {
        let streams = admin.origin_streams().await?;
        let mut done = Collected {
            streams: streams.len(),
            ..Collected::default()
        };
        for stream in &streams {
            let groups = match admin.groups(stream).await {
                Ok(g) => g,
                Err(e) if e.is_connection() => return Err(e),
                // Deleted or replaced by another type since the scan.
                Err(_) => continue,
            };
            if groups.is_empty() {
                continue;
            }
            let room = self.max_groups.saturating_sub(done.groups);
            if room < groups.len() {
                done.skipped += groups.len() - room;
            }
            if room == 0 {
                continue;
            }
            let dead_letters = admin.stream_len(&admin.dlq_of(stream)).await?;
            for g in groups.into_iter().take(room) {
                let oldest = if g.pending > 0 {
                    admin
                        .pending(stream, &g.name, 1)
                        .await?
                        .first()
                        .and_then(|p| p.id.age())
                } else {
                    None
                };
                telemetry::polled(
                    stream,
                    &g.name,
                    telemetry::Polled {
                        lag: g.lag,
                        pending: g.pending,
                        oldest_pending_age: oldest,
                        dead_letters,
                    },
                );
                telemetry::consumers(stream, &g.name, g.consumers);
                done.groups += 1;
            }
        }
        telemetry::server_metrics_pass(done.groups, done.skipped);
        if done.skipped > 0 {
            tracing::warn!(
                exported = done.groups,
                skipped = done.skipped,
                "server-wide metrics: more groups than max_groups; the rest are not exported"
            );
        }
        Ok(done)
    }
}
