//! Retry backoff ([`RetryBackoff`](crate::RetryBackoff)): an entry whose
//! handler failed (an error or a caught panic) before its last run waits in
//! the consumer that saw it fail, held — so the heartbeat keeps it fresh and
//! no reclaimer takes it over — for `with_retry_backoff(n)`. Then
//! `XCLAIM <self> 0 <ids> RETRYCOUNT <n + 1> JUSTID` counts the coming run
//! on the server, and the entry is queued as a redelivery that need not run
//! alone.
//!
//! A crash while it waits leaves it in the PEL, recovered after `claim_idle`
//! like any other. A drain hands it back to the group:
//! `XCLAIM <self> 0 <ids> IDLE <claim_idle − remaining> JUSTID` (the count
//! unchanged), so another consumer's reclaimer takes it once the rest of its
//! wait is over.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use futures::future::LocalBoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use redis::Value;
use tokio::time::Instant;

use super::Loop;
use crate::delivery::retry::RetryQueue;
use crate::error::{Class, Error};
use crate::handler::Message;
use crate::stream::EntryId;

/// Waiting entries taken back (or not) with `XCLAIM … RETRYCOUNT`: the
/// entries and what Redis answered (the ids still pending).
pub(super) type ClaimedBack = (Vec<Message>, Result<Value, Error>);

/// After a failed take-back, how long before trying again.
const TAKE_BACK_RETRY: Duration = Duration::from_millis(500);

/// The most failed runs of one entry kept for its dead letter.
const ATTEMPTS_KEPT: usize = 10;

/// Entries waiting out their retry backoff, those on their way back, and
/// the failed runs of the entries held here.
#[derive(Default)]
pub(super) struct Retries {
    /// By due instant.
    waiting: RetryQueue<Message>,
    /// Waiting entries on their way back (`XCLAIM … RETRYCOUNT`).
    claims: FuturesUnordered<LocalBoxFuture<'static, ClaimedBack>>,
    /// The last [`ATTEMPTS_KEPT`] failed runs of each held entry that failed
    /// here, oldest first, for its dead letter's `attempts`.
    attempts: HashMap<EntryId, VecDeque<Attempt>>,
}

/// One failed run of an entry.
#[derive(serde::Serialize)]
struct Attempt {
    delivery_count: u64,
    at_ms: u64,
    error: String,
}

impl Retries {
    /// When the next waiting entry is due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.waiting.next_due()
    }

    /// Whether no take-back is in flight.
    pub(super) fn is_idle(&self) -> bool {
        self.claims.is_empty()
    }

    /// Forgets every waiting entry (it stays pending).
    pub(super) fn forget_waiting(&mut self) {
        drop(self.waiting.take_all());
    }

    /// Records a failed run of `id` (its delivery count, now, the error).
    pub(super) fn failed(&mut self, id: &EntryId, delivery_count: u64, error: &str) {
        let runs = self.attempts.entry(id.clone()).or_default();
        if runs.len() == ATTEMPTS_KEPT {
            runs.pop_front();
        }
        runs.push_back(Attempt {
            delivery_count,
            at_ms: crate::util::now_ms(),
            error: error.to_owned(),
        });
    }

    /// The failed runs of `id` recorded here, as a JSON array (`None` when
    /// there are none), forgotten.
    pub(super) fn take_attempts(&mut self, id: &EntryId) -> Option<String> {
        let runs = self.attempts.remove(id)?;
        serde_json::to_string(&runs).ok()
    }

    /// Forgets the failed runs of entries no longer held.
    pub(super) fn settled<'a>(&mut self, ids: impl IntoIterator<Item = &'a EntryId>) {
        if self.attempts.is_empty() {
            return;
        }
        for id in ids {
            self.attempts.remove(id);
        }
    }

    /// The next take-back Redis answered (pending while none is in
    /// flight). Cancel-safe.
    pub(super) async fn claimed_back(&mut self) -> ClaimedBack {
        match self.claims.next().await {
            Some(back) => back,
            None => std::future::pending().await,
        }
    }
}

impl Loop {
    /// The handler of `msg` failed before its last run: keep it held and
    /// bring it back after its backoff. Answers the wait.
    pub(super) fn schedule_retry(&mut self, msg: Message) -> Duration {
        let o = &self.sub.opts;
        self.held.insert(msg.id.clone());
        self.retries
            .waiting
            .schedule(&o.retry_backoff, msg.delivery_count, o.claim_idle, msg)
    }

