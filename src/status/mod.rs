//! What [`Broker::status`](crate::Broker::status) answers: per subscription
//! its state and counts (kept by the consumer loop and the supervisor as they
//! go), and figures from the server (lag, pending, oldest pending entry,
//! dead-letter length) polled by [`StatusPoller`] every `status_period`
//! (default 5 s).
//!
//! A board also carries its subscription's pause flag
//! ([`Broker::pause`](crate::Broker::pause)): every source's loop reads it
//! before it starts a read or a pop, wakes on its changes, and reports
//! [`SubscriptionState::Paused`] through [`Board::settle_pause`] once no
//! read of its own is in flight.

mod display;
mod poller;

pub(crate) use poller::{StatusPoller, Stop};

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use crate::Phase;
use crate::kind::SourceKind;

/// The live subscriptions' boards, in the order they were added: what
/// `Broker::status` reads and the status poller fills, and when Redis last
/// answered the poller. Cloning shares them.
#[derive(Clone, Default)]
pub(crate) struct Boards(Arc<Shared>);

#[derive(Default)]
struct Shared {
    boards: Mutex<Vec<Arc<Board>>>,
    /// When Redis last answered the status poller's `PING`, and how long
    /// an answer stays good (two polling periods).
    contact: Mutex<Option<(Instant, Duration)>>,
}

impl Boards {
    pub(crate) fn new(boards: Vec<Arc<Board>>) -> Self {
        Boards(Arc::new(Shared {
            boards: Mutex::new(boards),
            contact: Mutex::new(None),
        }))
    }

    /// A copy of the list as it is now.
    pub(crate) fn list(&self) -> Vec<Arc<Board>> {
        self.0.boards.lock().expect("boards lock").clone()
    }

    pub(crate) fn add(&self, board: Arc<Board>) {
        self.0.boards.lock().expect("boards lock").push(board);
    }

    /// A removed subscription leaves the status.
    pub(crate) fn forget(&self, board: &Arc<Board>) {
        self.0
            .boards
            .lock()
            .expect("boards lock")
            .retain(|b| !Arc::ptr_eq(b, board));
    }

    /// Redis answered now; the answer stays good for `valid_for`.
    pub(crate) fn contact(&self, valid_for: Duration) {
        *self.0.contact.lock().expect("contact lock") = Some((Instant::now(), valid_for));
    }

    /// Whether Redis answered recently enough (never before the first
    /// answer).
    pub(crate) fn in_contact(&self) -> bool {
        self.0
            .contact
            .lock()
            .expect("contact lock")
            .is_some_and(|(at, valid_for)| at.elapsed() <= valid_for)
    }
}

/// An integer reply as `u64` (`None` for anything else, or a negative one).
pub(crate) fn int(v: &redis::Value) -> Option<u64> {
    match v {
        redis::Value::Int(i) => u64::try_from(*i).ok(),
        _ => None,
    }
}

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
    /// Paused by [`Broker::pause`](crate::Broker::pause): it starts no read
    /// or pop (and a stream consumer claims nothing from other consumers)
    /// until [`Broker::resume`](crate::Broker::resume); what it already
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
    /// A pause was asked for ([`Broker::pause`](crate::Broker::pause)) and
    /// not undone: no read or pop starts. [`state`](Self::state) turns
    /// [`Paused`](SubscriptionState::Paused) once no read of its own is in
    /// flight (at once for an idle one; a blocked read is cut short with
    /// `CLIENT UNBLOCK`, or else ends within its `block`).
    pub paused: bool,
}

