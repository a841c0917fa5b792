//! Settling entries: what goes to the dead-letter stream
//! (`dead_letters.rs` moves it) and what an ended move or XACK batch
//! (`acks.rs`) means for the entry: its key runs on, it is no longer held.

use std::sync::Arc;

use super::dead_letters::MoveEnd;
use super::{Loop, Queued};
use crate::handler::Message;
use crate::redis::DeadLetterEntry;
use crate::stream::EntryId;

impl Loop {
    /// Moves an entry to the dead-letter stream (see `DeadLetter`). The entry
    /// stays held, so it is kept fresh and never reclaimed meanwhile, and the
    /// move is sent until Redis accepts it (or the broker shuts down, or the
    /// group is gone).
    pub(super) fn dead_letter(&mut self, msg: Message, error: String) {
        self.dead_letter_with(msg, error, false);
    }

    /// Moves an entry to the dead-letter stream because an earlier entry of
    /// its key was dead-lettered (`fail_rest`), only while that mark is in
    /// Redis: when the mark is gone, the entry runs instead.
    pub(super) fn dead_letter_for_mark(&mut self, msg: Message, why: String) {
        self.dead_letter_with(msg, why, true);
    }

    fn dead_letter_with(&mut self, msg: Message, error: String, because_marked: bool) {
        let order = self.dead_letter_order(&msg.id, because_marked);
        let attempts = self.retries.take_attempts(&msg.id);
        let names = &self.sub.names;
        self.held.insert(msg.id.clone());
        let entry = Arc::new(DeadLetterEntry {
            stream: names.name.clone(),
            group: names.group.clone(),
            dlq: names.dlq.clone(),
            consumer: msg.consumer,
            id: msg.id,
            delivery_count: msg.delivery_count,
            fields: Some(msg.fields),
            error,
            dlq_max_len: names.dlq_max_len,
            order,
            attempts,
        });
        self.dead_letters.send(entry);
    }

    /// Moves an entry this consumer could not be sent to the dead-letter
    /// stream, by id: the script copies its fields on the server (and puts
    /// its size where `error` says `{entry_bytes}`). Held and retried as
    /// [`dead_letter`](Self::dead_letter).
    pub(super) fn dead_letter_by_id(&mut self, id: EntryId, delivery_count: u64, error: String) {
        let attempts = self.retries.take_attempts(&id);
        let names = &self.sub.names;
        self.held.insert(id.clone());
        let entry = Arc::new(DeadLetterEntry {
            stream: names.name.clone(),
            group: names.group.clone(),
            dlq: names.dlq.clone(),
            consumer: self.sub.consumer.clone(),
            id,
            delivery_count,
            fields: None,
            error,
            dlq_max_len: names.dlq_max_len,
            order: None,
            attempts,
        });
        self.dead_letters.send(entry);
    }

    pub(super) fn on_dead_lettered(&mut self, (entry, moved): (Arc<DeadLetterEntry>, MoveEnd)) {
        match moved {
            MoveEnd::Unmarked => return self.run_unmarked(&entry),
            MoveEnd::Copied => {
                if let Some(o) = entry.order.as_ref().filter(|o| o.mark.is_some()) {
                    self.key_failed(&o.key, &entry.id);
                }
            }
            MoveEnd::Dropped => {}
        }
        self.release_key(&entry.id);
        self.held.remove(&entry.id);
    }

    /// The mark that was to send `entry` after its key's failed entry is
    /// gone (a redrive or an operator deleted it): the key runs again, and
    /// the entry, still holding its key, goes to the front of the queue.
    fn run_unmarked(&mut self, entry: &DeadLetterEntry) {
        let (Some(o), Some(fields)) = (&entry.order, &entry.fields) else {
            return;
        };
        self.key_unmarked(&o.key);
        tracing::info!(stream = %entry.stream, id = %entry.id, key = %String::from_utf8_lossy(&o.key), "the key's fail_rest mark is gone; the entry runs instead of following the failed one");
        self.queue.push_front(Queued {
            id: entry.id.clone(),
            fields: fields.to_vec(),
            delivery_count: entry.delivery_count,
            // A redelivery never run here still runs alone.
            retried_here: entry.delivery_count <= 1,
            key: Some(o.key.clone()),
        });
    }

    /// Entries Redis acked (or that stay pending for good: a shut-down
    /// broker, a lost group) are settled here: their keys run on and they
    /// are no longer held.
    pub(super) fn on_acked(&mut self, ids: &[EntryId]) {
        self.retries.settled(ids);
        for id in ids {
            self.release_key(id);
            self.held.remove(id);
        }
    }
}
