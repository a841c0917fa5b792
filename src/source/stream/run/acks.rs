//! The XACK batch: ids of entries whose handler succeeded, sent as one
//! `XACK` on a shared connection (`XACKDEL … ACKED` for a stream kept with
//! `retain_acked` on a server that has it), sent until Redis accepts it
//! (`delivery::until_accepted`). Its state is its own: the loop pushes ids, says at each turn whether
//! the batch must go now, and gets back the ids Redis settled.

use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use futures::future::LocalBoxFuture;

use super::{Ewma, FETCH_WINDOW, maybe};
use crate::delivery::until_accepted;
use crate::error::Error;
use crate::redis::commands::Detected;
use crate::redis::{Ack, RedisActor};
use crate::stream::EntryId;

/// An XACK batch that came back: its ids, and how long the accepted
/// attempt took (or why it was not sent again).
type AckDone = (Arc<[EntryId]>, Result<Duration, Error>);

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
            self.send();
        }
        due.filter(|_| self.on_wire.is_none() && !self.waiting.is_empty())
    }

    fn send(&mut self) {
        let ids: Arc<[EntryId]> = std::mem::take(&mut self.waiting).into();
        self.on_wire_ids = ids.len();
        let (redis, stream) = (self.redis.clone(), self.stream.clone());
        let ack = Ack {
            stream: self.stream.clone(),
            group: self.group.clone(),
            ids: ids.clone(),
            delete: self.delete.clone(),
        };
        self.on_wire = Some(Box::pin(async move {
            let about = || format!("stream {stream}, {} entries", ids.len());
            let sent = until_accepted(&redis, ack, "XACK", about).await;
            (ids, sent.map(|((), took)| took))
        }));
    }

    /// The ids of the batch on the wire, once Redis accepted them (pending
    /// while nothing is on the wire). Cancel-safe.
    ///
    /// Entries stay held (kept fresh) until their XACK is done, so nobody
    /// claims an entry that ran successfully while its ack is on its way.
    /// A failed XACK is sent again with capped backoff for as long as it
    /// takes (a failover, `READONLY`, a revoked ACL…; see
    /// [`until_accepted`]): its ids come back only then. Only a shut-down
    /// broker or a lost group ends the retries (the entries stay pending,
    /// or are gone with their group, and are redelivered).
    pub(super) async fn settled(&mut self) -> Arc<[EntryId]> {
        let (ids, res) = maybe(&mut self.on_wire).await;
        self.on_wire = None;
        match res {
            Ok(took) => {
                self.round_trip.add(took);
                self.round_trip_metric.record(took.as_secs_f64());
            }
            Err(error) => {
                tracing::warn!(stream = %self.stream, entries = ids.len(), %error, "XACK failed; the entries stay pending");
            }
        }
        ids
    }
}
