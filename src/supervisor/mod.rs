//! `Supervisor`: owns the lifecycle of one broker.
//!
//! The actor does two jobs:
//!
//! * **The lifecycle driver** (`lifecycle`), one future spawned in the actor's
//!   context when the broker starts. It runs the nine lifecycle steps in order: `on_startup`
//!   hooks, PING, the shared pool and `RedisActor`, `XGROUP CREATE … MKSTREAM`
//!   and an `XREADGROUP` ACL probe (which reads nothing) per
//!   subscription, each waiting for a server that is starting, consumers, `after_startup` hooks; then waits for a stop
//!   request; then drains the consumers, runs `on_shutdown` hooks, closes the
//!   connections and runs every `after_shutdown` hook.
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

use crate::broker::{Broker, Phase};
use crate::connection::{Class, Pool, wait_until_ready};
use crate::consumer::{
    ConsumerActor, ConsumerExited, ConsumerReport, Drain, Subscription, stream_loop,
};
use crate::error::{Error, HookFailures};
use crate::hooks::{Hooks, Stage};
use crate::outcome::SupervisorOutcome;
use crate::reclaimer::ReclaimerActor;
use crate::redis::{Close, CreateGroup, Query, RedisActor};
use crate::source::Source;
use futures::FutureExt;

/// How often a failed consumer may be restarted before its subscription is
/// marked failed: at most [`max_restarts`](Self::max_restarts) restarts
/// within [`window`](Self::window), the first after
/// [`min_backoff`](Self::min_backoff), each further one after twice the
/// previous delay, up to [`max_backoff`](Self::max_backoff).
///
/// ```
/// use std::time::Duration;
/// use rillkit::RestartPolicy;
///
/// let policy = RestartPolicy::default()
///     .with_max_restarts(3)
///     .with_window(Duration::from_secs(30));
/// assert_eq!(policy.max_restarts(), 3);
/// assert_eq!(policy.max_backoff(), Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    max_restarts: usize,
    window: Duration,
    min_backoff: Duration,
    max_backoff: Duration,
}

impl RestartPolicy {
    /// Sets how many restarts are allowed within the
    /// [`window`](Self::with_window) (default 5); 0 fails a subscription at
    /// its consumer's first error.
    #[must_use]
    pub fn with_max_restarts(mut self, restarts: usize) -> Self {
        self.max_restarts = restarts;
        self
    }

    /// Sets the window the restarts are counted in (default 60 s).
    #[must_use]
    pub fn with_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Sets the first restart delay (default 100 ms); it doubles per restart
    /// in the window, up to [`max_backoff`](Self::with_max_backoff).
    #[must_use]
    pub fn with_min_backoff(mut self, delay: Duration) -> Self {
        self.min_backoff = delay;
        self
    }

    /// Sets the longest restart delay (default 10 s).
    #[must_use]
    pub fn with_max_backoff(mut self, delay: Duration) -> Self {
        self.max_backoff = delay;
        self
    }

    /// The restart limit, set with
    /// [`with_max_restarts`](Self::with_max_restarts).
    pub fn max_restarts(&self) -> usize {
        self.max_restarts
    }

    /// The window, set with [`with_window`](Self::with_window).
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The first restart delay, set with
    /// [`with_min_backoff`](Self::with_min_backoff).
    pub fn min_backoff(&self) -> Duration {
        self.min_backoff
    }

    /// The longest restart delay, set with
    /// [`with_max_backoff`](Self::with_max_backoff).
    pub fn max_backoff(&self) -> Duration {
        self.max_backoff
    }
}

impl Default for RestartPolicy {
    /// 5 restarts in 60 s, backoff from 100 ms to 10 s.
    fn default() -> Self {
        RestartPolicy {
            max_restarts: 5,
            window: Duration::from_secs(60),
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
        }
    }
}

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
        }
    }

    /// The source's name (stream, list or channel), for logs.
    fn name(&self) -> Arc<str> {
        self.source.board().stream.clone()
    }
}

