//! The consumer loop. See the parent module for what it does; this file is how.

use std::cell::{Cell, RefCell};
use std::collections::{HashSet, VecDeque};
use std::future::{Future, pending};
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use redis::Value;
use redis::aio::MultiplexedConnection;
use tokio::sync::watch;
use tracing::Instrument;

use super::Subscription;

mod hygiene;
mod retry;
use crate::connection::{Class, Connector, READ_TIMEOUT_MARGIN, Retry, client_name, log_wait};
use crate::consumer::hygiene::Taken;
use crate::error::Error;
use crate::handler::{HandlerError, HandlerResult, Message, Prepared};
use crate::reclaimer::{self, Claim, ReclaimerActor};
use crate::redis::reply::{self, RawEntry};
use crate::redis::{
    Ack, AckError, CreateGroup, DeadLetter, DeadLetterEntry, Moved, Query, RedisActor, Unblock,
};
use crate::status::SubscriptionState;
use crate::stream::EntryId;
use crate::telemetry::ConsumerMetrics;

/// How a consumer loop ended.
#[derive(Debug, Default)]
pub(crate) struct ConsumerReport {
    /// The unrecoverable error that ended it, if any.
    pub error: Option<Error>,
    /// Set when the loop itself panicked (caught at the actor boundary).
    pub panic: Option<String>,
    /// The drain deadline passed with handlers still running.
    pub timed_out: bool,
}

impl ConsumerReport {
    pub(crate) fn panicked(what: String) -> Self {
        ConsumerReport {
            panic: Some(what),
            ..Default::default()
        }
    }
}

/// An entry as read or claimed, with the server's delivery count.
pub(crate) struct Delivered {
    pub raw: RawEntry,
    pub delivery_count: u64,
}

/// A fetched or claimed entry waiting for a handler slot. Only entries with
/// a body get here: `enqueue` acks and skips deleted ones.
struct Queued {
    id: EntryId,
    fields: Vec<(Vec<u8>, Vec<u8>)>,
    delivery_count: u64,
    /// Its last run failed here (a handler error or a caught panic), so it
    /// need not run alone: it is not the kind that kills the process.
    retried_here: bool,
}

/// A handler run that has ended (or panicked).
struct Finished {
    msg: Message,
    result: Result<HandlerResult, String>,
    /// How long it ran.
    took: Duration,
}

/// A reclaim page that came back: the claimed entries and whether the page
/// was full.
type ClaimDone = Result<(Vec<Delivered>, bool), Error>;

/// An XACK batch that came back: its ids and what Redis said.
type AckDone = (Result<Vec<EntryId>, AckError>, Duration);

/// A dead-letter move that came back: the entry and what Redis said.
type DeadLetterDone = (Arc<DeadLetterEntry>, Result<Option<Moved>, Error>);

/// What one read produced.
struct ReadDone {
    conn: Option<MultiplexedConnection>,
    /// For a re-read of its own PEL: the last pending entry it looked at
    /// (`None`: it is past the last one).
    pel: Option<Option<EntryId>>,
    result: Result<Vec<Delivered>, Error>,
}

/// The read to send: new entries, or a page of this consumer's own PEL.
enum Read {
    New(redis::Cmd),
    Pel(PelRead),
}

/// One page of a re-read of this consumer's own pending entries.
struct PelRead {
    stream: Arc<str>,
    group: Arc<str>,
    consumer: Arc<str>,
    /// Exclusive start (`0`: from the beginning).
    after: String,
    count: usize,
    /// Entries it holds (awaiting an XACK, a dead-letter move or their
    /// retry): skipped.
    held: HashSet<EntryId>,
    /// The first re-read of this consumer loop: every entry found counts a
    /// delivery (its earlier run, in an earlier life, never finished).
    fresh: bool,
}

/// Where the next read starts: our own pending entries after `id`, or new
/// entries (`>`).
#[derive(Clone)]
enum Cursor {
    Pending(String),
    New,
}

/// Resolves with the output of `f`, or never when there is no future.
async fn maybe<F: Future + Unpin>(f: &mut Option<F>) -> F::Output {
    match f {
        Some(f) => f.await,
        None => pending().await,
    }
}

pub(crate) async fn consume(
    sub: Arc<Subscription>,
    broker: crate::Broker,
    redis: Addr<RedisActor>,
    reclaimer: Addr<ReclaimerActor>,
    stop: watch::Receiver<Option<Instant>>,
    ready: Option<tokio::sync::oneshot::Sender<()>>,
) -> ConsumerReport {
    let metrics = ConsumerMetrics::new(&sub.names.name, &sub.names.group);
    let now = tokio::time::Instant::now();
    let mut lp = Loop {
        reclaim_interval: reclaimer::interval(sub.opts.claim_idle),
        heartbeat_every: (sub.opts.claim_idle / 3).max(Duration::from_millis(5)),
        reclaimer,
        reclaim: None,
        reclaim_due: now,
        held: HashSet::new(),
        waiting: retry::Waiting::default(),
        retry_claims: FuturesUnordered::new(),
        fresh: true,
        heartbeat_at: now,
        lease_at: now,
        lease_renewal: None,
        lease_retry: Retry::default(),
        prune_at: sub.opts.prune_idle.map(|_| now),
        refreshing: Rc::new(Cell::new(false)),
        in_read: Rc::new(Cell::new(false)),
        reader: Rc::new(RefCell::new(None)),
        sub,
        epoch: broker.connector().epoch(),
        connector: broker.connector().clone(),
        broker,
        metrics,
        redis,
        conn: None,
        cursor: Cursor::Pending("0".into()),
        read_retry: Retry::default(),
        ack_retry: Retry::default(),
        dead_letter_retry: Retry::default(),
        unblock_refused: Rc::new(Cell::new(false)),
        retry_delay: None,
        acks_inflight: 0,
        queue: VecDeque::new(),
        running: FuturesUnordered::new(),
        read: None,
        acks: Vec::new(),
        ack_inflight: None,
        dead_letters: FuturesUnordered::new(),
        side: FuturesUnordered::new(),
        was_holding: false,
        isolated: false,
        reclaim_peek: false,
        make_room: false,
        handler_time: Ewma::default(),
        round_trip: Ewma::default(),
        deadline: None,
        unblock_at: None,
        report: ConsumerReport::default(),
    };
    let mut stop = stop;
    if let Some(lease) = &lp.sub.lease {
        match hygiene::hold(lease, &lp.redis, &mut stop).await {
            Ok(()) => lp.renew_lease(),
            Err(Error::StartAborted | Error::ShutDown) => {
                lp.sub.board.set_state(SubscriptionState::Stopped);
                return lp.report;
            }
            Err(e) => {
                tracing::error!(stream = %lp.sub.names.name, consumer = %lp.sub.consumer, error = %e, "could not take the consumer name's lease; consumer ends");
                lp.report.error = Some(e);
                return lp.report;
            }
        }
    }
    let s = &lp.sub;
    tracing::info!(
        stream = %s.names.name,
        group = %s.names.group,
        consumer = %s.consumer,
        policy = "retry_then_dlq",
        max_retries = s.opts.max_retries,
        "consumer started"
    );
    lp.sub.board.set_state(SubscriptionState::Running);
    if let Some(tx) = ready {
        let _ = tx.send(());
    }
    lp.run(stop).await;
    let r = &lp.report;
    if r.error.is_none() && r.panic.is_none() && !r.timed_out {
        lp.leave_group().await;
    }
    lp.release_lease().await;
    if lp.report.error.is_none() && lp.report.panic.is_none() {
        lp.sub.board.set_state(SubscriptionState::Stopped);
    }
    tracing::info!(stream = %lp.sub.names.name, consumer = %lp.sub.consumer, "consumer stopped");
    lp.report
}

