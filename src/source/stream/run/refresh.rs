//! Keeping every entry this consumer holds fresh in the PEL, so nobody
//! takes it over however long a handler runs: [`Refresh`] is the liveness
//! rule applied to the held entries (`XCLAIM … JUSTID` every
//! `claim_idle / 3`, a failed refresh again at once with backoff), with
//! its one refresh in flight.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use redis::Value;

use super::{Loop, maybe};
use crate::delivery::liveness::{Liveness, Stall};
use crate::error::{Class, Error};
use crate::redis::Query;
use crate::util::log_wait;

pub(super) struct Refresh {
    stream: Arc<str>,
    /// The held entries' claim, by the liveness rule.
    live: Liveness,
    ttl: Duration,
    stall: Stall,
    /// The refresh in flight.
    in_flight: Option<LocalBoxFuture<'static, Result<Value, Error>>>,
    /// Whether the consumer held anything at the last turn of the loop.
    was_holding: bool,
}

impl Refresh {
    pub(super) fn new(stream: Arc<str>, claim_idle: Duration, stall: Stall) -> Self {
        let ttl = refresh_ttl(claim_idle);
        Refresh {
            stream,
            live: Liveness::new(ttl, None, stall.clone()),
            ttl,
            stall,
            in_flight: None,
            was_holding: false,
        }
    }

    /// At a turn of the loop: whether entries are held now. Answers when
    /// the next refresh is due, if one is (entries just taken need none
    /// before `claim_idle / 3` from now).
    pub(super) fn turn(&mut self, holding: bool) -> Option<tokio::time::Instant> {
        if holding && !self.was_holding {
            let now = tokio::time::Instant::now();
            self.live = Liveness::new(self.ttl, Some(now), self.stall.clone());
        }
        self.was_holding = holding;
        self.live.due().filter(|_| holding)
    }

    /// Whether a refresh may be sent now (none is in flight).
    pub(super) fn may_send(&self) -> bool {
        self.in_flight.is_none()
    }

    /// Sends a refresh (`XCLAIM … JUSTID` of every held entry).
    pub(super) fn send(&mut self, req: LocalBoxFuture<'static, Result<Value, Error>>) {
        self.live.sending();
        self.in_flight = Some(req);
    }

    /// What the refresh in flight answered, logged (pending while none is
    /// in flight): `Some` with the error that ends the partition (its lease
    /// is held elsewhere). Cancel-safe.
    pub(super) async fn answered(&mut self) -> Option<Error> {
        let res = maybe(&mut self.in_flight).await;
        self.in_flight = None;
        let stream = &self.stream;
        match res {
            Ok(_) => {
                if self.live.confirmed().after_failures > 0 {
                    tracing::info!(stream = %stream, "refreshing held entries works again");
                }
            }
            Err(Error::ShutDown) => {
                self.live.failed();
            }
            Err(e) if e.class() == Class::LeaseLost => {
                self.live.failed();
                return Some(e);
            }
            Err(e) => {
                let failed = self.live.failed();
                if failed.log {
                    log_wait!(e.class(), stream = %stream, error = %e, "refreshing held entries failed; trying again shortly");
                }
            }
        }
        None
    }
}

/// The held entries' refresh, as a claim renewed by the liveness rule:
/// every third of `claim_idle` (at least every 5 ms).
fn refresh_ttl(claim_idle: Duration) -> Duration {
    claim_idle.max(Duration::from_millis(15))
}

impl Loop {
    /// Keeps the entries this consumer holds (running and queued) fresh in the
    /// PEL: `XCLAIM … <self> 0 <ids> JUSTID` resets their idle time without
    /// touching the delivery count.
    ///
    /// One refresh at a time (the liveness rule schedules the next): while
    /// the shared connections reconnect, a refresh waits for them.
    pub(super) fn heartbeat(&mut self) {
        if !self.refresh.may_send() {
            return;
        }
        let s = &self.sub;
        let mut cmd = redis::cmd("XCLAIM");
        cmd.arg(&*s.names.name)
            .arg(&*s.names.group)
            .arg(&*s.consumer)
            .arg(0);
        for id in &self.held {
            cmd.arg(id);
        }
        cmd.arg("JUSTID");
        let req = self.claim(cmd);
        self.refresh.send(req);
    }

    /// Sends `cmd`, an `XCLAIM` to this consumer, on a shared connection;
    /// in a partition, fenced by its lease (see
    /// [`Fence`](crate::source::stream::ordered::Fence)).
    pub(super) fn claim(&self, cmd: redis::Cmd) -> LocalBoxFuture<'static, Result<Value, Error>> {
        match &self.fence {
            Some(fence) => {
                let req = self.redis.send(fence.eval(&cmd));
                async move { req.await.unwrap_or(Err(Error::ShutDown)) }.boxed_local()
            }
            None => {
                let req = self.redis.send(Query("xclaim", cmd));
                async move { req.await.unwrap_or(Err(Error::ShutDown)) }.boxed_local()
            }
        }
    }
}

#[cfg(test)]
mod tests;
