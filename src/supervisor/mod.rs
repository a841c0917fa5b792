//! `Supervisor`: one per broker; it runs the subscriptions' consumers.
//!
//! * **Slots**: one per subscription (configured, or added and removed at run
//!   time), each with its `ConsumerActor` and, for a stream, the group's
//!   `ReclaimerActor`; and one per partition of an ordered stream this
//!   process has read, its loop started and stopped as the ordered stream's
//!   loop (membership, share-out) asks (`parts.rs`), drained with the rest,
//!   its end told to that loop rather than restarted here.
//! * **Supervision and tally**: every `ConsumerActor` reports its end with
//!   `ConsumerExited`. While running, a consumer that ended with an error or a
//!   panic is restarted with exponential backoff, at most `max_restarts`
//!   times in its `window` (OTP style); past that its subscription is
//!   failed (`errors` += 1, and `panics` += 1 if it panicked). When every
//!   subscription has failed the broker stops by itself. While draining, the
//!   reports are tallied into the [`SupervisorOutcome`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use backon::{BackoffBuilder, ExponentialBuilder};
use tokio::sync::{oneshot, watch};

mod parts;
mod restart;
pub(crate) mod startup;

pub use restart::RestartPolicy;

use crate::connection::Connector;
use crate::delivery::{ConsumerActor, ConsumerExited, ConsumerReport, Drain};
use crate::error::Error;
use crate::lifecycle::{Owner, SupervisorOutcome};
use crate::reclaimer::ReclaimerActor;
use crate::redis::RedisActor;
use crate::schedule::mover::DueMover;
use crate::source::Source;
use crate::source::stream::{Subscription, ordered_loop, stream_loop};
use crate::status::Boards;

struct Slot {
    source: Source,
    /// A stream subscription's reclaimer (shared per (stream, group)).
    reclaimer: Option<Addr<ReclaimerActor>>,
    addr: Option<Addr<ConsumerActor>>,
    restarts: VecDeque<Instant>,
    failed: bool,
    /// Removed at run time: no longer restarted, counted or drained.
    removed: bool,
    /// Waits for the end of a subscription being removed.
    on_removed: Option<oneshot::Sender<ConsumerReport>>,
    /// A partition of an ordered stream: whose, and which. Its loop is
    /// started and stopped as its ordered stream's loop asks; its end is
    /// told to that loop, which decides what follows.
    part: Option<parts::PartOf>,
    /// An ordered stream's, while its loop runs: where its partitions'
    /// ends are told.
    parts_told: Option<parts::Told>,
}

impl Slot {
    fn new(source: Source, reclaimer: Option<Addr<ReclaimerActor>>) -> Self {
        Slot {
            source,
            reclaimer,
            addr: None,
            restarts: VecDeque::new(),
            failed: false,
            removed: false,
            on_removed: None,
            part: None,
            parts_told: None,
        }
    }

    /// The source's name (stream, list or channel), for logs.
    fn name(&self) -> Arc<str> {
        self.source.board().stream.clone()
    }
}

/// What the supervisor is given by its broker: where Redis is, whose code
/// it runs, the status boards it keeps true, and how it asks for a stop
/// when every subscription has failed.
pub(crate) struct Setup {
    pub connector: Connector,
    pub owner: Owner,
    pub boards: Boards,
    pub request_stop: Box<dyn Fn() + Send>,
    pub restart: RestartPolicy,
}

pub(crate) struct Supervisor {
    setup: Setup,
    subs: Vec<Source>,
    redis: Option<Addr<RedisActor>>,
    slots: Vec<Slot>,
    /// Consumers are running (`StartConsumers` has run).
    running: bool,
    /// The drain's deadline, once draining.
    drain_by: Option<Instant>,
    outcome: SupervisorOutcome,
    drained: Option<oneshot::Sender<SupervisorOutcome>>,
    /// One due-mover per stream consumed here (scheduled entries), for
    /// subscriptions added at run time too; stopped at the drain.
    movers: std::collections::HashMap<Arc<str>, Addr<DueMover>>,
}

