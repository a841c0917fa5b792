//! The reads in flight on one read connection, in the order sent: at most
//! two, the second (without `BLOCK`) sent behind the first. Replies on one
//! connection come in the order the commands were sent, and each read's
//! result is handed on in that order: one that is done while a read sent
//! before it is not waits its turn.

use std::collections::VecDeque;
use std::task::{Context, Poll};

use futures::future::LocalBoxFuture;

use super::pel::ReadDone;

#[derive(Default)]
pub(super) struct InFlight {
    reads: VecDeque<Sent>,
}

/// One read in flight.
struct Sent {
    read: LocalBoxFuture<'static, ReadDone>,
    /// Its result, once done (while a read sent before it is not taken).
    done: Option<ReadDone>,
    /// How many entries it asked for.
    asked: usize,
    /// It was sent behind another read, on a clone of its connection.
    behind: bool,
}

impl InFlight {
    pub(super) fn is_empty(&self) -> bool {
        self.reads.is_empty()
    }

    pub(super) fn len(&self) -> usize {
        self.reads.len()
    }

    /// Drops every read in flight.
    pub(super) fn clear(&mut self) {
        self.reads.clear();
    }

    /// How many entries the reads in flight asked for.
    pub(super) fn asked(&self) -> usize {
        self.reads.iter().map(|r| r.asked).sum()
    }

    /// Whether the first read in flight was sent behind another (`None`:
    /// none is in flight).
    pub(super) fn first_behind(&self) -> Option<bool> {
        self.reads.front().map(|r| r.behind)
    }

    /// Adds `read`, of up to `asked` entries, after those in flight;
    /// `behind`: it was sent behind another read.
    pub(super) fn push(
        &mut self,
        read: LocalBoxFuture<'static, ReadDone>,
        asked: usize,
        behind: bool,
    ) {
        self.reads.push_back(Sent {
            read,
            done: None,
            asked,
            behind,
        });
    }

    /// Polls every read not yet done once, and answers the first one sent
    /// if it is done (with how many entries it asked for).
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<ReadDone> {
        for r in self.reads.iter_mut().filter(|r| r.done.is_none()) {
            if let Poll::Ready(done) = r.read.as_mut().poll(cx) {
                r.done = Some(done);
            }
        }
        if self.reads.front().is_none_or(|r| r.done.is_none()) {
            return Poll::Pending;
        }
        let r = self.reads.pop_front().expect("checked");
        let mut done = r.done.expect("checked");
        done.asked = r.asked;
        Poll::Ready(done)
    }
}

#[cfg(test)]
mod tests;