pub(crate) struct Supervisor {
    broker: Broker,
    hooks: Hooks,
    subs: Vec<Source>,
    restart: RestartPolicy,
    started: Option<oneshot::Sender<Result<(), Error>>>,
    redis: Option<Addr<RedisActor>>,
    slots: Vec<Slot>,
    /// Consumers are running (`StartConsumers` has run).
    running: bool,
    draining: bool,
    outcome: SupervisorOutcome,
    drained: Option<oneshot::Sender<SupervisorOutcome>>,
}

impl Supervisor {
    pub(crate) fn new(
        broker: Broker,
        hooks: Hooks,
        subs: Vec<Source>,
        restart: RestartPolicy,
        started: oneshot::Sender<Result<(), Error>>,
    ) -> Self {
        Supervisor {
            broker,
            hooks,
            subs,
            restart,
            started: Some(started),
            redis: None,
            slots: Vec::new(),
            running: false,
            draining: false,
            outcome: SupervisorOutcome::default(),
            drained: None,
        }
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
        let broker = self.broker.clone();
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
                let reclaimer = self.slots[index].reclaimer.clone().expect("set above");
                stream_loop(
                    sub.clone(),
                    broker.clone(),
                    redis,
                    reclaimer,
                    stop,
                    Some(ready),
                )
            }
            Source::List(sub) => Box::pin(crate::source::list::consume(
                sub.clone(),
                broker.clone(),
                redis,
                stop,
                Some(ready),
            )),
            Source::Channel(sub) => Box::pin(crate::source::channel::consume(
                sub.clone(),
                broker.clone(),
                stop,
                Some(ready),
            )),
        };
        let actor = ConsumerActor::new(broker, index, run, stop_tx, ctx.address().recipient());
        self.slots[index].addr = Some(actor.start());
        rx
    }

    fn maybe_drained(&mut self) {
        if self.draining && self.live() == 0 {
            if let Some(tx) = self.drained.take() {
                let _ = tx.send(self.outcome);
            }
        }
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let started = self.started.take();
        let fut = self.broker.within(lifecycle(
            self.broker.clone(),
            self.hooks.clone(),
            self.subs.clone(),
            ctx.address(),
            started,
        ));
        ctx.spawn(actix::fut::wrap_future(fut).map(|(), _, ctx: &mut Context<Self>| ctx.stop()));
    }
}

/// Start one consumer actor per subscription; answers once each has started.
#[derive(Message)]
#[rtype(result = "()")]
struct StartConsumers(Addr<RedisActor>);

impl Handler<StartConsumers> for Supervisor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: StartConsumers, ctx: &mut Self::Context) -> Self::Result {
        let redis = msg.0;
        self.redis = Some(redis.clone());
        self.running = true;
        for source in self.subs.clone() {
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
        let (Some(redis), true, false) = (self.redis.clone(), self.running, self.draining) else {
            let e = if self.draining {
                Error::ShutDown
            } else {
                Error::NotStarted
            };
            return Box::pin(async move { Err(e) });
        };
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

    fn handle(&mut self, msg: RemoveSource, _: &mut Self::Context) -> Self::Result {
        let slot = self.slots.get_mut(msg.0)?;
        if slot.removed {
            return None;
        }
        slot.removed = true;
        let (tx, rx) = oneshot::channel();
        match &slot.addr {
            Some(addr) => {
                slot.on_removed = Some(tx);
                addr.do_send(Drain(msg.1));
            }
            None => {
                // Between restarts, or failed: nothing runs.
                let _ = tx.send(ConsumerReport::default());
            }
        }
        self.broker.forget_board(slot.source.board());
        self.maybe_drained();
        Some(rx)
    }
}

/// Drain every consumer with a deadline; answers the tally once all ended.
#[derive(Message)]
#[rtype(result = "SupervisorOutcome")]
struct DrainAll(Instant);

impl Handler<DrainAll> for Supervisor {
    type Result = ResponseFuture<SupervisorOutcome>;