impl Supervisor {
    pub(crate) fn new(setup: Setup, subs: Vec<Source>) -> Self {
        Supervisor {
            setup,
            subs,
            redis: None,
            slots: Vec::new(),
            running: false,
            drain_by: None,
            outcome: SupervisorOutcome::default(),
            drained: None,
            movers: std::collections::HashMap::new(),
        }
    }

    /// Starts the due-mover of each stream `source` reads that has none
    /// yet (not the partitions of a stream ordered by key: nothing is
    /// scheduled there).
    fn move_due(&mut self, source: &Source, redis: &Addr<RedisActor>) {
        let Some(sub) = source.as_stream() else {
            return;
        };
        if sub.names.order.is_some() {
            return;
        }
        let name = sub.names.name.clone();
        self.movers
            .entry(name.clone())
            .or_insert_with(|| DueMover::new(name, redis.clone()).start());
    }

    /// Whether the broker drains (`DrainAll` has come).
    fn draining(&self) -> bool {
        self.drain_by.is_some()
    }

    fn live(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.addr.is_some() && !s.removed)
            .count()
    }

    /// One reclaimer per (stream, group), shared by its consumers: the one
    /// a live slot already has, or a new one.
    fn reclaimer_for(&self, sub: &Subscription, redis: &Addr<RedisActor>) -> Addr<ReclaimerActor> {
        let n = &sub.names;
        self.slots
            .iter()
            .filter(|s| !s.removed)
            .filter_map(|s| match (&s.source, &s.reclaimer) {
                (Source::Stream(o), Some(r))
                    if o.names.name == n.name && o.names.group == n.group && r.connected() =>
                {
                    Some(r.clone())
                }
                _ => None,
            })
            .next()
            .unwrap_or_else(|| ReclaimerActor::new(n.clone(), redis.clone()).start())
    }

    fn spawn_consumer(&mut self, index: usize, ctx: &mut Context<Self>) -> oneshot::Receiver<()> {
        let (ready, rx) = oneshot::channel();
        let Some(redis) = self.redis.clone() else {
            return rx;
        };
        let Some(source) = self.slots.get(index).map(|s| s.source.clone()) else {
            return rx;
        };
        let (stop_tx, stop) = watch::channel(None);
        let connector = self.setup.connector.clone();
        let run = match &source {
            Source::Stream(sub) => {
                let alive = self.slots[index]
                    .reclaimer
                    .as_ref()
                    .is_some_and(Addr::connected);
                if !alive {
                    // It died (a panic): one new reclaimer for its (stream,
                    // group), shared by every slot that had the dead one.
                    let fresh = ReclaimerActor::new(sub.names.clone(), redis.clone()).start();
                    for s in &mut self.slots {
                        if let (Source::Stream(o), Some(r)) = (&s.source, &mut s.reclaimer) {
                            if o.names.name == sub.names.name
                                && o.names.group == sub.names.group
                                && !r.connected()
                            {
                                *r = fresh.clone();
                            }
                        }
                    }
                    self.slots[index].reclaimer = Some(fresh);
                }
                if sub.ordered().is_some() {
                    let parts = self.link_parts(index, ctx);
                    ordered_loop(sub.clone(), redis, parts, stop, Some(ready))
                } else {
                    let reclaimer = self.slots[index].reclaimer.clone().expect("set above");
                    stream_loop(sub.clone(), connector, redis, reclaimer, stop, Some(ready))
                }
            }
            Source::List(sub) => Box::pin(crate::source::list::consume(
                sub.clone(),
                connector,
                redis,
                stop,
                Some(ready),
            )),
            Source::Channel(sub) => Box::pin(crate::source::channel::consume(
                sub.clone(),
                connector,
                stop,
                Some(ready),
            )),
        };
        let actor = ConsumerActor::new(
            self.setup.owner,
            index,
            run,
            stop_tx,
            ctx.address().recipient(),
        );
        self.slots[index].addr = Some(actor.start());
        rx
    }

    fn maybe_drained(&mut self) {
        if self.draining() && self.live() == 0 {
            if let Some(tx) = self.drained.take() {
                let _ = tx.send(self.outcome);
            }
        }
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;
}

