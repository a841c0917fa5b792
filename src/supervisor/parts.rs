//! An ordered stream's partitions: each partition's loop in a slot and a
//! `ConsumerActor` of its own, started and stopped as the ordered stream's
//! loop asks, its end told to that loop (which drains on an error or a
//! panic: the restart policy applies to the ordered stream). Each run of
//! that loop has a numbered link: an earlier run's asks are ignored, an end
//! is told to the run that started the loop, and a run starts only once the
//! earlier runs' partition loops ended (never two loops on one partition).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::StreamExt;
use futures::channel::mpsc;

use super::{Slot, Supervisor};
use crate::delivery::parts::{PartCommand, Parts, link};
use crate::delivery::{ConsumerActor, ConsumerReport, Drain};
use crate::source::Source;

/// The numbers of the links, one per run of an ordered stream's loop.
static RUNS: AtomicU64 = AtomicU64::new(0);

/// Where a run of an ordered stream's loop is told its partitions' ends.
pub(super) struct Told {
    run: u64,
    ended: mpsc::UnboundedSender<(u16, ConsumerReport)>,
}

/// A partition's slot: its ordered stream's slot, its index, and the run
/// that last started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PartOf {
    parent: usize,
    partition: u16,
    run: u64,
}

/// A run of an ordered stream's loop asks something of a partition.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct PartAsked {
    parent: usize,
    run: u64,
    command: PartCommand,
}

impl Supervisor {
    /// The link of a new run of the ordered stream in slot `parent`.
    pub(super) fn link_parts(&mut self, parent: usize, ctx: &mut Context<Self>) -> Parts {
        let run = RUNS.fetch_add(1, Ordering::Relaxed);
        let (parts, link) = link();
        self.slots[parent].parts_told = Some(Told {
            run,
            ended: link.ended,
        });
        ctx.add_stream(link.commands.map(move |command| PartAsked {
            parent,
            run,
            command,
        }));
        parts
    }

    /// Whether partition loops of the ordered stream in slot `parent` run.
    pub(super) fn parts_live(&self, parent: usize) -> bool {
        self.slots
            .iter()
            .any(|s| s.addr.is_some() && s.part.is_some_and(|of| of.parent == parent))
    }

    /// A partition's loop ended: told to the run that started it, if it
    /// still runs (else a drain's overrun counts in the outcome).
    pub(super) fn part_ended(&mut self, of: PartOf, report: ConsumerReport) {
        let Some(parent) = self.slots.get(of.parent) else {
            return;
        };
        match &parent.parts_told {
            Some(told) if told.run == of.run => {
                let _ = told.ended.unbounded_send((of.partition, report));
            }
            _ => self.outcome.timed_out |= report.timed_out,
        }
    }

    /// Answers the removal of slot `index` with `report` once none of its
    /// partition loops runs (looking every 100 ms).
    pub(super) fn answer_removed(
        &mut self,
        index: usize,
        report: ConsumerReport,
        ctx: &mut Context<Self>,
    ) {
        if self.parts_live(index) {
            ctx.run_later(Duration::from_millis(100), move |act, ctx| {
                act.answer_removed(index, report, ctx);
            });
            return;
        }
        if let Some(tx) = self.slots[index].on_removed.take() {
            let _ = tx.send(report);
        }
    }

    /// Drains the partition loops left by slot `parent`'s loop, which ended
    /// (panicked: else it waits for them).
    pub(super) fn drain_parts_of(&self, parent: usize) {
        let Source::Stream(sub) = &self.slots[parent].source else {
            return;
        };
        let deadline = Instant::now() + sub.drain_timeout;
        for slot in &self.slots {
            if slot.part.is_some_and(|of| of.parent == parent) {
                if let Some(addr) = &slot.addr {
                    self.drain_part(addr, deadline);
                }
            }
        }
    }

    /// Drains a partition's loop by `deadline`, or the broker's if earlier.
    fn drain_part(&self, addr: &Addr<ConsumerActor>, deadline: Instant) {
        let deadline = self.drain_by.map_or(deadline, |by| by.min(deadline));
        addr.do_send(Drain(deadline));
    }

    /// Restarts slot `parent`'s loop once its partition loops ended
    /// (looking every 100 ms).
    pub(super) fn restart_after_parts(&mut self, parent: usize, ctx: &mut Context<Self>) {
        if self.draining() || self.slots[parent].removed {
            return;
        }
        if self.parts_live(parent) {
            ctx.run_later(Duration::from_millis(100), move |act, ctx| {
                act.restart_after_parts(parent, ctx);
            });
            return;
        }
        // Nobody waits for a restarted consumer to be ready.
        drop(self.spawn_consumer(parent, ctx));
    }

    fn part_slot(&self, parent: usize, partition: u16) -> Option<usize> {
        self.slots.iter().position(|s| {
            s.part
                .is_some_and(|of| of.parent == parent && of.partition == partition)
        })
    }

    /// Starts a partition's loop for `run` of slot `parent`, in its slot
    /// (made the first time); while draining or removed, its end is told
    /// at once.
    fn start_part(&mut self, parent: usize, run: u64, partition: u16, ctx: &mut Context<Self>) {
        let of = PartOf {
            parent,
            partition,
            run,
        };
        let sub = match &self.slots[parent].source {
            Source::Stream(sub) if !self.draining() && !self.slots[parent].removed => sub.clone(),
            _ => return self.part_ended(of, ConsumerReport::default()),
        };
        let (Some(redis), Some(part)) = (
            self.redis.clone(),
            sub.ordered()
                .and_then(|o| o.parts.get(usize::from(partition)))
                .cloned(),
        ) else {
            return self.part_ended(of, ConsumerReport::default());
        };
        let index = match self.part_slot(parent, partition) {
            // Still draining: its end is told, then it is asked again.
            Some(i) if self.slots[i].addr.is_some() => return,
            Some(i) => i,
            None => {
                let reclaimer = self.reclaimer_for(&part, &redis);
                self.slots
                    .push(Slot::new(Source::Stream(part), Some(reclaimer)));
                self.slots.len() - 1
            }
        };
        self.slots[index].part = Some(of);
        // Nobody waits for a partition's loop to be ready.
        drop(self.spawn_consumer(index, ctx));
    }
}

impl StreamHandler<PartAsked> for Supervisor {
    fn handle(&mut self, msg: PartAsked, ctx: &mut Context<Self>) {
        let current = self.slots[msg.parent]
            .parts_told
            .as_ref()
            .is_some_and(|t| t.run == msg.run);
        if !current {
            // Asked by a run that has ended since.
            return;
        }
        match msg.command {
            PartCommand::Start(partition) => self.start_part(msg.parent, msg.run, partition, ctx),
            PartCommand::Stop(partition, deadline) => {
                let slot = self.part_slot(msg.parent, partition);
                if let Some(addr) = slot.and_then(|i| self.slots[i].addr.as_ref()) {
                    self.drain_part(addr, deadline);
                }
            }
        }
    }

    /// A run's link closed (its slot's exit says how): nothing to do.
    fn finished(&mut self, _: &mut Context<Self>) {}
}
