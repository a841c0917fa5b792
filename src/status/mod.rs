//! What [`Broker::status`](crate::Broker::status) answers: per subscription
//! its state and counts (kept by the consumer loop and the supervisor as they
//! go), and figures from the server (lag, pending, oldest pending entry,
//! dead-letter length) polled by [`StatusPoller`] every `status_period`
//! (default 5 s).
//!
//! A board also carries its subscription's pause flag
//! ([`Broker::pause_local`](crate::Broker::pause_local)): every source's loop reads it
//! before it starts a read or a pop, wakes on its changes, and reports
//! [`SubscriptionState::Paused`] through [`Board::settle_pause`] once no
//! read of its own is in flight.

mod autoscale;
mod board;
mod display;
mod poller;
pub(crate) mod scale;

pub(crate) use board::{Board, Boards, int};
pub(crate) use poller::{StatusPoller, Stop};
pub(crate) use scale::{MAX_CONCURRENCY, Scale};

use std::time::{Duration, SystemTime};

use crate::Phase;
use crate::kind::SourceKind;

/// A snapshot of the broker: its phase and each subscription's status.
/// [`Broker::status`](crate::Broker::status) answers it from memory (no
/// Redis round trip); the server's figures in it are the status poller's
/// last reading. It prints as a table (`{}`, see its `Display`).
///
/// ```no_run
/// use rillkit::prelude::*;
/// use rillkit::SubscriptionState;
///
/// # fn f(broker: Broker) {
/// let status = broker.status();
/// // Readiness: running, Redis answers, every subscription reads or is paused.
/// if !status.is_ready() {
///     eprintln!("not ready:\n{status}");
/// }
/// for s in &status.subscriptions {
///     if let SubscriptionState::Reconnecting { last_error, .. } = &s.state {
///         eprintln!("{} reconnecting: {last_error}", s.id());
///     }
///     if let Some(server) = &s.server {
///         println!("{}: lag {:?}, {} pending", s.key, server.lag, server.pending);
///     }
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Status {
    /// Where the broker is in its lifecycle.
    pub phase: Phase,
    /// One per subscription, in the order they were added.
    pub subscriptions: Vec<SubscriptionStatus>,
    /// Redis answered the status poller's `PING` within the last two
    /// [`status_period`](crate::BrokerBuilder::status_period)s (10 s by
    /// default). `false` while it is unreachable or stalled (a paused or
    /// stopped server, a network partition), and before the broker started.
    pub redis_reachable: bool,
}

impl Status {
    /// Ready to serve: the broker is running, Redis answers
    /// ([`redis_reachable`](Self::redis_reachable)) and every subscription
    /// is [`Running`](SubscriptionState::Running) or
    /// [`Paused`](SubscriptionState::Paused) (for a readiness probe). A
    /// pause is an operator's decision, not a fault: a probe that failed on
    /// it would have the process taken out of service or restarted, and a
    /// restart forgets the pause.
    pub fn is_ready(&self) -> bool {
        self.phase == Phase::Running
            && self.redis_reachable
            && self.subscriptions.iter().all(|s| {
                matches!(
                    s.state,
                    SubscriptionState::Running | SubscriptionState::Paused
                )
            })
    }
}

/// Where a subscription's consumer is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubscriptionState {
    /// Not reading yet (the broker is starting, or the consumer is starting
    /// again after a restart).
    Starting,
    /// Reading and handling.
    Running,
    /// Its reads fail with a transient error (the connection, a failover, a
    /// server loading, an ACL or credentials being fixed) and are retried
    /// with backoff.
    Reconnecting {
        /// Since when its reads fail.
        since: SystemTime,
        /// The last error.
        last_error: String,
    },
    /// The consumer ended (an unrecoverable error or a panic) and is being
    /// restarted by the supervisor; `restarts` counts the restarts in the
    /// current window.
    Restarting {
        /// Restarts so far in the restart window.
        restarts: usize,
    },
    /// Its consumer name's lease is held by another live process (see
    /// [`ConsumerOptions::with_lease_ttl`](crate::ConsumerOptions::with_lease_ttl);
    /// for a list, its heartbeat key, see
    /// [`ListOptions::with_heartbeat_ttl`](crate::ListOptions::with_heartbeat_ttl)):
    /// it waits for the lease to lapse before reading.
    WaitingForLease {
        /// The holder's token: `<hostname>-<pid>-<random>`.
        holder: String,
        /// Since when it waits.
        since: SystemTime,
    },
    /// It failed past its restart limit: it no longer runs.
    Failed,
    /// Stopped with the broker.
    Stopped,
    /// Paused by [`Broker::pause_local`](crate::Broker::pause_local): it starts no read
    /// or pop (and a stream consumer claims nothing from other consumers)
    /// until [`Broker::resume_local`](crate::Broker::resume_local); what it already
    /// holds still runs, is acked or settled, and its lease or heartbeat
    /// and its held entries' refreshes go on. Counts as ready
    /// ([`Status::is_ready`]).
    Paused,
}

