//! How many handlers a subscription runs at once: the concurrency it was
//! built with, a fleet-wide value an operator set (`rillkit scale`, kept in
//! Redis and read by every process of the group), and how many run now.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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
}

impl Scale {
    /// Sets the concurrency as built, and whether it may change.
    pub(crate) fn configure(&self, concurrency: usize, scalable: bool) {
        self.configured.store(concurrency, Ordering::Relaxed);
        self.scalable.store(scalable, Ordering::Relaxed);
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
    /// the subscription may change, else as built.
    pub(crate) fn concurrency(&self) -> usize {
        match self.fleet() {
            Some(n) if self.scalable() => n,
            _ => self.configured(),
        }
    }

    /// The loop's handlers in flight, as of its last turn.
    pub(crate) fn set_in_flight(&self, n: usize) {
        self.in_flight.store(n, Ordering::Relaxed);
    }

    /// Handlers in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_value_counts_only_where_the_concurrency_may_change() {
        let s = Scale::default();
        s.configure(4, true);
        assert_eq!(s.concurrency(), 4);
        assert!(s.set_fleet(Some(8)));
        assert_eq!(s.concurrency(), 8);
        assert!(!s.set_fleet(Some(8)), "no change");
        assert!(s.set_fleet(None));
        assert_eq!(s.concurrency(), 4);
        let fixed = Scale::default();
        fixed.configure(3, false);
        assert!(!fixed.set_fleet(Some(8)));
        assert_eq!((fixed.concurrency(), fixed.fleet()), (3, Some(8)));
    }
}
