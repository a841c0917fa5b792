//! A batch handler, run natively: queued entries start as batches of up to
//! `max_entries` (a batch starts when it is full or its first entry has
//! waited `max_wait`), each batch one handler future and one slot of
//! `concurrency`. Entries are decoded when their batch starts; one that does
//! not decode (or was delivered more often than it may run) is moved to the
//! dead-letter stream before the batch runs, and never reaches it. When the
//! batch ends, each entry is settled by its own result: the successes join
//! the next `XACK`, each failure is retried or dead-lettered by its own
//! delivery count exactly as a handler run of its own (see `handle.rs`).
//! Every entry of a batch stays held, and refreshed, until it is settled.
//! A redelivery that must run alone (see [`Loop::start_queued`]) runs as a
//! batch of its own. The prefetch counts in batches: as many as the
//! handlers get through in a round trip, in entries at most `count` (two
//! reads' `count` where a read may go out behind another).

use std::time::Duration;

use futures::FutureExt;

use super::{Finished, Loop, Queued};
use crate::delivery::handler::{self, BatchRun, Ran, Run};
use crate::handler::{BatchHandler, BatchInput, Message};

/// What ended in `running`: one entry's run, or a batch's.
pub(super) enum Ended {
    One(Finished),
    Batch(BatchDone),
}

impl From<Finished> for Ended {
    fn from(f: Finished) -> Self {
        Ended::One(f)
    }
}

/// A batch that ended: its entries, in the order the handler got them, and
/// how its run went.
pub(super) struct BatchDone {
    entries: Vec<Queued>,
    run: BatchRun,
}

/// Whether a queued entry must run alone (see [`Loop::start_queued`]).
fn alone(q: &Queued) -> bool {
    q.delivery_count > 1 && !q.retried_here
}

impl Loop {
    pub(super) fn on_ended(&mut self, ended: Ended) {
        match ended {
            Ended::One(f) => self.on_finished(f),
            Ended::Batch(b) => self.on_batch_done(b),
        }
    }

    fn batching(&self) -> &BatchHandler {
        self.sub.batch().expect("a batch handler")
    }

    /// When the gathering batch is due to start although not full, if it
    /// may start then (a slot is free) and was not due at the last look.
    pub(super) fn batch_due(&self) -> Option<tokio::time::Instant> {
        let b = self.sub.batch()?;
        if self.startable() == 0
            || self.drain.is_some()
            || !self.lease.holds()
            || self.handlers.alone()
            || !self.batch_slot_free()
        {
            return None;
        }
        // Not one already due at the last look: it waits for something
        // else (a redelivery that runs alone waits for the running
        // handlers), whose end wakes the loop.
        self.handlers.gathering().due_after_look(b.max_wait)
    }

    /// Whether a batch may start: a slot of `concurrency` is free (in a
    /// partition, one of the consumer's shared by its partitions).
    fn batch_slot_free(&self) -> bool {
        if self.gate.is_some() {
            self.slot_free()
        } else {
            self.handlers.len() < self.sub.board.concurrency()
        }
    }

    /// Starts batches of queued entries while batch slots are free: a full
    /// one at once, one less than full once its first entry has waited
    /// `max_wait` (or a redelivery that runs alone cuts it short).
    pub(super) fn start_batches(&mut self) {
        let now = tokio::time::Instant::now();
        if self.queue.is_empty() {
            self.handlers.gathering_mut().after(true, false, now);
            return;
        }
        let (max, wait) = {
            let b = self.batching();
            (b.max_entries, b.max_wait)
        };
        // The concurrency may have changed (`rillkit scale`).
        let slots = self.sub.board.concurrency();
        let mut started = false;
        while self.handlers.len() < slots && !self.handlers.alone() {
            let Some(front) = self.queue.front() else {
                break;
            };
            if alone(front) {
                if !self.handlers.is_empty() {
                    break;
                }
                let q = self.queue.pop_front().expect("front exists");
                self.start_batch(vec![q], true);
                started = true;
                continue;
            }
            let due = self.handlers.gathering().waited(wait, now);
            if self.queue.len() < max && !due {
                // Gathering; unless a redelivery cuts it short.
                if !self.queue.iter().any(alone) {
                    break;
                }
            }
            let ready = self
                .queue
                .iter()
                .take(max)
                .take_while(|q| !alone(q))
                .count();
            let cut = ready < self.queue.len().min(max);
            if ready < max && !due && !cut {
                break;
            }
            let batch: Vec<Queued> = self.queue.drain(..ready).collect();
            self.start_batch(batch, false);
            started = true;
        }
        let empty = self.queue.is_empty();
        self.handlers.gathering_mut().after(empty, started, now);
    }

