//! The loop of one list consumer: pop (`BLMOVE`, or `BRPOP` at most once)
//! on its own connection when a handler slot is free (or, for a batch
//! handler, there is room for a batch), run the handler,
//! settle the item (`LREM`, or a move to the dead-letter list), keep the
//! heartbeat alive and recover dead consumers' processing lists, and drain
//! on a stop.

use std::cell::RefCell;
use std::collections::HashMap;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use actix::Addr;
use futures::StreamExt;
use futures::future::LocalBoxFuture;
use futures::stream::FuturesUnordered;
use redis::Value;

use tokio::sync::{oneshot, watch};

mod batch;
mod drain;
mod handle;
mod heartbeat;
mod pause;
mod read;

use batch::{Batches, Ended};
use handle::{count_run, unhold};
use heartbeat::{Beating, recover_dead};
use pause::Unblock;
use read::Backoff;

use super::scripts::{PUT_BACK_UNHELD, RETURN_OWN};
use super::{ListHandler, ListSub};
use crate::connection::Connector;
use crate::delivery::ConsumerReport;
use crate::delivery::claim::{Taken, take_when_free};
use crate::delivery::consumer;
use crate::delivery::handler::Run;
use crate::delivery::liveness::{Liveness, Stall};
use crate::delivery::reader::{ReadConn, Reader};
use crate::delivery::retry::RetryQueue;
use crate::delivery::until_done;
use crate::error::Error;
use crate::redis::{Eval, RedisActor};
use crate::status::SubscriptionState;
use crate::telemetry::ConsumerMetrics;
use crate::util::Alarm;

/// A finished handler run: the item, its attempt number, how it ended.
type Finished = (Vec<u8>, u64, Run);

/// A finished pop: the connection (when it is still usable), the item
/// with its run already counted when the pop counted it, and whether the
/// reply was late.
type ReadDone = (
    Option<ReadConn>,
    Result<Vec<(Vec<u8>, Option<u64>)>, Error>,
    bool,
);

struct Loop {
    sub: Arc<ListSub>,
    redis: Addr<RedisActor>,
    connector: Connector,
    /// The read connection (for `BLMOVE`, `BRPOP` and the pop script).
    reader: Reader,
    /// This subscription's metrics series.
    metrics: ConsumerMetrics,
    read: Option<LocalBoxFuture<'static, ReadDone>>,
    /// The pop's backoff after a failure.
    backoff: Backoff,
    /// Handler runs: one item's each, or (batch handler) one batch's.
    running: FuturesUnordered<LocalBoxFuture<'static, Ended>>,
    /// A batch handler's queue and gathering (`None`: one item per run).
    batches: Option<Batches>,
    /// Failed items waiting out their backoff (they stay on the processing
    /// list meanwhile), and the alarm for the first one due.
    waiting: RetryQueue<(Vec<u8>, u64)>,
    waiting_alarm: Alarm,
    side: FuturesUnordered<LocalBoxFuture<'static, ()>>,
    token: String,
    fatal: Option<Error>,
    /// Items on the processing list this loop knows of (running, waiting
    /// for a retry, or being settled), as a multiset.
    held: Rc<RefCell<HashMap<Vec<u8>, usize>>>,
    /// Putting back what a lost pop reply may have left on the processing
    /// list.
    reconcile: Reconcile,
    /// The heartbeat: its alarm and the beat in flight.
    beat: Beating,
    /// The heartbeat (the consumer name's lease), by the liveness rule
    /// every source keeps: past its TTL since the last confirmed beat,
    /// other consumers may take this one for dead and move its processing
    /// list back, so nothing new starts here.
    liveness: Liveness,
    /// Cutting a blocked pop short (a pause, a drain).
    unblock: Unblock,
    phase: Phase,
}

/// Where the loop is in its life.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Consuming,
    Draining,
    /// The drain deadline passed with handlers still running or settling.
    TimedOut,
}

/// The read connection was lost: a `BLMOVE` whose reply was lost may have
/// left an item on the processing list that nobody runs. Before the next
/// pop, such items go back onto the list.
#[derive(Default)]
struct Reconcile {
    due: bool,
    sent: Option<LocalBoxFuture<'static, Result<u64, Error>>>,
}

