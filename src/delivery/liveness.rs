//! The liveness rule every source keeps for its claim to its work (a stream
//! consumer name's lease, a list consumer's heartbeat):
//!
//! * the claim is renewed every third of its TTL, one renewal at a time,
//!   also while draining (a drain may outlast the TTL);
//! * it is surely this process's until the TTL has passed since the last
//!   renewal Redis confirmed, counted from when that renewal was *sent*;
//!   past that, nothing new starts (another process may take the work over),
//!   until a renewal is confirmed again;
//! * a renewal that fails is tried again promptly, with the capped backoff
//!   (100 ms doubling, never later than the next third of the TTL);
//! * a renewal that finds the claim held by another process ends the
//!   consumer (the source says how);
//! * **a stall is not a death**: after any trouble this process saw with
//!   the server (a failed renewal or read, a reply far later than it should
//!   be), it declares no other consumer dead and takes over no other
//!   consumer's work until one whole window (the TTL, or `claim_idle` for
//!   a stream's entries) has passed since the server first answered it
//!   again. A
//!   server that stalled (a long script keeping it `BUSY`, a pause) let
//!   every claim age on its clock while nobody could renew; the window gives
//!   the other consumers their turn to renew before anyone judges them.
//!
//! The limit: a consumer cut off from a server that stays responsive to
//! the others for longer than the window is taken for dead, and its work
//! runs elsewhere, maybe a second time (at least once).
//!
//! [`Liveness`] keeps the times; the source sends its own renewal (a script
//! over its own keys) and reports what came back. [`Stall`] is the trouble
//! record alone, for a source that judges others without a claim of its own
//! to renew (a stream consumer's reclaims).

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;

use crate::util::Retry;

/// Whether this consumer saw trouble with the server, and since when the
/// server answers it again: one window after that it may judge other
/// consumers. Cloning shares it, so the futures a loop sends out can record
/// what they saw.
#[derive(Clone)]
pub(crate) struct Stall {
    window: Duration,
    state: Rc<Cell<Seen>>,
}

/// What a [`Stall`] has seen last.
#[derive(Clone, Copy, Default, PartialEq)]
enum Seen {
    /// No trouble, ever.
    #[default]
    Nothing,
    /// Trouble, and no answer since.
    Trouble,
    /// Trouble, then the server answered again at this instant.
    AnsweredAt(Instant),
}

impl Stall {
    /// A record whose quiet window is `window`.
    pub(crate) fn new(window: Duration) -> Self {
        Stall {
            window,
            state: Rc::default(),
        }
    }

    /// Trouble now: a failed command, or a reply much later than it should
    /// have come. The window starts again at the next answer.
    pub(crate) fn trouble(&self) {
        self.state.set(Seen::Trouble);
    }

    /// The server answered a command in time.
    pub(crate) fn answered(&self) {
        if self.state.get() == Seen::Trouble {
            self.state.set(Seen::AnsweredAt(Instant::now()));
        }
    }

    /// Whether a whole window has passed since the server answered again
    /// after the last trouble (or there was none): only then may this
    /// consumer take another for dead. Knowing only that no trouble was seen
    /// is not enough: a consumer that sent nothing during a stall saw none.
    pub(crate) fn quiet(&self) -> bool {
        match self.state.get() {
            Seen::Nothing => true,
            Seen::Trouble => false,
            Seen::AnsweredAt(at) => Instant::now() >= at + self.window,
        }
    }
}

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
    /// Failed renewals in a row: the next try's backoff, and the logs.
    failures: Retry,
    /// The loop's record of trouble with the server (shared with its other
    /// commands), which its renewals feed.
    stall: Stall,
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
    /// (`None`: the next renewal is due at once), whose renewals report to
    /// the loop's `stall`.
    pub(crate) fn new(ttl: Duration, confirmed_at: Option<Instant>, stall: Stall) -> Self {
        let now = Instant::now();
        Liveness {
            ttl,
            next: confirmed_at.map_or(now, |at| at + ttl / 3),
            sent: None,
            until: confirmed_at.map(|at| at + ttl),
            failures: Retry::default(),
            stall,
        }
    }

    /// The trouble record (shared), for other failures the source sees.
    pub(crate) fn stall(&self) -> &Stall {
        &self.stall
    }

    /// Whether this consumer may take another for dead now: the server
    /// has answered for a whole TTL since the last trouble.
    pub(crate) fn may_judge_others(&self) -> bool {
        self.stall.quiet()
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
        let after_failures = self.failures.succeeded();
        self.stall.answered();
        Renewed {
            lapsed,
            after_failures,
        }
    }

    /// The renewal on its way failed (Redis did not answer, or refused).
    pub(crate) fn failed(&mut self) -> NotRenewed {
        self.sent = None;
        self.stall.trouble();
        let (delay, log) = self.failures.failed();
        // Tried again promptly: the claim must be renewed as soon as the
        // server answers, before others judge it.
        self.next = Instant::now() + delay.min(self.ttl / 3);
        NotRenewed {
            lapsed: !self.holds(),
            log,
        }
    }

    /// When the claim lapses unless a renewal is confirmed first (`None`:
    /// not yet confirmed by a renewal of this loop).
    pub(crate) fn lapses_at(&self) -> Option<Instant> {
        self.until
    }

    /// Whether the claim is surely this process's now.
    pub(crate) fn holds(&self) -> bool {
        self.until.is_none_or(|until| Instant::now() < until)
    }
}

/// Until when a claim holds, as its loop last saw it (`None`: no limit
/// known yet), shared with the work it guards.
pub(crate) type HeldUntil = Rc<Cell<Option<Instant>>>;

/// A future that is polled only while a claim holds: from the instant it
/// lapses (on this process's clock) its inner future is never polled again,
/// so none of its code runs past the lapse, whatever else the thread did
/// first (a long blocking handler beside it, a pause). The loop that
/// owns the claim drops it then.
pub(crate) struct WhileHeld<F> {
    inner: F,
    until: HeldUntil,
}

impl<F> WhileHeld<F> {
    pub(crate) fn new(inner: F, until: HeldUntil) -> Self {
        WhileHeld { inner, until }
    }
}

impl<F: std::future::Future + Unpin> std::future::Future for WhileHeld<F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        if self.until.get().is_some_and(|u| Instant::now() >= u) {
            // Lapsed: the loop's lapse alarm, due at the same instant, drops
            // this future.
            return std::task::Poll::Pending;
        }
        std::pin::Pin::new(&mut self.inner).poll(cx)
    }
}

#[cfg(test)]
mod tests;