struct Loop {
    sub: Arc<Subscription>,
    connector: Connector,
    /// The broker, for handlers that ask for it.
    broker: crate::Broker,
    /// This subscription's metrics series.
    metrics: ConsumerMetrics,
    /// Changes when a failover is announced: the read connection moves.
    epoch: watch::Receiver<u64>,
    redis: Addr<RedisActor>,
    reclaimer: Addr<ReclaimerActor>,
    /// A reclaim page in flight (`None` when the reclaimer is gone).
    reclaim: Option<LocalBoxFuture<'static, Option<ClaimDone>>>,
    /// When to ask the reclaimer next.
    reclaim_due: tokio::time::Instant,
    reclaim_interval: Duration,
    /// Ids of every entry this consumer holds: queued, running, or on its way
    /// to the dead-letter stream. Kept fresh in the PEL by the heartbeat.
    held: HashSet<EntryId>,
    /// When to refresh the idle time of held entries next.
    heartbeat_at: tokio::time::Instant,
    heartbeat_every: Duration,
    /// When to renew the consumer name's lease next.
    lease_at: tokio::time::Instant,
    /// A lease renewal in flight.
    lease_renewal: Option<LocalBoxFuture<'static, Result<Taken, Error>>>,
    /// Failed renewals in a row (for logging).
    lease_retry: Retry,
    /// When to prune the group's idle empty consumers next (`None`: off).
    prune_at: Option<tokio::time::Instant>,
    /// A refresh is in flight.
    refreshing: Rc<Cell<bool>>,
    /// Entries whose handler failed here, held while they wait out their
    /// retry backoff (see `retry.rs`).
    waiting: retry::Waiting,
    /// Waiting entries on their way back (XCLAIM … RETRYCOUNT).
    retry_claims: FuturesUnordered<LocalBoxFuture<'static, retry::ClaimedBack>>,
    /// Until its first re-read of its own PEL is done.
    fresh: bool,
    /// Whether it held anything at the last turn of the loop.
    was_holding: bool,
    /// A redelivered entry is running alone.
    isolated: bool,
    /// The reclaim in flight only peeks.
    reclaim_peek: bool,
    /// An idle entry waits to be claimed: fetch nothing until the handlers
    /// finished and the claim is done.
    make_room: bool,
    /// How long a handler runs, on average.
    handler_time: Ewma,
    /// How long a round trip to Redis takes (measured on XACK), on average.
    round_trip: Ewma,
    /// The read connection, absent while (re)connecting.
    conn: Option<MultiplexedConnection>,
    /// Its CLIENT ID, and in a cluster the node it is on, for CLIENT UNBLOCK.
    reader: Rc<RefCell<Option<Unblock>>>,
    /// `true` while an XREADGROUP is on the wire (not connecting, not backing off).
    in_read: Rc<Cell<bool>>,
    cursor: Cursor,
    /// Failed reads, XACKs and dead-letter moves in a row, with their backoff.
    read_retry: Retry,
    ack_retry: Retry,
    dead_letter_retry: Retry,
    /// How long the next read waits first (after a failed one).
    retry_delay: Option<Duration>,
    /// Entries in the XACK batch on the wire.
    acks_inflight: usize,
    /// CLIENT UNBLOCK was refused (ACL, managed service): stop waits out
    /// `block` instead.
    unblock_refused: Rc<Cell<bool>>,
    /// Fetched, not started.
    queue: VecDeque<Queued>,
    running: FuturesUnordered<LocalBoxFuture<'static, Finished>>,
    read: Option<LocalBoxFuture<'static, ReadDone>>,
    /// Ids to XACK with the next batch.
    acks: Vec<EntryId>,
    ack_inflight: Option<LocalBoxFuture<'static, AckDone>>,
    /// Dead-letter moves in flight; their entries stay held until done.
    dead_letters: FuturesUnordered<LocalBoxFuture<'static, DeadLetterDone>>,
    /// Hand-backs and refreshes in flight (fire and forget, awaited on exit).
    side: FuturesUnordered<LocalBoxFuture<'static, ()>>,
    /// Set once draining.
    deadline: Option<Instant>,
    /// When to send (again) CLIENT UNBLOCK to the blocked read while draining.
    unblock_at: Option<tokio::time::Instant>,
    report: ConsumerReport,
}

