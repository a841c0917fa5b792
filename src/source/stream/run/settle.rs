//! Settling entries: XACK batches after success, and dead-letter moves
//! (one script: copy and ack), each retried with backoff until Redis
//! answers, so nothing is acked twice or copied twice.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Loop, Queued};
use crate::error::{Class, Error};
use crate::handler::Message;
use crate::redis::{Ack, AckError, DeadLetter, DeadLetterEntry, MoveAnswer};
use crate::stream::EntryId;
use crate::util::log_wait;

/// An XACK batch that came back: its ids and what Redis said.
pub(super) type AckDone = (Result<Vec<EntryId>, AckError>, Duration);

/// A dead-letter move that came back: the entry and what Redis said.
pub(super) type DeadLetterDone = (Arc<DeadLetterEntry>, Result<MoveAnswer, Error>);

impl Loop {
    /// Moves an entry to the dead-letter stream (see `DeadLetter`). The entry
    /// stays held, so it is kept fresh and never reclaimed meanwhile, and the
    /// move is retried with backoff until it is done or the broker shuts down.
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
        });
        self.send_dead_letter(entry, None);
    }

    /// Moves an entry this consumer could not be sent to the dead-letter
    /// stream, by id: the script copies its fields on the server (and puts
    /// its size where `error` says `{entry_bytes}`). Held and retried as
    /// [`dead_letter`](Self::dead_letter).
    pub(super) fn dead_letter_by_id(&mut self, id: EntryId, delivery_count: u64, error: String) {
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
        });
        self.send_dead_letter(entry, None);
    }

    pub(super) fn send_dead_letter(
        &mut self,
        entry: Arc<DeadLetterEntry>,
        delay: Option<Duration>,
    ) {
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

    pub(super) fn on_dead_lettered(&mut self, (entry, res): DeadLetterDone) {
        match &res {
            Ok(MoveAnswer::Moved(moved)) if moved.trimmed > 0 => {
                self.metrics.dead_lettered.increment(1);
                self.sub.board.dead_lettered();
                self.metrics.dead_letters_trimmed.increment(moved.trimmed);
                tracing::warn!(
                    stream = %entry.stream, dlq = %entry.dlq, dlq_id = %moved.id, removed = moved.trimmed,
                    cap = entry.dlq_max_len.unwrap_or(0),
                    "the dead-letter stream is at its cap: its oldest dead letters were removed"
                )
            }
            Ok(MoveAnswer::Moved(moved)) => {
                self.metrics.dead_lettered.increment(1);
                self.sub.board.dead_lettered();
                match moved.entry_bytes {
                    Some(bytes) => {
                        tracing::warn!(stream = %entry.stream, id = %entry.id, dlq_id = %moved.id, entry_bytes = bytes, "dead-lettered by id, copied on the server")
                    }
                    None => {
                        tracing::debug!(stream = %entry.stream, id = %entry.id, dlq_id = %moved.id, "dead-lettered")
                    }
                }
            }
            Ok(MoveAnswer::Unmarked) => {
                self.dead_letter_retry.succeeded();
                return self.run_unmarked(&entry);
            }
            Ok(MoveAnswer::NotPending) => tracing::warn!(
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
        if let (Ok(MoveAnswer::Moved(_)), Some(o)) = (&res, &entry.order) {
            if o.mark.is_some() {
                self.key_failed(&o.key, &entry.id);
            }
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

    pub(super) fn send_acks(&mut self, delay: Option<Duration>) {
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
    pub(super) fn on_acked(&mut self, (res, took): AckDone) {
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
            self.release_key(id);
            self.held.remove(id);
        }
    }
}
