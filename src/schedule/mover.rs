//! `DueMover`: one per stream a broker consumes, in every process that
//! consumes it. The one holding the stream's mover lease
//! (`<slot>:rillkit:due-mover:<stream>`, [`LEASE_TTL`]) moves due entries every
//! [`POLL`], or sooner when the next is due sooner; the others ask every
//! [`WATCH`] whether the lease is free, so when its holder dies another takes
//! over within the lease's TTL. Taking, renewing and moving are one script
//! ([`MOVE_LUA`]), and the moves are exactly once whoever runs them: the
//! lease saves work, it guards nothing.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use actix::prelude::*;
use redis::Value;

use crate::redis::{Eval, RedisActor};
use crate::util::Retry;

/// How long the mover lease holds without a renewal (renewed when a third
/// of it has passed).
pub(crate) const LEASE_TTL: Duration = Duration::from_secs(5);

/// How often the lease's holder looks for due entries.
pub(crate) const POLL: Duration = Duration::from_millis(50);

/// How often a process without the lease asks for it (so a dead holder's
/// work is taken over within `LEASE_TTL + WATCH`, 7 s).
pub(crate) const WATCH: Duration = Duration::from_secs(2);

/// The most entries one script run moves (then it runs again at once).
const PER_RUN: usize = 500;

/// How long a mover the ACL refuses waits before it asks again (the ACL may
/// be put right; a user who schedules nothing need not grant it).
const REFUSED_WAIT: Duration = Duration::from_secs(600);

/// KEYS: the sorted set, the hash, the lease, the stream. ARGV: token, lease
/// ttl ms, most entries to move. Answers `{0, 0, pttl}` when another holds
/// the lease, else `{1, moved, ms until the next is due or -1}`.
const MOVE_LUA: &str = r#"
local holder = redis.call('GET', KEYS[3])
if holder and holder ~= ARGV[1] then
  return {0, 0, redis.call('PTTL', KEYS[3])}
end
local ttl = tonumber(ARGV[2])
if not holder or redis.call('PTTL', KEYS[3]) < ttl * 2 / 3 then
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ttl)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(due) do
  local packed = redis.call('HGET', KEYS[2], id)
  if packed then
    local body = cmsgpack.unpack(packed)
    local max_len = table.remove(body, 1)
    if max_len ~= '' then
      redis.call('XADD', KEYS[4], 'MAXLEN', '~', max_len, '*', unpack(body))
    else
      redis.call('XADD', KEYS[4], '*', unpack(body))
    end
    redis.call('HDEL', KEYS[2], id)
  end
  redis.call('ZREM', KEYS[1], id)
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local wait = -1
if #first > 0 then wait = math.max(0, tonumber(first[2]) - now) end
return {1, #due, wait}
"#;

static MOVE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(MOVE_LUA));

/// KEYS: the lease. ARGV: token. Drops the lease if this token holds it.
const RELEASE_LUA: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

static RELEASE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RELEASE_LUA));

/// What one run of [`MOVE_LUA`] answered.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// Another process holds the lease, for this long still (ms; negative:
    /// no expiry or gone).
    Held(i64),
    /// This process holds it: entries moved, ms until the next is due.
    Moved(i64, Option<i64>),
}

fn parse(v: &Value) -> Option<Answer> {
    let Value::Array(items) = v else { return None };
    let int = |i: usize| match items.get(i) {
        Some(Value::Int(n)) => Some(*n),
        _ => None,
    };
    match int(0)? {
        0 => Some(Answer::Held(int(2)?)),
        _ => {
            let wait = int(2)?;
            Some(Answer::Moved(int(1)?, (wait >= 0).then_some(wait)))
        }
    }
}

/// When to run again after an answer.
fn next_run(answer: &Answer) -> Duration {
    match *answer {
        Answer::Held(pttl) if pttl > 0 => WATCH.min(Duration::from_millis(pttl as u64)),
        Answer::Held(_) => WATCH,
        Answer::Moved(n, _) if n as usize >= PER_RUN => Duration::ZERO,
        Answer::Moved(_, Some(wait)) => POLL.min(Duration::from_millis(wait as u64)),
        Answer::Moved(_, None) => POLL,
    }
}