    /// Starts batches in a partition, while one of the slots its consumer's
    /// partitions share is free: a batch takes the next entry of each free
    /// key (see [`Loop::key_batch`]) and their keys with them. It starts
    /// when full, or once its first entry has waited `max_wait` since it
    /// could join (or a redelivery that runs alone cuts it short).
    pub(super) fn start_batches_in_key_order(&mut self) {
        let now = tokio::time::Instant::now();
        let (max, wait) = {
            let b = self.batching();
            (b.max_entries, b.max_wait)
        };
        let mut started = false;
        loop {
            // Looked at first: what may start is then known, so a slot
            // given back elsewhere wakes this loop.
            let pick = self.key_batch(max);
            if pick.at.is_empty() || !self.slot_free() || self.handlers.alone() {
                break;
            }
            if pick.alone && !self.handlers.is_empty() {
                break;
            }
            let due = self.handlers.gathering().waited(wait, now);
            if pick.at.len() < max && !due && !pick.cut {
                break;
            }
            let batch = self.take_queued(&pick.at);
            if self.start_batch(batch, pick.alone) {
                self.slot_taken();
            }
            started = true;
        }
        let none_may_start = self.startable() == 0;
        self.handlers
            .gathering_mut()
            .after(none_may_start, started, now);
    }

    /// Decodes a batch's entries and starts its handler (one future);
    /// entries out of runs, that do not decode, or whose key is marked
    /// failed go to the dead-letter stream first. `alone`: a redelivery
    /// that runs alone. Answers whether a handler started.
    pub(super) fn start_batch(&mut self, entries: Vec<Queued>, alone: bool) -> bool {
        let max_retries = self.sub.opts.max_retries;
        let out_of_runs = |q: &Queued| handler::out_of_runs(q.delivery_count, max_retries);
        let mut entries = entries;
        if entries
            .iter()
            .any(|q| out_of_runs(q).is_some() || self.key_marked(&q.id).is_some())
        {
            let all = std::mem::take(&mut entries);
            for q in all {
                if let Some(why) = self.key_marked(&q.id) {
                    tracing::warn!(stream = %self.sub.names.name, id = %q.id, reason = %why, "an earlier entry of this key was dead-lettered; moving this one after it");
                    let msg = self.message(q);
                    self.dead_letter_for_mark(msg, why);
                } else if let Some(err) = out_of_runs(&q) {
                    let count = q.delivery_count;
                    tracing::warn!(
                        stream = %self.sub.names.name, id = %q.id, delivery_count = count, error = %err,
                        "entry had all its runs without finishing; moving it to the dead-letter stream"
                    );
                    let msg = self.message(q);
                    self.dead_letter(msg, err);
                } else {
                    entries.push(q);
                }
            }
        }
        if entries.is_empty() {
            return false;
        }
        let field = &*self.sub.names.field;
        let inputs: Vec<BatchInput<'_>> = entries
            .iter()
            .map(|q| BatchInput {
                id: Some(&q.id),
                data: q
                    .fields
                    .iter()
                    .find(|(k, _)| k.as_slice() == field.as_bytes())
                    .map(|(_, v)| v.as_slice()),
                delivery_count: q.delivery_count,
            })
            .collect();
        let prepare = self.batching().handler.clone();
        let prepared = handler::decode(|| prepare(&inputs));
        drop(inputs);
        let prepared = match prepared {
            Ok(p) => p,
            Err(panic) => {
                // Decoding panicked (a codec's bug): the batch failed.
                let run = BatchRun {
                    results: Err(panic),
                    took: Duration::ZERO,
                    ended: None,
                };
                self.on_batch_done(BatchDone { entries, run });
                return false;
            }
        };
        let (undeliverable, entries, call) = prepared.sort(entries);
        for (q, why) in undeliverable {
            tracing::warn!(stream = %self.sub.names.name, id = %q.id, reason = %why, "entry cannot be handled; moving it to the dead-letter stream");
            let msg = self.message(q);
            self.dead_letter(msg, why.to_string());
        }
        let Some(call) = call else { return false };
        let redelivered = entries.iter().filter(|q| q.delivery_count > 1).count();
        if redelivered > 0 {
            self.metrics.redelivered.increment(redelivered as u64);
        }
        let s = &self.sub;
        let span = crate::telemetry::process_span!(
            "rillkit.handle_batch",
            destination = s.names.name,
            client = s.consumer,
            base {
                stream = %s.names.name,
                group = %s.names.group,
                consumer = %s.consumer,
                entries = entries.len(),
                first_id = %entries[0].id,
                last_id = %entries[entries.len() - 1].id,
            },
            otel {
                "messaging.destination.name" = %s.names.name,
                "messaging.consumer.group.name" = %s.names.group,
                "messaging.batch.message_count" = i64::try_from(entries.len()).unwrap_or(i64::MAX),
            },
        );
        #[cfg(feature = "otel")]
        crate::otel::follow_all(
            &span,
            entries.iter().filter_map(|q| {
                q.fields
                    .iter()
                    .find(|(k, _)| k.as_slice() == crate::traceparent::TRACEPARENT_FIELD.as_bytes())
                    .and_then(|(_, v)| std::str::from_utf8(v).ok())
                    .and_then(|t| t.parse::<crate::TraceParent>().ok())
            }),
            s.opts.trace_linking,
        );
        let running = handler::start_batch(span, call);
        let running = running.map(move |run| Ended::Batch(BatchDone { entries, run }));
        self.run(running.boxed_local(), alone);
        true
    }