impl SubscriptionState {
    /// Every state's name, as [`name`](Self::name) gives it.
    pub const NAMES: [&'static str; 8] = [
        "starting",
        "running",
        "reconnecting",
        "restarting",
        "waiting_for_lease",
        "failed",
        "stopped",
        "paused",
    ];

    /// The state's name, without its details: `starting`, `running`,
    /// `reconnecting`, `restarting`, `waiting_for_lease`, `failed`,
    /// `stopped` or `paused` (the `state` label of
    /// `rillkit_subscription_state`).
    pub fn name(&self) -> &'static str {
        match self {
            SubscriptionState::Starting => "starting",
            SubscriptionState::Running => "running",
            SubscriptionState::Reconnecting { .. } => "reconnecting",
            SubscriptionState::Restarting { .. } => "restarting",
            SubscriptionState::WaitingForLease { .. } => "waiting_for_lease",
            SubscriptionState::Failed => "failed",
            SubscriptionState::Stopped => "stopped",
            SubscriptionState::Paused => "paused",
        }
    }
}

/// One subscription's status.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SubscriptionStatus {
    /// What it reads.
    pub kind: SourceKind,
    /// The key it reads: a stream, a list, or a channel (or pattern).
    pub key: String,
    /// The consumer group (empty for lists and channels).
    pub group: String,
    /// This subscription's consumer name.
    pub consumer: String,
    /// Where it moves what fails for good: the dead-letter stream (or list);
    /// empty for a channel and an ordered stream (each partition has its
    /// own).
    pub dlq: String,
    /// Where its consumer is.
    pub state: SubscriptionState,
    /// Handler runs that returned `Ok` since the broker started.
    pub handled: u64,
    /// Handler runs that failed (an error or a panic) since the broker
    /// started.
    pub failed: u64,
    /// Entries this broker moved to the dead-letter stream since it started.
    pub dead_lettered: u64,
    /// Pub/Sub messages dropped because the subscription's buffer was full
    /// (0 for other kinds).
    pub dropped: u64,
    /// Figures read from the server at the last poll (`None` before the
    /// first). For an ordered stream, the sums over its partitions (the
    /// oldest pending age: the oldest of any).
    pub server: Option<ServerFigures>,
    /// An [ordered stream](crate::Stream::ordered_by)'s partitions, by
    /// index (empty for any other subscription).
    pub partitions: Vec<PartitionStatus>,
    /// A pause was asked for and
    /// not undone: no read or pop starts. [`state`](Self::state) turns
    /// [`Paused`](SubscriptionState::Paused) once no read of its own is in
    /// flight (at once for an idle one; a blocked read is cut short with
    /// `CLIENT UNBLOCK`, or else ends within its `block`).
    /// Asked for in this process ([`Broker::pause_local`](crate::Broker::pause_local))
    /// or for the fleet ([`fleet_paused`](Self::fleet_paused)).
    pub paused: bool,
    /// The pause was asked for the whole fleet (kept in Redis:
    /// [`Broker::pause_fleet`](crate::Broker::pause_fleet), `rillkit pause`,
    /// the dashboard), so every process of the group (or list) is paused
    /// until it is resumed there.
    pub fleet_paused: bool,
    /// Handlers it may run at once now: its `concurrency`, or the fleet-wide
    /// value set with `rillkit scale` (or
    /// [`Admin::scale_group`](crate::admin::Admin::scale_group)) where it may change.
    pub concurrency: usize,
    /// Handlers running now (as of its loop's last turn).
    pub in_flight: usize,
    /// The group's rate limit
    /// ([`ConsumerOptions::with_rate_limit`](crate::ConsumerOptions::with_rate_limit)),
    /// if it has one.
    pub rate_limit: Option<crate::rate_limit::RateLimit>,
}

impl SubscriptionStatus {
    /// What names this subscription for
    /// [`Broker::pause_local`](crate::Broker::pause_local) and
    /// [`resume_local`](crate::Broker::resume_local).
    pub fn id(&self) -> SubscriptionId {
        SubscriptionId {
            kind: self.kind,
            key: self.key.clone(),
            group: self.group.clone(),
            consumer: self.consumer.clone(),
        }
    }
}