/// Moves one stream's due entries. Stopped with [`Stop`], which drops the
/// lease if it holds it, so another process takes over at once.
pub(crate) struct DueMover {
    stream: Arc<str>,
    keys: Vec<Vec<u8>>,
    redis: Addr<RedisActor>,
    token: String,
    retry: Retry,
    held: bool,
    stopping: bool,
    /// A run is on its way; at a stop, the lease is dropped after it
    /// (a run answered after the drop would take the lease again).
    running: bool,
    /// The stop waiting for the run on its way.
    after_run: Option<tokio::sync::oneshot::Sender<()>>,
}

impl DueMover {
    pub(crate) fn new(stream: Arc<str>, redis: Addr<RedisActor>) -> Self {
        let [due, entries, lease] = crate::keys::scheduled_keys(&stream);
        DueMover {
            keys: vec![
                due.into_bytes(),
                entries.into_bytes(),
                lease.into_bytes(),
                stream.as_bytes().to_vec(),
            ],
            stream,
            redis,
            token: crate::keys::process_token(),
            retry: Retry::default(),
            held: false,
            stopping: false,
            running: false,
            after_run: None,
        }
    }

    fn run(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        let req = self.redis.send(Eval {
            script: &MOVE,
            keys: self.keys.clone(),
            args: vec![
                self.token.as_bytes().to_vec(),
                LEASE_TTL.as_millis().to_string().into_bytes(),
                PER_RUN.to_string().into_bytes(),
            ],
        });
        self.running = true;
        ctx.spawn(req.into_actor(self).map(|res, act, ctx| {
            act.running = false;
            if let Some(stop) = act.after_run.take() {
                let _ = stop.send(());
            }
            if act.stopping {
                return;
            }
            let next = match res {
                Ok(Ok(v)) => act.answered(&v),
                Ok(Err(e)) if e.class() == crate::error::Class::Permission => {
                    if act.retry.failures() == 0 {
                        tracing::warn!(stream = %act.stream, error = %e, "scheduled entries of this stream are not moved by this process: the ACL refuses the due-mover's script (it needs EVALSHA and, in the script, TIME, GET, SET, PTTL, ZRANGEBYSCORE, ZRANGE, ZREM, HGET, HDEL, XADD); asking again every 10 min");
                    }
                    let _ = act.retry.failed();
                    REFUSED_WAIT
                }
                Ok(Err(e)) => {
                    let (delay, log) = act.retry.failed();
                    if log {
                        crate::util::log_wait!(
                            e.class(),
                            stream = %act.stream,
                            error = %e,
                            failures = act.retry.failures(),
                            "scheduled entries: moving due ones failed; trying again"
                        );
                    }
                    delay
                }
                // The Redis actor is gone: the broker is stopping.
                Err(_) => return,
            };
            ctx.run_later(next, |act, ctx| act.run(ctx));
        }));
    }

    fn answered(&mut self, v: &Value) -> Duration {
        let Some(answer) = parse(v) else {
            tracing::warn!(stream = %self.stream, reply = ?v, "scheduled entries: unexpected reply to the move");
            return WATCH;
        };
        if self.retry.succeeded() > 0 {
            tracing::info!(stream = %self.stream, "scheduled entries: moving due ones again");
        }
        let held = matches!(answer, Answer::Moved(..));
        if held != self.held {
            self.held = held;
            tracing::debug!(stream = %self.stream, held, "scheduled entries: mover lease");
        }
        if let Answer::Moved(n, _) = answer
            && n > 0
        {
            tracing::debug!(stream = %self.stream, moved = n, "scheduled entries due: added to the stream");
        }
        next_run(&answer)
    }
}

impl Actor for DueMover {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.run(ctx);
    }
}

/// Stops a [`DueMover`], dropping its lease.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Stop;

impl Handler<Stop> for DueMover {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: Stop, _: &mut Self::Context) -> Self::Result {
        self.stopping = true;
        let run_ended = if self.running {
            let (tx, rx) = tokio::sync::oneshot::channel();
            self.after_run = Some(tx);
            Some(rx)
        } else {
            None
        };
        let (redis, release) = (
            self.redis.clone(),
            Eval {
                script: &RELEASE,
                keys: vec![self.keys[2].clone()],
                args: vec![self.token.as_bytes().to_vec()],
            },
        );
        let done = async move {
            if let Some(rx) = run_ended {
                let _ = rx.await;
            }
            let _ = redis.send(release).await;
        };
        Box::pin(done.into_actor(self).map(|(), _, ctx| ctx.stop()))
    }
}

#[cfg(test)]
mod tests;