    /// Takes the entries whose wait is over back with `XCLAIM … RETRYCOUNT
    /// <the coming run> JUSTID`, one command per count.
    pub(super) fn retry_due(&mut self) {
        let due = self.retries.waiting.take_due(Instant::now());
        let mut by_count: BTreeMap<u64, Vec<Message>> = BTreeMap::new();
        for m in due {
            by_count.entry(m.delivery_count + 1).or_default().push(m);
        }
        let s = &self.sub;
        for (run, msgs) in by_count {
            let mut cmd = redis::cmd("XCLAIM");
            cmd.arg(&*s.names.name)
                .arg(&*s.names.group)
                .arg(&*s.consumer)
                .arg(0)
                .arg(msgs.iter().map(|m| &m.id).collect::<Vec<_>>())
                .arg("RETRYCOUNT")
                .arg(run)
                .arg("JUSTID");
            let req = self.claim(cmd);
            self.retries
                .claims
                .push(Box::pin(async move { (msgs, req.await) }));
        }
    }

    /// Queues what came back (with its new count, beside other entries);
    /// forgets what is no longer pending (acked or deleted elsewhere); waits
    /// again a little when Redis did not answer.
    pub(super) fn on_retry_claimed(&mut self, (msgs, answer): ClaimedBack) {
        let ids = match answer {
            Ok(Value::Array(ids)) => ids,
            Ok(other) => {
                tracing::warn!(reply = ?other, "unexpected XCLAIM reply; retrying the take-back");
                Vec::new()
            }
            Err(Error::ShutDown) => return,
            Err(e) if e.class() == Class::LeaseLost => {
                for m in &msgs {
                    self.release_key(&m.id);
                    self.held.remove(&m.id);
                }
                return self.give_up(&e.to_string());
            }
            Err(e) => {
                tracing::warn!(
                    stream = %self.sub.names.name, entries = msgs.len(), error = %e,
                    retry_in_ms = TAKE_BACK_RETRY.as_millis() as u64,
                    "taking failed entries back for their retry failed; trying again"
                );
                let due = Instant::now() + TAKE_BACK_RETRY;
                for m in msgs {
                    self.retries.waiting.requeue(due, m);
                }
                return;
            }
        };
        let back: std::collections::HashSet<EntryId> = ids
            .into_iter()
            .filter_map(|v| match v {
                Value::BulkString(b) => String::from_utf8(b).ok().map(EntryId),
                Value::SimpleString(s) => Some(EntryId(s)),
                _ => None,
            })
            .collect();
        let mut ahead = Vec::new();
        for m in msgs {
            if !back.contains(&m.id) {
                tracing::info!(stream = %m.stream, id = %m.id, "entry waiting for its retry is no longer pending (acked or deleted elsewhere)");
                self.release_key(&m.id);
                self.held.remove(&m.id);
                continue;
            }
            let fields = m.fields.to_vec();
            let key = self.entry_key(&fields);
            let q = super::Queued {
                id: m.id,
                fields,
                delivery_count: m.delivery_count + 1,
                retried_here: true,
                key,
            };
            if self.gate.is_some() {
                // Ahead of its key's later entries, which wait behind it.
                ahead.push(q);
            } else {
                self.queue.push_back(q);
            }
        }
        ahead.sort_by_key(|q| std::cmp::Reverse(q.id.parts()));
        for q in ahead {
            self.queue.push_front(q);
        }
        if self.drain.is_some() {
            self.hand_back();
        }
    }

    /// At a drain: every waiting entry back to the group, claimable by any
    /// consumer once the rest of its wait is over (`XCLAIM … IDLE
    /// <claim_idle − remaining> JUSTID`, the count unchanged).
    pub(super) fn hand_back_waiting(&mut self) {
        let now = Instant::now();
        for (due, msgs) in self.retries.waiting.take_all() {
            let remaining = due.saturating_duration_since(now);
            let idle = self.sub.opts.claim_idle.saturating_sub(remaining);
            let ids: Vec<EntryId> = msgs.into_iter().map(|m| m.id).collect();
            for id in &ids {
                self.held.remove(id);
            }
            self.give_back(ids, idle, None, "entries waiting for their retry");
        }
    }
}
