//! The autoscaler's decisions, apart from any I/O: given the group's
//! backlog and the handlers that ran at most since the last look, the
//! concurrency to run next.

use std::time::{Duration, Instant};

/// How long nothing must have waited before the concurrency shrinks.
pub(crate) const QUIET: Duration = Duration::from_secs(5);

/// One subscription's autoscaling state.
#[derive(Debug, Clone)]
pub(crate) struct Autoscaler {
    pub min: usize,
    pub max: usize,
    /// The concurrency it runs now.
    pub current: usize,
    /// Since when nothing has waited (no backlog at every look since).
    quiet_since: Option<Instant>,
    /// The backlog at the last look (`None` when Redis could not tell).
    pub backlog: Option<u64>,
    /// The last change: when (ms since the Unix epoch), from and to.
    pub last_change: Option<(u64, usize, usize)>,
}

impl Autoscaler {
    pub(crate) fn new(min: usize, max: usize) -> Self {
        Autoscaler {
            min,
            max,
            current: min,
            quiet_since: None,
            backlog: None,
            last_change: None,
        }
    }

    /// One look: `backlog` entries wait for the group (its lag; `None` when
    /// Redis cannot tell, which changes nothing), and at most `peak`
    /// handlers ran at once since the last look. Answers the new
    /// concurrency when it changes.
    ///
    /// - While entries wait and every slot was busy, it doubles (up to
    ///   `max`): a static backlog counts, not only a growing one.
    /// - Once nothing has waited for [`QUIET`] and fewer than half the
    ///   slots were busy, it halves, never below `min` nor below twice
    ///   what ran; the next halving waits another [`QUIET`].
    pub(crate) fn tick(
        &mut self,
        now: Instant,
        backlog: Option<u64>,
        peak: usize,
    ) -> Option<usize> {
        self.backlog = backlog;
        let next = match backlog {
            None => return None,
            Some(waiting) if waiting > 0 => {
                self.quiet_since = None;
                if peak < self.current {
                    return None;
                }
                self.current.saturating_mul(2).min(self.max)
            }
            Some(_) => {
                let since = *self.quiet_since.get_or_insert(now);
                if now.duration_since(since) < QUIET || peak.saturating_mul(2) >= self.current {
                    return None;
                }
                self.quiet_since = Some(now);
                (self.current / 2).max(peak.saturating_mul(2)).max(self.min)
            }
        };
        (next != self.current).then(|| {
            self.current = next;
            next
        })
    }
}

#[cfg(test)]
mod tests;
