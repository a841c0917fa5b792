//! The list consumer's drain: stop popping, put back what came after the
//! stop, let running handlers finish until the deadline, leave the list.

use std::time::{Duration, Instant};

use futures::StreamExt;
use redis::Value;

use super::Loop;
use crate::delivery::drain::Draining;
use crate::delivery::reader::UNBLOCK_EVERY;
use crate::delivery::{ConsumerReport, until_done};
use crate::error::Error;
use crate::redis::Eval;
use crate::source::list::scripts::PUT_BACK;
use crate::status::SubscriptionState;
use crate::util::Alarm;

impl Loop {
    /// Stops popping (a blocked pop is cut short with `CLIENT UNBLOCK`,
    /// sent again every 50 ms while it lasts), puts an item popped after the
    /// stop back onto the list, gives running handlers until `deadline`,
    /// then moves whatever this consumer still holds back onto the list,
    /// unregisters it, and closes its connection with `QUIT`.
    pub(super) async fn drain(mut self, deadline: Instant) -> ConsumerReport {
        let mut drain = Draining::new("list", self.sub.keys.list.clone(), deadline);
        let until = drain.until();
        self.waiting.take_all();
        let mut unblock = tokio::time::interval(UNBLOCK_EVERY);
        // A drain can outlast the heartbeat's TTL: keep beating, so nobody
        // takes what runs here for a dead consumer's.
        let mut beat_alarm = Alarm::new();
        let reliable = self.reliable();
        let mut timed_out = false;
        loop {
            if self.read.is_none() && self.running.is_empty() && self.side.is_empty() {
                break;
            }
            tokio::select! {
                biased;
                Some(done) = self.running.next(), if !self.running.is_empty() => self.finished(done),
                () = beat_alarm.until(self.liveness.due()), if reliable && self.liveness.due().is_some() => self.heartbeat(),
                b = async { self.beat.as_mut().expect("beat").await }, if self.beat.is_some() => {
                    self.beat = None;
                    self.on_beat(b);
                }
                Some(()) = self.side.next(), if !self.side.is_empty() => {}
                r = async { self.read.as_mut().expect("read").await }, if self.read.is_some() => {
                    self.read = None;
                    let (conn, r, _) = r;
                    self.reader.give_back(conn);
                    for (item, counted) in r.unwrap_or_default() {
                        self.put_back(item, counted.is_some());
                    }
                }
                _ = unblock.tick(), if self.read.is_some() => {
                    if let Some(sent) = self.reader.unblock(&self.redis) {
                        self.side.push(sent);
                    }
                }
                () = tokio::time::sleep_until(drain.progress_due()) => drain.tell(self.running.len()),
                () = tokio::time::sleep_until(until) => {
                    timed_out = !self.running.is_empty() || !self.side.is_empty();
                    break;
                }
            }
        }
        if timed_out && self.reliable() {
            tracing::warn!(list = %self.sub.keys.list, handlers = self.running.len(),
                "drain deadline passed with list handlers still running; their items go back onto the list");
        } else if timed_out {
            tracing::warn!(list = %self.sub.keys.list, handlers = self.running.len(),
                "drain deadline passed with list handlers still running; their items are lost (at most once)");
        }
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
            timed_out,
            lease_lost: false,
        }
    }

    /// An item popped after the stop: back where it came from, unrun.
    fn put_back(&mut self, item: Vec<u8>, counted: bool) {
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
            self.settle(eval, "putting back an item popped after the stop", None);
        } else {
            let mut cmd = redis::cmd("RPUSH");
            cmd.arg(&*k.list).arg(item);
            self.settle(
                crate::redis::Query("rpush", cmd),
                "putting back an item popped after the stop",
                None,
            );
        }
    }
}
