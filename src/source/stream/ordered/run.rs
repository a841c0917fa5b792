//! The ordered stream's loop: membership and the share-out of partitions.
//! Each partition this consumer owns is read by a stream consumer loop of
//! its own, which the supervisor runs and drains like any subscription's
//! (asked through [`Parts`]); this loop decides which run. See the parent
//! module for the rules.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use actix::Addr;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use tokio::sync::watch;

use super::{MEMBERS, Ordered, check_partitions};
use crate::delivery::parts::Parts;
use crate::delivery::{ConsumerReport, until_stopped};
use crate::error::Error;
use crate::redis::{Eval, Query, RedisActor};
use crate::source::stream::Subscription;
use crate::status::SubscriptionState;
use crate::util::{Retry, log_wait};

/// A partition this consumer reads (or waits to read), until the
/// supervisor tells its loop ended.
struct Part {
    /// Told to stop (handed on, or the drain).
    stopping: bool,
}

/// The partitions `me` owns among `members` (the live consumers): every
/// `n`-th from its place in name order.
pub(crate) fn share(members: &[String], me: &str, partitions: u16) -> BTreeSet<u16> {
    let mut names: Vec<&str> = members.iter().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    let Some(place) = names.iter().position(|m| *m == me) else {
        return BTreeSet::new();
    };
    (0..partitions)
        .filter(|i| usize::from(*i) % names.len() == place)
        .collect()
}

pub(crate) async fn consume(
    sub: Arc<Subscription>,
    redis: Addr<RedisActor>,
    parts: Parts,
    mut stop: watch::Receiver<Option<Instant>>,
    ready: Option<tokio::sync::oneshot::Sender<()>>,
) -> ConsumerReport {
    let ord = sub.ordered().expect("an ordered stream's subscription");
    let mut report = ConsumerReport::default();
    // The partition count first: a consumer configured with another count
    // than the one recorded must not read.
    let gives_up =
        |e: &Error| matches!(e, Error::ShutDown | Error::Config(_)) || !e.class().is_transient();
    let log = |e: &Error, delay: std::time::Duration| {
        log_wait!(e.class(), stream = %sub.names.name, error = %e, retry_in_ms = delay.as_millis() as u64, "could not check the ordered stream's partition count; trying again");
    };
    let check = || check_partitions(&redis, &sub.names.name, ord);
    match until_stopped(&mut stop, check, gives_up, log).await {
        Ok(()) => {}
        Err(None | Some(Error::ShutDown)) => return report,
        Err(Some(e)) => {
            tracing::error!(stream = %sub.names.name, error = %e, "ordered stream cannot be read; consumer ends");
            report.error = Some(e);
            return report;
        }
    }
    sub.board.set_state(SubscriptionState::Running);
    if let Some(tx) = ready {
        let _ = tx.send(());
    }
    tracing::info!(
        stream = %sub.names.name, group = %sub.names.group, consumer = %sub.consumer,
        partitions = ord.order.partitions, key_field = %ord.order.key_field,
        on_key_failure = %sub.opts.on_key_failure,
        "ordered consumer started"
    );
    let mut lp = Manager {
        sub: sub.clone(),
        redis,
        link: parts,
        parts: BTreeMap::new(),
        desired: BTreeSet::new(),
        deadline: None,
    };
    let renew_every = ord.ttl / 3;
    let mut tick = tokio::time::Instant::now();
    let mut members: Option<LocalBoxFuture<'static, Result<Vec<String>, Error>>> = None;
    let mut members_retry = Retry::default();
    loop {
        if lp.deadline.is_some() && lp.parts.is_empty() {
            break;
        }
        tokio::select! {
            () = tokio::time::sleep_until(tick), if lp.deadline.is_none() && members.is_none() => {
                members = Some(lp.renew_membership());
            }
            res = async { members.as_mut().expect("guarded").await }, if members.is_some() => {
                members = None;
                match res {
                    Ok(live) => {
                        members_retry.succeeded();
                        tick = tokio::time::Instant::now() + renew_every;
                        lp.desired = share(&live, &lp.sub.consumer, ord.order.partitions);
                        lp.apply();
                    }
                    Err(Error::ShutDown) => {}
                    Err(e) => {
                        // The partitions held keep going under their own
                        // leases; the share-out waits for the next answer.
                        let (delay, log) = members_retry.failed();
                        if log {
                            log_wait!(e.class(), stream = %lp.sub.names.name, error = %e, retry_in_ms = delay.as_millis() as u64, "could not renew this consumer's membership of the ordered stream's group; trying again");
                        }
                        tick = tokio::time::Instant::now() + delay.min(renew_every);
                    }
                }
            }
            ended = lp.link.ended(), if !lp.parts.is_empty() => {
                let Some((index, ended)) = ended else {
                    // The supervisor is gone, and every loop it ran.
                    lp.parts.clear();
                    continue;
                };
                lp.parts.remove(&index);
                if ended.lease_lost {
                    tracing::info!(stream = %lp.sub.names.name, partition = index, "partition given up here (its lease lapsed or is held elsewhere); it is taken again if the share-out still gives it to this consumer");
                }
                report.timed_out |= ended.timed_out;
                if let Some(p) = ended.panic {
                    if lp.deadline.is_none() {
                        // A bug of the loop's own: the ordered stream
                        // drains and ends, restarted under the restart
                        // policy (with backoff, counted).
                        tracing::error!(stream = %lp.sub.names.name, partition = index, panic = %p, "a partition's consumer panicked; the ordered consumer drains and ends");
                        lp.drain(Instant::now() + lp.sub.drain_timeout);
                    }
                    report.panic.get_or_insert(p);
                }
                match ended.error {
                    Some(Error::ConsumerNameInUse { holder, .. }) => {
                        tracing::warn!(stream = %lp.sub.names.name, partition = index, holder = %holder, "another consumer took this partition after its lease lapsed here; it is read there now");
                    }
                    Some(e) if lp.deadline.is_none() => {
                        tracing::error!(stream = %lp.sub.names.name, partition = index, error = %e, "a partition's consumer ended with an error; the ordered consumer drains and ends");
                        report.error = Some(e);
                        lp.drain(Instant::now() + lp.sub.drain_timeout);
                    }
                    Some(e) => {
                        report.error.get_or_insert(e);
                    }
                    None => {}
                }
                if lp.deadline.is_none() {
                    lp.apply();
                }
            }
            changed = stop.changed(), if lp.deadline.is_none() => {
                let deadline = match changed {
                    Ok(()) => (*stop.borrow()).unwrap_or_else(Instant::now),
                    Err(_) => Instant::now(),
                };
                lp.drain(deadline);
            }
        }
    }
    lp.leave().await;
    if report.error.is_none() && report.panic.is_none() {
        sub.board.set_state(SubscriptionState::Stopped);
    }
    tracing::info!(stream = %sub.names.name, consumer = %sub.consumer, "ordered consumer stopped");
    report
}