/// The lifecycle driver has ended: the supervisor stops.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Finish;

impl Handler<Finish> for Supervisor {
    type Result = ();

    fn handle(&mut self, _: Finish, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

/// Start one consumer actor per subscription; answers once each has started.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct StartConsumers(pub Addr<RedisActor>);

impl Handler<StartConsumers> for Supervisor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: StartConsumers, ctx: &mut Self::Context) -> Self::Result {
        let redis = msg.0;
        self.redis = Some(redis.clone());
        self.running = true;
        for source in self.subs.clone() {
            self.move_due(&source, &redis);
            let reclaimer = source.as_stream().map(|s| self.reclaimer_for(s, &redis));
            self.slots.push(Slot::new(source, reclaimer));
        }
        let ready: Vec<_> = (0..self.slots.len())
            .map(|i| self.spawn_consumer(i, ctx))
            .collect();
        Box::pin(async move {
            futures::future::join_all(ready).await;
        })
    }
}

/// Adds a subscription to a running broker and starts its consumer;
/// answers its index once it has started reading.
#[derive(Message)]
#[rtype(result = "Result<usize, Error>")]
pub(crate) struct AddSource(pub Source);

impl Handler<AddSource> for Supervisor {
    type Result = ResponseFuture<Result<usize, Error>>;

    fn handle(&mut self, msg: AddSource, ctx: &mut Self::Context) -> Self::Result {
        let (Some(redis), true, false) = (self.redis.clone(), self.running, self.draining()) else {
            let e = if self.draining() {
                Error::ShutDown
            } else {
                Error::NotStarted
            };
            return Box::pin(async move { Err(e) });
        };
        self.move_due(&msg.0, &redis);
        let reclaimer = msg.0.as_stream().map(|s| self.reclaimer_for(s, &redis));
        self.slots.push(Slot::new(msg.0, reclaimer));
        let index = self.slots.len() - 1;
        let ready = self.spawn_consumer(index, ctx);
        Box::pin(async move {
            let _ = ready.await;
            Ok(index)
        })
    }
}

/// Removes a subscription added at run time (or at build time): its
/// consumer drains with the deadline; answers its report once it ended.
#[derive(Message)]
#[rtype(result = "Option<oneshot::Receiver<ConsumerReport>>")]
pub(crate) struct RemoveSource(pub usize, pub Instant);

impl Handler<RemoveSource> for Supervisor {
    type Result = Option<oneshot::Receiver<ConsumerReport>>;

    fn handle(&mut self, msg: RemoveSource, ctx: &mut Self::Context) -> Self::Result {
        let slot = self.slots.get_mut(msg.0)?;
        if slot.removed {
            return None;
        }
        slot.removed = true;
        let (tx, rx) = oneshot::channel();
        slot.on_removed = Some(tx);
        match &slot.addr {
            Some(addr) => addr.do_send(Drain(msg.1)),
            // Between restarts, or failed: nothing runs (but the
            // partitions' loops a panicked ordered stream left draining).
            None => self.answer_removed(msg.0, ConsumerReport::default(), ctx),
        }
        self.setup.boards.forget(self.slots[msg.0].source.board());
        self.maybe_drained();
        Some(rx)
    }
}

/// Drain every consumer with a deadline; answers the tally once all ended.
#[derive(Message)]
#[rtype(result = "SupervisorOutcome")]
pub(crate) struct DrainAll(pub Instant);

impl Handler<DrainAll> for Supervisor {
    type Result = ResponseFuture<SupervisorOutcome>;