impl Loop {
    async fn run(&mut self, mut stop: watch::Receiver<Option<Instant>>) {
        loop {
            if self.deadline.is_none() {
                self.start_queued();
                if self.may_reclaim() && tokio::time::Instant::now() >= self.reclaim_due {
                    self.start_reclaim();
                }
                if let Some(count) = self.read_count() {
                    self.start_read(count);
                }
            }
            let may_reclaim = self.may_reclaim();
            let holding = !self.held.is_empty();
            if holding && !self.was_holding {
                // Fresh entries need no refresh before `claim_idle / 3` from now.
                self.heartbeat_at = tokio::time::Instant::now() + self.heartbeat_every;
            }
            self.was_holding = holding;
            if self.ack_inflight.is_none() && !self.acks.is_empty() {
                self.send_acks(None);
            }
            if self.deadline.is_some()
                && self.read.is_none()
                && self.running.is_empty()
                && self.reclaim.is_none()
                && self.ack_inflight.is_none()
                && self.acks.is_empty()
                && self.dead_letters.is_empty()
                && self.side.is_empty()
                && self.retry_claims.is_empty()
            {
                return;
            }

            let deadline = self.deadline.map(tokio::time::Instant::from_std);
            let unblock_at = self.unblock_at;
            let retry_at = self.waiting.next_due().filter(|_| self.deadline.is_none());
            let has_lease = self.sub.lease.is_some();
            let prune_at = self.prune_at.filter(|_| self.deadline.is_none());
            tokio::select! {
                done = maybe(&mut self.read) => {
                    self.read = None;
                    self.on_read(done);
                }
                Some(fin) = self.running.next(), if !self.running.is_empty() => self.on_finished(fin),
                res = maybe(&mut self.ack_inflight) => {
                    self.ack_inflight = None;
                    self.on_acked(res);
                }
                Some(done) = self.dead_letters.next(), if !self.dead_letters.is_empty() => self.on_dead_lettered(done),
                Some(()) = self.side.next(), if !self.side.is_empty() => {}
                () = tokio::time::sleep_until(retry_at.unwrap_or_else(far_future)), if retry_at.is_some() => {
                    self.retry_due();
                }
                Some(back) = self.retry_claims.next(), if !self.retry_claims.is_empty() => self.on_retry_claimed(back),
                claimed = maybe(&mut self.reclaim) => {
                    self.reclaim = None;
                    self.on_claimed(claimed);
                }
                () = tokio::time::sleep_until(self.reclaim_due), if may_reclaim => {}
                () = tokio::time::sleep_until(self.heartbeat_at), if holding => {
                    self.heartbeat();
                }
                () = tokio::time::sleep_until(self.lease_at), if has_lease && self.lease_renewal.is_none() => {
                    self.renew_lease();
                }
                res = maybe(&mut self.lease_renewal) => {
                    self.lease_renewal = None;
                    self.on_lease_renewed(res);
                }
                () = tokio::time::sleep_until(prune_at.unwrap_or_else(far_future)), if prune_at.is_some() => {
                    self.prune_idle();
                }
                Ok(()) = self.epoch.changed(), if self.deadline.is_none() => self.on_failover(),
                changed = stop.changed(), if self.deadline.is_none() => {
                    let deadline = match changed {
                        Ok(()) => (*stop.borrow()).unwrap_or_else(Instant::now),
                        // The actor is gone: stop now.
                        Err(_) => Instant::now(),
                    };
                    self.begin_drain(deadline);
                }
                () = tokio::time::sleep_until(unblock_at.unwrap_or_else(far_future)), if unblock_at.is_some() => {
                    self.unblock();
                }
                () = tokio::time::sleep_until(deadline.unwrap_or_else(far_future)), if deadline.is_some() => {
                    self.abandon();
                    return;
                }
            }
        }
    }

    /// Starts queued entries while handler slots are free.
    ///
    /// A redelivered entry (delivery count > 1) whose last run may have ended
    /// without a result (a crash, found in the PEL or claimed from another
    /// consumer) runs alone: it waits until the running handlers finished,
    /// and nothing else starts while it runs. If it is the kind that kills the
    /// process, the crash then costs only its own delivery count, never its
    /// neighbours'. An entry whose handler failed here runs beside others: a
    /// downstream outage must not serialise a consumer of many handlers.
    fn start_queued(&mut self) {
        while self.running.len() < self.sub.opts.concurrency && !self.isolated {
            let Some(front) = self.queue.front() else {
                break;
            };
            let alone = front.delivery_count > 1 && !front.retried_here;
            if alone && !self.running.is_empty() {
                break;
            }
            let d = self.queue.pop_front().expect("front exists");
            let before = self.running.len();
            self.start(d);
            self.isolated = alone && self.running.len() > before;
        }
    }

    /// How many entries the next read may fetch, if a read may start now.
    ///
    /// Entries are fetched no faster than they can start, so a consumer never
    /// holds entries another idle consumer could be running: a read starts when
    /// nothing fetched waits and the free slots plus the prefetch (see
    /// [`Loop::prefetch`]) reach half a batch (of `count`, at most
    /// `concurrency`), and asks for that many, at most `count`. While
    /// re-reading its own pending entries (redeliveries, which run alone) it
    /// reads one at a time, only when nothing runs.
    fn read_count(&self) -> Option<usize> {
        let o = &self.sub.opts;
        if self.deadline.is_some()
            || self.read.is_some()
            || !self.queue.is_empty()
            || self.isolated
            || self.make_room
            // A claim is on its way: what it brings is a redelivery, which
            // must run alone, before anything newly fetched.
            || (self.reclaim.is_some() && !self.reclaim_peek)
        {
            return None;
        }
        let free = o.concurrency - self.running.len();
        match self.cursor {
            // What it holds now awaits an XACK or a dead-letter move: the
            // re-read skips those and takes the next one.
            Cursor::Pending(_) => self
                .running
                .is_empty()
                .then_some(self.held.len().min(o.count.max(100)) + 1),
            Cursor::New => {
                let room = free + self.prefetch();
                let low_water = o.count.min(o.concurrency).div_ceil(2).max(1);
                (room >= low_water).then_some(o.count.min(room))
            }
        }
    }

    /// How many entries may be fetched beyond the free handler slots: as many
    /// as the handlers get through in one Redis round trip (at most `count`),
    /// so a fetched entry waits about one round trip before it starts. Slow
    /// handlers get none; fast ones get whole batches. 0 until both times are
    /// measured.
    fn prefetch(&self) -> usize {
        let (Some(handler), Some(rtt)) = (self.handler_time.get(), self.round_trip.get()) else {
            return 0;
        };
        let per_trip =
            rtt.as_nanos() * self.sub.opts.concurrency as u128 / handler.as_nanos().max(1);
        per_trip.min(self.sub.opts.count as u128) as usize
    }

    /// Whether a reclaim check may start (when due): after the own pending
    /// entries were re-read (else a claimed entry could be read twice), not
    /// while a redelivery runs alone, and, once an idle entry is known to wait,
    /// only when this consumer is idle (the claim itself).
    fn may_reclaim(&self) -> bool {
        let idle = self.running.is_empty() && self.queue.is_empty() && self.read.is_none();
        self.deadline.is_none()
            && self.reclaim.is_none()
            && matches!(self.cursor, Cursor::New)
            && !self.isolated
            && (idle || !self.make_room)
    }

