//! The XACK batch: ids of entries whose handler succeeded, sent as one
//! `XACK` on a shared connection (`XACKDEL … ACKED` for a stream kept with
//! `retain_acked` on a server that has it), retried with backoff until
//! Redis accepts it. Its state is its own: the loop pushes ids, says at each turn whether
//! the batch must go now, and gets back the ids Redis settled.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use futures::future::LocalBoxFuture;

use super::{Ewma, FETCH_WINDOW, maybe};
use crate::error::{Class, Error};
use crate::redis::commands::Detected;
use crate::redis::{Ack, AckError, RedisActor};
use crate::stream::EntryId;
use crate::util::{Retry, log_wait};

/// An XACK batch that came back: its ids and what Redis said, and how long
/// it took.
type AckDone = (Result<Vec<EntryId>, AckError>, Duration);

pub(super) struct Acks {
    stream: Arc<str>,
    group: Arc<str>,
    redis: Addr<RedisActor>,
    /// For a stream kept with `retain_acked`: what its server has, so acks
    /// delete what every group has acked where `XACKDEL` exists.
    delete: Option<Detected>,
    /// The ack round trip histogram of the subscription's series.
    round_trip_metric: metrics::Histogram,
    /// Ids to XACK with the next batch.
    waiting: Vec<EntryId>,
    /// Since when the oldest id in `waiting` waits (a deferred batch goes
    /// out after [`FETCH_WINDOW`] at the latest).
    since: Option<tokio::time::Instant>,
    /// The batch on the wire and how many ids it carries.
    on_wire: Option<LocalBoxFuture<'static, AckDone>>,
    on_wire_ids: usize,
    /// Failed XACKs in a row, with their backoff.
    retry: Retry,
    /// How long a round trip to Redis takes (an XACK never blocks), on
    /// average.
    round_trip: Ewma,
}

impl Acks {
    pub(super) fn new(
        stream: Arc<str>,
        group: Arc<str>,
        redis: Addr<RedisActor>,
        delete: Option<Detected>,
        round_trip_metric: metrics::Histogram,
    ) -> Self {
        Acks {
            stream,
            group,
            redis,
            delete,
            round_trip_metric,
            waiting: Vec::new(),
            since: None,
            on_wire: None,
            on_wire_ids: 0,
            retry: Retry::default(),
            round_trip: Ewma::default(),
        }
    }

    /// An entry to ack with the next batch.
    pub(super) fn push(&mut self, id: EntryId) {
        self.waiting.push(id);
    }

    /// Whether nothing waits and nothing is on the wire.
    pub(super) fn is_settled(&self) -> bool {
        self.waiting.is_empty() && self.on_wire.is_none()
    }

    /// Ids not yet accepted by Redis: waiting and on the wire.
    pub(super) fn outstanding(&self) -> usize {
        self.waiting.len() + self.on_wire.as_ref().map_or(0, |_| self.on_wire_ids)
    }

    /// The average XACK round trip, once one was measured.
    pub(super) fn round_trip(&self) -> Option<Duration> {
        self.round_trip.get()
    }

    /// The batch at a turn of the loop: sent now when nothing is on the
    /// wire and `now` says so (nothing is queued behind it, keys wait for
    /// it, a drain), when it reached `count`, or when its oldest id has
    /// waited [`FETCH_WINDOW`]. Otherwise it waits, so the acks of fast
    /// handlers finishing within one window share one XACK. Answers when
    /// the waiting batch is due, for the loop's timer.
    pub(super) fn turn(&mut self, now: bool, count: usize) -> Option<tokio::time::Instant> {
        if self.waiting.is_empty() {
            self.since = None;
        } else if self.since.is_none() {
            self.since = Some(tokio::time::Instant::now());
        }
        let due = self.since.map(|t| t + FETCH_WINDOW);
        if self.on_wire.is_none()
            && !self.waiting.is_empty()
            && (now
                || self.waiting.len() >= count
                || due.is_some_and(|due| due <= tokio::time::Instant::now()))
        {
            self.since = None;
            self.send(None);
        }
        due.filter(|_| self.on_wire.is_none() && !self.waiting.is_empty())
    }

    fn send(&mut self, delay: Option<Duration>) {
        let ids = std::mem::take(&mut self.waiting);
        self.on_wire_ids = ids.len();
        let redis = self.redis.clone();
        let (stream, group) = (self.stream.clone(), self.group.clone());
        let delete = self.delete.clone();
        self.on_wire = Some(Box::pin(async move {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            let t0 = Instant::now();
            let res = match redis
                .send(Ack {
                    stream,
                    group,
                    ids,
                    delete,
                })
                .await
            {
                Ok(r) => r,
                // The actor is gone: the ids went with the message.
                Err(_) => Err(AckError {
                    error: Error::ShutDown,
                    ids: Vec::new(),
                }),
            };
            (res, t0.elapsed())
        }));
    }

    /// The ids of the batch on the wire, once Redis answered for them
    /// (pending while nothing is on the wire). Cancel-safe.
    ///
    /// Entries stay held (kept fresh) until their XACK is done, so nobody
    /// claims an entry that ran successfully while its ack is on its way.
    /// A failed XACK is retried with capped backoff for as long as it takes
    /// (a failover, `READONLY`, a revoked ACL…): its ids come back only
    /// then. Only a shut-down broker or a lost group ends the retries (the
    /// entries stay pending, or are gone with their group, and are
    /// redelivered).
    pub(super) async fn settled(&mut self) -> Vec<EntryId> {
        let (res, took) = maybe(&mut self.on_wire).await;
        self.on_wire = None;
        match res {
            Ok(ids) => {
                self.round_trip.add(took);
                self.round_trip_metric.record(took.as_secs_f64());
                let failures = self.retry.succeeded();
                if failures > 0 {
                    tracing::info!(stream = %self.stream, failures, "XACK accepted again");
                }
                ids
            }
            Err(AckError { error, ids })
                if matches!(error, Error::ShutDown) || error.class() == Class::GroupGone =>
            {
                tracing::warn!(entries = ids.len(), error = %error, "XACK failed; the entries stay pending");
                ids
            }
            Err(AckError { error, ids }) => {
                let (delay, log) = self.retry.failed();
                if log {
                    let (stream, entries, retry_in_ms) =
                        (&self.stream, ids.len(), delay.as_millis() as u64);
                    let failures = self.retry.failures();
                    log_wait!(
                        error.class(),
                        %stream, entries, error = %error, failures, retry_in_ms,
                        "XACK failed; the entries stay held and the ack is retried"
                    );
                }
                self.waiting.extend(ids);
                self.send(Some(delay));
                Vec::new()
            }
        }
    }
}
