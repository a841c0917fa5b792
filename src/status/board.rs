//! The live side of the status: each subscription's [`Board`], which its
//! consumer loop and the supervisor update as they go, and [`Boards`], the
//! list `Broker::status` reads and the status poller fills.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use super::{
    PartitionStatus, Scale, ServerFigures, SubscriptionId, SubscriptionState, SubscriptionStatus,
};
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
    /// Whether a pause was asked for; the loop watches it (and is woken
    /// through it when its concurrency changes).
    pause: watch::Sender<bool>,
    /// Who asked for the pause ([`LOCAL`], [`FLEET`]), read on every turn of
    /// a loop without a lock.
    asked: AtomicU8,
    /// Its concurrency: as built, fleet-wide, in flight.
    scale: Scale,
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
            asked: AtomicU8::new(0),
            scale: Scale::default(),
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

    /// Asks the loop to pause (`true`) or to read again (`false`), for
    /// this process. For an ordered stream, every partition's loop too; its
    /// own state turns `Paused` at once (the partitions' show their reads).
    pub(crate) fn set_paused(&self, on: bool) {
        self.ask(LOCAL, on);
    }

    /// The same for the fleet-wide pause, as kept in Redis. The loop reads
    /// while neither is asked for.
    pub(crate) fn set_fleet_paused(&self, on: bool) {
        self.ask(FLEET, on);
    }

    fn ask(&self, who: u8, on: bool) {
        let asked = if on {
            self.asked.fetch_or(who, Ordering::SeqCst) | who
        } else {
            self.asked.fetch_and(!who, Ordering::SeqCst) & !who
        };
        let paused = asked != 0;
        self.pause
            .send_if_modified(|p| std::mem::replace(p, paused) != paused);
        for p in &self.parts {
            p.ask(who, on);
        }
        if !self.parts.is_empty() {
            self.settle_pause(false);
        }
    }

    /// Whether a pause is asked for, here or for the fleet: the loop starts
    /// no read or pop.
    pub(crate) fn paused(&self) -> bool {
        self.asked.load(Ordering::SeqCst) != 0
    }

    /// Whether the fleet-wide pause is on.
    pub(crate) fn fleet_paused(&self) -> bool {
        self.asked.load(Ordering::SeqCst) & FLEET != 0
    }

    /// Its concurrency: as built, fleet-wide, in flight.
    pub(crate) fn scale(&self) -> &Scale {
        &self.scale
    }

    /// Handlers the loop may run at once now (see [`Scale::concurrency`]).
    pub(crate) fn concurrency(&self) -> usize {
        self.scale.concurrency()
    }

    /// One look of the autoscaler, if it has one: the group's backlog
    /// (`None`: unknown). When the concurrency changes, logs it, counts it
    /// and wakes the loop.
    pub(crate) fn autoscale(&self, backlog: Option<u64>) {
        let Some((from, to)) = self
            .scale
            .autoscale_tick(std::time::Instant::now(), backlog)
        else {
            return;
        };
        let direction = if to > from { "up" } else { "down" };
        tracing::info!(
            stream = %self.stream,
            group = %self.group,
            consumer = %self.consumer,
            from,
            to,
            backlog = ?backlog,
            in_effect = self.concurrency(),
            "autoscaled {direction}"
        );
        crate::telemetry::autoscaled(&self.stream, &self.group, direction, self.concurrency());
        self.pause.send_modify(|_| {});
    }

    /// Sets (or clears) the fleet-wide concurrency and, when the
    /// concurrency in effect changed, wakes the loop so it starts (or stops
    /// starting) handlers at once.
    pub(crate) fn set_fleet_concurrency(&self, n: Option<usize>) {
        if self.scale.set_fleet(n) {
            crate::telemetry::concurrency(&self.stream, &self.group, self.concurrency());
            self.pause.send_modify(|_| {});
        }
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
        if self.parent.is_none() && self.kind != SourceKind::Channel {
            crate::telemetry::concurrency(&self.stream, &self.group, self.concurrency());
        }
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
            dlq: self.dlq.to_string(),
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
            fleet_paused: self.fleet_paused(),
            concurrency: self.concurrency(),
            in_flight: self.scale.in_flight(),
            rate_limit: self.scale.rate_limit(),
        }
    }
}

/// [`Board::asked`]: a pause asked for in this process.
const LOCAL: u8 = 1;
/// [`Board::asked`]: the fleet-wide pause, as kept in Redis.
const FLEET: u8 = 2;
