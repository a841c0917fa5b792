//! The partitions of an ordered stream as the supervisor runs them: each
//! partition's loop in a slot and a `ConsumerActor` of its own, started and
//! stopped as the ordered stream's loop asks (it owns the share-out), its
//! end told to that loop (which drains the ordered stream on an error, so
//! the restart policy applies to the ordered stream as a whole).

use std::time::Instant;

use actix::prelude::*;
use futures::StreamExt;
use futures::channel::mpsc;

use super::{Slot, Supervisor};
use crate::delivery::parts::{PartCommand, Parts, link};
use crate::delivery::{ConsumerReport, Drain};
use crate::source::Source;

/// Where an ordered stream's loop learns its partitions' ends.
pub(super) type Told = mpsc::UnboundedSender<(u16, ConsumerReport)>;

/// A partition's slot: the ordered stream's slot and the partition's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PartOf {
    parent: usize,
    partition: u16,
}

/// An ordered stream's loop asks something of one of its partitions.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct PartAsked {
    parent: usize,
    command: PartCommand,
}

impl Supervisor {
    /// The link of the ordered stream in slot `parent` to its partitions:
    /// its asks are handled as they come, its partitions' ends told.
    pub(super) fn link_parts(&mut self, parent: usize, ctx: &mut Context<Self>) -> Parts {
        let (parts, link) = link();
        self.slots[parent].parts_told = Some(link.ended);
        ctx.add_stream(
            link.commands
                .map(move |command| PartAsked { parent, command }),
        );
        parts
    }

    /// Tells the ordered stream's loop that a partition's loop ended.
    pub(super) fn part_ended(&mut self, of: PartOf, report: ConsumerReport) {
        if let Some(told) = self
            .slots
            .get(of.parent)
            .and_then(|p| p.parts_told.as_ref())
        {
            let _ = told.unbounded_send((of.partition, report));
        }
    }

    /// Drains the partitions' loops still running of the ordered stream in
    /// slot `parent`, whose own loop ended (it panicked: it waits for them
    /// otherwise).
    pub(super) fn drain_parts_of(&self, parent: usize) {
        let Source::Stream(sub) = &self.slots[parent].source else {
            return;
        };
        let deadline = Instant::now() + sub.drain_timeout;
        for slot in &self.slots {
            if slot.part.is_some_and(|of| of.parent == parent) {
                if let Some(addr) = &slot.addr {
                    addr.do_send(Drain(deadline));
                }
            }
        }
    }

    fn part_slot(&self, of: PartOf) -> Option<usize> {
        self.slots.iter().position(|s| s.part == Some(of))
    }

    /// Starts partition `of`'s loop, in its slot (made the first time).
    /// Nothing starts while draining, or once the ordered stream is removed
    /// or its loop ended: its end is told at once. A loop of the partition
    /// still draining from an earlier run of the ordered stream is left to
    /// end: its end is told, and the ordered stream's loop asks again.
    fn start_part(&mut self, of: PartOf, ctx: &mut Context<Self>) {
        let parent = self.slots.get(of.parent);
        let sub = match parent.map(|p| (&p.source, p.removed, p.parts_told.is_some())) {
            Some((Source::Stream(sub), false, true)) if !self.draining => sub.clone(),
            _ => return self.part_ended(of, ConsumerReport::default()),
        };
        let (Some(redis), Some(part)) = (
            self.redis.clone(),
            sub.ordered()
                .and_then(|o| o.parts.get(usize::from(of.partition)))
                .cloned(),
        ) else {
            return self.part_ended(of, ConsumerReport::default());
        };
        let index = match self.part_slot(of) {
            Some(i) if self.slots[i].addr.is_some() => return,
            Some(i) => i,
            None => {
                let reclaimer = self.reclaimer_for(&part, &redis);
                let mut slot = Slot::new(Source::Stream(part), Some(reclaimer));
                slot.part = Some(of);
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        // Nobody waits for a partition's loop to be ready.
        drop(self.spawn_consumer(index, ctx));
    }
}

impl StreamHandler<PartAsked> for Supervisor {
    fn handle(&mut self, msg: PartAsked, ctx: &mut Context<Self>) {
        match msg.command {
            PartCommand::Start(partition) => {
                let of = PartOf {
                    parent: msg.parent,
                    partition,
                };
                self.start_part(of, ctx);
            }
            PartCommand::Stop(partition, deadline) => {
                let of = PartOf {
                    parent: msg.parent,
                    partition,
                };
                let addr = self.part_slot(of).and_then(|i| self.slots[i].addr.as_ref());
                if let Some(addr) = addr {
                    addr.do_send(Drain(deadline));
                }
            }
        }
    }

    /// The ordered stream's loop ended (its slot's exit says how): the
    /// supervisor goes on.
    fn finished(&mut self, _: &mut Context<Self>) {}
}