    fn handle(&mut self, msg: DrainAll, _: &mut Self::Context) -> Self::Result {
        self.draining = true;
        for slot in self.slots.iter().filter(|s| !s.removed) {
            if let Some(addr) = &slot.addr {
                addr.do_send(Drain(msg.0));
            }
        }
        let (tx, rx) = oneshot::channel();
        self.drained = Some(tx);
        self.maybe_drained();
        let fallback = self.outcome;
        // A consumer that cannot report (its arbiter died) must not hang the
        // drain: give up a little after the deadline.
        let give_up = tokio::time::Instant::from_std(msg.0) + Duration::from_secs(5);
        Box::pin(async move {
            match tokio::time::timeout_at(give_up, rx).await {
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
        let failed_run = report.error.is_some() || report.panic.is_some();
        if slot.removed {
            // A removed subscription counts in the final outcome as it
            // would have at the stop.
            self.outcome.timed_out |= report.timed_out;
            self.outcome.errors += usize::from(report.error.is_some());
            self.outcome.panics += usize::from(report.panic.is_some());
            if let Some(tx) = slot.on_removed.take() {
                let _ = tx.send(report);
            }
            self.maybe_drained();
            return;
        }
        if self.draining {
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
            .is_some_and(|t| now.duration_since(*t) > self.restart.window)
        {
            slot.restarts.pop_front();
        }
        if slot.restarts.len() >= self.restart.max_restarts {
            slot.failed = true;
            board.set_state(crate::status::SubscriptionState::Failed);
            self.outcome.errors += 1;
            tracing::error!(stream = %stream, restarts = slot.restarts.len(), "consumer failed past its restart limit; subscription is failed");
            let mut kept = self.slots.iter().filter(|s| !s.removed).peekable();
            if kept.peek().is_some() && kept.all(|s| s.failed) {
                tracing::error!("every subscription has failed; stopping the broker");
                self.broker.request_stop();
            }
            return;
        }
        let delay = ExponentialBuilder::default()
            .with_min_delay(self.restart.min_backoff)
            .with_max_delay(self.restart.max_backoff)
            .without_max_times()
            .build()
            .nth(slot.restarts.len())
            .unwrap_or(self.restart.max_backoff);
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
        ctx.run_later(delay, move |act, ctx| {
            if !act.draining && !act.slots[index].removed {
                // Nobody waits for a restarted consumer to be ready.
                drop(act.spawn_consumer(index, ctx));
            }
        });
    }
}

/// The lifecycle, its nine steps in order (numbered in the comments; steps 2
/// and 3 are in `connect`). See the module docs.
async fn lifecycle(
    broker: Broker,
    hooks: Hooks,
    subs: Vec<Source>,
    me: Addr<Supervisor>,
    started: Option<oneshot::Sender<Result<(), Error>>>,
) {
    // Should this future die half-way (a panic in rillkit's own code), every
    // stop() caller still wakes, with the panic counted.
    let _guard = Unfinished(broker.clone());
    let mut started = started;
    let mut report_start = |r: Result<(), Error>| {
        if let Some(tx) = started.take() {
            let _ = tx.send(r);
        }
    };
    let fail_start = |broker: &Broker, e: Error| {
        broker.set_phase(Phase::Stopped);
        broker.finish(SupervisorOutcome::default(), Vec::new());
        e
    };

    // A stop requested during startup (a signal): abandon the start after
    // the hook or command in progress, close what was opened, run the
    // after_shutdown hooks, and finish clean.
    let abort_start = |broker: Broker, hooks: Hooks| async move {
        tracing::info!("stop requested during startup; the start is abandoned");
        if let Some(redis) = broker.redis_if_started() {
            let _ = redis.send(Close).await;
        }
        broker.set_phase(Phase::Stopped);
        let failures = hooks.run(Stage::AfterShutdown, &broker, true).await;
        broker.finish(SupervisorOutcome::default(), failures);
        Err(Error::StartAborted)
    };

    // 1. on_startup hooks, before any Redis I/O.
    let failures = hooks.run(Stage::OnStartup, &broker, false).await;
    if !failures.is_empty() {
        let e = Error::Hook(HookFailures {
            failures: failures.into(),
            outcome: None,
        });
        return report_start(Err(fail_start(&broker, e)));
    }
    if broker.stop_requested() {
        return report_start(abort_start(broker.clone(), hooks.clone()).await);
    }
    // 2. PING (waiting for a server that is starting); then the shared pool.
    let streams: Vec<Arc<Subscription>> =
        subs.iter().filter_map(Source::as_stream).cloned().collect();
    let connected = tokio::select! {
        r = connect(&broker, &streams) => Some(r),
        () = broker.wait_stop_requested() => None,
    };
    let redis = match connected {
        Some(Ok(r)) if !broker.stop_requested() => r,
        Some(Err(e)) if !broker.stop_requested() => {
            return report_start(Err(fail_start(&broker, e)));
        }
        _ => return report_start(abort_start(broker.clone(), hooks.clone()).await),
    };
    // 4. Consumers, and retention for the streams that ask for it.
    let _ = me.send(StartConsumers(redis.clone())).await;
    let retention = crate::retention::start(
        streams.iter().map(|s| &s.names),
        &redis,
        broker.retention_period(),
    );
    let poller =
        crate::status::StatusPoller::new(broker.clone(), redis.clone(), broker.status_period())
            .start();
    broker.set_phase(Phase::Running);
    // 5. after_startup hooks.
    let failures = hooks.run(Stage::AfterStartup, &broker, false).await;
    let after_startup_ok = failures.is_empty();
    let mut start_error = None;
    if after_startup_ok {
        report_start(Ok(()));
        broker.wait_stop_requested().await;
    } else {
        start_error = Some(failures);
        broker.request_stop();
    }

    // 6. Drain.
    let timeout = broker.requested_timeout();
    broker.set_phase(Phase::Draining);
    let outcome = me
        .send(DrainAll(Instant::now() + timeout))
        .await
        .unwrap_or(SupervisorOutcome {
            timed_out: true,
            ..Default::default()
        });
    for r in retention {
        let _ = r.send(crate::retention::Stop).await;
    }
    let _ = poller.send(crate::status::Stop).await;
    // 7. on_shutdown hooks, connections still open (skipped when
    //    after_startup failed).
    let mut failures = Vec::new();
    if after_startup_ok {
        failures = hooks.run(Stage::OnShutdown, &broker, false).await;
    }
    // 8. Close the connections.
    broker.set_phase(Phase::Stopped);
    let closed = redis.send(Close).await.unwrap_or(0);
    let outcome = SupervisorOutcome {
        closed_connections: closed,
        ..outcome
    };
    tracing::info!(
        connections = closed,
        exit_code = outcome.exit_code(),
        "stopped; shared pool connections closed"
    );
    // 9. Every after_shutdown hook.
    failures.extend(hooks.run(Stage::AfterShutdown, &broker, true).await);

    match start_error {
        Some(mut startup_failures) => {
            startup_failures.extend(failures);
            broker.finish(outcome, Vec::new());
            report_start(Err(Error::Hook(HookFailures {
                failures: startup_failures.into(),
                outcome: Some(outcome),
            })));
        }
        None => broker.finish(outcome, failures),
    }
}

/// Lifecycle steps 2 and 3, and the wait for the consumer names' leases
/// before step 4: PING, the shared pool and `RedisActor`, then the
/// consumer groups. Each step waits for a server that is starting (until the
/// startup deadline) and fails at once on anything else, with a log line that
/// names the cause.
async fn connect(broker: &Broker, subs: &[Arc<Subscription>]) -> Result<Addr<RedisActor>, Error> {
    let connector = broker.connector().clone();
    let deadline = Instant::now() + broker.startup_timeout();
    let fail = |e: Error| {
        let server = connector.describe();
        match e.class() {
            Class::Connection => {
                tracing::error!(server, error = %e, "redis is unreachable; start failed")
            }
            Class::Credentials => {
                tracing::error!(server, error = %e, "redis refused the credentials; start failed")
            }
            Class::Tls => {
                tracing::error!(server, error = %e, "the TLS handshake failed (check the CA, the client certificate and the server name); start failed")
            }
            Class::Permission => {
                tracing::error!(server, error = %e, "the redis ACL user lacks a permission; start failed")
            }
            _ => tracing::error!(server, error = %e, "start failed"),
        }
        e
    };
    let pool = wait_until_ready("PING", "ping", deadline, || async {
        // Every master of a cluster answers (redis-rs sends PING to each).
        for mut c in connector.shared(1, connector.timeouts().connect).await? {
            redis::cmd("PING")
                .query_async::<redis::Value>(&mut c)
                .await
                .map_err(Error::from_redis)?;
        }
        Pool::connect(connector.clone(), broker.pool_size()).await
    })
    .await
    .map_err(fail)?;
    let redis =
        RedisActor::new(pool, connector.watch_failovers(), broker.publish_timeout()).start();
    broker.set_redis(redis.clone());
    // 3. Consumer groups, and an ACL probe of XREADGROUP: a user that may
    // not read the stream fails here, naming XREADGROUP, rather than retrying
    // its reads forever once started.
    for sub in subs {
        let created = wait_until_ready("XGROUP CREATE", "xgroup|create", deadline, || {
            redis
                .send(CreateGroup {
                    stream: sub.names.name.clone(),
                    group: sub.names.group.clone(),
                    start_id: sub.opts.start_id.as_str().into(),
                })
                .map(|r| r.unwrap_or(Err(Error::ShutDown)))
        })
        .await;
        let created = match created {
            Ok(()) => {
                wait_until_ready("XREADGROUP", "xreadgroup", deadline, || {
                    redis.send(Query("xreadgroup", acl_probe(sub))).map(|r| {
                        match r.unwrap_or(Err(Error::ShutDown)) {
                            // The answer a permitted probe gets.
                            Err(e) if e.class() == Class::Fatal => Ok(()),
                            other => other.map(drop),
                        }
                    })
                })
                .await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = created {
            let _ = redis.send(Close).await;
            return Err(fail(e));
        }
    }
    // Before 4: the consumer names' leases (two live processes never run one
    // consumer's pending entries at once): a name held by another live
    // process is waited for, up to the same deadline.
    for sub in subs {
        let Some(lease) = &sub.lease else { continue };
        let taken = wait_until_ready("the consumer name's lease", "evalsha", deadline, || {
            lease.acquire(&redis, Some(deadline), None, &sub.board)
        })
        .await;
        if let Err(e) = taken {
            let _ = redis.send(Close).await;
            return Err(fail(e));
        }
    }
    Ok(redis)
}

/// `XREADGROUP … STREAMS <stream> $`: Redis checks the ACL (command and key)
/// before it runs a command, so a user that may not read the stream gets
/// `NOPERM`, and one that may gets `ERR The $ ID is meaningless in the context
/// of XREADGROUP`, with nothing read, delivered or created. (An id past every
/// entry would not do: Redis serves it like `>` and delivers a new entry.)
fn acl_probe(sub: &Subscription) -> redis::Cmd {
    let mut cmd = redis::cmd("XREADGROUP");
    cmd.arg("GROUP")
        .arg(&*sub.names.group)
        .arg(&*sub.consumer)
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg(&*sub.names.name)
        .arg("$");
    cmd
}

/// Finishes the broker with one panic counted if the lifecycle driver is
/// dropped before it finished (it panicked).
struct Unfinished(Broker);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.0.is_finished() {
            tracing::error!("the lifecycle driver ended before finishing; counting a panic");
            self.0.set_phase(Phase::Stopped);
            self.0.finish(
                SupervisorOutcome {
                    panics: 1,
                    ..Default::default()
                },
                Vec::new(),
            );
        }
    }
}
