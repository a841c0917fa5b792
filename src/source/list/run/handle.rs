//! A list item's handler run and what its end means, the same way for a
//! run of its own and for its share of a batch: its run counted first
//! (`HINCRBY`, unless the pop counted it), then `LREM` after success, a
//! retry after its backoff, or the dead-letter list; each settle sent until
//! Redis accepts it.

use std::cell::RefCell;
use std::collections::HashMap;

use actix::Addr;
use redis::Value;

use super::batch::Ended;
use super::{Finished, Loop};
use crate::delivery::handler::{self, Verdict, Why};
use crate::delivery::until_accepted;
use crate::error::Error;
use crate::handler::ItemMeta;
use crate::redis::{Eval, RedisActor};
use crate::source::list::scripts::{DEAD_LETTER, DONE};
use crate::source::list::{ListDeadLetter, ListHandler, ListSub, MAX_RETRY_WAIT};

impl Loop {
    /// Starts a handler run of `item` (see [`count_run`] for `attempts`
    /// and `counted`).
    pub(super) fn run(&mut self, item: Vec<u8>, attempts: u64, counted: Option<u64>) {
        let (redis, sub) = (self.redis.clone(), self.sub.clone());
        let reliable = self.reliable();
        self.running.push(Box::pin(async move {
            let attempt = count_run(&redis, &sub, reliable, &item, attempts, counted).await;
            let meta = ItemMeta {
                source: sub.keys.list.clone(),
                pattern: None,
                consumer: sub.consumer.clone(),
                attempt,
            };
            let span = crate::telemetry::process_span!(
                "rillkit.handle",
                destination = sub.keys.list,
                client = sub.consumer,
                base { list = %sub.keys.list, consumer = %sub.consumer, attempt, },
                otel { "messaging.destination.name" = %sub.keys.list, },
            );
            let ListHandler::Each(handle) = &sub.handler else {
                unreachable!("a batch handler's items run in batches")
            };
            let run = match handler::start(span, || {
                handle(&item, meta).map_err(|e| format!("item does not decode: {e}"))
            }) {
                Ok(running) => running.await,
                Err(at_once) => at_once,
            };
            Ended::One((item, attempt, run))
        }));
    }

    /// An item's run ended: settled by its result.
    pub(super) fn finished(&mut self, done: Finished) {
        let mut handled = Vec::new();
        self.decide(done, &mut handled);
        self.remove_handled(handled);
    }

    /// A batch ended: each item settled by its own result, the handled ones
    /// removed together (one `LREM` script for the batch).
    pub(super) fn finished_batch(&mut self, items: Vec<Finished>) {
        let mut handled = Vec::with_capacity(items.len());
        for done in items {
            self.decide(done, &mut handled);
        }
        self.remove_handled(handled);
    }

    /// Removes handled items from the processing list (`LREM` of each and
    /// its count, in one script), sent until Redis accepts it.
    fn remove_handled(&mut self, handled: Vec<Vec<u8>>) {
        if handled.is_empty() {
            return;
        }
        let k = &self.sub.keys;
        let done = Eval {
            script: &DONE,
            keys: vec![k.processing.clone().into(), k.attempts.clone().into()],
            args: handled.clone(),
        };
        self.settle(done, "LREM of handled items", handled);
    }

    /// What a run's end means for its item: retried after its backoff, or
    /// moved to the dead-letter list; a handled item (read reliably) joins
    /// `handled`, to be removed from the processing list.
    fn decide(&mut self, (item, attempt, run): Finished, handled: &mut Vec<Vec<u8>>) {
        let list = &self.sub.keys.list;
        handler::tally(&self.metrics, &self.sub.board, &run);
        let (max_retries, reliable) = (self.sub.opts.max_retries, self.reliable());
        match run.ran.verdict(attempt, max_retries, reliable) {
            Verdict::Settle => {
                if reliable {
                    handled.push(item);
                }
            }
            Verdict::DeadLetter { error, why } => {
                let consumer = &self.sub.consumer;
                if why == Why::Undecodable {
                    tracing::warn!(%list, %consumer, %error, "item goes to the dead-letter list");
                } else {
                    tracing::warn!(%list, %consumer, attempt, %error, "item goes to the dead-letter list");
                }
                self.dead_letter(item, &error, attempt);
            }
            Verdict::Retry { error } => {
                let wait = self.waiting.schedule(
                    &self.sub.opts.retry_backoff,
                    attempt,
                    MAX_RETRY_WAIT,
                    (item, attempt),
                );
                tracing::debug!(%list, attempt, %error, retry_in_ms = wait.as_millis() as u64, "item failed; it runs again after its backoff");
            }
        }
    }