/// Runs one list subscription until it is told to drain (or fails with an
/// error nothing fixes, like `WRONGTYPE`).
pub(crate) async fn consume(
    sub: Arc<ListSub>,
    connector: Connector,
    redis: Addr<RedisActor>,
    mut stop: watch::Receiver<Option<Instant>>,
    ready: Option<oneshot::Sender<()>>,
) -> ConsumerReport {
    let reader = Reader::new(
        connector.clone(),
        sub.keys.list.clone(),
        &[&sub.keys.list, &sub.consumer, "list"],
        sub.opts.block,
    );
    let metrics = ConsumerMetrics::for_items(&sub.keys.list);
    let heartbeat_ttl = sub.opts.heartbeat_ttl;
    let mut l = Loop {
        token: crate::keys::process_token(),
        sub,
        redis,
        reader,
        metrics,
        connector,
        read: None,
        backoff: Backoff::default(),
        running: FuturesUnordered::new(),
        batches: None,
        waiting: RetryQueue::default(),
        waiting_alarm: Alarm::new(),
        side: FuturesUnordered::new(),
        fatal: None,
        held: Rc::default(),
        reconcile: Reconcile::default(),
        beat: Beating::default(),
        liveness: Liveness::new(heartbeat_ttl, None, Stall::new(heartbeat_ttl)),
        unblock: Unblock::default(),
        phase: Phase::Consuming,
    };
    if let ListHandler::Batch(b) = &l.sub.handler {
        l.batches = Some(Batches::new(b.clone()));
    }
    let reliable = !l.sub.opts.at_most_once;
    let mut ready = ready;
    if reliable {
        // Register, then take back what an earlier process under this name
        // left on its processing list.
        let started = consumer::unless_stopped(&mut stop, l.join(&mut ready)).await;
        if let Some(Err(e)) = started {
            return ConsumerReport {
                error: Some(e),
                ..Default::default()
            };
        }
    }
    if let Some(tx) = ready {
        let _ = tx.send(());
    }
    tracing::info!(
        list = %l.sub.keys.list,
        consumer = %l.sub.consumer,
        mode = if reliable { "reliable" } else { "at_most_once" },
        max_retries = l.sub.opts.max_retries,
        "list consumer started"
    );
    l.sub.board.set_state(SubscriptionState::Running);
    let pause = l.sub.board.pause_watch();
    consumer::run(&mut l, stop, Some(pause)).await;
    l.leave().await
}

impl consumer::Source for Loop {
    fn names(&self) -> (&'static str, Arc<str>) {
        ("list", self.sub.keys.list.clone())
    }

    async fn turn(&mut self) -> bool {
        // After an error nothing fixes, nothing starts: the loop drains.
        if self.phase == Phase::Consuming && self.fatal.is_none() {
            self.maybe_start();
        }
        self.unblock_turn();
        self.sub.board.scale().set_in_flight(self.running.len());
        self.phase != Phase::Consuming
            && self.read.is_none()
            && self.running.is_empty()
            && self.side.is_empty()
    }

    async fn step(&mut self) {
        let consuming = self.phase == Phase::Consuming;
        let reliable = self.reliable();
        // A due retry starts only where `maybe_start` would start it, or
        // where it cuts a blocked pop short (`unblock_turn`); elsewhere the
        // event that frees the way (a handler's end, the pop's reply, a
        // confirmed heartbeat) wakes the loop.
        let retry_at = self.waiting.next_due().filter(|_| {
            consuming
                && (self.may_take_retry() || self.may_cut_pop_for_retry())
                && (!reliable || self.liveness.holds())
        });
        let batch_at = self
            .batch_due()
            .filter(|_| !reliable || self.liveness.holds());
        let beat_at = self.liveness.due().filter(|_| reliable);
        let backoff_at = self.backoff.at.filter(|_| consuming);
        let unblock_at = self.unblock.at;
        let (mut done, mut read, mut reconciled, mut beat) = (None, None, None, None);
        let (mut backoff_over, mut beat_due) = (false, false);
        {
            let (running, side, popping) = (&mut self.running, &mut self.side, &mut self.read);
            let (reconcile, beating) = (&mut self.reconcile.sent, &mut self.beat);
            let batches = &mut self.batches;
            let (waiting_alarm, backoff, unblock) = (
                &mut self.waiting_alarm,
                &mut self.backoff,
                &mut self.unblock,
            );
            std::future::poll_fn(|cx| {
                let mut ready = consumer::Ready::default();
                if !running.is_empty() {
                    done = ready.poll(Pin::new(&mut running.next()), cx).flatten();
                }
                ready.poll_all(side, cx);
                if let Some(f) = popping.as_mut() {
                    read = ready.poll(f.as_mut(), cx);
                }
                if let Some(f) = reconcile.as_mut() {
                    reconciled = ready.poll(f.as_mut(), cx);
                }
                if let Some(f) = beating.sent.as_mut() {
                    beat = ready.poll(f.as_mut(), cx);
                }
                ready.alarm(waiting_alarm, retry_at, cx);
                backoff_over = ready.alarm(&mut backoff.alarm, backoff_at, cx);
                beat_due = ready.alarm(&mut beating.alarm, beat_at, cx);
                ready.alarm(&mut unblock.alarm, unblock_at, cx);
                if let Some(b) = batches.as_mut() {
                    ready.alarm(b.alarm(), batch_at, cx);
                }
                ready.any()
            })
            .await;
        }
        match done {
            Some(Ended::One(done)) => self.finished(done),
            Some(Ended::Batch(items)) => self.finished_batch(items),
            None => {}
        }
        if let Some(r) = read {
            self.read = None;
            if consuming {
                self.on_read(r);
            } else {
                self.put_back_read(r);
            }
        }
        if let Some(r) = reconciled {
            self.reconcile.sent = None;
            self.on_reconciled(r);
        }
        if backoff_over {
            self.backoff.at = None;
        }
        if let Some(b) = beat {
            self.beat.sent = None;
            self.on_beat(b);
        }
        if beat_due {
            self.heartbeat();
        }
    }