    /// A batch ended: each entry settled by its own result.
    fn on_batch_done(&mut self, BatchDone { entries, run }: BatchDone) {
        if run.ended.is_some() {
            self.metrics.handler_duration.record(run.took.as_secs_f64());
        }
        // A redelivery that ran alone is done (nothing ran beside it).
        self.handlers.finished(run.ended, run.took);
        if let Err(panic) = &run.results {
            tracing::error!(stream = %self.sub.names.name, entries = entries.len(), error = %panic, "batch handler panicked");
        }
        let n = entries.len();
        let mut ok = 0u64;
        for (q, ran) in entries.into_iter().zip(handler::each_ran(run.results, n)) {
            match ran {
                Ran::Ok => {
                    ok += 1;
                    self.metrics.record_end_to_end(&q.id);
                    // Stays held until the XACK is done (see `on_acked`).
                    self.acks.push(q.id);
                }
                ran => {
                    // Settled as a failed run of its own (counted, retried
                    // or dead-lettered by its own delivery count).
                    let msg = self.message(q);
                    let run = Run {
                        ran,
                        took: run.took,
                        ended: None,
                    };
                    self.on_finished(Finished { msg, run });
                }
            }
        }
        if ok > 0 {
            self.metrics.handled.increment(ok);
            for _ in 0..ok {
                self.sub.board.handled();
            }
        }
    }

    /// How many entries the next read of new entries may fetch (see
    /// [`Loop::read_count`]), counting in batches: room for a batch per
    /// free slot, plus the prefetch, less what is queued. While a slot is
    /// free it fills the gathering batch; else it fetches at least half a
    /// batch.
    pub(super) fn batch_read_count(&self) -> Option<usize> {
        let (b, count) = (self.batching(), self.sub.opts.count);
        if self.queue_full() {
            return None;
        }
        // In a partition, entries held back by their key count as not
        // queued: the read fetches past a busy key.
        let queued = self.startable();
        // Entries a read in flight asked for count as queued.
        let asked = self.reading.asked();
        if queued > 0 && self.handlers.stalled(self.fetch_window()) {
            // Stalled on a slow batch: fetch nothing more ahead of it.
            return None;
        }
        let free = self
            .sub
            .board
            .concurrency()
            .saturating_sub(self.handlers.len());
        let room = (free * b.max_entries + self.batch_prefetch()).saturating_sub(queued + asked);
        let low_water = if free > 0 {
            1
        } else {
            b.max_entries.min(count).div_ceil(2)
        };
        (room >= low_water).then_some(count.min(room))
    }

    /// The prefetch in entries: the batches the handlers get through in one
    /// round trip (or [`FETCH_WINDOW`]), at most [`Loop::most_ahead`] entries; none for
    /// slow batches, and none until both times are measured.
    fn batch_prefetch(&self) -> usize {
        let (Some(handler), Some(_)) = (self.handlers.took(), self.acks.round_trip()) else {
            return 0;
        };
        let b = self.batching();
        let batches = self.fetch_window().as_nanos() * self.sub.board.concurrency() as u128
            / handler.as_nanos().max(1);
        batches
            .saturating_mul(b.max_entries as u128)
            .min(self.most_ahead() as u128) as usize
    }

    /// The message a handler of its own would have got: for a dead letter
    /// or a retry.
    fn message(&self, q: Queued) -> Message {
        let s = &self.sub;
        Message {
            id: q.id,
            stream: s.names.name.clone(),
            group: s.names.group.clone(),
            consumer: s.consumer.clone(),
            delivery_count: q.delivery_count,
            fields: q.fields.into(),
            data_field: s.names.field.clone(),
        }
    }
}
