//! The consumer loop's share of consumer hygiene (see
//! [`consumer::hygiene`](crate::source::stream::hygiene)): renewing the consumer
//! name's lease, pruning the group's idle empty consumers, and leaving the
//! group after a clean stop.

use std::time::Instant;

use futures::FutureExt;
use redis::Value;
use tokio::sync::watch;

use super::Loop;
use super::lease::Renewed;
use crate::delivery::until_stopped;
use crate::error::Error;
use crate::redis::{Eval, Query, RedisActor};
use crate::source::stream::hygiene::{
    LEAVE_GROUP, Lease, PRUNE_IDLE, prune_period, pruned_names, spared,
};
use crate::util::log_wait;

/// Holds `lease` before a consumer loop starts: waits while another process
/// holds it (no deadline: the startup already checked it once, so this is a
/// restart), and while Redis cannot be asked, with backoff, until `stop`
/// changes ([`Error::StartAborted`]). Answers when the take that
/// succeeded was sent.
///
/// # Errors
/// [`Error::StartAborted`] on a stop; an error no wait fixes (a missing ACL
/// permission).
pub(super) async fn hold(
    lease: &Lease,
    redis: &actix::Addr<RedisActor>,
    stop: &mut watch::Receiver<Option<Instant>>,
    board: &crate::status::Board,
) -> Result<Instant, Error> {
    // Each take watches a copy of `stop`, to end its own wait for the
    // lease on a stop.
    let own = stop.clone();
    let attempt = || {
        let mut stop = own.clone();
        async move { lease.acquire(redis, None, Some(&mut stop), board).await }
    };
    let gives_up =
        |e: &Error| matches!(e, Error::StartAborted | Error::ShutDown) || !e.class().is_transient();
    let log = |e: &Error, delay: std::time::Duration| {
        log_wait!(e.class(), key = lease.key(), error = %e, retry_in_ms = delay.as_millis() as u64, "could not take the consumer name's lease; trying again");
    };
    until_stopped(stop, attempt, gives_up, log)
        .await
        .map_err(|e| e.unwrap_or(Error::StartAborted))
}

impl Loop {
    /// Makes the consumer known to the group at once (`XGROUP
    /// CREATECONSUMER`), so a live consumer shows in `XINFO CONSUMERS` from
    /// its start: before Redis 7.2 a read that delivers nothing does not
    /// create it. Best effort: a refusal (an ACL without
    /// `+xgroup|createconsumer`) is logged at DEBUG; the first delivery
    /// creates it then.
    pub(super) fn announce(&mut self) {
        let s = &self.sub;
        let mut cmd = redis::cmd("XGROUP");
        cmd.arg("CREATECONSUMER")
            .arg(&*s.names.name)
            .arg(&*s.names.group)
            .arg(&*s.consumer);
        let req = self.redis.send(Query("xgroup|createconsumer", cmd));
        let stream = s.names.name.clone();
        self.side.push(Box::pin(async move {
            if let Ok(Err(e)) = req.await {
                tracing::debug!(stream = %stream, error = %e, "XGROUP CREATECONSUMER failed; the first delivery creates the consumer");
            }
        }));
    }

    /// What a renewal answered. The lease held by another process (this one
    /// could not renew for longer than the TTL, and someone took the name)
    /// ends the loop with [`Error::ConsumerNameInUse`]: it reads nothing
    /// more and drains.
    pub(super) fn on_lease_renewed(&mut self, renewed: Renewed) {
        match renewed {
            // Redis answers again after an outage long enough to lapse the
            // lease: read now, not after the backoff the outage built up.
            Renewed::Held { lapsed: true } => self.reading.retry_now(),
            Renewed::Held { lapsed: false } | Renewed::Failed => {}
            Renewed::Elsewhere { holder } => {
                if self.fence.is_some() {
                    let why = format!("{} is held by {holder}", self.lease.what());
                    return self.give_up(&why);
                }
                if self.report.error.is_some() {
                    // Already ending for this (or another) reason.
                    return;
                }
                let e = self.lease.lost(holder);
                tracing::error!(stream = %self.sub.names.name, consumer = %self.sub.consumer, error = %e, lease = self.lease.what(), "the lease was taken by another process; this consumer starts nothing more and drains");
                self.report.error = Some(e);
                self.begin_drain(Instant::now() + self.sub.drain_timeout);
            }
        }
    }