struct Manager {
    sub: Arc<Subscription>,
    redis: Addr<RedisActor>,
    /// How the partitions' loops are started and stopped, and their ends
    /// learnt.
    link: Parts,
    /// The partitions whose loops run (or were asked to start).
    parts: BTreeMap<u16, Part>,
    /// The partitions the last share-out gave this consumer.
    desired: BTreeSet<u16>,
    /// Set once draining.
    deadline: Option<Instant>,
}

impl Manager {
    fn ordered(&self) -> &Ordered {
        self.sub
            .ordered()
            .expect("an ordered stream's subscription")
    }

    /// Puts this consumer in the group's members with a new expiry and
    /// answers the live members.
    fn renew_membership(&self) -> LocalBoxFuture<'static, Result<Vec<String>, Error>> {
        let ord = self.ordered();
        let req = self.redis.send(Eval {
            script: &MEMBERS,
            keys: vec![ord.members_key.as_bytes().to_vec()],
            args: vec![
                self.sub.consumer.as_bytes().to_vec(),
                (ord.ttl.as_millis() as u64).to_string().into_bytes(),
            ],
        });
        async move {
            let answer = req.await.unwrap_or(Err(Error::ShutDown))?;
            redis::from_redis_value(answer)
                .map_err(|e| Error::unparsable("membership script reply", e.to_string()))
        }
        .boxed_local()
    }

    /// Starts the partitions given to this consumer that it does not read
    /// yet, and hands on those it reads that are no longer its own (their
    /// loops drain: running handlers finish, unstarted entries go back,
    /// then the lease is dropped for the next owner).
    ///
    /// Nothing starts or moves once the consumer drains: a share-out
    /// answered after the stop began (a membership renewal on its way then)
    /// would otherwise start partitions no stop reaches.
    fn apply(&mut self) {
        if self.deadline.is_some() {
            return;
        }
        let handover = Instant::now() + self.sub.drain_timeout;
        for (index, part) in &mut self.parts {
            if !part.stopping && !self.desired.contains(index) {
                part.stopping = true;
                tracing::info!(stream = %self.sub.names.name, partition = *index, "handing this partition on to another consumer of the group");
                self.link.stop(*index, handover);
            }
        }
        let new: Vec<u16> = self
            .desired
            .iter()
            .copied()
            .filter(|i| !self.parts.contains_key(i))
            .collect();
        for index in new {
            self.link.start(index);
            self.parts.insert(index, Part { stopping: false });
        }
    }

    /// Drains every partition by `deadline`.
    fn drain(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
        for (index, part) in &mut self.parts {
            part.stopping = true;
            self.link.stop(*index, deadline);
        }
    }

    /// Leaves the group's members, so the others share out the partitions
    /// at their next renewal rather than after the TTL. Best effort.
    async fn leave(&self) {
        let mut cmd = redis::cmd("ZREM");
        cmd.arg(&*self.ordered().members_key)
            .arg(&*self.sub.consumer);
        if let Ok(Err(e)) = self.redis.send(Query("zrem", cmd)).await {
            tracing::debug!(stream = %self.sub.names.name, error = %e, "could not leave the ordered stream's members; the entry lapses after its TTL");
        }
    }
}

#[cfg(test)]
mod tests;
