//! Taking over idle entries of the group through the `ReclaimerActor`
//! (one at a time, only when this consumer is idle), and keeping every
//! entry this consumer holds fresh in the PEL so nobody takes it over.

use std::time::Instant;

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use redis::Value;

use super::read::Cursor;
use super::{ClaimDone, Loop};
use crate::error::{Class, Error};
use crate::reclaimer::Claim;
use crate::redis::Query;
use crate::util::log_wait;

impl Loop {
    /// Asks the reclaimer for one page of entries idle for `claim_idle`,
    /// claimed for this consumer.
    ///
    /// A claimed entry is a redelivery and runs alone, so it is claimed only
    /// when this consumer is idle (nothing running, queued or being read).
    /// While busy, the check only peeks; when an idle entry waits, the consumer
    /// stops fetching, lets its handlers finish, then claims it.
    pub(super) fn start_reclaim(&mut self) {
        let idle = self.running.is_empty() && self.queue.is_empty() && self.read.is_none();
        let peek = !idle;
        self.reclaim_peek = peek;
        let req = self.reclaimer.send(Claim {
            consumer: self.sub.consumer.clone(),
            min_idle: self.sub.opts.claim_idle,
            count: 1,
            peek,
        });
        self.reclaim = Some(Box::pin(async move { req.await.ok() }));
    }

    pub(super) fn on_claimed(&mut self, claimed: Option<ClaimDone>) {
        let now = tokio::time::Instant::now();
        self.reclaim_due = now + self.reclaim_interval;
        let Some(claimed) = claimed else {
            // The reclaimer lives as long as its consumers hold its address:
            // gone means it panicked. Without it retries would silently stop,
            // so this consumer fails too and its restart brings a new one.
            tracing::error!(stream = %self.sub.names.name, "the reclaimer actor died; consumer ends");
            self.report.panic = Some("the reclaimer actor died".into());
            self.begin_drain(Instant::now() + self.sub.drain_timeout);
            return;
        };
        if self.reclaim_peek {
            if let Ok((_, true)) = claimed {
                // An idle entry waits: make room, then claim it.
                self.make_room = true;
                self.reclaim_due = now;
                if self.read.is_some() && self.in_read.get() {
                    // Cut a blocked read short rather than wait `block`.
                    self.unblock();
                }
            }
            return;
        }
        self.make_room = false;
        match claimed {
            Ok((claimed, full)) => {
                self.stall.answered();
                if full {
                    // More idle entries may be waiting: ask again as soon as
                    // there is room.
                    self.reclaim_due = now;
                }
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
                    self.cursor = match self.cursor {
                        Cursor::New => Cursor::Pending(first.to_string()),
                        Cursor::Pending(_) => Cursor::Pending("-".into()),
                    };
                }
            }
            Err(Error::ShutDown) => {}
            Err(e) => {
                self.stall.trouble();
                log_wait!(e.class(), stream = %self.sub.names.name, error = %e, "reclaim failed; trying again later");
            }
        }
    }

    /// Keeps the entries this consumer holds (running and queued) fresh in the
    /// PEL, so no reclaimer takes them over however long a handler runs:
    /// `XCLAIM … <self> 0 <ids> JUSTID` resets their idle time without
    /// touching the delivery count.
    ///
    /// One refresh at a time (the liveness rule schedules the next): while
    /// the shared connections reconnect, a refresh waits for them.
    pub(super) fn heartbeat(&mut self) {
        if self.refreshing.is_some() {
            return;
        }
        self.refresh.sending();
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
        self.refreshing = Some(self.claim(cmd));
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

    /// What a refresh answered.
    pub(super) fn on_refreshed(&mut self, res: Result<Value, Error>) {
        let stream = &self.sub.names.name;
        match res {
            Ok(_) => {
                if self.refresh.confirmed().after_failures > 0 {
                    tracing::info!(stream = %stream, "refreshing held entries works again");
                }
            }
            Err(Error::ShutDown) => {
                self.refresh.failed();
            }
            Err(e) if e.class() == Class::LeaseLost => {
                self.refresh.failed();
                self.give_up(&e.to_string());
            }
            Err(e) => {
                let failed = self.refresh.failed();
                if failed.log {
                    log_wait!(e.class(), stream = %stream, error = %e, "refreshing held entries failed; trying again shortly");
                }
            }
        }
    }
}
