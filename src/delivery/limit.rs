//! Rate limits shared by every consumer of a group: [`Limiter`], a
//! consumer's permits under a [`RateLimit`], asked of a token bucket in
//! Redis.
//!
//! The bucket is one hash per group beside the stream
//! (`<stream slot>:rillkit:rate:<stream>:<group>`: its tokens and when they were
//! counted), filled at the limit's rate up to its burst by the server's
//! clock, and taken from by one script ([`TAKE_LUA`]) that answers how many
//! permits a consumer got and how long until a full batch is there again.
//! A consumer reads no more entries than it holds permits for, so it holds
//! nothing it may not start; a consumer without permits asks again when a
//! batch has built up (not once per entry).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use actix::Addr;
use futures::future::LocalBoxFuture;
use redis::Value;

use crate::error::Error;
use crate::rate_limit::RateLimit;
use crate::redis::{Eval, RedisActor};
use crate::util::{Retry, log_wait};

/// KEYS: the bucket. ARGV: permits per ms, burst, permits wanted. Answers
/// `{permits given, 0}`, or when it gave fewer than wanted (at most the
/// burst) `{permits given, ms to wait}`: until that many are there, but no
/// longer than 100 ms past the time one is.
const TAKE_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = math.min(tonumber(ARGV[3]), burst)
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(b[1]) or burst
local at = tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local got = math.min(want, math.floor(tokens))
tokens = tokens - got
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens), 'at', string.format('%.3f', now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate) + 60000)
local wait = 0
if got < want then
  -- Until the bucket holds what was wanted, but no later than 100 ms
  -- after it holds one permit.
  local to_want = math.ceil((want - tokens) / rate)
  local to_one = math.ceil(math.max(0, 1 - tokens) / rate)
  wait = math.min(to_want, math.max(100, to_one))
end
return {got, wait}
"#;

static TAKE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(TAKE_LUA));

/// KEYS: the bucket. ARGV: permits per ms, burst, permits given back. Puts
/// back permits a read did not use (never past the burst).
const GIVE_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(b[1]) or burst
local at = tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate + tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'tokens', string.format('%.6f', tokens), 'at', string.format('%.3f', now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate) + 60000)
return 0
"#;

static GIVE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(GIVE_LUA));

/// What one take answered: permits asked for, given, and how long until a
/// full batch.
type Taken = Result<(usize, usize, Duration), Error>;

/// One consumer's permits under a group's [`RateLimit`]. Its state is its
/// own; the loop asks [`Limiter::permits`] before a read, spends them with
/// [`Limiter::spend`], says how many it wants with [`Limiter::turn`] and
/// polls [`Limiter::answered`] in its step.
pub(crate) struct Limiter {
    limit: RateLimit,
    key: Vec<u8>,
    redis: Addr<RedisActor>,
    stream: Arc<str>,
    /// Permits given and not spent.
    permits: usize,
    /// A take on its way (after a wait for the bucket to fill).
    asking: Option<LocalBoxFuture<'static, Taken>>,
    /// No take before this: the bucket was short when last asked.
    next_ask: tokio::time::Instant,
    retry: Retry,
    /// Permits asked for and not given: entries held back by the limit.
    limited: metrics::Counter,
}

impl Limiter {
    pub(crate) fn new(
        limit: RateLimit,
        stream: Arc<str>,
        group: &str,
        redis: Addr<RedisActor>,
        limited: metrics::Counter,
    ) -> Self {
        Limiter {
            key: crate::keys::rate_key(&stream, group).into_bytes(),
            limit,
            redis,
            stream,
            permits: 0,
            asking: None,
            next_ask: tokio::time::Instant::now(),
            retry: Retry::default(),
            limited,
        }
    }

    /// Permits given and not spent: at most this many entries may be read.
    pub(crate) fn permits(&self) -> usize {
        self.permits
    }

    /// A read of up to `n` entries starts.
    pub(crate) fn spend(&mut self, n: usize) {
        self.permits = self.permits.saturating_sub(n);
    }

    /// A read brought `n` fewer entries than it was given permits for
    /// (or failed): they go back to the bucket for every consumer of the
    /// group (not waited for; lost if Redis does not take them).
    pub(crate) fn give_back(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        // The bucket has them now: no need to wait for it to fill.
        self.next_ask = tokio::time::Instant::now();
        self.redis.do_send(Eval {
            script: &GIVE,
            keys: vec![self.key.clone()],
            args: self.args(n),
        });
    }

    /// The arguments of a take or a give-back of `n` permits.
    fn args(&self, n: usize) -> Vec<Vec<u8>> {
        vec![
            format!("{:.9}", self.limit.per_ms()).into_bytes(),
            self.limit.burst().to_string().into_bytes(),
            n.to_string().into_bytes(),
        ]
    }

    /// The loop would read `want` entries: asks the bucket for what is
    /// missing (at most a burst), unless a take is on its way. A take after
    /// a short answer waits until a batch has built up in the bucket.
    pub(crate) fn turn(&mut self, want: usize) {
        if self.asking.is_some() || self.permits >= want.max(1) {
            return;
        }
        let ask = (want - self.permits).clamp(1, self.limit.burst() as usize);
        let not_before = self.next_ask;
        let take = Eval {
            script: &TAKE,
            keys: vec![self.key.clone()],
            args: self.args(ask),
        };
        let redis = self.redis.clone();
        self.asking = Some(Box::pin(async move {
            // The take is sent only now: the permits it gets are used at
            // once, not held while the batch builds up.
            tokio::time::sleep_until(not_before).await;
            let v = redis.send(take).await.map_err(|_| Error::ShutDown)??;
            let (got, wait) =
                parse(&v).ok_or_else(|| Error::unparsable("rate limit take", format!("{v:?}")))?;
            Ok((ask, got, wait))
        }));
    }

    /// Resolves when a take is answered (never while none is on its way),
    /// and counts what it gave. Cancel-safe.
    pub(crate) async fn answered(&mut self) {
        let Some(f) = self.asking.as_mut() else {
            return std::future::pending().await;
        };
        let taken = f.await;
        self.asking = None;
        let now = tokio::time::Instant::now();
        match taken {
            Ok((asked, got, wait)) => {
                self.limited.increment(asked.saturating_sub(got) as u64);
                if self.retry.succeeded() > 0 {
                    tracing::info!(stream = %self.stream, "rate limit: the bucket answers again");
                }
                self.permits += got;
                self.next_ask = now + wait;
            }
            Err(e) => {
                let (delay, log) = self.retry.failed();
                if log {
                    log_wait!(e.class(), stream = %self.stream, error = %e, failures = self.retry.failures(), "rate limit: taking permits failed; nothing is read until it works");
                }
                self.next_ask = now + delay;
            }
        }
    }
}

fn parse(v: &Value) -> Option<(usize, Duration)> {
    let Value::Array(items) = v else { return None };
    match items.as_slice() {
        [Value::Int(got), Value::Int(wait)] => Some((
            usize::try_from(*got).ok()?,
            Duration::from_millis(u64::try_from(*wait).ok()?),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
