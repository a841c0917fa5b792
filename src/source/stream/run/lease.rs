//! The consumer name's lease (or a partition's) while the loop runs:
//! renewed by the liveness rule every third of its TTL, held until its TTL
//! after the last confirmed renewal was sent, released at the end.
//! [`Keeper`] holds that state; the loop asks it whether the lease holds
//! and decides what a lease held elsewhere means (a drain, or giving a
//! partition up).

use std::sync::Arc;

use actix::Addr;
use futures::FutureExt;
use futures::future::LocalBoxFuture;

use super::maybe;
use crate::delivery::claim::Taken;
use crate::delivery::liveness::{HeldUntil, Liveness, Stall};
use crate::error::Error;
use crate::redis::RedisActor;
use crate::source::stream::hygiene::Lease;
use crate::status::Board;
use crate::util::log_wait;

/// What a renewal answered, as the loop acts on it.
pub(super) enum Renewed {
    /// Still ours; `lapsed`: it had lapsed here before this renewal (Redis
    /// answers again after a long outage).
    Held { lapsed: bool },
    /// Another process holds it now.
    Elsewhere { holder: String },
    /// Not renewed this time (logged): tried again by the liveness rule.
    Failed,
}

pub(super) struct Keeper {
    /// The lease (`None`: no lease).
    lease: Option<Lease>,
    live: Option<Liveness>,
    renewal: Option<LocalBoxFuture<'static, Result<Taken, Error>>>,
    /// Until when it holds, as of this turn of the loop: a partition's
    /// handlers are polled only until then.
    until: HeldUntil,
    redis: Addr<RedisActor>,
    board: Arc<Board>,
    /// For its log lines: the stream and the consumer.
    stream: Arc<str>,
    consumer: Arc<str>,
}

impl Keeper {
    pub(super) fn new(
        lease: Option<Lease>,
        redis: Addr<RedisActor>,
        board: Arc<Board>,
        (stream, consumer): (Arc<str>, Arc<str>),
        stall: &Stall,
    ) -> Self {
        let live = lease
            .as_ref()
            .map(|l| Liveness::new(l.ttl, None, stall.clone()));
        Keeper {
            lease,
            live,
            renewal: None,
            until: HeldUntil::default(),
            redis,
            board,
            stream,
            consumer,
        }
    }

    /// The lease was taken when `sent` was sent: ours for a TTL from then,
    /// never longer here than on the server.
    pub(super) fn taken(&mut self, sent: tokio::time::Instant, stall: &Stall) {
        if let Some(l) = &self.lease {
            self.live = Some(Liveness::new(l.ttl, Some(sent), stall.clone()));
        }
    }

    /// Whether the lease is surely ours now (always, without a lease). A
    /// process paused past the TTL (SIGSTOP, a frozen VM) or cut off from
    /// Redis that long finds it is not, and starts nothing until a renewal
    /// says so: another process may have taken the name meanwhile.
    pub(super) fn holds(&self) -> bool {
        self.live.as_ref().is_none_or(Liveness::holds)
    }

    /// When the next renewal is due.
    pub(super) fn renew_at(&self) -> Option<tokio::time::Instant> {
        self.live.as_ref().and_then(Liveness::due)
    }

    /// At a turn of the loop: when the lease lapses here unless renewed,
    /// which [`until`](Self::until) also holds from now on for the
    /// handlers it guards.
    pub(super) fn turn(&self) -> Option<tokio::time::Instant> {
        let at = self.live.as_ref().and_then(Liveness::lapses_at);
        self.until.set(at);
        at
    }

    /// Until when it holds, shared with the handlers it guards.
    pub(super) fn until(&self) -> HeldUntil {
        self.until.clone()
    }

    /// Renews the lease (one renewal at a time; the next is due a third of
    /// its TTL later). It goes on while draining: a drain may be longer
    /// than the TTL, and the name is still in use until it ends.
    pub(super) fn renew(&mut self) {
        let (Some(lease), Some(live)) = (self.lease.clone(), self.live.as_mut()) else {
            return;
        };
        if self.renewal.is_some() {
            return;
        }
        live.sending();
        let redis = self.redis.clone();
        self.renewal = Some(async move { lease.take(&redis).await }.boxed_local());
    }

    /// What the renewal in flight answered (pending while none is), logged.
    /// Cancel-safe.
    pub(super) async fn renewed(&mut self) -> Renewed {
        let res = maybe(&mut self.renewal).await;
        self.renewal = None;
        let (Some(lease), Some(live)) = (&self.lease, self.live.as_mut()) else {
            return Renewed::Failed;
        };
        let (stream, consumer) = (&self.stream, &self.consumer);
        match res {
            Ok(Taken::Held) => {
                let renewed = live.confirmed();
                if renewed.after_failures > 0 {
                    tracing::info!(%stream, %consumer, lease = lease.what(), "the lease is renewed again");
                }
                Renewed::Held {
                    lapsed: renewed.lapsed,
                }
            }
            Ok(Taken::Elsewhere { holder, .. }) => {
                live.failed();
                Renewed::Elsewhere { holder }
            }
            Err(Error::ShutDown) => {
                live.failed();
                Renewed::Failed
            }
            Err(e) => {
                let failed = live.failed();
                if failed.lapsed {
                    self.board.read_failed(&format!(
                        "the consumer name's lease could not be renewed: {e}"
                    ));
                }
                if failed.log {
                    log_wait!(e.class(), %stream, %consumer, error = %e, ttl_ms = lease.ttl.as_millis() as u64, lapsed = failed.lapsed, "could not renew the consumer name's lease; trying again (once it has lapsed, nothing starts until it is renewed)");
                }
                Renewed::Failed
            }
        }
    }

    /// What the lease is, for a log line.
    pub(super) fn what(&self) -> &'static str {
        self.lease.as_ref().map_or("lease", Lease::what)
    }

    /// The lease held elsewhere, as the error the consumer ends with.
    pub(super) fn lost(&self, holder: String) -> Error {
        let lease = self.lease.as_ref().expect("a lease answered");
        lease.lost(holder)
    }

    /// At the end of the loop: waits for a renewal in flight (so it cannot
    /// set the lease again after this), then drops the lease when it is
    /// still ours, so a successor under the same name starts at once.
    pub(super) async fn release(&mut self) {
        if let Some(renewal) = self.renewal.take() {
            let _ = renewal.await;
        }
        if let Some(lease) = &self.lease {
            lease.release(&self.redis).await;
        }
    }
}
