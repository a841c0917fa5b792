//! The drain: stop reading, hand fetched but unstarted entries back to the
//! group, let running handlers finish until the deadline, then abandon
//! them (their entries stay pending).

use std::time::{Duration, Instant};

use super::Loop;
use crate::error::Error;
use crate::redis::Query;
use crate::stream::EntryId;

impl Loop {
    /// Stop reading; hand back what is fetched but not started.
    pub(super) fn begin_drain(&mut self, deadline: Instant) {
        if self.drain.is_some() {
            return;
        }
        self.drain = Some(deadline);
        self.hand_back();
        self.hand_back_waiting();
        // A read on the wire is cut short; one connecting or backing off
        // (nothing on the wire yet) is dropped.
        self.stop_read();
    }

    /// Makes fetched-but-unstarted entries claimable by any consumer now:
    /// `XCLAIM … 0 <ids> IDLE <claim_idle> RETRYCOUNT <count - 1> JUSTID` to
    /// ourselves gives back the delivery that never ran and makes the entries
    /// look idle for `claim_idle`. Where reads take idle entries themselves
    /// and the server has `XNACK` (Redis 8.8), one `XNACK <stream> <group>
    /// SILENT IDS <n> <ids>` does the same: each entry's count goes down by
    /// the delivery that never ran, it is left with no owner, and the next
    /// read with `CLAIM` of any consumer takes it at once.
    pub(super) fn hand_back(&mut self) {
        if self.queue.is_empty() {
            return;
        }
        if self.claims_in_read() && self.reading.server().hand_back() {
            let ids: Vec<EntryId> = self.queue.drain(..).map(|d| d.id).collect();
            for id in &ids {
                self.held.remove(id);
            }
            let s = &self.sub;
            let mut cmd = redis::cmd("XNACK");
            cmd.arg(&*s.names.name)
                .arg(&*s.names.group)
                .arg("SILENT")
                .arg("IDS")
                .arg(ids.len())
                .arg(&ids);
            let req = self.redis.send(Query("xnack", cmd));
            let (stream, n) = (s.names.name.clone(), ids.len());
            self.side.push(Box::pin(async move {
                match req.await.unwrap_or(Err(Error::ShutDown)) {
                    Ok(_) => tracing::info!(stream = %stream, entries = n, "handed unstarted entries back to the group (XNACK)"),
                    Err(Error::ShutDown) => {}
                    Err(e) => tracing::warn!(stream = %stream, entries = n, error = %e, "hand-back failed; entries are reclaimed after claim_idle"),
                }
            }));
            return;
        }
        let unstarted: Vec<(EntryId, u64)> = self
            .queue
            .drain(..)
            .map(|d| (d.id, d.delivery_count))
            .collect();
        for (id, _) in &unstarted {
            self.held.remove(id);
        }
        let idle = self.sub.opts.claim_idle;
        self.give_back_unrun(unstarted, idle, "unstarted entries");
    }

    /// Gives back entries whose delivery (the count given with each) never
    /// ran here: each keeps the count it had before it, idle for `idle`
    /// (see [`give_back`](Self::give_back)); one `XCLAIM` per count.
    pub(super) fn give_back_unrun(
        &mut self,
        entries: impl IntoIterator<Item = (EntryId, u64)>,
        idle: Duration,
        what: &'static str,
    ) {
        let mut by_count: std::collections::BTreeMap<u64, Vec<EntryId>> = Default::default();
        for (id, count) in entries {
            by_count
                .entry(count.saturating_sub(1))
                .or_default()
                .push(id);
        }
        for (count, ids) in by_count {
            self.give_back(ids, idle, Some(count), what);
        }
    }

    /// Gives `ids` back to the group, claimable by any consumer once idle
    /// for `claim_idle`: `XCLAIM <self> 0 <ids> IDLE <idle> [RETRYCOUNT
    /// <count>] JUSTID` (without a count, the count stays). A failure is
    /// logged: the entries are then reclaimed after `claim_idle`.
    pub(super) fn give_back(
        &mut self,
        ids: Vec<EntryId>,
        idle: Duration,
        count: Option<u64>,
        what: &'static str,
    ) {
        let s = &self.sub;
        let n = ids.len();
        let mut cmd = redis::cmd("XCLAIM");
        cmd.arg(&*s.names.name)
            .arg(&*s.names.group)
            .arg(&*s.consumer)
            .arg(0)
            .arg(&ids)
            .arg("IDLE")
            .arg(idle.as_millis() as u64);
        if let Some(count) = count {
            cmd.arg("RETRYCOUNT").arg(count);
        }
        cmd.arg("JUSTID");
        let req = self.claim(cmd);
        let stream = s.names.name.clone();
        self.side.push(Box::pin(async move {
            match req.await {
                Ok(_) => tracing::info!(stream = %stream, entries = n, idle_ms = idle.as_millis() as u64, "handed {what} back to the group"),
                Err(Error::ShutDown) => {}
                Err(e) => tracing::warn!(stream = %stream, entries = n, error = %e, "hand-back failed; entries are reclaimed after claim_idle (or taken with the partition)"),
            }
        }));
    }

    /// The drain deadline passed: drop running handlers (their entries stay
    /// pending and are redelivered) and whatever is still in flight.
    pub(super) fn abandon(&mut self) {
        if self.report.lease_lost {
            // Dropped on purpose (see `give_up`), not a drain that ran late.
        } else if !self.handlers.is_empty() {
            tracing::warn!(
                stream = %self.sub.names.name, consumer = %self.sub.consumer, handlers = self.handlers.len(),
                "drain deadline passed; abandoning running handlers, their entries stay pending"
            );
            self.report.timed_out = true;
        }
        if !self.report.lease_lost && (!self.acks.is_settled() || !self.dead_letters.is_empty()) {
            let acks = self.acks.outstanding();
            tracing::warn!(
                stream = %self.sub.names.name, consumer = %self.sub.consumer,
                acks, dead_letter_moves = self.dead_letters.len(),
                "drain deadline passed with acks or dead-letter moves not accepted by redis; those entries stay pending"
            );
            self.report.timed_out = true;
        }
        let abandoned = self.handlers.abandon();
        self.slots_ended(abandoned);
        self.held.clear();
        self.reading.cancel();
        self.reclaim.cancel();
    }
}