    fn drain_asked(&self) -> Option<Instant> {
        self.fatal
            .as_ref()
            .map(|_| Instant::now() + self.sub.drain_timeout)
    }

    /// Stops popping (a blocked pop is cut short, see `unblock_turn`);
    /// waiting retries stay on the processing list, which the leave puts
    /// back onto the list.
    fn begin_drain(&mut self, _deadline: Instant) {
        self.phase = Phase::Draining;
        self.waiting.take_all();
        self.unblock.at = None;
        self.put_back_queued();
    }

    fn running(&self) -> usize {
        self.running.len()
    }

    fn abandon(&mut self) {
        self.abandon_running();
    }
}

impl Loop {
    fn reliable(&self) -> bool {
        !self.sub.opts.at_most_once
    }

    /// Registers the consumer (heartbeat) and moves its own processing list
    /// back onto the list, retrying transient errors.
    /// `ready` is answered at once when the name is held elsewhere: the
    /// broker's start does not wait for another process.
    async fn join(&mut self, ready: &mut Option<oneshot::Sender<()>>) -> Result<(), Error> {
        let k = self.sub.keys.clone();
        let ttl = self.sub.opts.heartbeat_ttl;
        let (redis, beat) = (self.redis.clone(), self.beat_eval());
        // The name's heartbeat may be another live process's: wait for it
        // to lapse (its processing list is its own business).
        let take = || async {
            let answer = until_done(&redis, beat.clone(), None).await?;
            Ok(match answer {
                Value::Int(1) => Taken::Held,
                holder => Taken::Elsewhere {
                    holder: redis::from_redis_value(holder).unwrap_or_default(),
                    remaining: ttl / 3,
                },
            })
        };
        let consumer = &self.sub.consumer;
        let first_wait = |holder: &str, _| {
            if let Some(tx) = ready.take() {
                let _ = tx.send(());
            }
            tracing::warn!(list = %k.list, %consumer, %holder,
                "another live process uses this consumer name; waiting for its heartbeat to lapse");
        };
        // Without a deadline the wait goes on until the name is free.
        let in_use = |holder, waited| Error::ConsumerNameInUse {
            kind: crate::kind::SourceKind::List,
            key: k.list.to_string(),
            group: String::new(),
            consumer: consumer.to_string(),
            holder,
            waited,
        };
        let board = self.sub.board.clone();
        let took = take_when_free(take, None, None, &board, first_wait, in_use).await?;
        let sent = tokio::time::Instant::from_std(took.sent);
        let stall = self.liveness.stall().clone();
        self.liveness = Liveness::new(ttl, Some(sent), stall);
        let moved = until_done(&self.redis, self.return_own("keep"), None).await?;
        if let Value::Int(n @ 1..) = moved {
            tracing::info!(list = %k.list, consumer = %self.sub.consumer, items = n,
                "moved this consumer's processing list, left by an earlier process under its name, back onto the list");
        }
        // Dead consumers' items first, before this one's first pop.
        recover_dead(&self.redis, self.recover_eval(), &k.list).await;
        Ok(())
    }

    fn return_own(&self, mode: &str) -> Eval {
        let k = &self.sub.keys;
        Eval {
            script: &RETURN_OWN,
            keys: vec![
                k.processing.clone().into(),
                k.list.as_bytes().to_vec(),
                k.registry.clone().into(),
                k.heartbeat.clone().into(),
            ],
            args: vec![
                mode.into(),
                self.sub.consumer.as_bytes().to_vec(),
                self.token.clone().into_bytes(),
            ],
        }
    }

