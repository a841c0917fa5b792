//! A list's batch handler, run natively by its consumer loop: popped items
//! (and items due for a retry) queue, and start as batches of up to
//! `max_entries` by the rule every batch handler keeps
//! ([`Gathering`]); each batch is one handler future and one slot of
//! `concurrency`. Its items' runs are counted first (those a pop did not
//! count), then decoded; one that does not decode goes to the dead-letter
//! list and never reaches the handler. When the batch ends, each item is
//! settled by its own result, exactly as a run of its own (`LREM`, a retry
//! after its backoff, or the dead-letter list). A pop fetches room for a
//! batch per free slot and one more gathering.

use std::collections::VecDeque;
use std::time::Duration;

use super::{Finished, Loop, Phase, count_run};
use crate::delivery::batch::Gathering;
use crate::delivery::handler::{self, Ran, Run};
use crate::handler::{BatchHandler, BatchInput, HandlerResult, Undeliverable};
use crate::util::Alarm;

/// What ended in `running`: one item's run, or a batch's (each item's run,
/// in the order the handler got them, the undecodable first).
pub(super) enum Ended {
    One(Finished),
    Batch(Vec<Finished>),
}

/// An item waiting for its batch: its bytes, its runs so far (0: a fresh
/// pop) and its run's count when the pop counted it.
struct Queued {
    item: Vec<u8>,
    attempts: u64,
    counted: Option<u64>,
}

/// The batch handler's queue, and since when its next batch gathers.
pub(super) struct Batches {
    handler: BatchHandler,
    queue: VecDeque<Queued>,
    gathering: Gathering,
    /// Wakes the loop when the gathering batch is due.
    alarm: Alarm,
}

impl Batches {
    pub(super) fn new(handler: BatchHandler) -> Self {
        Batches {
            handler,
            queue: VecDeque::new(),
            gathering: Gathering::default(),
            alarm: Alarm::new(),
        }
    }

    /// Queues an item for the next batch.
    pub(super) fn queue(&mut self, item: Vec<u8>, attempts: u64, counted: Option<u64>) {
        self.queue.push_back(Queued {
            item,
            attempts,
            counted,
        });
    }

    /// The alarm of the gathering batch.
    pub(super) fn alarm(&mut self) -> &mut Alarm {
        &mut self.alarm
    }

    /// How many items a pop may bring with `free` batch slots free: room
    /// for a batch per free slot and one more gathering, less what is
    /// queued.
    pub(super) fn room(&self, free: usize) -> usize {
        free.saturating_add(1)
            .saturating_mul(self.handler.max_entries)
            .saturating_sub(self.queue.len())
    }
}

impl Loop {
    /// When the gathering batch is due to start although not full, if it
    /// may start then (a slot is free). One already due wakes the loop at
    /// once: the next turn starts it.
    pub(super) fn batch_due(&self) -> Option<tokio::time::Instant> {
        let b = self.batches.as_ref()?;
        if b.queue.is_empty() || self.phase != Phase::Consuming || !self.slot_free() {
            return None;
        }
        b.gathering.due(b.handler.max_wait)
    }

    /// Starts batches of queued items while batch slots are free: a full
    /// one at once, one less than full once its first item has waited
    /// `max_wait`.
    pub(super) fn start_batches(&mut self) {
        let now = tokio::time::Instant::now();
        let mut started = false;
        while self.slot_free() {
            let Some(b) = self.batches.as_mut() else {
                return;
            };
            let (max, wait) = (b.handler.max_entries, b.handler.max_wait);
            if b.queue.is_empty() || !b.gathering.ready(b.queue.len(), max, wait, now) {
                break;
            }
            let n = b.queue.len().min(max);
            let items: Vec<Queued> = b.queue.drain(..n).collect();
            self.start_batch(items);
            started = true;
        }
        if let Some(b) = self.batches.as_mut() {
            b.gathering.after(b.queue.is_empty(), started, now);
        }
    }