    /// Queues fetched or claimed entries. Entries deleted or trimmed while
    /// pending (no body) are acked and skipped, logged once per batch; entries
    /// this consumer already holds are skipped (a defence: one entry must
    /// never run twice at once here).
    fn enqueue(&mut self, entries: Vec<Delivered>) {
        let mut gone = 0usize;
        for Delivered {
            raw,
            delivery_count,
        } in entries
        {
            let Some(fields) = raw.fields else {
                gone += 1;
                self.acks.push(raw.id);
                continue;
            };
            if self.held.insert(raw.id.clone()) {
                self.queue.push_back(Queued {
                    id: raw.id,
                    fields,
                    delivery_count,
                    retried_here: false,
                });
            } else {
                tracing::debug!(id = %raw.id, "entry already held; not queued twice");
            }
        }
        if gone > 0 {
            tracing::warn!(stream = %self.sub.names.name, entries = gone, "pending entries were deleted or trimmed; acking and skipping them");
        }
    }

    /// Runs one entry's handler, or sends it to the DLQ if it cannot run.
    fn start(&mut self, q: Queued) {
        let Queued {
            id,
            fields,
            delivery_count,
            retried_here: _,
        } = q;
        let s = &self.sub;
        let msg = Message {
            id,
            stream: s.names.name.clone(),
            group: s.names.group.clone(),
            consumer: s.consumer.clone(),
            delivery_count,
            fields: fields.into(),
            data_field: s.names.field.clone(),
        };
        let max_runs = s.opts.max_retries.saturating_add(1);
        if delivery_count > max_runs {
            // Delivered more often than it may run: earlier runs never
            // finished (the process died each time).
            let err = format!(
                "delivered {delivery_count} times, more than max_retries + 1 = {max_runs} runs; earlier runs never finished"
            );
            tracing::warn!(
                stream = %msg.stream, id = %msg.id, delivery_count, error = %err,
                "entry had all its runs without finishing; moving it to the dead-letter stream"
            );
            self.dead_letter(msg, err);
            return;
        }
        // The handler runs inside a span carrying the delivery, so the
        // application's own log lines in it name the entry.
        let span = tracing::info_span!(
            "rillkit.handle",
            stream = %msg.stream,
            group = %msg.group,
            consumer = %msg.consumer,
            entry_id = %msg.id,
            delivery_count = msg.delivery_count,
            traceparent = tracing::field::Empty,
        );
        if let Some(tp) = msg.field(crate::traceparent::TRACEPARENT_FIELD) {
            // Recorded as sent (lossy UTF-8): a malformed value still helps
            // a search, and parsing is the reader's business.
            span.record(
                "traceparent",
                tracing::field::display(String::from_utf8_lossy(tp)),
            );
        }
        let prepared = span.in_scope(|| {
            std::panic::catch_unwind(AssertUnwindSafe(|| (s.handler)(&msg, &self.broker)))
        });
        match prepared {
            Ok(Prepared::Run(fut)) => {
                if msg.delivery_count > 1 {
                    self.metrics.redelivered.increment(1);
                }
                self.metrics.in_flight.increment(1.0);
                self.running.push(Box::pin(
                    async move {
                        let t0 = Instant::now();
                        let result = AssertUnwindSafe(fut)
                            .catch_unwind()
                            .await
                            .map_err(|p| crate::panic_message(&*p));
                        let took = t0.elapsed();
                        Finished { msg, result, took }
                    }
                    .instrument(span),
                ));
            }
            Ok(Prepared::Undeliverable(why)) => {
                tracing::warn!(stream = %msg.stream, id = %msg.id, reason = %why, "entry cannot be handled; moving it to the dead-letter stream");
                self.dead_letter(msg, why.to_string());
            }
            Err(p) => {
                let what = crate::panic_message(&*p);
                self.on_finished(Finished {
                    msg,
                    result: Err(what),
                    took: Duration::ZERO,
                });
            }
        }
    }

    fn on_finished(&mut self, fin: Finished) {
        let Finished { msg, result, took } = fin;
        self.handler_time.add(took);
        if !took.is_zero() {
            // It ran (a panic while creating the future never did).
            self.metrics.in_flight.decrement(1.0);
            self.metrics.handler_duration.record(took.as_secs_f64());
        }
        if self.isolated {
            // The redelivery that ran alone is done (nothing runs beside it).
            self.isolated = false;
        }
        let error = match result {
            Ok(Ok(())) => {
                self.metrics.handled.increment(1);
                self.sub.board.handled();
                self.metrics.record_end_to_end(&msg.id);
                // Stays held until the XACK is done (see `on_acked`).
                self.acks.push(msg.id);
                return;
            }
            Ok(Err(HandlerError::Reject(e))) => {
                tracing::warn!(stream = %msg.stream, id = %msg.id, error = %e, "handler rejected entry; moving it to the dead-letter stream");
                self.dead_letter(msg, format!("rejected: {e}"));
                return;
            }
            Ok(Err(HandlerError::Retry(e))) => {
                self.metrics.failed.increment(1);
                self.sub.board.failed();
                e.to_string()
            }
            Err(panic) => {
                self.metrics.failed.increment(1);
                self.sub.board.failed();
                tracing::error!(stream = %msg.stream, id = %msg.id, panic = %panic, "handler panicked");
                format!("handler panicked: {panic}")
            }
        };
        let max_runs = self.sub.opts.max_retries.saturating_add(1);
        if msg.delivery_count >= max_runs {
            tracing::warn!(
                stream = %msg.stream, id = %msg.id, delivery_count = msg.delivery_count, error = %error,
                "handler failed on its last run; moving the entry to the dead-letter stream"
            );
            self.dead_letter(msg, error);
        } else {
            let (stream, id, delivery_count) =
                (msg.stream.clone(), msg.id.clone(), msg.delivery_count);
            let wait = self.schedule_retry(msg);
            tracing::warn!(
                %stream, %id, delivery_count, error = %error, retry_in_ms = wait.as_millis() as u64,
                "handler failed; the entry runs again after its backoff"
            );
        }
    }

