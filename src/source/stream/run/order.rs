//! The key gate of a partition of a stream ordered by key: entries of one
//! key start one at a time, in the order they were read (id order), while
//! entries of other keys start beside them.
//!
//! A key is taken by the entry that starts, and stays taken while that
//! entry runs, waits for its retry, awaits its `XACK`, or is on its way to
//! the dead-letter stream; it is given back when Redis accepted the `XACK`
//! or the dead-letter move is done. So a key's next entry starts only once
//! its earlier ones are settled in Redis: after a crash, whatever runs again
//! (an entry whose ack was lost) runs before anything newer of its key. Later entries of a
//! taken key wait in the queue, behind it; entries without a key run
//! without ordering. An entry whose retry is due goes to the front of the
//! queue, ahead of its key's later entries.
//!
//! With `fail_rest`, the dead-letter move of an entry marks its key failed
//! (in the same script); from then on this consumer dead-letters the key's
//! entries instead of running them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::future::LocalBoxFuture;

use super::{Loop, Queued};
use crate::order::OnKeyFailure;
use crate::redis::DeadLetterOrder;
use crate::source::stream::ordered::KeyOrder;
use crate::stream::EntryId;

/// The key gate's state.
pub(super) struct Gate {
    /// Which entry holds each taken key.
    taken: HashMap<Vec<u8>, EntryId>,
    /// The key of each entry that holds one.
    key_of: HashMap<EntryId, Vec<u8>>,
    /// Keys marked failed (`fail_rest`), with the entry that failed first.
    failed: HashMap<Vec<u8>, String>,
    /// Queued entries held back by their key at the last look.
    blocked: usize,
    /// Counts the marks this loop added, so a reload sent before one was
    /// added does not drop it.
    marked: u64,
    /// A reload of the keys marked failed, in flight.
    reload: Option<LocalBoxFuture<'static, Marks>>,
}

/// A reload of the keys marked failed: the count of marks added when it
/// was sent, and what Redis answered.
type Marks = (u64, Result<HashMap<Vec<u8>, String>, crate::error::Error>);

impl Gate {
    pub(super) fn new(failed: HashMap<Vec<u8>, String>) -> Self {
        Gate {
            taken: HashMap::new(),
            key_of: HashMap::new(),
            failed,
            blocked: 0,
            marked: 0,
            reload: None,
        }
    }

    /// The reload of the marks in flight, once Redis answered it (pending
    /// while there is no gate or no reload). Cancel-safe.
    pub(super) async fn reloaded(gate: &mut Option<Gate>) -> Marks {
        let Some(reload) = gate.as_mut().and_then(|g| g.reload.as_mut()) else {
            return std::future::pending().await;
        };
        let marks = reload.await;
        if let Some(g) = gate.as_mut() {
            g.reload = None;
        }
        marks
    }
}

impl Gate {
    /// Whether queued entries wait for their key at the last look.
    pub(super) fn waits(&self) -> bool {
        self.blocked > 0
    }

    /// How many keys are marked failed.
    pub(super) fn failed_count(&self) -> usize {
        self.failed.len()
    }
}

/// The queued entries one batch may take now (see [`Loop::key_batch`]).
pub(super) struct KeyBatch {
    /// Their places in the queue, ascending.
    pub(super) at: Vec<usize>,
    /// A redelivery that must run alone is next (or is `at`'s one entry).
    pub(super) cut: bool,
    /// `at` is one redelivery that must run alone.
    pub(super) alone: bool,
}

/// The most entries a partition's queue holds while keys hold them back:
/// entries of other keys are read past a busy key, up to this many.
fn queue_cap(count: usize) -> usize {
    count.saturating_mul(10).max(100)
}

impl Loop {
    fn key_order(&self) -> Option<&KeyOrder> {
        self.sub.key_order()
    }

    /// The key of a fetched entry, when the stream is ordered.
    pub(super) fn entry_key(&self, fields: &[(Vec<u8>, Vec<u8>)]) -> Option<Vec<u8>> {
        let k = self.key_order()?;
        crate::order::entry_key(fields, &k.key_field, &self.sub.names.field)
    }

    /// Queued entries that may start as soon as a handler slot is free.
    pub(super) fn startable(&self) -> usize {
        let blocked = self.gate.as_ref().map_or(0, |g| g.blocked);
        self.queue.len().saturating_sub(blocked)
    }

