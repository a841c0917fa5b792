//! The retry queue: items whose handler failed, each waiting out its
//! [`RetryBackoff`](crate::RetryBackoff) in the consumer that saw it fail,
//! ordered by when it is due. Every source keeps its failed items here; what
//! an item is (a stream entry, a list item) and how it comes back is the
//! source's business.

use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::time::Duration;

use tokio::time::Instant;

use super::RetryBackoff;

/// Items waiting out their backoff, by when they are due.
pub(crate) struct RetryQueue<T>(BTreeMap<Instant, Vec<T>>);

impl<T> Default for RetryQueue<T> {
    fn default() -> Self {
        RetryQueue(BTreeMap::new())
    }
}

impl<T> RetryQueue<T> {
    /// Queues `item`, whose run number `run` failed, for the wait `backoff`
    /// gives that run (at most `cap`, with its jitter drawn at random per
    /// item). Answers the wait.
    pub(crate) fn schedule(
        &mut self,
        backoff: &RetryBackoff,
        run: u64,
        cap: Duration,
        item: T,
    ) -> Duration {
        let wait = backoff.wait(run, cap, jitter_seed());
        self.0.entry(Instant::now() + wait).or_default().push(item);
        wait
    }

    /// Queues `item` again, due at `due` (a take-back that failed).
    pub(crate) fn requeue(&mut self, due: Instant, item: T) {
        self.0.entry(due).or_default().push(item);
    }

    /// When the first item is due.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.0.keys().next().copied()
    }

    /// Every item due by `now`, the earliest first.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<T> {
        let later = self.0.split_off(&(now + Duration::from_nanos(1)));
        std::mem::replace(&mut self.0, later)
            .into_values()
            .flatten()
            .collect()
    }

    /// The earliest item due by `now`, if any.
    pub(crate) fn take_one_due(&mut self, now: Instant) -> Option<T> {
        let mut first = self.0.first_entry()?;
        if *first.key() > now {
            return None;
        }
        let item = first.get_mut().remove(0);
        if first.get().is_empty() {
            first.remove();
        }
        Some(item)
    }

    /// Everything, with when it was due.
    pub(crate) fn take_all(&mut self) -> BTreeMap<Instant, Vec<T>> {
        std::mem::take(&mut self.0)
    }
}

/// A random number for the jitter: std's hasher keys are random per process
/// and per call, and a counter makes every call's input differ.
fn jitter_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    std::collections::hash_map::RandomState::new().hash_one(CALLS.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests;
