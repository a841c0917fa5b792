//! The stream consumer's part in the consumer loop
//! ([`consumer::run`](crate::delivery::consumer::run)): what starts at a
//! turn (reads, queued handlers, a reclaim, the XACK batch), and the
//! events a step waits for, each component's future polled in one pass.

use std::pin::pin;
use std::sync::Arc;
use std::time::Instant;

use super::{Loop, order};
use crate::delivery::consumer::{self, Ready};
use crate::util::Alarm;

/// The loop's timers, each moved only when its instant changes, and the
/// instants the loop keeps itself.
pub(super) struct Timers {
    retry: Alarm,
    reclaim: Alarm,
    refresh: Alarm,
    renew: Alarm,
    lapse: Alarm,
    prune: Alarm,
    ack: Alarm,
    batch: Alarm,
    unblock: Alarm,
    /// When to prune the group's idle empty consumers next (`None`: off).
    pub(super) prune_at: Option<tokio::time::Instant>,
    /// When the gathering XACK batch is due to be sent (see `Acks::turn`).
    ack_at: Option<tokio::time::Instant>,
}

impl Timers {
    pub(super) fn new(prune_at: Option<tokio::time::Instant>) -> Self {
        Timers {
            retry: Alarm::new(),
            reclaim: Alarm::new(),
            refresh: Alarm::new(),
            renew: Alarm::new(),
            lapse: Alarm::new(),
            prune: Alarm::new(),
            ack: Alarm::new(),
            batch: Alarm::new(),
            unblock: Alarm::new(),
            prune_at,
            ack_at: None,
        }
    }
}

impl consumer::Source for Loop {
    fn names(&self) -> (&'static str, Arc<str>) {
        ("stream", self.sub.names.name.clone())
    }

    async fn turn(&mut self) -> bool {
        if self.fence.is_some() && !self.report.lease_lost && !self.lease.holds() {
            self.give_up("no renewal of the lease was confirmed within its TTL");
        }
        if self.drain.is_none() {
            self.pause_turn();
            // A batch decodes all its entries when it starts: the next
            // read goes out first, so Redis serves it while the client
            // decodes (sent after it, the two would take turns). The
            // read's count is the same either way: it counts queued
            // entries and free batch slots alike.
            if self.sub.batch().is_some() {
                self.read_turn().await;
            }
            self.start_queued();
            if self.may_reclaim() && tokio::time::Instant::now() >= self.reclaim.due() {
                self.start_reclaim();
            }
            self.read_turn().await;
        }
        // While fetched entries still wait, their acks join this batch:
        // one XACK per batch of fast handlers rather than one for the
        // first to finish and one for the rest (each write costs a
        // system call and the loopback's work on both sides).
        let ack_now = self.queue.is_empty()
            // Nothing runs although entries wait (a redelivery that must
            // run alone, a lapsed lease): send now.
            || self.handlers.is_empty()
            // Keys wait for their entries' acks (a key's next entry
            // starts once its XACK landed): send now.
            || self.gate.as_ref().is_some_and(order::Gate::waits)
            || self.drain.is_some();
        // A slow handler must not hold the acks of those that finished
        // before it (a crash would run them again): the batch waits
        // FETCH_WINDOW at most.
        self.timers.ack_at = self.acks.turn(ack_now, self.sub.opts.count);
        self.handlers.show();
        self.sub.board.scale().set_in_flight(self.handlers.len());
        let reads_nothing = self.drain.is_some() || self.sub.board.paused();
        let idle = self.queue.is_empty();
        self.handlers.pace().show(idle, reads_nothing);
        self.drain.is_some()
            && !self.reading.is_reading()
            && self.handlers.is_empty()
            && self.reclaim.is_idle()
            && self.acks.is_settled()
            && self.dead_letters.is_empty()
            && self.side.is_empty()
            && self.retries.is_idle()
    }

