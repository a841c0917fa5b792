//! The consumer loop. See the parent module for what it does; this file is how.

use std::collections::{HashSet, VecDeque};
use std::future::{Future, pending};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use futures::future::LocalBoxFuture;
use futures::stream::FuturesUnordered;

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
mod in_flight;
mod lease;
mod order;
mod oversize;
mod pace;
mod pause;
mod pel;
mod read;
mod reclaim;
mod refresh;
mod retry;
mod settle;
mod source;

use crate::connection::Connector;
use crate::delivery::ConsumerReport;
use crate::delivery::consumer;
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
use crate::util::log_wait;
use acks::Acks;
use dead_letters::DeadLetters;
use fetch::FETCH_WINDOW;
use handlers::Handlers;
use lease::Keeper;
use read::{Cursor, ReadEvent, Reading};
use reclaim::Reclaim;
use refresh::Refresh;
use retry::Retries;
use source::Timers;

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
    let reader = Reader::new(
        connector.clone(),
        sub.names.name.clone(),
        &[&sub.names.group, &sub.consumer, "reader"],
        sub.opts.block,
    )
    .asking_commands();
    let acks = Acks::new(
        stream,
        group,
        redis.clone(),
        sub.names.retain_acked.then(|| reader.detected()),
        metrics.ack_round_trip.clone(),
    );
    let dead_letters = DeadLetters::new(redis.clone(), metrics.clone(), sub.board.clone());
    let limiter = sub.opts.rate_limit.map(|limit| {
        crate::delivery::limit::Limiter::new(
            limit,
            sub.names.name.clone(),
            &sub.names.group,
            redis.clone(),
            metrics.rate_limited.clone(),
        )
    });
    let handlers = Handlers::new(
        metrics.in_flight.clone(),
        pace::Pace::new(limiter, sub.priority.clone()),
    );
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
        timers: Timers::new(sub.opts.prune_idle.map(|_| now)),
        refresh: Refresh::new(sub.names.name.clone(), sub.opts.claim_idle, stall.clone()),
        stall: stall.clone(),
        reading: Reading::new(reader, connector),
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
    let pause = lp.sub.board.pause_watch();
    consumer::run(&mut lp, stop, Some(pause)).await;
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
    /// The loop's timers.
    timers: Timers,
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
    /// The drain's deadline, once draining.
    drain: Option<Instant>,
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
        match (self.gate.is_some(), self.sub.batch().is_some()) {
            (true, true) => return self.start_batches_in_key_order(),
            (true, false) => return self.start_queued_in_key_order(),
            (false, true) => return self.start_batches(),
            (false, false) => {}
        }
        while self.handlers.len() < self.sub.board.concurrency() && !self.handlers.alone() {
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
            // Where reads take idle entries, an idle consumer's next read
            // does; a busy one only peeks.
            && (!self.claims_in_read() || !idle)
            && matches!(self.reading.cursor(), Cursor::New)
            && !self.handlers.alone()
            && (idle || !self.reclaim.makes_room())
            && self.stall.quiet()
    }

    /// Queues fetched or claimed entries. Entries deleted or trimmed while
    /// pending (no body) are acked and skipped, logged once per batch, and so
    /// are entries a redrive put back for another group; entries
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
            if redriven_for_another(&fields, &self.sub.names.group) {
                tracing::debug!(stream = %self.sub.names.name, id = %raw.id, "entry redriven for another group; acked without running");
                self.acks.push(raw.id);
                continue;
            }
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

/// Whether a redrive put this entry back for another consumer group: its
/// `redriven_for` field names a group that is not `group`. Such an entry is
/// acked without running, so only the dead letter's own group runs it again.
fn redriven_for_another(fields: &[(Vec<u8>, Vec<u8>)], group: &str) -> bool {
    fields
        .iter()
        .rev()
        .find(|(k, _)| k.as_slice() == b"redriven_for")
        .is_some_and(|(_, v)| v.as_slice() != group.as_bytes())
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