    /// Whether the queue is as full as held-back keys may make it.
    pub(super) fn queue_full(&self) -> bool {
        self.gate.is_some() && self.queue.len() >= queue_cap(self.sub.opts.count)
    }

    /// Starts queued entries whose key is free, in queue order, while
    /// handler slots are free (a redelivery that must run alone still
    /// waits for the others, as in [`start_queued`](Loop::start_queued)).
    pub(super) fn start_queued_in_key_order(&mut self) {
        loop {
            // Looked at first (see `start_batches_in_key_order`).
            let pick = self.key_batch(self.slots().available().max(1));
            if pick.at.is_empty() || !self.slot_free() || self.handlers.alone() {
                break;
            }
            if pick.alone && !self.handlers.is_empty() {
                break;
            }
            for q in self.take_queued(&pick.at) {
                if self.start(q, pick.alone) {
                    self.slot_taken();
                }
            }
        }
    }

    /// The key of `q`, which starts now, is taken until `q` is settled.
    fn take_key(&mut self, q: &Queued) {
        if let (Some(key), Some(gate)) = (&q.key, self.gate.as_mut()) {
            gate.taken.insert(key.clone(), q.id.clone());
            gate.key_of.insert(q.id.clone(), key.clone());
        }
    }

    /// The queued entries that may start now (as one batch, or each as a
    /// run of its own): those whose key is free
    /// (or held by the entry itself, back for its retry), the first of each
    /// key, up to `max`, in queue order; an entry without a key always. It
    /// stops at a redelivery that must run alone: first, it is the batch
    /// alone; later, it cuts the batch short. Counts the entries held back
    /// by a key (what was not looked at counts as startable).
    pub(super) fn key_batch(&mut self, max: usize) -> KeyBatch {
        let mut held_back: HashSet<&[u8]> = HashSet::new();
        let (mut at, mut cut, mut alone, mut blocked) = (Vec::new(), false, false, 0);
        let gate = self.gate.as_ref().expect("ordered");
        for (i, q) in self.queue.iter().enumerate() {
            if at.len() >= max {
                break;
            }
            if let Some(key) = &q.key {
                let taken_by_other = gate.taken.get(key).is_some_and(|id| *id != q.id);
                if taken_by_other || held_back.contains(key.as_slice()) {
                    held_back.insert(key);
                    blocked += 1;
                    continue;
                }
                held_back.insert(key);
            }
            if q.delivery_count > 1 && !q.retried_here {
                alone = at.is_empty();
                if alone {
                    at.push(i);
                }
                cut = true;
                break;
            }
            at.push(i);
        }
        if let Some(g) = self.gate.as_mut() {
            g.blocked = blocked;
        }
        KeyBatch { at, cut, alone }
    }

    /// Takes the queued entries at places `at` (in ascending order) out of
    /// the queue, in order, and their keys with them.
    pub(super) fn take_queued(&mut self, at: &[usize]) -> Vec<Queued> {
        let mut taken: Vec<Queued> = at
            .iter()
            .rev()
            .map(|&i| self.queue.remove(i).expect("in range"))
            .collect();
        taken.reverse();
        for q in &taken {
            self.take_key(q);
        }
        taken
    }

    /// A batch (or a handler) of this partition started: one slot taken.
    pub(super) fn slot_taken(&self) {
        self.slots().take();
    }

    /// The consumer's handler slots shared by its partitions.
    fn slots(&self) -> &crate::source::stream::ordered::Slots {
        &self.key_order().expect("ordered").slots
    }

    /// Whether a handler may start: a slot of the consumer's `concurrency`,
    /// shared by the partitions it owns, is free.
    pub(super) fn slot_free(&self) -> bool {
        self.slots().free()
    }

    /// `n` handlers of this partition ended (or were abandoned): their
    /// slots go back to the consumer's partitions.
    pub(super) fn slots_ended(&self, n: usize) {
        if self.gate.is_some() {
            self.slots().give(n);
        }
    }

    /// Whether entries wait for a slot another partition holds.
    pub(super) fn waits_for_slot(&self) -> bool {
        self.gate.is_some() && self.startable() > 0 && !self.slot_free()
    }