/// Names one subscription of a broker: what it reads, its key, its group
/// and its consumer name (unique among a broker's stream and list
/// subscriptions). Made with [`stream`](Self::stream) or
/// [`list`](Self::list), or taken from a status row with
/// [`SubscriptionStatus::id`]. It prints as `stream orders, group billing,
/// consumer web-1`.
///
/// ```no_run
/// use rillkit::prelude::*;
/// use rillkit::SubscriptionId;
///
/// # fn f(broker: Broker) -> Result<(), rillkit::Error> {
/// // Stop reading `orders` in this process (what it holds still runs and
/// // is acked), then read again.
/// let id = SubscriptionId::stream("orders", "billing", "web-1");
/// broker.pause_local(&id)?;
/// broker.resume_local(&id)?;
/// // Or every subscription the status shows (Pub/Sub ones cannot pause).
/// for s in broker.status().subscriptions {
///     if s.kind != rillkit::SourceKind::Channel {
///         println!("pausing {}", s.id());
///         broker.pause_local(&s.id())?;
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SubscriptionId {
    /// What it reads.
    pub kind: SourceKind,
    /// The stream or list key, or the channel (or pattern).
    pub key: String,
    /// The consumer group (empty for lists and channels).
    pub group: String,
    /// The consumer name.
    pub consumer: String,
}

impl SubscriptionId {
    /// The subscription of `consumer` in `group` on `stream`.
    pub fn stream(
        stream: impl Into<String>,
        group: impl Into<String>,
        consumer: impl Into<String>,
    ) -> Self {
        SubscriptionId {
            kind: SourceKind::Stream,
            key: stream.into(),
            group: group.into(),
            consumer: consumer.into(),
        }
    }

    /// The reliable subscription of `consumer` on `list` (for an
    /// at-most-once one, set [`kind`](Self::kind) to
    /// [`SourceKind::ListAtMostOnce`]).
    pub fn list(list: impl Into<String>, consumer: impl Into<String>) -> Self {
        SubscriptionId {
            kind: SourceKind::List,
            key: list.into(),
            group: String::new(),
            consumer: consumer.into(),
        }
    }

    /// With another [`kind`](Self::kind).
    #[must_use]
    pub fn with_kind(mut self, kind: SourceKind) -> Self {
        self.kind = kind;
        self
    }
}

/// A subscription's figures as the server reported them at one poll.
///
/// The fields below are described for a stream. For a list: `lag` is the
/// list's length (`LLEN`), `pending` the length of this consumer's
/// processing list (0 at most once), `oldest_pending_age` is `None`, and
/// `dead_letters` the dead-letter list's length. Channels are not polled
/// (`server` stays `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerFigures {
    /// When they were read.
    pub polled_at: SystemTime,
    /// Entries in the stream not yet delivered to the group, in entries:
    /// `XINFO GROUPS`'s `lag` (Redis 7+). `None` when Redis cannot tell
    /// (after entries were deleted in the group's unread range, or on Redis
    /// before 7); after unread entries were *trimmed* (`MAXLEN`) it counts
    /// them too, so it over-counts.
    pub lag: Option<u64>,
    /// Entries delivered to the group and not acked yet, all consumers
    /// (`XINFO GROUPS` `pending`).
    pub pending: u64,
    /// Age of the oldest pending entry, from its entry id's timestamp (when
    /// it was added), or `None` when nothing is pending.
    pub oldest_pending_age: Option<Duration>,
    /// Entries in the dead-letter stream (`XLEN`).
    pub dead_letters: u64,
}

/// One partition of an [ordered stream](crate::Stream::ordered_by), as one
/// consumer sees it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PartitionStatus {
    /// Its index, `0..partitions`.
    pub index: u16,
    /// Its stream key, `<name>:p<index>`.
    pub key: String,
    /// Whether this consumer owns it now (holds its lease and reads it).
    pub owned: bool,
    /// This consumer's reader of it: `Running` while owned, `WaitingForLease`
    /// while its previous owner hands it over, `Stopped` once handed on.
    pub state: SubscriptionState,
    /// Entries of it this consumer handled.
    pub handled: u64,
    /// Handler runs of it that failed here.
    pub failed: u64,
    /// Entries of it this consumer moved to its dead-letter stream.
    pub dead_lettered: u64,
    /// Its keys marked failed with
    /// [`OnKeyFailure::FailRest`](crate::OnKeyFailure::FailRest), as its
    /// owner read them last (0 where it is not owned).
    pub failed_keys: u64,
    /// Its group's figures from the server (lag, pending, dead letters),
    /// polled like the subscription's.
    pub server: Option<ServerFigures>,
}
