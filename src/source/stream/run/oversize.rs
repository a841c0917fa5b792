//! Entries too large for the server to send: when the server drops the
//! read connection in the middle of a read (a reply that outgrew the
//! client's output buffer, or a close for any other reason), the consumer
//! re-reads its own PEL one entry at a time, so the entry that does it is
//! found; that entry is then read in pieces (`redis::chunked`), and after
//! `max_failed_sends` such drops it is moved to the dead-letter stream by
//! id, unread. [`Oversize`] keeps what those reads taught.

use std::collections::{HashMap, HashSet};

use super::Loop;
use crate::redis::reply::Delivered;
use crate::stream::EntryId;

#[derive(Default)]
pub(super) struct Oversize {
    /// The server dropped the read connection in the middle of a read: the
    /// re-read of its own PEL takes one entry at a time.
    careful: bool,
    /// Entries whose one-entry fetch lost the read connection, and how many
    /// times; at `max_failed_sends` an entry is dead-lettered by id.
    failed_sends: HashMap<EntryId, u32>,
    /// The server dropped the read connection in the middle of a read at
    /// least once: no read is sent behind another from then on (two
    /// replies waiting in the server's output buffer for this client may
    /// be what it refused).
    dropped: bool,
}

impl Oversize {
    /// Whether the server ever dropped the read connection in the middle
    /// of a read.
    pub(super) fn dropped(&self) -> bool {
        self.dropped
    }

    /// Whether the re-read of its own PEL takes one entry at a time.
    pub(super) fn one_at_a_time(&self) -> bool {
        self.careful
    }

    /// The entries to read in pieces when their turn comes.
    pub(super) fn in_pieces(&self) -> HashSet<EntryId> {
        self.failed_sends.keys().cloned().collect()
    }

    /// The re-read of its own PEL is done: reads take whole pages again.
    pub(super) fn pel_read(&mut self) {
        self.careful = false;
    }

    /// A read brought `entries`: none of them needs reading in pieces.
    pub(super) fn received(&mut self, entries: &[Delivered]) {
        if !self.failed_sends.is_empty() {
            for d in entries {
                self.failed_sends.remove(&d.raw.id);
            }
        }
    }

    /// The server dropped the read connection in the middle of a read:
    /// re-read its own PEL one entry at a time from now on; if one entry
    /// was alone on the wire (`fetching`, with the delivery count of its
    /// run), count it. Answers it and how many times it failed so, once
    /// that reaches `max`, forgetting it.
    pub(super) fn failed_send(
        &mut self,
        fetching: Option<(EntryId, u64)>,
        max: u32,
    ) -> Option<(EntryId, u64, u32)> {
        self.careful = true;
        self.dropped = true;
        let (id, run) = fetching?;
        let times = self.failed_sends.entry(id.clone()).or_default();
        *times += 1;
        let times = *times;
        if times >= max {
            self.failed_sends.remove(&id);
        }
        Some((id, run, times))
    }
}

impl Loop {
    /// The server dropped the read connection in the middle of a read (a
    /// reply that outgrew the client's output buffer, or a close for any
    /// other reason): re-read its own PEL one entry at a time from now on;
    /// if one entry was alone on the wire, count it (its next read is in
    /// pieces), and at `max_failed_sends` move it to the dead-letter stream
    /// by id.
    pub(super) fn on_failed_send(&mut self, fetching: Option<(EntryId, u64)>) {
        let max = self.sub.opts.max_failed_sends;
        let Some((id, run, times)) = self.reading.oversize().failed_send(fetching, max) else {
            return;
        };
        let (stream, consumer) = (&self.sub.names.name, &self.sub.consumer);
        if times < max {
            tracing::warn!(
                %stream, %consumer, %id, times,
                "the server dropped the read connection while sending this entry (larger than it may send one client?); reading it in pieces"
            );
            return;
        }
        tracing::error!(
            %stream, %consumer, %id, times, dlq = %self.sub.names.dlq,
            "the server cannot send this entry (larger than its output buffer for a client allows: client-output-buffer-limit normal, maxmemory-clients); moving it to the dead-letter stream by id"
        );
        let error = format!(
            "the server dropped the read connection {times} times while sending this entry              ({{entry_bytes}} bytes): it is larger than the server lets one reply to a client be              (client-output-buffer-limit normal, maxmemory-clients), also when read in pieces; dead-lettered by id without being read"
        );
        self.dead_letter_by_id(id, run, error);
    }
}