    /// Moves an entry to the dead-letter stream (see `DeadLetter`). The entry
    /// stays held, so it is kept fresh and never reclaimed meanwhile, and the
    /// move is retried with backoff until it is done or the broker shuts down.
    fn dead_letter(&mut self, msg: Message, error: String) {
        let names = &self.sub.names;
        self.held.insert(msg.id.clone());
        let entry = Arc::new(DeadLetterEntry {
            stream: names.name.clone(),
            group: names.group.clone(),
            dlq: names.dlq.clone(),
            consumer: msg.consumer,
            id: msg.id,
            delivery_count: msg.delivery_count,
            fields: msg.fields,
            error,
            dlq_max_len: names.dlq_max_len,
        });
        self.send_dead_letter(entry, None);
    }

    fn send_dead_letter(&mut self, entry: Arc<DeadLetterEntry>, delay: Option<Duration>) {
        let redis = self.redis.clone();
        self.dead_letters.push(Box::pin(async move {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            let res = redis
                .send(DeadLetter(entry.clone()))
                .await
                .unwrap_or(Err(Error::ShutDown));
            (entry, res)
        }));
    }

    fn on_dead_lettered(&mut self, (entry, res): DeadLetterDone) {
        match &res {
            Ok(Some(moved)) if moved.trimmed > 0 => {
                self.metrics.dead_lettered.increment(1);
                self.sub.board.dead_lettered();
                self.metrics.dead_letters_trimmed.increment(moved.trimmed);
                tracing::warn!(
                    stream = %entry.stream, dlq = %entry.dlq, dlq_id = %moved.id, removed = moved.trimmed,
                    cap = entry.dlq_max_len.unwrap_or(0),
                    "the dead-letter stream is at its cap: its oldest dead letters were removed"
                )
            }
            Ok(Some(moved)) => {
                self.metrics.dead_lettered.increment(1);
                self.sub.board.dead_lettered();
                tracing::debug!(stream = %entry.stream, id = %entry.id, dlq_id = %moved.id, "dead-lettered")
            }
            Ok(None) => tracing::warn!(
                stream = %entry.stream, id = %entry.id,
                "entry was no longer pending for this consumer; not dead-lettered here"
            ),
            Err(Error::ShutDown) => tracing::error!(
                stream = %entry.stream, id = %entry.id,
                "dead-letter move abandoned: broker shut down; the entry stays pending"
            ),
            Err(e) => {
                let (delay, log) = self.dead_letter_retry.failed();
                if log {
                    log_wait!(
                        e.class(),
                        stream = %entry.stream, id = %entry.id, dlq = %entry.dlq, error = %e,
                        failures = self.dead_letter_retry.failures(),
                        retry_in_ms = delay.as_millis() as u64,
                        "dead-letter move failed; retrying, the entry stays pending and held"
                    );
                }
                return self.send_dead_letter(entry, Some(delay));
            }
        }
        if res.is_ok() {
            self.dead_letter_retry.succeeded();
        }
        self.held.remove(&entry.id);
    }

    fn start_read(&mut self, count: usize) {
        let s = &self.sub;
        let read = match &self.cursor {
            Cursor::New => {
                let mut cmd = redis::cmd("XREADGROUP");
                cmd.arg("GROUP")
                    .arg(&*s.names.group)
                    .arg(&*s.consumer)
                    .arg("COUNT")
                    .arg(count)
                    .arg("BLOCK")
                    .arg(s.opts.block.as_millis() as u64)
                    .arg("STREAMS")
                    .arg(&*s.names.name)
                    .arg(">");
                Read::New(cmd)
            }
            Cursor::Pending(after) => Read::Pel(PelRead {
                stream: s.names.name.clone(),
                group: s.names.group.clone(),
                consumer: s.consumer.clone(),
                after: after.clone(),
                count,
                // Skip what it holds (entries waiting for their retry
                // included); on a fresh start count a run for everything (a
                // crash in an earlier life).
                held: self.held.clone(),
                fresh: self.fresh,
            }),
        };

        let conn = self.conn.take();
        let connector = self.connector.clone();
        let block = s.opts.block;
        let delay = self.retry_delay.take();
        let in_read = self.in_read.clone();
        let reader = self.reader.clone();
        let key = s.names.name.clone();
        let name = client_name(&[&s.names.group, &s.consumer, "reader"]);
        let unblock_refused = self.unblock_refused.clone();
        self.read = Some(Box::pin(async move {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            let mut conn = match conn {
                Some(c) => c,
                None => {
                    match connect_reader(&connector, &key, &name, block, &unblock_refused).await {
                        Ok((c, id)) => {
                            *reader.borrow_mut() = id;
                            c
                        }
                        Err(e) => {
                            return ReadDone {
                                conn: None,
                                pel: None,
                                result: Err(e),
                            };
                        }
                    }
                }
            };
            // On the wire from here until the reply is complete: a stop now
            // must wait for it and hand back.
            in_read.set(true);
            let (result, pel) = match read {
                Read::New(cmd) => (read_new(&mut conn, cmd).await, None),
                Read::Pel(p) => match reread_pel(&mut conn, p).await {
                    Ok((entries, last)) => (Ok(entries), Some(last)),
                    Err(e) => (Err(e), None),
                },
            };
            in_read.set(false);
            let keep = match &result {
                Err(e) if drops_reader(e) => None,
                _ => Some(conn),
            };
            ReadDone {
                conn: keep,
                pel,
                result,
            }
        }));
    }

    fn on_read(&mut self, done: ReadDone) {
        self.unblock_at = None;
        self.conn = done.conn;
        if self.conn.is_none() {
            self.drop_connection();
        }
        let entries = match done.result {
            Ok(e) => e,
            Err(e) => return self.on_read_error(e),
        };
        self.read_retry.succeeded();
        self.sub.board.read_ok();
        match done.pel {
            Some(Some(last)) => self.cursor = Cursor::Pending(last.0),
            Some(None) => {
                self.cursor = Cursor::New;
                self.fresh = false;
            }
            None => {}
        }
        self.enqueue(entries);
        if self.deadline.is_some() {
            self.hand_back();
        }
    }