    /// Gives a partition up at once: its lease lapsed on this process's
    /// clock (no renewal confirmed for its TTL, counted from when the
    /// renewal was sent, so never later than it lapses on the server), or a
    /// fenced command found it held elsewhere. Running handlers are
    /// dropped (cancelled at their next `.await`; their entries stay
    /// pending, and the next owner runs them before anything newer of their
    /// keys); nothing is handed back or started; the loop ends. The ordered
    /// consumer takes the partition again if its share-out still gives it
    /// here.
    pub(super) fn give_up(&mut self, why: &str) {
        if self.report.lease_lost {
            return;
        }
        tracing::warn!(
            stream = %self.sub.names.name, consumer = %self.sub.consumer,
            handlers = self.handlers.len(), queued = self.queue.len(), reason = %why,
            "the partition's lease lapsed or is held elsewhere: this consumer gives the partition up, drops its running handlers and starts nothing more of it (their entries stay pending for the next owner)"
        );
        self.report.lease_lost = true;
        for q in std::mem::take(&mut self.queue) {
            self.release_key(&q.id);
        }
        // Entries waiting for their retry stay pending too.
        self.retries.forget_waiting();
        self.drain = Some(Instant::now());
        self.abandon();
    }

    /// Deletes the group's consumers that hold nothing and have been idle
    /// longer than `prune_idle` (one script; this consumer is spared), and
    /// schedules the next run.
    pub(super) fn prune_idle(&mut self) {
        let Some(ttl) = self.sub.opts.prune_idle else {
            self.timers.prune_at = None;
            return;
        };
        self.timers.prune_at = Some(tokio::time::Instant::now() + prune_period(ttl));
        let s = &self.sub;
        let redis = self.redis.clone();
        let (name, group, me) = (
            s.names.name.clone(),
            s.names.group.clone(),
            s.consumer.clone(),
        );
        let req = async move {
            let query = |acl, cmd| {
                let redis = redis.clone();
                async move {
                    redis
                        .send(Query(acl, cmd))
                        .await
                        .unwrap_or(Err(Error::ShutDown))
                }
            };
            let spare = spared(&name, &group, &me, query).await?;
            let mut args = vec![
                group.as_bytes().to_vec(),
                (ttl.as_millis() as u64).to_string().into_bytes(),
            ];
            args.extend(spare.into_iter().map(String::into_bytes));
            redis
                .send(Eval {
                    script: &PRUNE_IDLE,
                    keys: vec![name.as_bytes().to_vec()],
                    args,
                })
                .await
                .unwrap_or(Err(Error::ShutDown))
        };
        let (stream, group) = (s.names.name.clone(), s.names.group.clone());
        self.side.push(
            async move {
                match req.await.and_then(pruned_names) {
                    Ok(names) if names.is_empty() => {}
                    Ok(names) => tracing::info!(
                        stream = %stream, group = %group, idle_ms = ttl.as_millis() as u64, pruned = ?names,
                        "deleted idle consumers that held no pending entries"
                    ),
                    Err(Error::ShutDown) => {}
                    Err(e) => {
                        log_wait!(e.class(), stream = %stream, group = %group, error = %e, "pruning idle consumers failed; trying again later")
                    }
                }
            }
            .boxed_local(),
        );
    }

    /// After a clean drain: deletes this consumer from its group when it
    /// holds no pending entry (one script: checked and deleted atomically),
    /// so workers restarted under fresh names (the default
    /// `<group>-<hostname>-<pid>`) do not pile up in `XINFO CONSUMERS`. A
    /// consumer that holds entries stays, and they are recovered as usual.
    pub(super) async fn leave_group(&self) {
        let s = &self.sub;
        let req = self.redis.send(Eval {
            script: &LEAVE_GROUP,
            keys: vec![s.names.name.as_bytes().to_vec()],
            args: vec![
                s.names.group.as_bytes().to_vec(),
                s.consumer.as_bytes().to_vec(),
            ],
        });
        match req.await {
            Ok(Ok(Value::Int(1))) => {
                tracing::debug!(stream = %s.names.name, consumer = %s.consumer, "consumer left its group (it held no pending entries)")
            }
            Ok(Ok(Value::Int(0))) => {
                tracing::info!(stream = %s.names.name, consumer = %s.consumer, "consumer stays in its group: it still holds pending entries")
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(stream = %s.names.name, consumer = %s.consumer, error = %e, "could not remove the consumer from its group; it stays listed")
            }
            Err(_) => {}
        }
    }
}