    async fn step(&mut self) {
        let consuming = self.drain.is_none();
        let refresh_at = self.refresh.turn(!self.held.is_empty());
        let reclaim_at = self.may_reclaim().then(|| self.reclaim.due());
        let unblock_at = self.reading.unblock_at();
        let retry_at = self.retries.next_due().filter(|_| consuming);
        let renew_at = self.lease.renew_at();
        // A partition is given up the moment its lease lapses here.
        let lapse_at = self
            .lease
            .turn()
            .filter(|_| self.fence.is_some() && !self.report.lease_lost);
        let prune_at = self.timers.prune_at.filter(|_| consuming);
        let slot_wait = self
            .sub
            .key_order()
            .filter(|_| consuming && self.waits_for_slot())
            .map(|k| k.slots.clone());
        let (batch_at, ack_at) = (self.batch_due(), self.timers.ack_at);
        let (mut read, mut ended, mut acked, mut dead, mut back) = (None, None, None, None, None);
        let (mut checked, mut answered, mut marks, mut renewed) = (None, None, None, None);
        let (mut retry, mut refresh, mut lapse, mut renew, mut prune, mut unblock) =
            (false, false, false, false, false, false);
        {
            let t = &mut self.timers;
            let side = &mut self.side;
            let mut read_f = pin!(self.reading.next(consuming));
            let (ended_f, permits_f) = self.handlers.events();
            let (mut ended_f, mut permits_f) = (pin!(ended_f), pin!(permits_f));
            let mut slot_f = pin!(Loop::slot_given_back(slot_wait));
            let mut acked_f = pin!(self.acks.settled());
            let mut dead_f = pin!(self.dead_letters.ended());
            let mut back_f = pin!(self.retries.claimed_back());
            let mut checked_f = pin!(self.reclaim.checked());
            let mut answered_f = pin!(self.refresh.answered());
            let mut marks_f = pin!(order::Gate::reloaded(&mut self.gate));
            let mut renewed_f = pin!(self.lease.renewed());
            std::future::poll_fn(|cx| {
                let mut r = Ready::default();
                read = r.poll(read_f.as_mut(), cx);
                ended = r.poll(ended_f.as_mut(), cx);
                r.poll(slot_f.as_mut(), cx);
                acked = r.poll(acked_f.as_mut(), cx);
                dead = r.poll(dead_f.as_mut(), cx);
                r.poll_all(side, cx);
                back = r.poll(back_f.as_mut(), cx);
                checked = r.poll(checked_f.as_mut(), cx);
                answered = r.poll(answered_f.as_mut(), cx);
                marks = r.poll(marks_f.as_mut(), cx);
                renewed = r.poll(renewed_f.as_mut(), cx);
                r.poll(permits_f.as_mut(), cx);
                retry = r.alarm(&mut t.retry, retry_at, cx);
                r.alarm(&mut t.reclaim, reclaim_at, cx);
                refresh = r.alarm(&mut t.refresh, refresh_at, cx);
                lapse = r.alarm(&mut t.lapse, lapse_at, cx);
                renew = r.alarm(&mut t.renew, renew_at, cx);
                prune = r.alarm(&mut t.prune, prune_at, cx);
                r.alarm(&mut t.ack, ack_at, cx);
                r.alarm(&mut t.batch, batch_at, cx);
                unblock = r.alarm(&mut t.unblock, unblock_at, cx);
                r.any()
            })
            .await;
        }
        // Handled as if they came one after another, in this order.
        match read {
            Some(super::ReadEvent::Done(done)) => self.on_read(done),
            Some(super::ReadEvent::Failover) => self.on_failover(),
            None => {}
        }
        if let Some(fin) = ended {
            self.slots_ended(1);
            self.on_ended(fin);
        }
        if let Some(ids) = acked {
            self.on_acked(&ids);
        }
        if let Some(ended) = dead {
            self.on_dead_lettered(ended);
        }
        if retry && self.drain.is_none() {
            self.retry_due();
        }
        if let Some(back) = back {
            self.on_retry_claimed(back);
        }
        if let Some(checked) = checked {
            self.on_checked(checked);
        }
        if refresh {
            self.heartbeat();
        }
        if let Some(Some(e)) = answered {
            self.give_up(&e.to_string());
        }
        if lapse && !self.lease.holds() {
            self.give_up("no renewal of the lease was confirmed within its TTL");
        }
        if renew {
            self.lease.renew();
            self.reload_marks();
        }
        if let Some(marks) = marks {
            self.on_marks(marks);
        }
        if let Some(renewed) = renewed {
            self.on_lease_renewed(renewed);
        }
        if prune && self.drain.is_none() {
            self.prune_idle();
        }
        // Not when the read ended in this same pass: its unblock is over.
        if unblock && self.reading.unblock_at().is_some() {
            self.unblock();
        }
    }

    fn drain_asked(&self) -> Option<Instant> {
        self.drain
    }

    fn begin_drain(&mut self, deadline: Instant) {
        Loop::begin_drain(self, deadline);
    }

    fn running(&self) -> usize {
        self.handlers.len()
    }

    fn abandon(&mut self) {
        Loop::abandon(self);
        self.handlers.show();
    }
}