    /// Counts the runs of a batch's items, decodes them and runs the
    /// handler once for those that decoded (one future in `running`).
    fn start_batch(&mut self, items: Vec<Queued>) {
        let (redis, sub) = (self.redis.clone(), self.sub.clone());
        let reliable = self.reliable();
        let prepare = match &self.batches {
            Some(b) => b.handler.handler.clone(),
            None => return,
        };
        self.running.push(Box::pin(async move {
            // The runs a pop did not count, counted at once (together).
            let counts = items.iter().map(|q| {
                count_run(&redis, &sub, reliable, &q.item, q.attempts, q.counted)
            });
            let counts = futures::future::join_all(counts).await;
            let counted: Vec<(Vec<u8>, u64)> =
                items.into_iter().map(|q| q.item).zip(counts).collect();
            let inputs: Vec<BatchInput<'_>> = counted
                .iter()
                .map(|(item, attempt)| BatchInput {
                    id: None,
                    data: Some(item.as_slice()),
                    delivery_count: *attempt,
                })
                .collect();
            let prepared = handler::decode(|| prepare(&inputs));
            drop(inputs);
            let prepared = match prepared {
                Ok(p) => p,
                // Decoding panicked (a codec's bug): this run of each failed.
                Err(panic) => {
                    tracing::error!(list = %sub.keys.list, items = counted.len(), error = %panic, "decoding a batch panicked");
                    let n = counted.len();
                    return Ended::Batch(ran_each(counted, Err(panic), n, Duration::ZERO, None));
                }
            };
            let (undeliverable, good, call) = prepared.sort(counted);
            let mut ended: Vec<Finished> = undeliverable
                .into_iter()
                .map(|((item, attempt), why)| {
                    let ran = Ran::Undecodable(match why {
                        Undeliverable::Decode(e) => format!("item does not decode: {e}"),
                        other => format!("item does not decode: {other}"),
                    });
                    (item, attempt, Run::at_once(ran))
                })
                .collect();
            let Some(call) = call else {
                return Ended::Batch(ended);
            };
            let s = &sub;
            let span = crate::telemetry::process_span!(
                "rillkit.handle_batch",
                destination = s.keys.list,
                client = s.consumer,
                base { list = %s.keys.list, consumer = %s.consumer, items = good.len(), },
                otel {
                    "messaging.destination.name" = %s.keys.list,
                    "messaging.batch.message_count" = i64::try_from(good.len()).unwrap_or(i64::MAX),
                },
            );
            let run = handler::start_batch(span, call).await;
            if let Err(panic) = &run.results {
                tracing::error!(list = %sub.keys.list, items = good.len(), error = %panic, "batch handler panicked");
            }
            let n = good.len();
            ended.extend(ran_each(good, run.results, n, run.took, run.ended));
            Ended::Batch(ended)
        }));
    }

    /// At the drain: queued items go back onto the list unrun (a fresh
    /// pop's count taken back), the oldest last, where it is popped first;
    /// an item due for a retry stays on the processing list, which the
    /// leave puts back.
    pub(super) fn put_back_queued(&mut self) {
        let Some(b) = self.batches.as_mut() else {
            return;
        };
        let queued: Vec<Queued> = b.queue.drain(..).collect();
        b.gathering.after(true, false, tokio::time::Instant::now());
        for q in queued.into_iter().rev().filter(|q| q.attempts == 0) {
            if self.reliable() {
                super::unhold(&self.held, &q.item);
            }
            self.put_back(q.item, q.counted.is_some());
        }
    }
}

/// Each item's run of a batch, by [`handler::each_ran`]; the handler's
/// duration (`ended`) counts once, with the first.
fn ran_each(
    items: Vec<(Vec<u8>, u64)>,
    results: Result<Vec<HandlerResult>, String>,
    n: usize,
    took: Duration,
    mut ended: Option<std::time::Instant>,
) -> Vec<Finished> {
    items
        .into_iter()
        .zip(handler::each_ran(results, n))
        .map(|((item, attempt), ran)| {
            let run = Run {
                ran,
                took,
                ended: ended.take(),
            };
            (item, attempt, run)
        })
        .collect()
}
