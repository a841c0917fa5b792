//! The liveness rule every source keeps for its claim to its work (a stream
//! consumer name's lease, a list consumer's heartbeat):
//!
//! * the claim is renewed every third of its TTL, one renewal at a time,
//!   also while draining (a drain may outlast the TTL);
//! * it is surely this process's until the TTL has passed since the last
//!   renewal Redis confirmed, counted from when that renewal was *sent*;
//!   past that, nothing new starts (another process may take the work over),
//!   until a renewal is confirmed again;
//! * a renewal that fails is tried again at the next third of the TTL;
//! * a renewal that finds the claim held by another process ends the
//!   consumer (the source says how).
//!
//! [`Liveness`] keeps the times; the source sends its own renewal (a script
//! over its own keys) and reports what came back.

use std::time::Duration;

use tokio::time::Instant;

use crate::util::Retry;

/// One consumer's claim to its work, by the rule in the module docs.
pub(crate) struct Liveness {
    ttl: Duration,
    /// When the next renewal is due.
    next: Instant,
    /// The renewal on its way, sent then.
    sent: Option<Instant>,
    /// Until when the claim is surely ours (`None`: not yet confirmed by a
    /// renewal of this loop; the start confirmed it).
    until: Option<Instant>,
    /// Failed renewals in a row, for the logs.
    failures: Retry,
}

/// What a confirmed renewal means for the loop.
pub(crate) struct Renewed {
    /// The claim had lapsed before this renewal (an outage or a pause past
    /// the TTL): work may start again.
    pub lapsed: bool,
    /// How many renewals had failed in a row before this one.
    pub after_failures: u32,
}

/// What a failed renewal means for the loop.
pub(crate) struct NotRenewed {
    /// The claim has lapsed: nothing new starts.
    pub lapsed: bool,
    /// Whether to log this failure (the first, then each doubling).
    pub log: bool,
}

impl Liveness {
    /// A claim with `ttl`, confirmed by a renewal sent at `confirmed_at`
    /// (`None`: the next renewal is due at once).
    pub(crate) fn new(ttl: Duration, confirmed_at: Option<Instant>) -> Self {
        let now = Instant::now();
        Liveness {
            ttl,
            next: confirmed_at.map_or(now, |at| at + ttl / 3),
            sent: None,
            until: confirmed_at.map(|at| at + ttl),
            failures: Retry::default(),
        }
    }

    /// When the next renewal is due; `None` while one is on its way.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.sent.is_none().then_some(self.next)
    }

    /// A renewal is sent now: the next is due a third of the TTL later.
    pub(crate) fn sending(&mut self) {
        let now = Instant::now();
        self.sent = Some(now);
        self.next = now + self.ttl / 3;
    }

    /// Redis confirmed the renewal on its way.
    pub(crate) fn confirmed(&mut self) -> Renewed {
        let lapsed = !self.holds();
        let sent = self.sent.take().unwrap_or_else(Instant::now);
        self.until = Some(sent + self.ttl);
        Renewed {
            lapsed,
            after_failures: self.failures.succeeded(),
        }
    }

    /// The renewal on its way failed (Redis did not answer, or refused).
    pub(crate) fn failed(&mut self) -> NotRenewed {
        self.sent = None;
        let (_, log) = self.failures.failed();
        NotRenewed {
            lapsed: !self.holds(),
            log,
        }
    }

    /// Whether the claim is surely this process's now.
    pub(crate) fn holds(&self) -> bool {
        self.until.is_none_or(|until| Instant::now() < until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_claim_lapses_a_ttl_after_the_last_confirmed_renewal_was_sent() {
        let ttl = Duration::from_secs(9);
        let mut l = Liveness::new(ttl, Some(Instant::now()));
        assert!(l.holds());
        assert_eq!(l.due(), Some(Instant::now() + Duration::from_secs(3)));
        tokio::time::advance(Duration::from_secs(3)).await;
        l.sending();
        assert_eq!(l.due(), None, "one renewal at a time");
        // The reply comes late: the claim counts from when it was sent.
        tokio::time::advance(Duration::from_secs(2)).await;
        let r = l.confirmed();
        assert!(!r.lapsed);
        tokio::time::advance(Duration::from_millis(6_999)).await;
        assert!(l.holds(), "3 s + 9 s after the start, less 1 ms");
        // Renewals fail from here on: the claim lapses, nothing may start.
        l.sending();
        let f = l.failed();
        assert!(f.log && !f.lapsed);
        tokio::time::advance(Duration::from_millis(2)).await;
        assert!(!l.holds());
        l.sending();
        assert!(l.failed().lapsed);
        l.sending();
        let r = l.confirmed();
        assert!(r.lapsed, "it had lapsed before this renewal");
        assert_eq!(r.after_failures, 2);
        assert!(l.holds());
    }

    #[tokio::test(start_paused = true)]
    async fn a_claim_not_yet_confirmed_holds_and_is_renewed_at_once() {
        let l = Liveness::new(Duration::from_secs(9), None);
        assert!(l.holds());
        assert_eq!(l.due(), Some(Instant::now()));
    }
}