    /// Starts what a free slot allows: a due retry first, else a pop.
    fn maybe_start(&mut self) {
        let now = tokio::time::Instant::now();
        if self.reliable() && !self.liveness.holds() {
            // Not surely alive in Redis's eyes: start nothing until a
            // heartbeat is confirmed again.
            return;
        }
        while self.may_take_retry() {
            let Some((item, attempts)) = self.waiting.take_one_due(now) else {
                break;
            };
            self.take(item, attempts, None);
        }
        self.start_batches();
        if self.read.is_some() || self.reconcile.sent.is_some() || self.backoff.at.is_some() {
            return;
        }
        if self.reconcile.due {
            self.start_reconcile();
        } else if self.pop_room() > 0 && !self.sub.board.paused() {
            self.start_read();
        }
    }

    /// Whether an item due for a retry may be taken now: into a batch
    /// handler's queue at any time; else into a free slot, but not while a
    /// pop is on its way (it may bring one item per free slot; its wait
    /// ends by the time the first retry is due).
    fn may_take_retry(&self) -> bool {
        self.batches.is_some() || (self.read.is_none() && self.slot_free())
    }

    /// Whether a retry, once due, waits only for the pop in flight: one
    /// item per run (a batch handler queues it at once) and a slot free.
    fn retry_waits_for_pop(&self) -> bool {
        self.batches.is_none() && self.read.is_some() && self.slot_free()
    }

    /// Whether a retry due while a pop blocks may wake the loop to cut the
    /// pop short: no `CLIENT UNBLOCK` sent for it yet (nor refused).
    fn may_cut_pop_for_retry(&self) -> bool {
        self.retry_waits_for_pop() && self.unblock.at.is_none() && !self.reader.unblock_refused()
    }

    /// Whether a handler slot of `concurrency` is free (with a batch
    /// handler, a slot runs a batch).
    fn slot_free(&self) -> bool {
        self.running.len() < self.sub.board.concurrency()
    }

    /// How many items the next pop may bring: one per free handler slot,
    /// or with a batch handler room for a batch per free slot and one more
    /// gathering, less what is queued.
    fn pop_room(&self) -> usize {
        let free = self
            .sub
            .board
            .concurrency()
            .saturating_sub(self.running.len());
        match &self.batches {
            None => free,
            Some(b) => b.room(free),
        }
    }

    /// An item to run: popped (`attempts` 0, `counted` its run's count
    /// when the pop counted it) or due for a retry (`attempts` its runs so
    /// far). Held while this loop has it; queued for a batch handler, else
    /// run at once.
    fn take(&mut self, item: Vec<u8>, attempts: u64, counted: Option<u64>) {
        if self.reliable() && attempts == 0 {
            *self.held.borrow_mut().entry(item.clone()).or_default() += 1;
        }
        match self.batches.as_mut() {
            Some(b) => b.queue(item, attempts, counted),
            None => self.run(item, attempts, counted),
        }
    }

    /// Puts every item of the processing list this loop does not hold back
    /// onto the list, in one script (`PUT_BACK_UNHELD`) that sends no item
    /// back: an item a lost pop reply left there, however large, goes back
    /// to be popped again. Answers how many went back.
    fn start_reconcile(&mut self) {
        let (redis, held) = (self.redis.clone(), self.held.clone());
        let keys = self.sub.keys.clone();
        self.reconcile.sent = Some(Box::pin(async move {
            let mut args = Vec::new();
            for (item, copies) in held.borrow().iter() {
                args.push(item.clone());
                args.push(copies.to_string().into_bytes());
            }
            let back = Eval {
                script: &PUT_BACK_UNHELD,
                keys: vec![
                    keys.processing.clone().into(),
                    keys.list.as_bytes().to_vec(),
                ],
                args,
            };
            match until_done(&redis, back, None).await? {
                Value::Int(moved) => Ok(moved.max(0) as u64),
                other => Err(Error::unparsable("put-back reply", format!("{other:?}"))),
            }
        }));
    }

    fn on_reconciled(&mut self, r: Result<u64, Error>) {
        match r {
            Ok(moved) => {
                self.reconcile.due = false;
                if moved > 0 {
                    tracing::info!(list = %self.sub.keys.list, items = moved,
                        "put back items a lost pop reply had left on the processing list");
                }
            }
            Err(e) => {
                let (delay, _) = self.backoff.retry.failed();
                tracing::debug!(list = %self.sub.keys.list, error = %e, "checking the processing list failed; trying again");
                self.backoff.at = Some(tokio::time::Instant::now() + delay);
            }
        }
    }
}
