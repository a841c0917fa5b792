//! `StatusPoller`: reads each subscription's server-side figures every
//! `status_period` (`XINFO GROUPS`, `XPENDING` summary, `XLEN` of the
//! dead-letter stream) into its [`Board`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use actix::prelude::*;
use redis::Value;

use super::{Board, Boards, ServerFigures};
use crate::error::Error;
use crate::kind::SourceKind;
use crate::redis::{Query, RedisActor};
use crate::stream::EntryId;

pub(crate) struct StatusPoller {
    boards: Boards,
    redis: Addr<RedisActor>,
    period: Duration,
    busy: Arc<AtomicBool>,
}

impl StatusPoller {
    pub(crate) fn new(boards: Boards, redis: Addr<RedisActor>, period: Duration) -> Self {
        StatusPoller {
            boards,
            redis,
            period,
            busy: Arc::default(),
        }
    }

    /// How long an answer from Redis keeps the broker ready: two periods.
    fn valid_for(&self) -> Duration {
        self.period * 2
    }

    fn poll(&self) {
        if self.busy.swap(true, Ordering::SeqCst) {
            return;
        }
        let (all, redis, busy) = (self.boards.clone(), self.redis.clone(), self.busy.clone());
        let valid_for = self.valid_for();
        actix_rt::spawn(async move {
            // Liveness first: a stalled or paused server answers nothing,
            // and readiness turns false once the last answer is too old.
            match query(&redis, "ping", redis::cmd("PING")).await {
                Ok(_) => all.contact(valid_for),
                Err(Error::ShutDown) => {
                    busy.store(false, Ordering::SeqCst);
                    return;
                }
                Err(e) => tracing::debug!(error = %e, "status PING failed"),
            }
            let boards = all.list();
            for b in boards.iter().filter(|b| b.kind != SourceKind::Channel) {
                let polled = if b.parts().is_empty() {
                    figures(&redis, b).await
                } else {
                    ordered_figures(&redis, b).await
                };
                match polled {
                    Ok(f) => {
                        crate::telemetry::polled(
                            &b.stream,
                            &b.group,
                            &b.dlq,
                            crate::telemetry::Polled {
                                lag: f.lag,
                                pending: f.pending,
                                oldest_pending_age: f.oldest_pending_age,
                                dead_letters: f.dead_letters,
                            },
                        );
                        b.set_server(f);
                    }
                    Err(Error::ShutDown) => break,
                    Err(e) => {
                        tracing::debug!(stream = %b.stream, error = %e, "status poll failed; trying again next period")
                    }
                }
            }
            busy.store(false, Ordering::SeqCst);
        });
    }
}

async fn query(
    redis: &Addr<RedisActor>,
    name: &'static str,
    cmd: redis::Cmd,
) -> Result<Value, Error> {
    redis
        .send(Query(name, cmd))
        .await
        .unwrap_or(Err(Error::ShutDown))
}

use super::int;

async fn figures(redis: &Addr<RedisActor>, b: &Board) -> Result<ServerFigures, Error> {
    match b.kind {
        SourceKind::Stream => {}
        SourceKind::List | SourceKind::ListAtMostOnce => return list_figures(redis, b).await,
        // Nothing on the server to poll: Pub/Sub keeps nothing.
        SourceKind::Channel => unreachable!("channels are not polled"),
    }
    let mut groups = redis::cmd("XINFO");
    groups.arg("GROUPS").arg(&*b.stream);
    let groups = query(redis, "xinfo|groups", groups).await?;
    let groups = crate::redis::info::groups(groups)
        .map_err(|m| Error::unparsable("XINFO GROUPS reply", m))?;
    let (lag, pending) = groups
        .iter()
        .find(|g| g.name == *b.group)
        .map_or((None, 0), |g| (g.lag, g.pending));
    let oldest_pending_age = if pending > 0 {
        let mut summary = redis::cmd("XPENDING");
        summary.arg(&*b.stream).arg(&*b.group);
        match query(redis, "xpending", summary).await? {
            Value::Array(s) => match s.get(1) {
                Some(Value::BulkString(id)) => {
                    EntryId(String::from_utf8_lossy(id).into_owned()).age()
                }
                _ => None,
            },
            _ => None,
        }
    } else {
        None
    };
    let mut len = redis::cmd("XLEN");
    len.arg(&*b.dlq);
    let dead_letters = int(&query(redis, "xlen", len).await?).unwrap_or(0);
    Ok(ServerFigures {
        polled_at: SystemTime::now(),
        lag,
        pending,
        oldest_pending_age,
        dead_letters,
    })
}

/// An ordered stream's figures: each partition's, polled and set on its
/// board and in its metrics, and their sums (the oldest pending age: the
/// oldest of any; lag unknown when one partition's is).
async fn ordered_figures(redis: &Addr<RedisActor>, b: &Board) -> Result<ServerFigures, Error> {
    let mut sum = ServerFigures {
        polled_at: SystemTime::now(),
        lag: Some(0),
        pending: 0,
        oldest_pending_age: None,
        dead_letters: 0,
    };
    for p in b.parts() {
        let f = match figures(redis, p).await {
            Ok(f) => f,
            // A partition nobody published to yet has no stream.
            Err(e) if e.class() == crate::error::Class::Fatal => continue,
            Err(e) => return Err(e),
        };
        crate::telemetry::polled(
            &p.stream,
            &p.group,
            &p.dlq,
            crate::telemetry::Polled {
                lag: f.lag,
                pending: f.pending,
                oldest_pending_age: f.oldest_pending_age,
                dead_letters: f.dead_letters,
            },
        );
        sum.lag = sum.lag.zip(f.lag).map(|(a, b)| a + b);
        sum.pending += f.pending;
        sum.dead_letters += f.dead_letters;
        sum.oldest_pending_age = sum.oldest_pending_age.max(f.oldest_pending_age);
        p.set_server(f);
    }
    Ok(sum)
}

/// A list's figures: lag is its length (`LLEN`), pending the length of
/// this consumer's processing list, dead letters the dead-letter list's.
async fn list_figures(redis: &Addr<RedisActor>, b: &Board) -> Result<ServerFigures, Error> {
    let len = |key: &str| {
        let mut cmd = redis::cmd("LLEN");
        cmd.arg(key);
        query(redis, "llen", cmd)
    };
    let lag = int(&len(&b.stream).await?);
    let pending = if b.kind == SourceKind::List {
        let keys = crate::keys::ListKeys::new(b.stream.clone(), b.dlq.clone(), &b.consumer);
        int(&len(&keys.processing).await?).unwrap_or(0)
    } else {
        0
    };
    let dead_letters = int(&len(&b.dlq).await?).unwrap_or(0);
    Ok(ServerFigures {
        polled_at: SystemTime::now(),
        lag,
        pending,
        oldest_pending_age: None,
        dead_letters,
    })
}

impl Actor for StatusPoller {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // The broker's start has just talked to Redis.
        self.boards.contact(self.valid_for());
        self.poll();
        ctx.run_interval(self.period, |act, _| act.poll());
    }
}

/// Stops a [`StatusPoller`].
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Stop;

impl Handler<Stop> for StatusPoller {
    type Result = ();

    fn handle(&mut self, _: Stop, ctx: &mut Self::Context) {
        ctx.stop();
    }
}