    fn on_read_error(&mut self, e: Error) {
        let (delay, log) = self.read_retry.failed();
        let mut class = e.class();
        if class == Class::GroupGone && self.connector.is_cluster() && e.code() == Some("UNBLOCKED")
        {
            // In a cluster a blocked read is cut short this way when a slot
            // migration takes its key away (MIGRATE deletes it here): find
            // the slot's owner again. A stream really deleted answers
            // NOGROUP there, and its group is created again then.
            class = Class::Routing;
        }
        if !class.is_transient() {
            tracing::error!(stream = %self.sub.names.name, consumer = %self.sub.consumer, error = %e, "read failed; consumer ends");
            self.report.error = Some(e);
            // Stop reading now; what runs gets the usual drain deadline.
            self.begin_drain(Instant::now() + self.sub.drain_timeout);
            return;
        }
        if self.deadline.is_some() {
            return;
        }
        self.sub.board.read_failed(&e.to_string());
        self.retry_delay = Some(delay);
        if class == Class::Routing {
            // The stream's slot moved (a reshard) or is moving: the read
            // connection was dropped; the next one goes to the slot's owner
            // and re-reads this consumer's pending entries first.
            self.connector.redirected(&e);
            if log {
                let (stream, consumer) = (&self.sub.names.name, &self.sub.consumer);
                tracing::info!(
                    %stream, %consumer, answer = %e, failures = self.read_retry.failures(),
                    retry_in_ms = delay.as_millis() as u64,
                    "the stream's hash slot moved or its master changed; reading from its owner now"
                );
            }
            return;
        }
        if log {
            let (stream, consumer) = (&self.sub.names.name, &self.sub.consumer);
            log_wait!(
                class,
                %stream, %consumer, error = %e, failures = self.read_retry.failures(),
                retry_in_ms = delay.as_millis() as u64,
                "read failed; retrying"
            );
        }
        if class == Class::GroupGone {
            // The stream or the group is gone (deleted, FLUSHALL, a restart
            // without persistence): create it again from the start.
            let names = &self.sub.names;
            self.redis.do_send(CreateGroup {
                stream: names.name.clone(),
                group: names.group.clone(),
                start_id: "0".into(),
            });
            self.cursor = Cursor::Pending("0".into());
        }
    }

    fn send_acks(&mut self, delay: Option<Duration>) {
        let ids = std::mem::take(&mut self.acks);
        self.acks_inflight = ids.len();
        let names = &self.sub.names;
        let redis = self.redis.clone();
        let (stream, group) = (names.name.clone(), names.group.clone());
        self.ack_inflight = Some(Box::pin(async move {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            let t0 = Instant::now();
            let res = match redis.send(Ack { stream, group, ids }).await {
                Ok(r) => r,
                // The actor is gone: the ids went with the message.
                Err(_) => Err(AckError {
                    error: Error::ShutDown,
                    ids: Vec::new(),
                }),
            };
            (res, t0.elapsed())
        }));
    }

    /// Entries stay held (kept fresh) until their XACK is done, so nobody
    /// claims an entry that ran successfully while its ack is on its way.
    ///
    /// A failed XACK is retried with capped backoff for as long as it takes
    /// (a failover, `READONLY`, a revoked ACL…); meanwhile the entries stay
    /// held and refreshed, so nobody runs them again. Only a shut-down broker
    /// or a lost group ends the retries.
    fn on_acked(&mut self, (res, took): AckDone) {
        let ids = match res {
            Ok(ids) => {
                // An XACK never blocks: its time is a Redis round trip.
                self.round_trip.add(took);
                self.metrics.ack_round_trip.record(took.as_secs_f64());
                let failures = self.ack_retry.succeeded();
                if failures > 0 {
                    tracing::info!(stream = %self.sub.names.name, failures, "XACK accepted again");
                }
                ids
            }
            Err(AckError { error, ids })
                if matches!(error, Error::ShutDown) || error.class() == Class::GroupGone =>
            {
                // Nothing left to ack: the entries stay pending (or are gone
                // with their group) and are redelivered.
                tracing::warn!(entries = ids.len(), error = %error, "XACK failed; the entries stay pending");
                ids
            }
            Err(AckError { error, ids }) => {
                let (delay, log) = self.ack_retry.failed();
                if log {
                    let (stream, entries, retry_in_ms) =
                        (&self.sub.names.name, ids.len(), delay.as_millis() as u64);
                    let failures = self.ack_retry.failures();
                    log_wait!(
                        error.class(),
                        %stream, entries, error = %error, failures, retry_in_ms,
                        "XACK failed; the entries stay held and the ack is retried"
                    );
                }
                self.acks.extend(ids);
                self.send_acks(Some(delay));
                return;
            }
        };
        for id in &ids {
            self.held.remove(id);
        }
    }

    /// Asks the reclaimer for one page of entries idle for `claim_idle`,
    /// claimed for this consumer.
    ///
    /// A claimed entry is a redelivery and runs alone, so it is claimed only
    /// when this consumer is idle (nothing running, queued or being read).
    /// While busy, the check only peeks; when an idle entry waits, the consumer
    /// stops fetching, lets its handlers finish, then claims it.
    fn start_reclaim(&mut self) {
        let idle = self.running.is_empty() && self.queue.is_empty() && self.read.is_none();
        let peek = !idle;
        self.reclaim_peek = peek;
        let req = self.reclaimer.send(Claim {
            consumer: self.sub.consumer.clone(),
            min_idle: self.sub.opts.claim_idle,
            count: 1,
            peek,
        });
        self.reclaim = Some(Box::pin(async move { req.await.ok() }));
    }

    fn on_claimed(&mut self, claimed: Option<ClaimDone>) {
        let now = tokio::time::Instant::now();
        self.reclaim_due = now + self.reclaim_interval;
        let Some(claimed) = claimed else {
            // The reclaimer lives as long as its consumers hold its address:
            // gone means it panicked. Without it retries would silently stop,
            // so this consumer fails too and its restart brings a new one.
            tracing::error!(stream = %self.sub.names.name, "the reclaimer actor died; consumer ends");
            self.report.panic = Some("the reclaimer actor died".into());
            self.begin_drain(Instant::now() + self.sub.drain_timeout);
            return;
        };
        if self.reclaim_peek {
            if let Ok((_, true)) = claimed {
                // An idle entry waits: make room, then claim it.
                self.make_room = true;
                self.reclaim_due = now;
                if self.read.is_some() && self.in_read.get() {
                    // Cut a blocked read short rather than wait `block`.
                    self.unblock();
                }
            }
            return;
        }
        self.make_room = false;
        match claimed {
            Ok((entries, full)) => {
                if full {
                    // More idle entries may be waiting: ask again as soon as
                    // there is room.
                    self.reclaim_due = now;
                }
                if !entries.is_empty() {
                    tracing::info!(
                        stream = %self.sub.names.name, consumer = %self.sub.consumer, entries = entries.len(),
                        "claimed idle pending entries"
                    );
                }
                self.enqueue(entries);
                if self.deadline.is_some() {
                    self.hand_back();
                }
            }
            Err(Error::ShutDown) => {}
            Err(e) => {
                log_wait!(e.class(), stream = %self.sub.names.name, error = %e, "reclaim failed; trying again later");
            }
        }
    }