    pub(super) fn dead_letter(&mut self, item: Vec<u8>, error: &str, attempts: u64) {
        let k = &self.sub.keys;
        let letter = ListDeadLetter::encode(&k.list, &item, error, &self.sub.consumer, attempts);
        self.sub.board.dead_lettered();
        self.metrics.dead_lettered.increment(1);
        if self.reliable() {
            let eval = Eval {
                script: &DEAD_LETTER,
                keys: vec![
                    k.processing.clone().into(),
                    k.dlq.as_bytes().to_vec(),
                    k.attempts.clone().into(),
                ],
                args: vec![item.clone(), letter],
            };
            self.settle(eval, "move to the dead-letter list", vec![item]);
        } else {
            let mut cmd = redis::cmd("LPUSH");
            cmd.arg(&*k.dlq).arg(letter);
            self.settle(
                crate::redis::Query("lpush", cmd),
                "dead letter of an at-most-once item",
                Vec::new(),
            );
        }
    }

    /// Sends a settling write: reliably, until Redis accepts it, whatever
    /// it answers meanwhile but a shut-down broker, so a handled item is
    /// never handled again, nor a dead letter lost, because a write failed
    /// for a while (a settling script pushes before it removes, and does
    /// nothing once no copy of the item is left on the processing list);
    /// at most once, once, since a push sent again after a lost reply
    /// would deliver the item twice. The items of `release` stop being
    /// held once Redis accepted it.
    pub(super) fn settle<M>(&mut self, msg: M, what: &'static str, release: Vec<Vec<u8>>)
    where
        M: actix::Message<Result = Result<Value, Error>> + Clone + Send + 'static,
        RedisActor: actix::Handler<M>,
    {
        let (redis, list) = (self.redis.clone(), self.sub.keys.list.clone());
        let reliable = self.reliable();
        let held = self.held.clone();
        self.side.push(Box::pin(async move {
            if reliable {
                let about = || format!("list {list}");
                if let Err(e) = until_accepted(&redis, msg, what, about).await {
                    tracing::debug!(list = %list, error = %e, what, "a list item's settle was not sent again");
                }
            } else if let Err(e) = redis.send(msg).await.unwrap_or(Err(Error::ShutDown)) {
                tracing::warn!(list = %list, error = %e, what, "a write for an item read at most once failed; it is not sent again");
            }
            for item in &release {
                unhold(&held, item);
            }
        }));
    }
}

/// The run number of `item`'s run about to start. In reliable mode
/// `attempts` is the count before this run (0 for a fresh pop): unless the
/// pop `counted` it already, the run first adds one to the item's count in
/// Redis (`HINCRBY`), which is what the dead-letter decision reads, so a
/// crash while it runs still counts. When Redis cannot be reached for it,
/// the local count.
pub(super) async fn count_run(
    redis: &Addr<RedisActor>,
    sub: &ListSub,
    reliable: bool,
    item: &[u8],
    attempts: u64,
    counted: Option<u64>,
) -> u64 {
    if let Some(n) = counted {
        return n;
    }
    if !reliable {
        return 1;
    }
    let mut hincr = redis::cmd("HINCRBY");
    hincr.arg(&sub.keys.attempts).arg(item).arg(1);
    match redis.send(crate::redis::Query("hincrby", hincr)).await {
        Ok(Ok(Value::Int(n))) => u64::try_from(n).unwrap_or(1),
        _ => attempts + 1,
    }
}

/// `item` is one copy fewer on the processing list this loop holds.
pub(super) fn unhold(held: &RefCell<HashMap<Vec<u8>, usize>>, item: &[u8]) {
    let mut held = held.borrow_mut();
    if let Some(n) = held.get_mut(item) {
        *n -= 1;
        if *n == 0 {
            held.remove(item);
        }
    }
}
