//! Dead-letter moves in flight: one script each (it checks the entry is
//! still this consumer's, `XADD`s the copy to the dead-letter stream and
//! `XACK`s it), sent until Redis accepts it (`delivery::until_accepted`),
//! so nothing is copied twice. Its state is its own: the loop sends a move and gets back
//! how it ended; the entry stays held until then.

use std::sync::Arc;

use actix::Addr;
use futures::future::{LocalBoxFuture, pending};
use futures::stream::{FuturesUnordered, StreamExt};

use crate::delivery::until_accepted;
use crate::error::Error;
use crate::redis::{DeadLetter, DeadLetterEntry, MoveAnswer, RedisActor};
use crate::status::Board;
use crate::telemetry::ConsumerMetrics;

/// A dead-letter move that came back: the entry and what Redis said.
type Done = (Arc<DeadLetterEntry>, Result<MoveAnswer, Error>);

/// How a move ended.
pub(super) enum MoveEnd {
    /// The copy is in the dead-letter stream and the entry acked.
    Copied,
    /// A move because of its key's `fail_rest` mark found the mark gone:
    /// nothing moved, the entry is to run instead.
    Unmarked,
    /// Nothing moved and nothing will: the entry was no longer this
    /// consumer's, or the broker shut down (it stays pending).
    Dropped,
}

pub(super) struct DeadLetters {
    redis: Addr<RedisActor>,
    metrics: ConsumerMetrics,
    board: Arc<Board>,
    in_flight: FuturesUnordered<LocalBoxFuture<'static, Done>>,
}

impl DeadLetters {
    pub(super) fn new(
        redis: Addr<RedisActor>,
        metrics: ConsumerMetrics,
        board: Arc<Board>,
    ) -> Self {
        DeadLetters {
            redis,
            metrics,
            board,
            in_flight: FuturesUnordered::new(),
        }
    }

    /// Moves in flight.
    pub(super) fn len(&self) -> usize {
        self.in_flight.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.in_flight.is_empty()
    }

    /// Sends the move of `entry`, until Redis accepts it.
    pub(super) fn send(&mut self, entry: Arc<DeadLetterEntry>) {
        let redis = self.redis.clone();
        self.in_flight.push(Box::pin(async move {
            let move_it = DeadLetter(entry.clone());
            let e = &entry;
            let about = || format!("stream {}, id {}, dlq {}", e.stream, e.id, e.dlq);
            let res = until_accepted(&redis, move_it, "dead-letter move", about).await;
            (entry, res.map(|(answer, _)| answer))
        }));
    }

    /// The next move that ended, counted and logged (pending while none is
    /// in flight). Cancel-safe.
    pub(super) async fn ended(&mut self) -> (Arc<DeadLetterEntry>, MoveEnd) {
        let Some((entry, res)) = self.in_flight.next().await else {
            return pending().await;
        };
        let moved = self.answered(&entry, res);
        (entry, moved)
    }

    fn answered(
        &mut self,
        entry: &Arc<DeadLetterEntry>,
        res: Result<MoveAnswer, Error>,
    ) -> MoveEnd {
        match res {
            Ok(MoveAnswer::Moved(moved)) => {
                self.metrics.dead_lettered.increment(1);
                self.board.dead_lettered();
                if moved.trimmed > 0 {
                    self.metrics.dead_letters_trimmed.increment(moved.trimmed);
                    tracing::warn!(
                        stream = %entry.stream, dlq = %entry.dlq, dlq_id = %moved.id, removed = moved.trimmed,
                        cap = entry.dlq_max_len.unwrap_or(0),
                        "the dead-letter stream is at its cap: its oldest dead letters were removed"
                    )
                } else if let Some(bytes) = moved.entry_bytes {
                    tracing::warn!(stream = %entry.stream, id = %entry.id, dlq_id = %moved.id, entry_bytes = bytes, "dead-lettered by id, copied on the server")
                } else {
                    tracing::debug!(stream = %entry.stream, id = %entry.id, dlq_id = %moved.id, "dead-lettered")
                }
                MoveEnd::Copied
            }
            Ok(MoveAnswer::Unmarked) => MoveEnd::Unmarked,
            Ok(MoveAnswer::NotPending) => {
                tracing::warn!(
                    stream = %entry.stream, id = %entry.id,
                    "entry was no longer pending for this consumer; not dead-lettered here"
                );
                MoveEnd::Dropped
            }
            Err(e) => {
                tracing::error!(
                    stream = %entry.stream, id = %entry.id, error = %e,
                    "dead-letter move abandoned (the broker shut down, or the group is gone); the entry stays pending, or went with its group"
                );
                MoveEnd::Dropped
            }
        }
    }
}
