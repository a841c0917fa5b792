//! Taking over idle entries of the group through the `ReclaimerActor`
//! (one at a time, only when this consumer is idle). [`Reclaim`] keeps the
//! check's own state (when it is due, the page in flight, whether an idle
//! entry waits for room); the loop decides when it may run and what a
//! claimed page means for its reads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use futures::future::LocalBoxFuture;

use super::{Loop, maybe};
use crate::error::Error;
use crate::reclaimer::{self, Claim, ReclaimerActor};
use crate::redis::reply::Delivered;
use crate::stream::EntryId;
use crate::util::log_wait;

/// A reclaim page that came back: the claimed entries and whether the page
/// was full.
type ClaimDone = Result<(Vec<EntryId>, bool), Error>;

/// What a reclaim check found.
pub(super) enum Checked {
    /// The reclaimer is gone (it panicked).
    ReclaimerDied,
    /// A peek: whether an idle entry waits (then the consumer makes room
    /// and the claim is due at once).
    Peeked { waits: bool },
    /// A claim: the entries now this consumer's, or why none.
    Claimed(Result<Vec<EntryId>, Error>),
}

pub(super) struct Reclaim {
    reclaimer: Addr<ReclaimerActor>,
    consumer: Arc<str>,
    /// How long an entry is idle before another consumer takes it.
    min_idle: Duration,
    /// The check in flight, and whether it only peeks.
    in_flight: Option<(LocalBoxFuture<'static, Option<ClaimDone>>, bool)>,
    /// When to ask the reclaimer next.
    due: tokio::time::Instant,
    interval: Duration,
    /// An idle entry waits to be claimed: fetch nothing until the handlers
    /// finished and the claim is done.
    make_room: bool,
}

impl Reclaim {
    pub(super) fn new(
        reclaimer: Addr<ReclaimerActor>,
        consumer: Arc<str>,
        min_idle: Duration,
    ) -> Self {
        Reclaim {
            reclaimer,
            consumer,
            min_idle,
            in_flight: None,
            due: tokio::time::Instant::now(),
            interval: reclaimer::interval(min_idle),
            make_room: false,
        }
    }

    /// Whether no check is in flight.
    pub(super) fn is_idle(&self) -> bool {
        self.in_flight.is_none()
    }

    /// Whether a claim (not a peek) is on its way: what it brings is a
    /// redelivery, which must run alone, before anything newly fetched.
    pub(super) fn claiming(&self) -> bool {
        self.in_flight.as_ref().is_some_and(|(_, peek)| !peek)
    }

    /// Whether an idle entry waits for this consumer to make room.
    pub(super) fn makes_room(&self) -> bool {
        self.make_room
    }

    /// An idle entry that waited goes with the read being sent
    /// (`XREADGROUP … CLAIM`): reads may go on.
    pub(super) fn room_made(&mut self) {
        self.make_room = false;
    }

    /// When the next check is due.
    pub(super) fn due(&self) -> tokio::time::Instant {
        self.due
    }

    /// Asks the reclaimer for one page of entries idle for `claim_idle`,
    /// claimed for this consumer, or, while it is busy (`peek`), only
    /// whether one waits.
    pub(super) fn start(&mut self, peek: bool) {
        let req = self.reclaimer.send(Claim {
            consumer: self.consumer.clone(),
            min_idle: self.min_idle,
            count: 1,
            peek,
        });
        self.in_flight = Some((Box::pin(async move { req.await.ok() }), peek));
    }

    /// Forgets the check in flight (the drain deadline passed).
    pub(super) fn cancel(&mut self) {
        self.in_flight = None;
    }

    /// What the check in flight found (pending while none is). Schedules
    /// the next check. Cancel-safe.
    pub(super) async fn checked(&mut self) -> Checked {
        let claimed = maybe(&mut self.in_flight.as_mut().map(|(f, _)| f)).await;
        let peek = self.in_flight.take().is_some_and(|(_, peek)| peek);
        let now = tokio::time::Instant::now();
        self.due = now + self.interval;
        let Some(claimed) = claimed else {
            return Checked::ReclaimerDied;
        };
        if peek {
            let waits = matches!(claimed, Ok((_, true)));
            if waits {
                self.make_room = true;
                self.due = now;
            }
            return Checked::Peeked { waits };
        }
        self.make_room = false;
        Checked::Claimed(claimed.map(|(claimed, full)| {
            if full {
                // More idle entries may be waiting: ask again as soon as
                // there is room.
                self.due = now;
            }
            claimed
        }))
    }
}

impl Loop {
    /// Starts a reclaim check.
    ///
    /// A claimed entry is a redelivery and runs alone, so it is claimed only
    /// when this consumer is idle (nothing running, queued or being read).
    /// While busy, the check only peeks; when an idle entry waits, the consumer
    /// stops fetching, lets its handlers finish, then claims it.
    pub(super) fn start_reclaim(&mut self) {
        let idle = self.handlers.is_empty() && self.queue.is_empty() && !self.reading.is_reading();
        self.reclaim.start(!idle || self.claims_in_read());
    }

