//! When queued entries start as a batch: the one rule every consumer loop
//! that runs a batch handler natively keeps (a plain stream's, a list's).
//! A batch starts when `max_entries` are queued, or once the first queued
//! entry has waited `max_wait`; whatever is queued after a batch started
//! counts its wait from then.

use std::time::Duration;

use tokio::time::Instant;

/// Since when the next batch gathers in a loop's queue.
#[derive(Default, Debug)]
pub(crate) struct Gathering {
    since: Option<Instant>,
    /// When the queue was last looked at.
    looked: Option<Instant>,
}

impl Gathering {
    /// Whether `queued` entries start as a batch at `now`: full
    /// (`max_entries` or more), or gathered for `max_wait`.
    pub(crate) fn ready(
        &self,
        queued: usize,
        max_entries: usize,
        max_wait: Duration,
        now: Instant,
    ) -> bool {
        queued >= max_entries || self.waited(max_wait, now)
    }

    /// Whether the gathering batch has waited `max_wait` at `now` (one that
    /// begins gathering now has, when `max_wait` is zero).
    pub(crate) fn waited(&self, max_wait: Duration, now: Instant) -> bool {
        now >= self.since.unwrap_or(now) + max_wait
    }

    /// When the gathering batch is due to start although not full (`None`:
    /// nothing gathers).
    pub(crate) fn due(&self, max_wait: Duration) -> Option<Instant> {
        self.since.map(|since| since + max_wait)
    }

    /// When the gathering batch is due to start, if it was not due yet at
    /// the last look at the queue: one due then that did not start waits
    /// for another event (a slot, the end of a redelivery that runs alone),
    /// while one that came due since is started by the next look.
    pub(crate) fn due_after_look(&self, max_wait: Duration) -> Option<Instant> {
        let due = self.due(max_wait)?;
        self.looked.is_none_or(|at| due > at).then_some(due)
    }

    /// Brings the gathering up to date after a look at the queue at `now`:
    /// an empty queue gathers nothing; after a batch started, what is left
    /// gathers from `now`; else the first queued entry's wait goes on.
    pub(crate) fn after(&mut self, queue_empty: bool, started: bool, now: Instant) {
        self.looked = Some(now);
        self.since = match (queue_empty, started, self.since) {
            (true, _, _) => None,
            (false, true, _) | (false, false, None) => Some(now),
            (false, false, Some(since)) => Some(since),
        };
    }
}

#[cfg(test)]
mod tests;