    /// Resolves when another partition's handler gives its slot back.
    pub(super) async fn slot_given_back(slots: Option<Arc<crate::source::stream::ordered::Slots>>) {
        match slots {
            Some(s) => s.freed().await,
            None => std::future::pending().await,
        }
    }

    /// Gives back the key `id` holds, if any.
    pub(super) fn release_key(&mut self, id: &EntryId) {
        let Some(gate) = self.gate.as_mut() else {
            return;
        };
        if let Some(key) = gate.key_of.remove(id) {
            if gate.taken.get(&key) == Some(id) {
                gate.taken.remove(&key);
            }
        }
    }

    /// `key` is marked failed: its later entries are dead-lettered.
    pub(super) fn key_failed(&mut self, key: &[u8], id: &EntryId) {
        if let Some(gate) = self.gate.as_mut() {
            gate.marked += 1;
            gate.failed
                .entry(key.to_vec())
                .or_insert_with(|| id.as_str().to_owned());
            self.sub.board.set_failed_keys(gate.failed.len());
        }
    }

    /// Reads the keys marked failed again (`HGETALL`), with each lease
    /// renewal: a mark an operator deleted lets its key run again.
    pub(super) fn reload_marks(&mut self) {
        let (Some(k), Some(gate)) = (self.sub.key_order(), self.gate.as_mut()) else {
            return;
        };
        if gate.reload.is_some() || k.on_failure != OnKeyFailure::FailRest {
            return;
        }
        let (redis, hash, sent) = (self.redis.clone(), k.failed_keys.clone(), gate.marked);
        gate.reload = Some(Box::pin(async move {
            let res = crate::source::stream::ordered::failed_keys(&redis, &hash).await;
            (sent, res)
        }));
    }

    /// The marks as Redis holds them now; marks this loop added since the
    /// reload was sent are kept.
    pub(super) fn on_marks(&mut self, (sent, res): Marks) {
        let Some(gate) = self.gate.as_mut() else {
            return;
        };
        match res {
            Ok(marks) if gate.marked == sent => {
                for key in gate.failed.keys().filter(|k| !marks.contains_key(*k)) {
                    tracing::info!(stream = %self.sub.names.name, key = %String::from_utf8_lossy(key), "the key's fail_rest mark was deleted; its entries run again");
                }
                gate.failed = marks;
            }
            Ok(marks) => gate.failed.extend(marks),
            Err(e) => {
                tracing::debug!(stream = %self.sub.names.name, error = %e, "could not read the keys marked failed; trying at the next renewal");
            }
        }
        self.sub.board.set_failed_keys(gate.failed.len());
    }

    /// Why the entry `id` must not run: its key is marked failed
    /// (`fail_rest`).
    pub(super) fn key_marked(&self, id: &EntryId) -> Option<String> {
        if self.key_order()?.on_failure != OnKeyFailure::FailRest {
            // Marks left by an earlier `fail_rest` configuration: not ours.
            return None;
        }
        let gate = self.gate.as_ref()?;
        let key = gate.key_of.get(id)?;
        let first = gate.failed.get(key)?;
        Some(format!(
            "entry {first} of key {:?} was dead-lettered before it; with on_key_failure = fail_rest the key's later entries are dead-lettered too",
            String::from_utf8_lossy(key)
        ))
    }

    /// The ordering part of the dead letter of `id`: its key, the choice
    /// made for its key's later entries, and with `fail_rest` the hash
    /// where the move marks the key.
    pub(super) fn dead_letter_order(
        &self,
        id: &EntryId,
        because_marked: bool,
    ) -> Option<DeadLetterOrder> {
        let k = self.key_order()?;
        let key = self.gate.as_ref()?.key_of.get(id)?.clone();
        Some(DeadLetterOrder {
            key,
            on_key_failure: k.on_failure.name(),
            mark: (k.on_failure == OnKeyFailure::FailRest).then(|| k.failed_keys.clone()),
            because_marked,
        })
    }

    /// `key`'s mark is gone from Redis: its entries run again.
    pub(super) fn key_unmarked(&mut self, key: &[u8]) {
        if let Some(gate) = self.gate.as_mut() {
            gate.failed.remove(key);
            self.sub.board.set_failed_keys(gate.failed.len());
        }
    }
}
