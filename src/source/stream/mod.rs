//! A stream subscription and its consumer loop, which the delivery core's
//! `ConsumerActor` runs (one per subscription). The loop reads on a
//! connection of its own (the delivery core's `Reader`: a blocking
//! `XREADGROUP` never waits on a shared connection) and at once
//!
//! * reads: first its own pending entries (`XPENDING … <consumer>`, then
//!   `XCLAIM <self> … RETRYCOUNT`), so a restarted worker resumes its work and
//!   a reconnected one runs what a lost reply or a failover left in its PEL;
//!   then new ones with `>`, fetching no
//!   faster than handlers start them (free slots plus what handlers get
//!   through in one round trip or 2 ms, whichever is longer, at most
//!   `count`);
//! * asks its `ReclaimerActor` for idle entries of the group (retries, crashed
//!   consumers' entries), one at a time, once the own pending entries are done;
//! * runs up to `concurrency` handlers, catching their panics; a redelivered
//!   entry runs alone;
//! * keeps every entry it holds fresh in the PEL (`XCLAIM … JUSTID` every
//!   `claim_idle / 3`), so nobody takes over an entry it is still handling;
//! * batches acks: entries that finish while an XACK is in flight go together
//!   in the next, sent on a shared connection beside the next read;
//! * moves undecodable, rejected and exhausted entries to the dead-letter
//!   stream (retrying the move until it is done), and
//! * drains on stop: a blocked read is interrupted with CLIENT UNBLOCK, fetched
//!   but unstarted entries are handed back to the group (XCLAIM … IDLE
//!   `claim_idle` so any consumer can take them at once), running handlers get
//!   until the drain deadline, then are abandoned (their entries stay pending).
//!
//! The loop never ends on a connection error or a lost group: it reconnects
//! and recreates the group (`XGROUP CREATE … 0 MKSTREAM`) with backoff from
//! 100 ms up to 10 s. It ends with an error only on a reply it cannot act on
//! (for example WRONGTYPE: the key is not a stream); then it stops reading at
//! once and drains.

pub(crate) mod hygiene;
mod options;
pub(crate) mod ordered;
pub(crate) mod priority;
mod run;

use crate::delivery::default_consumer_name;
pub use options::ConsumerOptions;

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use futures::future::LocalBoxFuture;
use tokio::sync::{oneshot, watch};

use crate::delivery::ConsumerReport;

use crate::handler::ErasedHandler;
use crate::reclaimer::ReclaimerActor;
use crate::redis::RedisActor;
use crate::stream::StreamNames;

/// One subscription as configured: what to read and what to run.
pub(crate) struct Subscription {
    pub names: StreamNames,
    pub consumer: Arc<str>,
    pub opts: ConsumerOptions,
    pub handler: StreamHandler,
    /// How long handlers may finish when the consumer drains on its own (an
    /// unrecoverable error): the broker's `shutdown_timeout`.
    pub drain_timeout: std::time::Duration,
    /// Its live status, read by `Broker::status`.
    pub board: Arc<crate::status::Board>,
    /// Its consumer name's lease (`None`: `without_lease`), or for a
    /// partition of an ordered stream the partition's lease.
    pub lease: Option<hygiene::Lease>,
    /// What it is: plain, batched, ordered, or a partition of an ordered
    /// stream.
    pub shape: Shape,
    /// Its place among the streams of a prioritized subscription.
    pub priority: Option<priority::Level>,
}

/// What runs a stream's entries: a handler per entry, or a batch handler
/// the consumer loop runs natively (a plain stream's, a partition's).
#[derive(Clone)]
pub(crate) enum StreamHandler {
    Each(ErasedHandler),
    Batch(crate::handler::BatchHandler),
}

impl From<ErasedHandler> for StreamHandler {
    fn from(h: ErasedHandler) -> Self {
        StreamHandler::Each(h)
    }
}

impl From<crate::handler::BatchHandler> for StreamHandler {
    fn from(h: crate::handler::BatchHandler) -> Self {
        StreamHandler::Batch(h)
    }
}

/// The shapes a stream subscription can have: one of them, so no
/// combination that cannot exist can be built. Each runs either kind of
/// [`StreamHandler`].
pub(crate) enum Shape {
    /// One stream read by one consumer loop.
    Plain,
    /// A stream ordered by key: its partitions, which the loop shares out
    /// among the group's consumers.
    Ordered(ordered::Ordered),
    /// One partition of an ordered stream: its key gate.
    Partition(ordered::KeyOrder),
}

impl Subscription {
    /// The batch handler its loop runs natively, if it has one.
    pub(crate) fn batch(&self) -> Option<&crate::handler::BatchHandler> {
        match &self.handler {
            StreamHandler::Batch(b) => Some(b),
            StreamHandler::Each(_) => None,
        }
    }

    /// An ordered stream's partitions.
    pub(crate) fn ordered(&self) -> Option<&ordered::Ordered> {
        match &self.shape {
            Shape::Ordered(o) => Some(o),
            _ => None,
        }
    }

    /// A partition's key gate.
    pub(crate) fn key_order(&self) -> Option<&ordered::KeyOrder> {
        match &self.shape {
            Shape::Partition(k) => Some(k),
            _ => None,
        }
    }
}