    /// Keeps the entries this consumer holds (running and queued) fresh in the
    /// PEL, so no reclaimer takes them over however long a handler runs:
    /// `XCLAIM … <self> 0 <ids> JUSTID` resets their idle time without
    /// touching the delivery count.
    ///
    /// One refresh at a time: while the shared connections reconnect, a
    /// refresh waits for them, and the next is skipped rather than queued.
    fn heartbeat(&mut self) {
        self.heartbeat_at = tokio::time::Instant::now() + self.heartbeat_every;
        if self.refreshing.replace(true) {
            return;
        }
        let s = &self.sub;
        let mut cmd = redis::cmd("XCLAIM");
        cmd.arg(&*s.names.name)
            .arg(&*s.names.group)
            .arg(&*s.consumer)
            .arg(0);
        for id in &self.held {
            cmd.arg(id);
        }
        cmd.arg("JUSTID");
        let req = self.redis.send(Query("xclaim", cmd));
        let refreshing = self.refreshing.clone();
        self.side.push(Box::pin(async move {
            if let Ok(Err(e)) = req.await {
                tracing::warn!(error = %e, "refreshing held entries failed");
            }
            refreshing.set(false);
        }));
    }

    /// Stop reading; hand back what is fetched but not started.
    fn begin_drain(&mut self, deadline: Instant) {
        if self.deadline.is_some() {
            return;
        }
        self.deadline = Some(deadline);
        self.hand_back();
        self.hand_back_waiting();
        if self.read.is_some() {
            if self.in_read.get() {
                self.unblock();
            } else {
                // Connecting or backing off: nothing is on the wire yet.
                self.read = None;
            }
        }
    }

    /// Interrupts the blocked read (CLIENT UNBLOCK on a shared connection) and
    /// schedules another try, in case the read reached the server only after
    /// this one.
    ///
    /// `CLIENT UNBLOCK` is `@admin`, and some managed services refuse it: then
    /// (one WARN) the read is left to end by itself within `block`.
    fn unblock(&mut self) {
        if self.unblock_refused.get() {
            self.unblock_at = None;
            return;
        }
        if let Some(target) = self.reader.borrow().clone() {
            let req = self.redis.send(target);
            let refused = self.unblock_refused.clone();
            let block = self.sub.opts.block;
            self.side.push(Box::pin(async move {
                if let Ok(Err(e)) = req.await {
                    refuse_unblock(&refused, &e, block);
                }
            }));
        }
        self.unblock_at = Some(tokio::time::Instant::now() + Duration::from_millis(50));
    }

    /// Forgets the read connection: the next read opens a new one (to the
    /// master of the moment) and first re-reads this consumer's own pending
    /// entries, which a failover or a restart from a snapshot may have put
    /// back in its PEL.
    fn drop_connection(&mut self) {
        if self.conn.is_some() || self.reader.borrow().is_some() {
            self.metrics.reconnects.increment(1);
        }
        self.conn = None;
        *self.reader.borrow_mut() = None;
        self.cursor = Cursor::Pending("0".into());
    }

    /// A failover was announced: cut the read short and move to the new
    /// master.
    fn on_failover(&mut self) {
        tracing::info!(stream = %self.sub.names.name, consumer = %self.sub.consumer, "failover announced; moving the read connection to the new master");
        if self.read.is_some() {
            // Whatever the dropped read had fetched is in this consumer's PEL
            // and is re-read first.
            self.read = None;
            self.in_read.set(false);
            self.unblock_at = None;
        }
        self.retry_delay = None;
        self.drop_connection();
    }

    /// Makes fetched-but-unstarted entries claimable by any consumer now:
    /// `XCLAIM … 0 <ids> IDLE <claim_idle> RETRYCOUNT <count - 1> JUSTID` to
    /// ourselves gives back the delivery that never ran and makes the entries
    /// look idle for `claim_idle`.
    fn hand_back(&mut self) {
        if self.queue.is_empty() {
            return;
        }
        let s = &self.sub;
        let mut by_count: std::collections::BTreeMap<u64, Vec<EntryId>> = Default::default();
        for d in self.queue.drain(..) {
            self.held.remove(&d.id);
            by_count.entry(d.delivery_count).or_default().push(d.id);
        }
        for (count, ids) in by_count {
            let n = ids.len();
            let mut cmd = redis::cmd("XCLAIM");
            cmd.arg(&*s.names.name)
                .arg(&*s.names.group)
                .arg(&*s.consumer)
                .arg(0)
                .arg(&ids)
                .arg("IDLE")
                .arg(s.opts.claim_idle.as_millis() as u64)
                .arg("RETRYCOUNT")
                .arg(count.saturating_sub(1))
                .arg("JUSTID");
            let req = self.redis.send(Query("xclaim", cmd));
            let stream = s.names.name.clone();
            self.side.push(Box::pin(async move {
                match req.await {
                    Ok(Ok(_)) => tracing::info!(stream = %stream, entries = n, "handed unstarted entries back to the group"),
                    Ok(Err(e)) => tracing::warn!(stream = %stream, entries = n, error = %e, "hand-back failed; entries are reclaimed after claim_idle"),
                    Err(_) => {}
                }
            }));
        }
    }

    /// The drain deadline passed: drop running handlers (their entries stay
    /// pending and are redelivered) and whatever is still in flight.
    fn abandon(&mut self) {
        if !self.running.is_empty() {
            tracing::warn!(
                stream = %self.sub.names.name, consumer = %self.sub.consumer, handlers = self.running.len(),
                "drain deadline passed; abandoning running handlers, their entries stay pending"
            );
            self.report.timed_out = true;
        }
        if !self.acks.is_empty() || self.ack_inflight.is_some() || !self.dead_letters.is_empty() {
            let acks =
                self.acks.len() + self.ack_inflight.as_ref().map_or(0, |_| self.acks_inflight);
            tracing::warn!(
                stream = %self.sub.names.name, consumer = %self.sub.consumer,
                acks, dead_letter_moves = self.dead_letters.len(),
                "drain deadline passed with acks or dead-letter moves not accepted by redis; those entries stay pending"
            );
            self.report.timed_out = true;
        }
        self.metrics.in_flight.decrement(self.running.len() as f64);
        self.running.clear();
        self.held.clear();
        self.isolated = false;
        self.read = None;
        self.reclaim = None;
    }
}

