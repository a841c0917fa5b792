//! How many handlers a subscription runs at once: the concurrency it was
//! built with, a fleet-wide value an operator set (`rillkit scale`, kept in
//! Redis and read by every process of the group), and how many run now.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use super::autoscale::Autoscaler;

/// The highest concurrency a scale or an autoscale bound may set, in
/// handlers.
pub const MAX_CONCURRENCY: usize = 10_000;

/// A subscription's concurrency, shared by its loop (which reads it every
/// turn and reports its handlers in flight) and the fleet watch (which
/// sets the fleet-wide value).
#[derive(Default)]
pub(crate) struct Scale {
    /// `concurrency` as built.
    configured: AtomicUsize,
    /// Whether its concurrency may change at run time: not for a batch
    /// subscription (its concurrency sizes its reads) nor an ordered stream
    /// (its partitions share one set of slots).
    scalable: AtomicBool,
    /// The fleet-wide concurrency, 0 when none is set.
    fleet: AtomicUsize,
    /// Handlers running now.
    in_flight: AtomicUsize,
    /// The most handlers that ran at once since the autoscaler last looked.
    peak: AtomicUsize,
    /// The autoscaler's concurrency, 0 without one.
    auto: AtomicUsize,
    /// The autoscaler, when the subscription has one.
    autoscaler: Mutex<Option<Autoscaler>>,
    /// The group's rate limit, as built.
    rate_limit: std::sync::OnceLock<crate::rate_limit::RateLimit>,
}

impl Scale {
    /// Sets the concurrency as built, and whether it may change.
    pub(crate) fn configure(&self, concurrency: usize, scalable: bool) {
        self.configured.store(concurrency, Ordering::Relaxed);
        self.scalable.store(scalable, Ordering::Relaxed);
    }

    /// Sets the group's rate limit, as built (once).
    pub(crate) fn limit_rate(&self, limit: crate::rate_limit::RateLimit) {
        let _ = self.rate_limit.set(limit);
    }

    /// The group's rate limit, as built.
    pub(crate) fn rate_limit(&self) -> Option<crate::rate_limit::RateLimit> {
        self.rate_limit.get().copied()
    }

    /// The concurrency as built.
    pub(crate) fn configured(&self) -> usize {
        self.configured.load(Ordering::Relaxed)
    }

    /// Whether the concurrency may change at run time.
    pub(crate) fn scalable(&self) -> bool {
        self.scalable.load(Ordering::Relaxed)
    }

    /// The fleet-wide concurrency, if one is set (whether or not this
    /// subscription follows it).
    pub(crate) fn fleet(&self) -> Option<usize> {
        Some(self.fleet.load(Ordering::Relaxed)).filter(|n| *n > 0)
    }

    /// Sets (or clears) the fleet-wide concurrency; answers whether the
    /// concurrency in effect changed.
    pub(crate) fn set_fleet(&self, n: Option<usize>) -> bool {
        let before = self.concurrency();
        self.fleet.store(n.unwrap_or(0), Ordering::Relaxed);
        self.concurrency() != before
    }

    /// The concurrency in effect: the fleet-wide value where one is set and
    /// the subscription may change, else the autoscaler's, else as built.
    pub(crate) fn concurrency(&self) -> usize {
        match (self.fleet(), self.auto.load(Ordering::Relaxed)) {
            (Some(n), _) if self.scalable() => n,
            (_, auto) if auto > 0 => auto,
            _ => self.configured(),
        }
    }

    /// Gives the subscription an autoscaler between `min` and `max`
    /// handlers, starting at `min`.
    pub(crate) fn autoscale(&self, min: usize, max: usize) {
        *self.autoscaler.lock().expect("autoscaler lock") = Some(Autoscaler::new(min, max));
        self.auto.store(min, Ordering::Relaxed);
    }

    /// A copy of the autoscaler's state, when there is one.
    pub(crate) fn autoscaler(&self) -> Option<Autoscaler> {
        self.autoscaler.lock().expect("autoscaler lock").clone()
    }

    /// One look of the autoscaler (see [`Autoscaler::tick`]) with the
    /// handlers that ran at most since the last one; answers the change
    /// `(from, to)` of its concurrency, if any.
    pub(crate) fn autoscale_tick(
        &self,
        now: Instant,
        backlog: Option<u64>,
    ) -> Option<(usize, usize)> {
        let mut slot = self.autoscaler.lock().expect("autoscaler lock");
        let a = slot.as_mut()?;
        let peak = self
            .peak
            .swap(self.in_flight.load(Ordering::Relaxed), Ordering::Relaxed);
        let from = a.current;
        let to = a.tick(now, backlog, peak)?;
        a.last_change = Some((crate::util::now_ms(), from, to));
        self.auto.store(to, Ordering::Relaxed);
        Some((from, to))
    }

    /// The loop's handlers in flight, as of its last turn.
    pub(crate) fn set_in_flight(&self, n: usize) {
        self.in_flight.store(n, Ordering::Relaxed);
        self.peak.fetch_max(n, Ordering::Relaxed);
    }

    /// Handlers in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests;
