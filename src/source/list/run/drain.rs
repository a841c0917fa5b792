//! The list consumer's drain, on the consumer loop: what a pop brings
//! after the stop goes back unrun, handlers left at the deadline are
//! dropped, and the consumer leaves the list.

use std::time::{Duration, Instant};

use redis::Value;

use super::{Loop, Phase, ReadDone};
use crate::delivery::{ConsumerReport, until_done};
use crate::error::Error;
use crate::redis::Eval;
use crate::source::list::scripts::PUT_BACK;
use crate::status::SubscriptionState;

impl Loop {
    /// The drain deadline passed: running handlers are dropped (their
    /// items stay on the processing list, which the leave puts back).
    pub(super) fn abandon_running(&mut self) {
        if self.running.is_empty() && self.side.is_empty() {
            return;
        }
        self.phase = Phase::TimedOut;
        let (handlers, settling) = (self.running.len(), self.side.len());
        if self.reliable() {
            tracing::warn!(list = %self.sub.keys.list, handlers, settling,
                "drain deadline passed with list handlers still running or items not yet settled in Redis; their items go back onto the list");
        } else {
            tracing::warn!(list = %self.sub.keys.list, handlers, settling,
                "drain deadline passed with list handlers still running or items not yet settled in Redis; their items are lost (at most once)");
        }
    }

    /// After the drain: moves whatever this consumer still holds back onto
    /// the list, unregisters it, and closes its connection with `QUIT`.
    pub(super) async fn leave(mut self) -> ConsumerReport {
        if self.reliable() {
            // Whatever is left (abandoned handlers, waiting retries) goes
            // back onto the list now; should this fail, the heartbeat lapses
            // and a survivor moves it.
            let leave = self.return_own("leave");
            let limit = Instant::now() + Duration::from_secs(1);
            let left = tokio::time::timeout(
                Duration::from_secs(1),
                until_done(&self.redis, leave, Some(limit)),
            )
            .await
            .unwrap_or_else(|_| {
                Err(Error::Unavailable {
                    down_for: Duration::from_secs(1),
                    last_error: "no answer within 1 s".into(),
                })
            });
            match left {
                Ok(Value::Int(n @ 1..)) => {
                    tracing::info!(list = %self.sub.keys.list, items = n, "moved unfinished items back onto the list");
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(list = %self.sub.keys.list, error = %e, "could not leave the list cleanly; other consumers recover its processing list once the heartbeat lapses");
                }
            }
        }
        self.reader.quit().await;
        self.sub.board.set_state(SubscriptionState::Stopped);
        ConsumerReport {
            error: self.fatal.take(),
            panic: None,
            timed_out: self.phase == Phase::TimedOut,
            lease_lost: false,
        }
    }

    /// A pop that ended after the drain began: its items go back, unrun.
    pub(super) fn put_back_read(&mut self, (conn, r, _): ReadDone) {
        self.reader.give_back(conn);
        // The oldest last: it goes to the end of the list popped first.
        for (item, counted) in r.unwrap_or_default().into_iter().rev() {
            self.put_back(item, counted.is_some());
        }
    }

    /// An item popped after the stop, or one that waited for a batch: back
    /// where it came from, unrun.
    pub(super) fn put_back(&mut self, item: Vec<u8>, counted: bool) {
        let k = &self.sub.keys;
        if self.reliable() {
            let eval = Eval {
                script: &PUT_BACK,
                keys: vec![
                    k.processing.clone().into(),
                    k.list.as_bytes().to_vec(),
                    k.attempts.clone().into(),
                ],
                args: vec![
                    item,
                    if counted {
                        b"1".to_vec()
                    } else {
                        b"0".to_vec()
                    },
                ],
            };
            self.settle(
                eval,
                "putting back an item popped after the stop",
                Vec::new(),
            );
        } else {
            let mut cmd = redis::cmd("RPUSH");
            cmd.arg(&*k.list).arg(item);
            self.settle(
                crate::redis::Query("rpush", cmd),
                "putting back an item popped after the stop",
                Vec::new(),
            );
        }
    }
}