impl Subscription {
    /// Checks a stream subscription (its names, its options, under a
    /// cluster its dead-letter stream's slot) and builds it.
    pub(crate) fn build(
        mut names: StreamNames,
        opts: ConsumerOptions,
        handler: impl Into<StreamHandler>,
        cluster: bool,
        drain_timeout: std::time::Duration,
    ) -> Result<Self, crate::error::ConfigError> {
        names.validate()?;
        opts.validate(&names.name)?;
        if cluster {
            if names.dlq_default {
                names.dlq = crate::keys::dead_letter_name(&names.name, true).into();
            }
            if let Some(e) = crate::keys::dlq_slot_error(&names.name, &names.dlq) {
                return Err(e);
            }
        }
        let consumer: Arc<str> = match &opts.consumer {
            Some(c) => c.as_str().into(),
            None => default_consumer_name(&names.group).into(),
        };
        let order = names.order.clone();
        let (board, lease) = match &order {
            Some(order) => {
                let partitions = (0..order.partitions)
                    .map(|i| {
                        let p = crate::order::partition_name(&names.name, i);
                        let dlq = crate::keys::dead_letter_name(&p, cluster);
                        (p.into(), dlq.into())
                    })
                    .collect();
                let board = crate::status::Board::ordered(
                    names.name.clone(),
                    names.group.clone(),
                    consumer.clone(),
                    partitions,
                );
                // Each partition has a lease of its own instead.
                (board, None)
            }
            None => (
                Arc::new(crate::status::Board::new(
                    crate::kind::SourceKind::Stream,
                    names.name.clone(),
                    names.group.clone(),
                    consumer.clone(),
                    names.dlq.clone(),
                )),
                opts.lease_ttl
                    .map(|ttl| hygiene::Lease::new(&names.name, &names.group, &consumer, ttl)),
            ),
        };
        // An ordered stream's partitions share one set of slots: its
        // concurrency stays as built.
        board.scale().configure(opts.concurrency, order.is_none());
        let handler = handler.into();
        if let Some((min, max)) = opts.autoscale {
            if matches!(handler, StreamHandler::Batch(_)) {
                return Err(not_autoscaled(&names.name, "a batch subscription"));
            }
            if order.is_some() {
                return Err(not_autoscaled(&names.name, "a stream ordered by key"));
            }
            board.scale().autoscale(min, max);
        }
        if let Some(limit) = opts.rate_limit {
            board.scale().limit_rate(limit);
        }
        if order.is_some() && opts.rate_limit.is_some() {
            return Err(crate::error::ConfigError::Invalid {
                kind: Some(crate::kind::SourceKind::Stream),
                key: names.name.to_string(),
                option: "rate_limit",
                reason: "not for a stream ordered by key".into(),
            });
        }
        for part in board.parts() {
            part.scale().configure(opts.concurrency, false);
        }
        let mut sub = Subscription {
            lease,
            shape: Shape::Plain,
            names,
            consumer,
            opts,
            handler,
            drain_timeout,
            board,
            priority: None,
        };
        if let Some(order) = order {
            sub.shape = Shape::Ordered(ordered::Ordered::build(order, &sub, cluster)?);
        }
        Ok(sub)
    }
}

/// The error `build()` returns for autoscaling where the concurrency
/// cannot change (`what`: a batch subscription, an ordered stream).
pub(crate) fn not_autoscaled(stream: &str, what: &str) -> crate::error::ConfigError {
    crate::error::ConfigError::Invalid {
        kind: Some(crate::kind::SourceKind::Stream),
        key: stream.to_owned(),
        option: "autoscale",
        reason: format!("not for {what}: its concurrency stays as built (use with_concurrency)"),
    }
}

impl Subscription {
    /// The streams this subscription reads: its partitions for an ordered
    /// stream, else itself.
    pub(crate) fn readers(self: &Arc<Self>) -> Vec<Arc<Subscription>> {
        match self.ordered() {
            Some(o) => o.parts.clone(),
            None => vec![self.clone()],
        }
    }
}

/// A stream consumer's loop (a plain stream's, a partition's), for
/// [`ConsumerActor::new`].
pub(crate) fn stream_loop(
    sub: Arc<Subscription>,
    connector: crate::connection::Connector,
    redis: Addr<RedisActor>,
    reclaimer: Addr<ReclaimerActor>,
    stop: watch::Receiver<Option<Instant>>,
    ready: Option<oneshot::Sender<()>>,
) -> LocalBoxFuture<'static, ConsumerReport> {
    Box::pin(run::consume(sub, connector, redis, reclaimer, stop, ready))
}

/// An ordered stream's loop (membership and share-out), for
/// [`ConsumerActor::new`]: its partitions' loops are asked of the
/// supervisor through `parts`, each run by [`stream_loop`] with the
/// partition's subscription (`Ordered::parts`).
pub(crate) fn ordered_loop(
    sub: Arc<Subscription>,
    redis: Addr<RedisActor>,
    parts: crate::delivery::parts::Parts,
    stop: watch::Receiver<Option<Instant>>,
    ready: Option<oneshot::Sender<()>>,
) -> LocalBoxFuture<'static, ConsumerReport> {
    Box::pin(ordered::consume(sub, redis, parts, stop, ready))
}
