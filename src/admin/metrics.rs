//! Server-wide metrics: the figures of every stream and consumer group on the
//! server, not only those this process consumes, exported through the same
//! `metrics` facade and series names as a broker's own polled gauges, or
//! read as a [`MetricsSnapshot`] and written in the Prometheus text format
//! (what `rillkit metrics` prints).

use std::fmt::Write as _;

use std::time::Duration;

use super::Admin;
use crate::error::Error;
use crate::telemetry;

/// A collector of every stream's and consumer group's figures on the server:
/// lag, pending entries, the age of the oldest pending entry, consumers, and
/// the dead-letter stream's length, as the gauges `rillkit_lag`,
/// `rillkit_pending`, `rillkit_oldest_pending_age_seconds`,
/// `rillkit_consumers` (labels `stream`, `group`) and `rillkit_dead_letters`
/// (labels `stream`, `dlq`: one series per dead-letter stream, which the
/// stream's groups share) that a broker sets for its own subscriptions. A lagging group of
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

/// One pass's figures, read by [`ServerMetrics::snapshot`] without
/// setting any gauge.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// Streams found, groups read, groups left out by the cap.
    pub collected: Collected,
    /// Each group read, in the order of its stream's name.
    pub groups: Vec<GroupMetrics>,
}

/// One consumer group's figures in a [`MetricsSnapshot`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct GroupMetrics {
    /// The stream.
    pub stream: String,
    /// The group.
    pub group: String,
    /// Entries not yet delivered to the group (`XINFO GROUPS` `lag`;
    /// `None` when Redis cannot tell).
    pub lag: Option<u64>,
    /// Entries delivered to the group and not acked.
    pub pending: u64,
    /// Age of the oldest pending entry, from its id (`None`: nothing
    /// pending).
    pub oldest_pending_age: Option<Duration>,
    /// Consumers of the group.
    pub consumers: u64,
    /// The stream's dead-letter stream, which its groups share.
    pub dlq: String,
    /// Entries in the stream's dead-letter stream.
    pub dead_letters: u64,
}

impl MetricsSnapshot {
    /// The snapshot in the Prometheus text exposition format (0.0.4): for
    /// each of `rillkit_lag`, `rillkit_pending`,
    /// `rillkit_oldest_pending_age_seconds`, `rillkit_consumers`,
    /// `rillkit_dead_letters`, `rillkit_server_metrics_groups` and
    /// `rillkit_server_metrics_groups_skipped`, its `# HELP` (the text the
    /// library gives the installed recorder) and `# TYPE … gauge` lines,
    /// then one sample per group labelled `stream` and `group`, and for
    /// `rillkit_dead_letters` one per dead-letter stream labelled `stream`
    /// and `dlq` (label values escaped as the format says). A group whose lag Redis cannot
    /// tell has no `rillkit_lag` sample. For node_exporter's textfile
    /// collector, a cron job, or a scrape endpoint.
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        let family = |out: &mut String, name: &str, help: &str| {
            let help = help.replace('\\', "\\\\").replace('\n', "\\n");
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        };
        type Value = fn(&GroupMetrics) -> Option<String>;
        let per_group: [(&str, &str, Value); 4] = [
            (telemetry::LAG, telemetry::LAG_HELP, |g| {
                g.lag.map(|l| l.to_string())
            }),
            (telemetry::PENDING, telemetry::PENDING_HELP, |g| {
                Some(g.pending.to_string())
            }),
            (
                telemetry::OLDEST_PENDING_AGE,
                telemetry::OLDEST_PENDING_AGE_HELP,
                |g| {
                    Some(
                        g.oldest_pending_age
                            .map_or(0.0, |d| d.as_secs_f64())
                            .to_string(),
                    )
                },
            ),
            (telemetry::CONSUMERS, telemetry::CONSUMERS_HELP, |g| {
                Some(g.consumers.to_string())
            }),
        ];
        for (name, help, value) in per_group {
            family(&mut out, name, help);
            for g in &self.groups {
                if let Some(v) = value(g) {
                    let _ = writeln!(
                        out,
                        "{name}{{stream=\"{}\",group=\"{}\"}} {v}",
                        label_value(&g.stream),
                        label_value(&g.group)
                    );
                }
            }
        }
        // Once per dead-letter stream, which a stream's groups share.
        family(
            &mut out,
            telemetry::DEAD_LETTERS,
            telemetry::DEAD_LETTERS_HELP,
        );
        let mut told = std::collections::HashSet::new();
        for g in &self.groups {
            if told.insert((&g.stream, &g.dlq)) {
                let _ = writeln!(
                    out,
                    "{}{{stream=\"{}\",dlq=\"{}\"}} {}",
                    telemetry::DEAD_LETTERS,
                    label_value(&g.stream),
                    label_value(&g.dlq),
                    g.dead_letters
                );
            }
        }
        let c = &self.collected;
        for (name, help, v) in [
            (
                telemetry::SERVER_GROUPS,
                telemetry::SERVER_GROUPS_HELP,
                c.groups,
            ),
            (
                telemetry::SERVER_SKIPPED,
                telemetry::SERVER_SKIPPED_HELP,
                c.skipped,
            ),
        ] {
            family(&mut out, name, help);
            let _ = writeln!(out, "{name} {v}");
        }
        out
    }
}

/// A label value as the text format writes it: `\`, `"` and a line feed
/// escaped.
fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
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
    /// As [`snapshot`](Self::snapshot).
    pub async fn collect(&self, admin: &Admin) -> Result<Collected, Error> {
        let snap = self.snapshot(admin).await?;
        for g in &snap.groups {
            telemetry::polled(
                &g.stream,
                &g.group,
                &g.dlq,
                telemetry::Polled {
                    lag: g.lag,
                    pending: g.pending,
                    oldest_pending_age: g.oldest_pending_age,
                    dead_letters: g.dead_letters,
                },
            );
            telemetry::consumers(&g.stream, &g.group, g.consumers);
        }
        let done = snap.collected;
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

    /// One pass that reads every stream's and group's figures (within
    /// [`max_groups`](Self::max_groups)) and sets no gauge: for a caller
    /// that writes them itself, e.g. with
    /// [`MetricsSnapshot::to_prometheus`].
    ///
    /// # Errors
    /// A connection error, or [`Error::Redis`] when the ACL user may not run
    /// `SCAN`, `XINFO GROUPS`, `XPENDING` or `XLEN` (a key that changed type
    /// meanwhile is skipped).
    pub async fn snapshot(&self, admin: &Admin) -> Result<MetricsSnapshot, Error> {
        let streams = admin.origin_streams().await?;
        let mut snap = MetricsSnapshot::default();
        let done = &mut snap.collected;
        done.streams = streams.len();
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
            let dlq = admin.dlq_of(stream);
            let dead_letters = admin.stream_len(&dlq).await?;
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
                snap.groups.push(GroupMetrics {
                    stream: stream.clone(),
                    group: g.name,
                    lag: g.lag,
                    pending: g.pending,
                    oldest_pending_age: oldest,
                    consumers: g.consumers,
                    dlq: dlq.clone(),
                    dead_letters,
                });
                done.groups += 1;
            }
        }
        Ok(snap)
    }
}
