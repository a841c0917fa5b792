//! The list consumer's heartbeat: the consumer name's lease, renewed by
//! the liveness rule every source keeps, registering the consumer beside
//! the list; a confirmed beat also moves dead consumers' processing lists
//! back onto the list.

use std::time::Duration;

use actix::Addr;
use futures::future::LocalBoxFuture;
use redis::Value;

use super::Loop;
use crate::error::Error;
use crate::kind::SourceKind;
use crate::redis::{Eval, RedisActor};
use crate::source::list::scripts::{HEARTBEAT, RECOVER_DEAD};
use crate::util::{Alarm, log_wait};

impl Loop {
    /// `heartbeat_ttl` in ms, as a script argument.
    fn ttl_ms(&self) -> Vec<u8> {
        self.sub
            .opts
            .heartbeat_ttl
            .as_millis()
            .to_string()
            .into_bytes()
    }

    pub(super) fn beat_eval(&self) -> Eval {
        let k = &self.sub.keys;
        Eval {
            script: &HEARTBEAT,
            keys: vec![k.registry.clone().into(), k.heartbeat.clone().into()],
            args: vec![
                self.sub.consumer.as_bytes().to_vec(),
                self.ttl_ms(),
                self.token.clone().into_bytes(),
            ],
        }
    }

    pub(super) fn recover_eval(&self) -> Eval {
        let k = &self.sub.keys;
        Eval {
            script: &RECOVER_DEAD,
            keys: vec![k.list.as_bytes().to_vec(), k.registry.clone().into()],
            args: vec![
                k.own.clone().into(),
                self.sub.consumer.as_bytes().to_vec(),
                // A consumer whose record is missing gets one window of
                // this consumer's ttl to beat again before it counts as dead.
                self.ttl_ms(),
            ],
        }
    }

    /// Renews the heartbeat (the name's lease) and, when it is ours, moves
    /// dead consumers' processing lists back onto the list.
    pub(super) fn heartbeat(&mut self) {
        if self.beat.sent.is_some() {
            return;
        }
        let (beat, recover) = (self.beat_eval(), self.recover_eval());
        self.liveness.sending();
        // A consumer that saw the server stall lets the others renew first.
        let judge = self.liveness.may_judge_others();
        let (redis, list) = (self.redis.clone(), self.sub.keys.list.clone());
        self.beat.sent = Some(Box::pin(async move {
            let answer = match redis.send(beat).await {
                Ok(Ok(v)) => v,
                Ok(Err(e)) => return Beat::Failed(Some(e)),
                Err(_) => return Beat::Failed(None),
            };
            if answer != Value::Int(1) {
                let holder: String = redis::from_redis_value(answer).unwrap_or_default();
                return Beat::Taken(holder);
            }
            if judge {
                recover_dead(&redis, recover, &list).await;
            }
            Beat::Ok
        }));
    }

    pub(super) fn on_beat(&mut self, beat: Beat) {
        match beat {
            Beat::Ok => {
                if self.liveness.confirmed().after_failures > 0 {
                    tracing::info!(list = %self.sub.keys.list, consumer = %self.sub.consumer, "the heartbeat is confirmed again");
                }
                // Redis answers again: a pop waiting out a backoff the
                // outage built up starts now.
                if self.backoff.down {
                    self.backoff.at = None;
                }
            }
            Beat::Failed(e) => {
                let failed = self.liveness.failed();
                if let (Some(e), true) = (e, failed.log) {
                    log_wait!(e.class(), list = %self.sub.keys.list, consumer = %self.sub.consumer, error = %e, lapsed = failed.lapsed,
                        "heartbeat failed; trying again next beat (once it has lapsed, nothing starts until one is confirmed)");
                }
            }
            Beat::Taken(holder) => {
                self.liveness.failed();
                tracing::error!(list = %self.sub.keys.list, consumer = %self.sub.consumer, holder = %holder,
                    "another process holds this consumer name (its heartbeat lapsed here); the consumer stops popping and ends");
                self.fatal = Some(Error::ConsumerNameInUse {
                    kind: SourceKind::List,
                    key: self.sub.keys.list.to_string(),
                    group: String::new(),
                    consumer: self.sub.consumer.to_string(),
                    holder,
                    waited: Duration::ZERO,
                });
            }
        }
    }
}

/// The heartbeat's alarm (when the next beat is due) and the beat in
/// flight.
pub(super) struct Beating {
    pub(super) alarm: Alarm,
    pub(super) sent: Option<LocalBoxFuture<'static, Beat>>,
}

impl Default for Beating {
    fn default() -> Self {
        Beating {
            alarm: Alarm::new(),
            sent: None,
        }
    }
}

/// What a heartbeat found.
pub(super) enum Beat {
    Ok,
    /// Redis refused or did not answer (`None`: the broker shut down).
    Failed(Option<Error>),
    /// The heartbeat key holds another process's token.
    Taken(String),
}

pub(super) async fn recover_dead(redis: &Addr<RedisActor>, recover: Eval, list: &str) {
    match redis.send(recover).await {
        Ok(Ok(Value::Array(v))) => {
            if let [Value::Int(dead), Value::Int(moved), Value::Int(missing)] = v.as_slice() {
                if *dead > 0 {
                    tracing::warn!(list = %list, consumers = dead, items = moved,
                        "moved the processing lists of consumers whose heartbeat lapsed back onto the list");
                }
                if *missing > 0 {
                    tracing::warn!(list = %list, consumers = missing,
                        "registered consumers have no heartbeat record (evicted? check maxmemory-policy); each gets one heartbeat window to beat again before it counts as dead");
                }
            }
        }
        Ok(Err(e)) => {
            tracing::warn!(list = %list, error = %e, "recovering dead consumers failed; trying again next beat")
        }
        _ => {}
    }
}
