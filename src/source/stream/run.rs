//! The consumer loop. See the parent module for what it does; this file is how.

use std::collections::{HashSet, VecDeque};
use std::future::{Future, pending};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use futures::future::LocalBoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};

use tokio::sync::watch;

use super::Subscription;

mod acks;
mod batch;
mod dead_letters;
mod drain;
mod fetch;
mod handle;
mod handlers;
mod hygiene;
mod lease;
mod order;
mod pause;
mod pel;
mod read;
mod reclaim;
mod refresh;
mod retry;
mod settle;

use crate::connection::Connector;
use crate::delivery::ConsumerReport;
use crate::delivery::drain::Draining;
use crate::delivery::handler::Run;
use crate::delivery::liveness::Stall;
use crate::delivery::reader::Reader;
use crate::delivery::until_stopped;
use crate::error::Class;
use crate::error::Error;
use crate::handler::Message;
use crate::reclaimer::ReclaimerActor;
use crate::redis::RedisActor;
use crate::redis::reply::Delivered;
use crate::source::stream::ordered::Fence;
use crate::status::SubscriptionState;
use crate::stream::EntryId;
use crate::telemetry::ConsumerMetrics;
use crate::util::{Alarm, log_wait};
use acks::Acks;
use dead_letters::DeadLetters;
use fetch::FETCH_WINDOW;
use handlers::Handlers;
use lease::Keeper;
use read::{Cursor, ReadEvent, Reading};
use reclaim::Reclaim;
use refresh::Refresh;
use retry::Retries;

struct Queued {
    id: EntryId,
    fields: Vec<(Vec<u8>, Vec<u8>)>,
    delivery_count: u64,
    /// Its last run failed here (a handler error or a caught panic), so it
    /// need not run alone: it is not the kind that kills the process.
    retried_here: bool,
    /// Its key, in a partition of a stream ordered by key.
    key: Option<Vec<u8>>,
}