impl SubscriptionStatus {
    /// What names this subscription for
    /// [`Broker::pause`](crate::Broker::pause) and
    /// [`resume`](crate::Broker::resume).
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
/// broker.pause(&id)?;
/// broker.resume(&id)?;
/// // Or every subscription the status shows (Pub/Sub ones cannot pause).
/// for s in broker.status().subscriptions {
///     if s.kind != rillkit::SourceKind::Channel {
///         println!("pausing {}", s.id());
///         broker.pause(&s.id())?;
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

/// One subscription's live status, shared by its consumer (which updates
/// it) and the broker (which reads it).
pub(crate) struct Board {
    pub kind: SourceKind,
    pub stream: Arc<str>,
    pub group: Arc<str>,
    pub consumer: Arc<str>,
    pub dlq: Arc<str>,
    state: Mutex<SubscriptionState>,
    handled: AtomicU64,
    failed: AtomicU64,
    dead_lettered: AtomicU64,
    dropped: AtomicU64,
    server: Mutex<Option<ServerFigures>>,
    /// An ordered stream's partitions (empty for any other subscription).
    parts: Vec<Arc<Board>>,
    /// A partition's board: the ordered stream's, which its counts go to too.
    parent: Option<std::sync::Weak<Board>>,
    /// A partition: whether this consumer owns it now (holds its lease).
    owned: std::sync::atomic::AtomicBool,
    /// A partition: its keys marked failed (`fail_rest`), as its loop knows.
    failed_keys: AtomicU64,
    /// Whether a pause was asked for; the loop watches it.
    pause: watch::Sender<bool>,
    /// The same, read on every turn of a loop without a lock.
    asked: AtomicBool,
    /// The state is `Paused` (so `settle_pause` takes no lock while there
    /// is nothing to settle).
    shown_paused: AtomicBool,
}

impl Board {
    pub(crate) fn new(
        kind: SourceKind,
        stream: Arc<str>,
        group: Arc<str>,
        consumer: Arc<str>,
        dlq: Arc<str>,
    ) -> Self {
        crate::telemetry::state(&stream, &group, "starting", &SubscriptionState::NAMES);
        Board {
            kind,
            ..Board::bare(stream, group, consumer, dlq)
        }
    }

    /// The board of an ordered stream read by `consumer`, with one board
    /// per partition (`partitions`: each partition's stream and dead-letter
    /// stream). A partition's board sets no state gauge (the ordered
    /// stream's does) and adds its counts to the ordered stream's too.
    pub(crate) fn ordered(
        stream: Arc<str>,
        group: Arc<str>,
        consumer: Arc<str>,
        partitions: Vec<(Arc<str>, Arc<str>)>,
    ) -> Arc<Self> {
        crate::telemetry::state(&stream, &group, "starting", &SubscriptionState::NAMES);
        Arc::new_cyclic(|me| {
            let parts = partitions
                .into_iter()
                .map(|(partition, dlq)| {
                    Arc::new(Board {
                        parent: Some(me.clone()),
                        ..Board::bare(partition, group.clone(), consumer.clone(), dlq)
                    })
                })
                .collect();
            Board {
                parts,
                ..Board::bare(stream.clone(), group.clone(), consumer.clone(), "".into())
            }
        })
    }

    /// A stream's board, before any gauge is set.
    fn bare(stream: Arc<str>, group: Arc<str>, consumer: Arc<str>, dlq: Arc<str>) -> Self {
        Board {
            kind: SourceKind::Stream,
            stream,
            group,
            consumer,
            dlq,
            state: Mutex::new(SubscriptionState::Starting),
            handled: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            server: Mutex::new(None),
            parts: Vec::new(),
            parent: None,
            owned: std::sync::atomic::AtomicBool::new(false),
            failed_keys: AtomicU64::new(0),
            pause: watch::Sender::new(false),
            asked: AtomicBool::new(false),
            shown_paused: AtomicBool::new(false),
        }
    }

    /// An ordered stream's partitions' boards, by index (empty otherwise).
    pub(crate) fn parts(&self) -> &[Arc<Board>] {
        &self.parts
    }

    /// A partition's count of keys marked failed.
    pub(crate) fn set_failed_keys(&self, n: usize) {
        self.failed_keys.store(n as u64, Ordering::Relaxed);
    }

    /// Marks a partition owned by this consumer, or not.
    pub(crate) fn set_owned(&self, owned: bool) {
        self.owned.store(owned, Ordering::Relaxed);
    }

    /// Runs `f` on the ordered stream's board, for a partition's.
    fn up(&self, f: impl FnOnce(&Board)) {
        if let Some(p) = self.parent.as_ref().and_then(std::sync::Weak::upgrade) {
            f(&p);
        }
    }

    /// Sets the state gauges, except for a partition's board.
    fn gauge(&self, state: &str) {
        if self.parent.is_none() {
            crate::telemetry::state(&self.stream, &self.group, state, &SubscriptionState::NAMES);
        }
    }

    /// Whether this board is the subscription `id` names.
    pub(crate) fn is(&self, id: &SubscriptionId) -> bool {
        self.kind == id.kind
            && *self.stream == *id.key
            && *self.group == *id.group
            && *self.consumer == *id.consumer
    }

    /// Asks the loop to pause (`true`) or to read again (`false`).
    /// For an ordered stream, every partition's loop too; its own state
    /// turns `Paused` at once (the partitions' show their reads).
    pub(crate) fn set_paused(&self, on: bool) {
        self.asked.store(on, Ordering::SeqCst);
        self.pause
            .send_if_modified(|p| std::mem::replace(p, on) != on);
        for p in &self.parts {
            p.set_paused(on);
        }
        if !self.parts.is_empty() {
            self.settle_pause(false);
        }
    }