    fn handle(&mut self, msg: DrainAll, _: &mut Self::Context) -> Self::Result {
        self.drain_by = Some(msg.0);
        for slot in self.slots.iter().filter(|s| !s.removed) {
            if let Some(addr) = &slot.addr {
                addr.do_send(Drain(msg.0));
            }
        }
        // No entry is made due while the consumers stop; each mover drops
        // its lease, so a process still running takes over at once (not
        // waited for past 1 s: Redis may be down).
        let movers = tokio::time::timeout(
            Duration::from_secs(1),
            futures::future::join_all(
                self.movers
                    .drain()
                    .map(|(_, m)| m.send(crate::schedule::mover::Stop)),
            ),
        );
        let (tx, rx) = oneshot::channel();
        self.drained = Some(tx);
        self.maybe_drained();
        let fallback = self.outcome;
        // A consumer that cannot report (its arbiter died) must not hang the
        // drain: give up a little after the deadline.
        let give_up = tokio::time::Instant::from_std(msg.0) + Duration::from_secs(5);
        Box::pin(async move {
            let (_, drained) = futures::join!(movers, tokio::time::timeout_at(give_up, rx));
            match drained {
                Ok(Ok(o)) => o,
                _ => SupervisorOutcome {
                    timed_out: true,
                    ..fallback
                },
            }
        })
    }
}

impl Handler<ConsumerExited> for Supervisor {
    type Result = ();

    fn handle(&mut self, msg: ConsumerExited, ctx: &mut Self::Context) {
        let report = msg.report;
        let Some(slot) = self.slots.get_mut(msg.index) else {
            return;
        };
        slot.addr = None;
        if let Some(of) = slot.part {
            self.part_ended(of, report);
            self.maybe_drained();
            return;
        }
        if slot.parts_told.take().is_some() {
            // Its partitions' loops end with it (they have, unless it
            // panicked).
            self.drain_parts_of(msg.index);
        }
        let Some(slot) = self.slots.get_mut(msg.index) else {
            return;
        };
        let failed_run = report.error.is_some() || report.panic.is_some();
        if slot.removed {
            // A removed subscription counts in the final outcome as it
            // would have at the stop.
            self.outcome.timed_out |= report.timed_out;
            self.outcome.errors += usize::from(report.error.is_some());
            self.outcome.panics += usize::from(report.panic.is_some());
            self.answer_removed(msg.index, report, ctx);
            self.maybe_drained();
            return;
        }
        if self.drain_by.is_some() {
            self.outcome.timed_out |= report.timed_out;
            self.outcome.errors += usize::from(report.error.is_some());
            self.outcome.panics += usize::from(report.panic.is_some());
            self.maybe_drained();
            return;
        }
        if !failed_run {
            // Ended cleanly without being asked (its stop channel closed).
            return;
        }
        // Every escaped panic counts, restarted or not.
        self.outcome.panics += usize::from(report.panic.is_some());
        let stream = slot.name();
        let board = slot.source.board().clone();
        let now = Instant::now();
        while slot
            .restarts
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.setup.restart.window())
        {
            slot.restarts.pop_front();
        }
        if slot.restarts.len() >= self.setup.restart.max_restarts() {
            slot.failed = true;
            board.set_state(crate::status::SubscriptionState::Failed);
            self.outcome.errors += 1;
            tracing::error!(stream = %stream, restarts = slot.restarts.len(), "consumer failed past its restart limit; subscription is failed");
            let mut kept = self
                .slots
                .iter()
                .filter(|s| !s.removed && s.part.is_none())
                .peekable();
            if kept.peek().is_some() && kept.all(|s| s.failed) {
                tracing::error!("every subscription has failed; stopping the broker");
                (self.setup.request_stop)();
            }
            return;
        }
        let delay = ExponentialBuilder::default()
            .with_min_delay(self.setup.restart.min_backoff())
            .with_max_delay(self.setup.restart.max_backoff())
            .without_max_times()
            .build()
            .nth(slot.restarts.len())
            .unwrap_or(self.setup.restart.max_backoff());
        slot.restarts.push_back(now);
        crate::telemetry::restarted(&stream, &board.group);
        board.set_state(crate::status::SubscriptionState::Restarting {
            restarts: slot.restarts.len(),
        });
        tracing::warn!(
            stream = %stream,
            error = ?report.error.as_ref().map(|e| e.to_string()),
            panic = ?report.panic,
            restart_in_ms = delay.as_millis() as u64,
            "consumer ended; restarting"
        );
        let index = msg.index;
        ctx.run_later(delay, move |act, ctx| act.restart_after_parts(index, ctx));
    }
}