    pub(super) fn on_checked(&mut self, checked: Checked) {
        match checked {
            Checked::ReclaimerDied => {
                // The reclaimer lives as long as its consumers hold its
                // address: gone means it panicked. Without it retries would
                // silently stop, so this consumer fails too and its restart
                // brings a new one.
                tracing::error!(stream = %self.sub.names.name, "the reclaimer actor died; consumer ends");
                self.report.panic = Some("the reclaimer actor died".into());
                self.begin_drain(Instant::now() + self.sub.drain_timeout);
            }
            Checked::Peeked { waits } => {
                if waits && self.reading.blocking() {
                    // Cut a blocked read short rather than wait `block`.
                    self.unblock();
                }
            }
            Checked::Claimed(Ok(claimed)) => {
                self.stall.answered();
                if let Some(first) = claimed.first() {
                    tracing::info!(
                        stream = %self.sub.names.name, consumer = %self.sub.consumer, entries = claimed.len(),
                        "claimed idle pending entries"
                    );
                    // They are this consumer's pending entries now: the next
                    // read fetches them, on the read connection, as a
                    // re-read of its own PEL from the first one, or from the
                    // start if a re-read is under way (it may be past them).
                    // (At a drain they stay pending, claimable again after
                    // `claim_idle`.)
                    self.reading.claimed(first);
                }
            }
            Checked::Claimed(Err(Error::ShutDown)) => {}
            Checked::Claimed(Err(e)) => {
                self.stall.trouble();
                log_wait!(e.class(), stream = %self.sub.names.name, error = %e, "reclaim failed; trying again later");
            }
        }
    }
}

/// Reclaim inside the read (`XREADGROUP … CLAIM`).
impl Loop {
    /// Whether reads of new entries take the group's idle pending entries
    /// too (`XREADGROUP … CLAIM <claim_idle>`, Redis 8.4), instead of a
    /// separate reclaim pass: where the read connection's server has it,
    /// and never in a partition of an ordered stream (its entries change
    /// hands only with its lease, and `CLAIM` serves the longest idle
    /// first, not in id order).
    ///
    /// The lease rule holds as with the reclaimer: an entry a live consumer
    /// holds is refreshed every `claim_idle / 3` (`XCLAIM … JUSTID`), so it
    /// is never idle for `claim_idle`; a handler may run longer than that.
    pub(super) fn claims_in_read(&self) -> bool {
        self.fence.is_none() && self.reading.server().claim_in_read()
    }

    /// Whether the next read takes idle entries: as a reclaim would, only
    /// after a quiet window (a stall is not a death) and only when nothing
    /// runs or waits here (what it takes is a redelivery, which runs alone,
    /// and must not be charged a delivery for a neighbour's crash). A busy
    /// consumer peeks through the reclaimer instead, and when an idle entry
    /// waits it makes room: it reads nothing more until it is idle, then
    /// reads with `CLAIM`.
    pub(super) fn claim_with_read(&self) -> bool {
        self.claims_in_read()
            && self.stall.quiet()
            && self.handlers.is_empty()
            && self.queue.is_empty()
    }

    /// A read with `CLAIM` answered late (the server stalled while it
    /// waited): the entries it claimed may belong to consumers that could
    /// not refresh meanwhile, so none runs here. Each is kept pending with
    /// its delivery count as it was and no idle time, for its holder's next
    /// refresh to take back (or, if it is gone, for a claim after
    /// `claim_idle`). Answers the new entries.
    pub(super) fn give_back_late_claims(&mut self, entries: Vec<Delivered>) -> Vec<Delivered> {
        let (claimed, new): (Vec<_>, Vec<_>) =
            entries.into_iter().partition(|d| d.delivery_count > 1);
        if !claimed.is_empty() {
            tracing::warn!(stream = %self.sub.names.name, entries = claimed.len(), "a read with CLAIM answered late (the server stalled); its claimed entries are not run here");
            let claimed = claimed.into_iter().map(|d| (d.raw.id, d.delivery_count));
            self.give_back_unrun(claimed, Duration::ZERO, "late-claimed entries");
        }
        new
    }
}