    /// Whether a pause is asked for: the loop starts no read or pop.
    pub(crate) fn paused(&self) -> bool {
        self.asked.load(Ordering::SeqCst)
    }

    /// What a loop awaits (`changed()`) to wake when a pause is asked for
    /// or undone.
    pub(crate) fn pause_watch(&self) -> watch::Receiver<bool> {
        self.pause.subscribe()
    }

    /// A loop's turn tells where it is with the pause: paused and no read
    /// of its own in flight (`reading` false) turns `Running` into
    /// `Paused`; no longer paused turns `Paused` back into `Running`.
    /// Other states (trouble, a lease being waited for) are left as they
    /// are.
    pub(crate) fn settle_pause(&self, reading: bool) {
        let paused = self.paused();
        if !paused && !self.shown_paused.load(Ordering::Relaxed) {
            return;
        }
        let mut s = self.state.lock().expect("status lock");
        let next = match (&*s, paused) {
            (SubscriptionState::Running, true) if !reading => SubscriptionState::Paused,
            (SubscriptionState::Paused, false) => SubscriptionState::Running,
            (other, _) => {
                // Left `Paused` another way (a restart, a stop, trouble).
                let now = *other == SubscriptionState::Paused;
                self.shown_paused.store(now, Ordering::Relaxed);
                return;
            }
        };
        crate::telemetry::state(
            &self.stream,
            &self.group,
            next.name(),
            &SubscriptionState::NAMES,
        );
        self.shown_paused
            .store(next == SubscriptionState::Paused, Ordering::Relaxed);
        *s = next;
    }

    /// Sets the state gauges to the state as it is.
    pub(crate) fn publish_state(&self) {
        let state = self.state.lock().expect("status lock");
        self.gauge(state.name());
    }

    pub(crate) fn set_state(&self, state: SubscriptionState) {
        self.gauge(state.name());
        *self.state.lock().expect("status lock") = state;
    }

    /// A read failed transiently: `Reconnecting` since the first failure.
    pub(crate) fn read_failed(&self, error: &str) {
        let mut s = self.state.lock().expect("status lock");
        let since = match &*s {
            SubscriptionState::Reconnecting { since, .. } => *since,
            _ => SystemTime::now(),
        };
        if !matches!(*s, SubscriptionState::Reconnecting { .. }) {
            self.gauge("reconnecting");
        }
        *s = SubscriptionState::Reconnecting {
            since,
            last_error: error.to_owned(),
        };
    }

    /// A read succeeded: `Running` again.
    pub(crate) fn read_ok(&self) {
        let mut s = self.state.lock().expect("status lock");
        if !matches!(*s, SubscriptionState::Running) {
            self.gauge("running");
            *s = SubscriptionState::Running;
        }
    }

    pub(crate) fn handled(&self) {
        self.handled.fetch_add(1, Ordering::Relaxed);
        self.up(Board::handled);
    }

    pub(crate) fn failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        self.up(Board::failed);
    }

    pub(crate) fn dead_lettered(&self) {
        self.dead_lettered.fetch_add(1, Ordering::Relaxed);
        self.up(Board::dead_lettered);
    }

    pub(crate) fn dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_server(&self, figures: ServerFigures) {
        *self.server.lock().expect("status lock") = Some(figures);
    }

    pub(crate) fn snapshot(&self) -> SubscriptionStatus {
        SubscriptionStatus {
            kind: self.kind,
            key: self.stream.to_string(),
            group: self.group.to_string(),
            consumer: self.consumer.to_string(),
            state: self.state.lock().expect("status lock").clone(),
            handled: self.handled.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            server: self.server.lock().expect("status lock").clone(),
            partitions: self
                .parts
                .iter()
                .enumerate()
                .map(|(index, p)| PartitionStatus {
                    index: index as u16,
                    key: p.stream.to_string(),
                    owned: p.owned.load(Ordering::Relaxed),
                    state: p.state.lock().expect("status lock").clone(),
                    handled: p.handled.load(Ordering::Relaxed),
                    failed: p.failed.load(Ordering::Relaxed),
                    dead_lettered: p.dead_lettered.load(Ordering::Relaxed),
                    failed_keys: p.failed_keys.load(Ordering::Relaxed),
                    server: p.server.lock().expect("status lock").clone(),
                })
                .collect(),
            paused: self.paused(),
        }
    }
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