/// An exponentially weighted moving average of durations (weight 1/8).
#[derive(Default)]
struct Ewma(Option<f64>);

impl Ewma {
    fn add(&mut self, d: Duration) {
        let x = d.as_nanos() as f64;
        self.0 = Some(match self.0 {
            None => x,
            Some(avg) => avg + (x - avg) / 8.0,
        });
    }

    fn get(&self) -> Option<Duration> {
        self.0.map(|n| Duration::from_nanos(n as u64))
    }
}

/// Notes that a blocked read cannot be interrupted (`CLIENT UNBLOCK` or
/// `CLIENT ID` refused: ACL, a managed service) when `e` says so, with one
/// WARN: a stop then waits for the read to end by itself, within `block`.
/// Answers whether it did.
fn refuse_unblock(refused: &Cell<bool>, e: &Error, block: Duration) -> bool {
    if !matches!(e.class(), Class::Permission | Class::Fatal) {
        return false;
    }
    if !refused.replace(true) {
        tracing::warn!(
            error = %e, block_ms = block.as_millis() as u64,
            "blocked reads cannot be interrupted (CLIENT UNBLOCK or CLIENT ID refused); a stop waits for them to end within block"
        );
    }
    true
}

/// Whether a read that failed with `e` leaves its connection unusable or on
/// the wrong server: broken, demoted, the slot moved elsewhere (`MOVED`,
/// `ASK`), or its key gone (`UNBLOCKED`, which in a cluster is a migration).
fn drops_reader(e: &Error) -> bool {
    matches!(
        e.class(),
        Class::Connection | Class::RoleChange | Class::Routing | Class::GroupGone
    )
}

/// `XREADGROUP … >`: new entries, each on its first delivery.
async fn read_new(
    conn: &mut MultiplexedConnection,
    cmd: redis::Cmd,
) -> Result<Vec<Delivered>, Error> {
    let v: Value = cmd.query_async(conn).await.map_err(Error::from_redis)?;
    let entries = reply::read_reply(v).map_err(|m| Error::unparsable("XREADGROUP reply", m))?;
    Ok(entries
        .into_iter()
        .map(|raw| Delivered {
            raw,
            delivery_count: 1,
        })
        .collect())
}

/// One page of this consumer's own pending entries, taken back with the
/// delivery count of the run they are about to have. Answers them and the
/// last pending entry looked at.
///
/// `XPENDING … <consumer>` lists them with their counts (changing nothing);
/// `XCLAIM <self> 0 <ids> RETRYCOUNT <n>` returns their bodies, resets their
/// idle time and sets the count to `n` exactly. An entry that never ran here
/// (the reply of the read that delivered it was lost with its connection)
/// keeps its count: a dropped connection charges no delivery. Any entry on a
/// fresh start (an earlier life of the consumer did not finish it) counts one
/// more. (Entries whose handler failed here are held while they wait for
/// their retry, so the re-read skips them.) Entries deleted meanwhile
/// are dropped from the PEL by XCLAIM and not returned.
async fn reread_pel(
    conn: &mut MultiplexedConnection,
    p: PelRead,
) -> Result<(Vec<Delivered>, Option<EntryId>), Error> {
    let start = if p.after == "0" {
        "-".to_owned()
    } else {
        format!("({}", p.after)
    };
    let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(&*p.stream)
        .arg(&*p.group)
        .arg(&start)
        .arg("+")
        .arg(p.count)
        .arg(&*p.consumer)
        .query_async(conn)
        .await
        .map_err(Error::from_redis)?;
    let last = rows.last().map(|r| EntryId(r.0.clone()));
    let mut by_count: std::collections::BTreeMap<u64, Vec<String>> = Default::default();
    for (id, _, _, count) in rows {
        let key = EntryId(id);
        if p.held.contains(&key) {
            continue;
        }
        let run = if p.fresh { count + 1 } else { count.max(1) };
        by_count.entry(run).or_default().push(key.0);
    }
    let mut out = Vec::new();
    for (run, ids) in by_count {
        let v: Value = redis::cmd("XCLAIM")
            .arg(&*p.stream)
            .arg(&*p.group)
            .arg(&*p.consumer)
            .arg(0)
            .arg(&ids)
            .arg("RETRYCOUNT")
            .arg(run)
            .query_async(conn)
            .await
            .map_err(Error::from_redis)?;
        let entries = reply::entries(v).map_err(|m| Error::unparsable("XCLAIM reply", m))?;
        out.extend(entries.into_iter().map(|raw| Delivered {
            raw,
            delivery_count: run,
        }));
    }
    // In stream order, whatever their counts.
    out.sort_by_key(|d| d.raw.id.parts().unwrap_or_default());
    Ok((out, last))
}

/// Opens a consumer's dedicated read connection (to the master of the
/// moment; in a cluster, to the master that owns the stream's slot), whose
/// response timeout is `block` plus a margin, and returns it with the
/// `CLIENT UNBLOCK` that interrupts it (its `CLIENT ID`, and its node). When
/// `CLIENT ID` is refused (ACL), the read works all the same; stopping then
/// waits out `block`.
async fn connect_reader(
    connector: &Connector,
    stream: &str,
    name: &str,
    block: Duration,
    unblock_refused: &Cell<bool>,
) -> Result<(MultiplexedConnection, Option<Unblock>), Error> {
    let (mut conn, node) = connector
        .connect_reader(stream, block + READ_TIMEOUT_MARGIN, name)
        .await?;
    let id: Result<i64, Error> = redis::cmd("CLIENT")
        .arg("ID")
        .query_async(&mut conn)
        .await
        .map_err(Error::from_redis);
    match id {
        Ok(id) => Ok((conn, Some(Unblock { id, node }))),
        Err(e) if refuse_unblock(unblock_refused, &e, block) => Ok((conn, None)),
        Err(e) => Err(e),
    }
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400 * 365)
}
