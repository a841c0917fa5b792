//! How much to fetch, and when: entries are fetched no faster than they
//! start, with a prefetch of what the handlers get through in a round trip,
//! so a consumer holds little another idle consumer could be running, and
//! fast handlers never wait out a read's round trip.

use std::time::Duration;

use super::Loop;
use super::read::Cursor;

/// The shortest time the prefetch covers (see [`Loop::prefetch`]): two
/// ticks of tokio's 1 ms timer. With 64 handlers of 1 ms it takes the bench
/// from 0.79 to about 0.9 of the bare ceiling; handlers slower than
/// `FETCH_WINDOW × concurrency` still get no prefetch.
pub(super) const FETCH_WINDOW: Duration = Duration::from_millis(2);

impl Loop {
    /// Starts the next read if one may start now (see [`Loop::read_count`]).
    pub(super) async fn read_turn(&mut self) {
        let Some(want) = self.read_count() else {
            return;
        };
        // New entries only while the streams before this one are clear (a
        // prioritized subscription); under a rate limit, no more than the
        // permits held: what is read may start.
        let new = matches!(self.reading.cursor(), Cursor::New);
        let pace = self.handlers.pace();
        if new && !pace.may_read_new() {
            pace.held_back();
            return;
        }
        let Some(count) = pace.admit(want, new) else {
            return;
        };
        self.start_read(count);
        // Hand the command to the connection now and let its driver task
        // write it, before the queued handlers run: a busy loop that never
        // waits would otherwise keep the driver from sending the next read
        // until the queue ran dry, and every batch would wait out its round
        // trip.
        if let Some(done) = self.reading.poll_now().await {
            self.on_read(done);
        }
        tokio::task::yield_now().await;
    }

    /// How many entries the next read may fetch, if a read may start now.
    ///
    /// Entries are fetched no faster than they start, so a consumer holds
    /// little that another idle consumer could be running: a read starts
    /// when no more than one prefetch (see [`Loop::prefetch`]; none for slow
    /// handlers) of fetched entries waits — and, while entries wait, only if
    /// a handler finished within the fetch window (not behind a stalled
    /// one) — and the free slots plus the prefetch reach half a batch (of
    /// `count`, at most `concurrency`); it asks for that many, at most
    /// `count`. Entries the reads in flight asked for count as waiting, and
    /// with one read in flight a second may go out behind it (see
    /// [`Reading::may_send_behind`](super::read::Reading::may_send_behind)
    /// and [`Loop::pipelines`]). An entry that turns out slow can still
    /// hold up to one prefetch queued behind it. While
    /// re-reading its own pending entries (redeliveries, which run alone) it
    /// reads one at a time, only when nothing runs.
    pub(super) fn read_count(&self) -> Option<usize> {
        let o = &self.sub.opts;
        if self.drain.is_some()
            || !self.lease.holds()
            || self.sub.board.paused()
            || (self.reading.is_reading() && !(self.pipelines() && self.reading.may_send_behind()))
            || self.handlers.alone()
            // An idle entry waits: no read until it can be claimed (with
            // the read itself, where reads take idle entries).
            || (self.reclaim.makes_room() && !self.claim_with_read())
            // A claim is on its way: what it brings is a redelivery, which
            // must run alone, before anything newly fetched.
            || self.reclaim.claiming()
        {
            return None;
        }
        // The concurrency may have shrunk below what runs (`rillkit scale`).
        let free = self
            .sub
            .board
            .concurrency()
            .saturating_sub(self.handlers.len());
        match self.reading.cursor() {
            // What it holds now awaits an XACK or a dead-letter move: the
            // re-read skips those and takes the next one.
            Cursor::Pending(_) => (self.handlers.is_empty() && self.queue.is_empty())
                .then_some(self.held.len().min(o.count.max(100)) + 1),
            Cursor::New if self.sub.batch().is_some() => self.batch_read_count(),
            Cursor::New => {
                // The next read starts while up to one prefetch (what the
                // handlers get through in a round trip) is still queued,
                // so it is on its way while they work and the handlers do
                // not wait out its round trip. Slow handlers get no
                // prefetch: for them a read waits until nothing is queued.
                // Entries a read in flight asked for count as queued.
                let ahead = self.prefetch();
                let asked = self.reading.asked();
                if self.startable() + asked > ahead || self.queue_full() {
                    return None;
                }
                // Handlers that have not finished anything for longer than
                // the fetch window are stalled on a slow entry: fetch
                // nothing more ahead of them for another consumer to wait
                // on.
                if self.startable() > 0 && self.handlers.stalled(self.fetch_window()) {
                    return None;
                }
                let room = (free + ahead).saturating_sub(asked);
                let low_water = o.count.min(self.sub.board.concurrency()).div_ceil(2).max(1);
                (room >= low_water).then_some(o.count.min(room))
            }
        }
    }

    /// How many entries may be fetched beyond the free handler slots: as many
    /// as the handlers get through in one Redis round trip, or in
    /// [`FETCH_WINDOW`] if that is longer (at most [`Loop::most_ahead`]), so a fetched
    /// entry waits about that long before it starts. Slow
    /// handlers get none; fast ones get whole batches. 0 until both times are
    /// measured.
    pub(super) fn prefetch(&self) -> usize {
        let (Some(handler), Some(_)) = (self.handlers.took(), self.acks.round_trip()) else {
            return 0;
        };
        // The time to cover is at least FETCH_WINDOW: an XACK round trip on
        // an idle loopback understates how long a slot that frees up waits
        // for its next entry (the read's own trip, the loop's turn, and
        // timer-driven handlers finishing in bursts at the timer's tick).
        let window = self.fetch_window();
        let per_trip =
            window.as_nanos() * self.sub.board.concurrency() as u128 / handler.as_nanos().max(1);
        per_trip.min(self.most_ahead() as u128) as usize
    }

    /// The most a prefetch may be: a read's `count`, or two where a second
    /// read may be sent behind the first (see [`Loop::pipelines`]), so
    /// both fit.
    pub(super) fn most_ahead(&self) -> usize {
        let reads = if self.pipelines() { 2 } else { 1 };
        self.sub.opts.count * reads
    }

    /// The time a prefetch covers: an XACK round trip (measured), or
    /// [`FETCH_WINDOW`] if that is longer.
    pub(super) fn fetch_window(&self) -> Duration {
        self.acks.round_trip().unwrap_or_default().max(FETCH_WINDOW)
    }
}
