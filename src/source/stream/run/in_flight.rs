//! The reads in flight on one read connection, in the order sent.
//!
//! While reads of new entries come back full (a backlog), a second one may
//! be sent behind the read in flight, on a clone of the same connection
//! and without `BLOCK`: Redis then serves it while the client handles the
//! reply before it, instead of the two taking turns. Replies on one
//! connection come in the order the commands were sent, and each read's
//! result is handed on in that order: one that is done while a read sent
//! before it is not waits its turn. At most two reads are in flight, and
//! only the first can block, so a drain's `CLIENT UNBLOCK` ends both.
//!
//! Also here: what the loop makes of a read sent behind another when it
//! failed, or when the read before it failed.

use std::collections::VecDeque;
use std::task::{Context, Poll};

use futures::future::LocalBoxFuture;
use redis::aio::MultiplexedConnection;

use super::Loop;
use super::pel::{ReadDone, behind};
use super::read::Cursor;
use crate::error::Error;
use crate::redis::reply::Delivered;

#[derive(Default)]
pub(super) struct InFlight {
    reads: VecDeque<Sent>,
    /// A clone of the read connection while it is open and follows no
    /// `ASK`, for a read sent behind the one in flight.
    pipe: Option<MultiplexedConnection>,
    /// The last read of new entries brought all it asked for: more wait.
    full: bool,
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

    /// Drops every read in flight, and the connection's clone they may
    /// share (so dropping them closes a connection nothing else holds).
    pub(super) fn clear(&mut self) {
        self.reads.clear();
        self.pipe = None;
    }

    /// The read connection as it is now (`None`: none is open, or it
    /// follows an `ASK`).
    pub(super) fn connection(&mut self, pipe: Option<MultiplexedConnection>) {
        self.pipe = pipe;
    }

    /// A read of new entries came back: `full` when it brought all it
    /// asked for (false also for a failed read).
    pub(super) fn read_full(&mut self, full: bool) {
        self.full = full;
    }

    /// Whether this much allows a read behind the one in flight: exactly
    /// one is in flight, the last read came back full, and the connection
    /// is open.
    pub(super) fn may_send_behind(&self) -> bool {
        self.reads.len() == 1 && self.full && self.pipe.is_some()
    }

    /// Sends `cmd`, a read of up to `asked` new entries without `BLOCK`
    /// (`block` is how late it may answer), behind the read in flight.
    ///
    /// # Panics
    /// When no connection is open (see [`may_send_behind`](Self::may_send_behind)).
    pub(super) fn send_behind(
        &mut self,
        cmd: redis::Cmd,
        asked: usize,
        block: std::time::Duration,
    ) {
        let conn = self.pipe.clone().expect("checked by may_send_behind");
        self.push(Box::pin(behind(conn, cmd, block)), asked, true);
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

    /// Polls every read not yet done once, in the order sent (so a read's
    /// command reaches the connection's queue before that of a read sent
    /// after it), and answers the first one sent if it is done (with how
    /// many entries it asked for).
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

impl Loop {
    /// A read sent behind another failed. It counts as a read that found
    /// nothing: no backoff, no failure shown, since the next read, on the
    /// read connection, meets the same trouble and handles it (a connection
    /// it broke is forgotten already, and the PEL re-read first; one closed
    /// in the middle of its reply makes that re-read go one entry at a
    /// time).
    pub(super) fn behind_failed(&mut self, e: &Error) {
        if e.closed_after_accept() {
            self.on_failed_send(None);
        }
        tracing::debug!(stream = %self.sub.names.name, consumer = %self.sub.consumer, error = %e, "a read sent behind another failed; the next read handles it");
    }

    /// Whether `entries`, brought by a read sent behind another, are left
    /// for the re-read of this consumer's PEL: the read before it failed
    /// and sent the cursor back there (it lost its connection), so they
    /// are this consumer's pending entries already and run in the stream's
    /// order with that re-read. While draining they are taken, to be
    /// handed back at once.
    pub(super) fn left_for_reread(&self, entries: &[Delivered]) -> bool {
        let left = self.drain.is_none() && matches!(self.reading.cursor(), Cursor::Pending(_));
        if left && !entries.is_empty() {
            tracing::debug!(stream = %self.sub.names.name, consumer = %self.sub.consumer, entries = entries.len(), "entries of a read sent behind a failed one are left for the re-read of this consumer's pending entries");
        }
        left
    }
}

#[cfg(test)]
mod tests;