/// A handler run that has ended (or panicked).
struct Finished {
    msg: Message,
    run: Run,
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
    connector: Connector,
    redis: Addr<RedisActor>,
    reclaimer: Addr<ReclaimerActor>,
    stop: watch::Receiver<Option<Instant>>,
    ready: Option<tokio::sync::oneshot::Sender<()>>,
) -> ConsumerReport {
    let metrics = ConsumerMetrics::new(&sub.names.name, &sub.names.group);
    let now = tokio::time::Instant::now();
    let stall = Stall::new(sub.opts.claim_idle);
    let fence = Fence::of(&sub);
    let (stream, group) = (sub.names.name.clone(), sub.names.group.clone());
    let acks = Acks::new(stream, group, redis.clone(), metrics.ack_round_trip.clone());
    let dead_letters = DeadLetters::new(redis.clone(), metrics.clone(), sub.board.clone());
    let handlers = Handlers::new(metrics.in_flight.clone());
    let names = (sub.names.name.clone(), sub.consumer.clone());
    let lease = Keeper::new(
        sub.lease.clone(),
        redis.clone(),
        sub.board.clone(),
        names,
        &stall,
    );
    let mut lp = Loop {
        reclaim: Reclaim::new(reclaimer, sub.consumer.clone(), sub.opts.claim_idle),
        held: HashSet::new(),
        retries: Retries::default(),
        lease,
        prune_at: sub.opts.prune_idle.map(|_| now),
        refresh: Refresh::new(sub.names.name.clone(), sub.opts.claim_idle, stall.clone()),
        stall: stall.clone(),
        reading: Reading::new(
            Reader::new(
                connector.clone(),
                sub.names.name.clone(),
                &[&sub.names.group, &sub.consumer, "reader"],
                sub.opts.block,
            ),
            connector,
        ),
        sub,
        metrics,
        redis,
        queue: VecDeque::new(),
        acks,
        handlers,
        dead_letters,
        side: FuturesUnordered::new(),
        drain: None,
        report: ConsumerReport::default(),
        gate: None,
        fence,
    };
    let mut stop = stop;
    if let Some(lease) = &lp.sub.lease {
        match hygiene::hold(lease, &lp.redis, &mut stop, &lp.sub.board).await {
            Ok(sent) => {
                // Ours for a TTL from when the take was sent: never longer
                // here than on the server.
                let sent = tokio::time::Instant::from_std(sent);
                lp.lease.taken(sent, &lp.stall);
            }
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
    if lp.sub.key_order().is_some() {
        match take_partition(&lp.sub, &lp.redis, &mut stop).await {
            Ok(gate) => {
                lp.sub.board.set_failed_keys(gate.failed_count());
                lp.gate = Some(gate);
            }
            Err(e) if e.class() == Class::LeaseLost => {
                // Lost between its take and the take-over (a failover, a
                // reply that came late): taken again through the lease.
                tracing::warn!(stream = %lp.sub.names.name, consumer = %lp.sub.consumer, error = %e, "the partition's lease lapsed or is held elsewhere before its pending entries were taken; waiting for it again");
                lp.report.lease_lost = true;
                lp.sub.board.set_owned(false);
                return lp.report;
            }
            Err(e) => {
                lp.lease.release().await;
                if !matches!(e, Error::StartAborted | Error::ShutDown) {
                    lp.report.error = Some(e);
                }
                lp.sub.board.set_owned(false);
                return lp.report;
            }
        }
    }
    lp.announce();
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
    if r.error.is_none() && r.panic.is_none() && !r.timed_out && !r.lease_lost {
        lp.leave_group().await;
    }
    if !lp.report.lease_lost {
        // A partition given up leaves its lease alone: it lapsed here or
        // is held elsewhere, and the server may not answer now (a cut).
        lp.lease.release().await;
    }
    lp.sub.board.set_owned(false);
    lp.sub.board.set_failed_keys(0);
    lp.reading.quit().await;
    if lp.report.error.is_none() && lp.report.panic.is_none() {
        lp.sub.board.set_state(SubscriptionState::Stopped);
    }
    tracing::info!(stream = %lp.sub.names.name, consumer = %lp.sub.consumer, "consumer stopped");
    lp.report
}

struct Loop {
    sub: Arc<Subscription>,
    /// This subscription's metrics series.
    metrics: ConsumerMetrics,
    redis: Addr<RedisActor>,
    /// Reads on the read connection.
    reading: Reading,
    /// Held entries kept fresh in the PEL.
    refresh: Refresh,
    /// Taking over idle entries of the group.
    reclaim: Reclaim,
    /// Ids of every entry this consumer holds: queued, running, waiting for
    /// its retry, awaiting its XACK, or on its way to the dead-letter
    /// stream. Kept fresh in the PEL by `refresh`.
    held: HashSet<EntryId>,
    /// The consumer name's lease (or a partition's). Past its TTL since
    /// the last confirmed renewal, no read and no handler starts until a
    /// renewal succeeds.
    lease: Keeper,
    /// When to prune the group's idle empty consumers next (`None`: off).
    prune_at: Option<tokio::time::Instant>,
    /// Trouble with the server: no reclaim until it has answered for a
    /// whole `claim_idle` (a stall is not a death).
    stall: Stall,
    /// Entries whose handler failed here, held while they wait out their
    /// retry backoff.
    retries: Retries,
    /// Fetched, not started.
    queue: VecDeque<Queued>,
    /// The handler runs in flight.
    handlers: Handlers,
    /// The XACK batch.
    acks: Acks,
    /// Dead-letter moves in flight; their entries stay held until done.
    dead_letters: DeadLetters,
    /// Hand-backs, `CLIENT UNBLOCK`s, prunes and the `XGROUP
    /// CREATECONSUMER` in flight (fire and forget; a drain waits for them
    /// until its deadline).
    side: FuturesUnordered<LocalBoxFuture<'static, ()>>,
    /// The drain, once draining.
    drain: Option<Draining>,
    /// What the loop ends with. `lease_lost`: the partition was given up
    /// (its lease lapsed or is held elsewhere), and the loop ends without a
    /// drain.
    report: ConsumerReport,
    /// In a partition of a stream ordered by key: which keys are taken.
    gate: Option<order::Gate>,
    /// In a partition of a stream ordered by key: its lease, which fences
    /// every command that takes entries into this consumer's PEL.
    fence: Option<Fence>,
}

impl Loop {
    async fn run(&mut self, mut stop: watch::Receiver<Option<Instant>>) {
        let (mut retry_alarm, mut reclaim_alarm, mut heartbeat_alarm, mut lease_alarm) =
            (Alarm::new(), Alarm::new(), Alarm::new(), Alarm::new());
        let (mut prune_alarm, mut unblock_alarm, mut deadline_alarm, mut ack_alarm) =
            (Alarm::new(), Alarm::new(), Alarm::new(), Alarm::new());
        let (mut progress_alarm, mut batch_alarm, mut lapse_alarm) =
            (Alarm::new(), Alarm::new(), Alarm::new());
        let mut pause = self.sub.board.pause_watch();
        loop {
            if self.fence.is_some() && !self.report.lease_lost && !self.lease.holds() {
                self.give_up("no renewal of the lease was confirmed within its TTL");
            }
            if self.drain.is_none() {
                self.pause_turn();
                // A batch decodes all its entries when it starts: the next
                // read goes out first, so Redis serves it while the client
                // decodes (sent after it, the two would take turns). The
                // read's count is the same either way: it counts queued
                // entries and free batch slots alike.
                if self.sub.batch().is_some() {
                    self.read_turn().await;
                }
                self.start_queued();
                if self.may_reclaim() && tokio::time::Instant::now() >= self.reclaim.due() {
                    self.start_reclaim();
                }
                self.read_turn().await;
            }
            let may_reclaim = self.may_reclaim();
            let refresh_at = self.refresh.turn(!self.held.is_empty());
            let reclaim_due = self.reclaim.due();
            // While fetched entries still wait, their acks join this batch:
            // one XACK per batch of fast handlers rather than one for the
            // first to finish and one for the rest (each write costs a
            // system call and the loopback's work on both sides).
            let ack_now = self.queue.is_empty()
                // Nothing runs although entries wait (a redelivery
                // that must run alone, a lapsed lease): send now.
                || self.handlers.is_empty()
                // Keys wait for their entries' acks (a key's next
                // entry starts once its XACK landed): send now.
                || self.gate.as_ref().is_some_and(order::Gate::waits)
                || self.drain.is_some();
            // A slow handler must not hold the acks of those that finished
            // before it (a crash would run them again): the batch waits
            // FETCH_WINDOW at most.
            let ack_due = self.acks.turn(ack_now, self.sub.opts.count);
            if self.drain.is_some()
                && !self.reading.is_reading()
                && self.handlers.is_empty()
                && self.reclaim.is_idle()
                && self.acks.is_settled()
                && self.dead_letters.is_empty()
                && self.side.is_empty()
                && self.retries.is_idle()
            {
                self.handlers.show();
                return;
            }
            self.handlers.show();

            let deadline = self.drain.as_ref().map(Draining::until);
            let unblock_at = self.reading.unblock_at();
            let progress_due = self.drain.as_ref().map(Draining::progress_due);
            let retry_at = self.retries.next_due().filter(|_| self.drain.is_none());
            let renew_at = self.lease.renew_at();
            // A partition is given up the moment its lease lapses here.
            let lapse_at = self
                .lease
                .turn()
                .filter(|_| self.fence.is_some() && !self.report.lease_lost);
            let prune_at = self.prune_at.filter(|_| self.drain.is_none());
            let slot_wait = self
                .sub
                .key_order()
                .filter(|_| self.drain.is_none() && self.waits_for_slot())
                .map(|k| k.slots.clone());
            let batch_at = self.batch_due();
            tokio::select! {
                event = self.reading.next(self.drain.is_none()) => match event {
                    ReadEvent::Done(done) => self.on_read(done),
                    ReadEvent::Failover => self.on_failover(),
                },
                fin = self.handlers.ended() => {
                    self.slots_ended(1);
                    self.on_ended(fin);
                }
                () = Loop::slot_given_back(slot_wait.clone()), if slot_wait.is_some() => {}
                ids = self.acks.settled() => self.on_acked(ids),
                ended = self.dead_letters.ended() => self.on_dead_lettered(ended),
                Some(()) = self.side.next(), if !self.side.is_empty() => {}
                () = retry_alarm.until(retry_at), if retry_at.is_some() => {
                    self.retry_due();
                }
                back = self.retries.claimed_back() => self.on_retry_claimed(back),
                checked = self.reclaim.checked() => self.on_checked(checked),
                () = reclaim_alarm.until(Some(reclaim_due)), if may_reclaim => {}
                () = heartbeat_alarm.until(refresh_at), if refresh_at.is_some() => {
                    self.heartbeat();
                }
                lost = self.refresh.answered() => {
                    if let Some(e) = lost {
                        self.give_up(&e.to_string());
                    }
                }
                () = lapse_alarm.until(lapse_at), if lapse_at.is_some() => {
                    if !self.lease.holds() {
                        self.give_up("no renewal of the lease was confirmed within its TTL");
                    }
                }
                () = lease_alarm.until(renew_at), if renew_at.is_some() => {
                    self.lease.renew();
                    self.reload_marks();
                }
                marks = order::Gate::reloaded(&mut self.gate) => self.on_marks(marks),
                renewed = self.lease.renewed() => self.on_lease_renewed(renewed),
                () = prune_alarm.until(prune_at), if prune_at.is_some() => {
                    self.prune_idle();
                }
                Ok(()) = pause.changed(), if self.drain.is_none() => {}
                changed = stop.changed(), if self.drain.is_none() => {
                    let deadline = match changed {
                        Ok(()) => (*stop.borrow()).unwrap_or_else(Instant::now),
                        // The actor is gone: stop now.
                        Err(_) => Instant::now(),
                    };
                    self.begin_drain(deadline);
                }
                () = ack_alarm.until(ack_due), if ack_due.is_some() => {}
                () = batch_alarm.until(batch_at), if batch_at.is_some() => {}
                () = unblock_alarm.until(unblock_at), if unblock_at.is_some() => {
                    self.unblock();
                }
                () = progress_alarm.until(progress_due), if progress_due.is_some() => {
                    if let Some(drain) = self.drain.as_mut() {
                        drain.tell(self.handlers.len());
                    }
                }
                () = deadline_alarm.until(deadline), if deadline.is_some() => {
                    self.abandon();
                    self.handlers.show();
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
        if !self.lease.holds() {
            return;
        }
        if self.gate.is_some() {
            return self.start_queued_in_key_order();
        }
        if self.sub.batch().is_some() {
            return self.start_batches();
        }
        while self.handlers.len() < self.sub.opts.concurrency && !self.handlers.alone() {
            let Some(front) = self.queue.front() else {
                break;
            };
            let alone = front.delivery_count > 1 && !front.retried_here;
            if alone && !self.handlers.is_empty() {
                break;
            }
            let d = self.queue.pop_front().expect("front exists");
            self.start(d, alone);
        }
    }

    /// Whether a reclaim check may start (when due): after the own pending
    /// entries were re-read (else a claimed entry could be read twice), not
    /// while a redelivery runs alone, and, once an idle entry is known to wait,
    /// only when this consumer is idle (the claim itself).
    fn may_reclaim(&self) -> bool {
        let idle = self.handlers.is_empty() && self.queue.is_empty() && !self.reading.is_reading();
        self.drain.is_none()
            // A partition's entries change hands only with its lease.
            && self.fence.is_none()
            && !self.sub.board.paused()
            && self.reclaim.is_idle()
            && matches!(self.reading.cursor(), Cursor::New)
            && !self.handlers.alone()
            && (idle || !self.reclaim.makes_room())
            && self.stall.quiet()
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
                let key = self.entry_key(&fields);
                self.queue.push_back(Queued {
                    id: raw.id,
                    fields,
                    delivery_count,
                    retried_here: false,
                    key,
                });
            } else {
                tracing::debug!(id = %raw.id, "entry already held; not queued twice");
            }
        }
        if gone > 0 {
            tracing::warn!(stream = %self.sub.names.name, entries = gone, "pending entries were deleted or trimmed; acking and skipping them");
        }
    }
}

/// A partition of a stream ordered by key, its lease just taken: marks it
/// owned, takes every pending entry of the group's other consumers (a
/// previous owner's, so the re-read of the own pending entries runs them
/// first, in id order) and reads the keys marked failed. Waits for Redis
/// with backoff until `stop` changes.
///
/// # Errors
/// [`Error::StartAborted`] on a stop; an error no wait fixes.
async fn take_partition(
    sub: &Subscription,
    redis: &Addr<RedisActor>,
    stop: &mut watch::Receiver<Option<Instant>>,
) -> Result<order::Gate, Error> {
    use crate::source::stream::ordered;
    let k = sub.key_order().expect("a partition");
    sub.board.set_owned(true);
    let attempt = || async {
        let n = ordered::take_pending(redis, sub).await?;
        let failed = ordered::failed_keys(redis, &k.failed_keys).await?;
        Ok::<_, Error>((n, failed))
    };
    let gives_up = |e: &Error| {
        matches!(e, Error::ShutDown) || !e.class().is_transient() || e.class() == Class::LeaseLost
    };
    let log = |e: &Error, delay: std::time::Duration| {
        log_wait!(e.class(), stream = %sub.names.name, error = %e, retry_in_ms = delay.as_millis() as u64, "could not take the partition's pending entries; trying again");
    };
    let (n, failed) = until_stopped(stop, attempt, gives_up, log)
        .await
        .map_err(|e| e.unwrap_or(Error::StartAborted))?;
    tracing::info!(stream = %sub.names.name, consumer = %sub.consumer, taken_over = n, failed_keys = failed.len(), "partition taken; its pending entries run first");
    Ok(order::Gate::new(failed))
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
