//! Rate limits shared by every consumer of a group: [`Limiter`], a
//! consumer's permits under a [`RateLimit`], asked of a token bucket in
//! Redis.
//!
//! The bucket is one hash per group beside the stream
//! (`<stream slot>:rillkit:rate:<group>`: its tokens and when they were
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
/// `{permits given, ms until a batch of the wanted size (at most the
/// burst) is there}`.
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
if tokens < want then wait = math.ceil((want - tokens) / rate) end
return {got, wait}
"#;

static TAKE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(TAKE_LUA));

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

    /// `n` entries read.
    pub(crate) fn spend(&mut self, n: usize) {
        self.permits = self.permits.saturating_sub(n);
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
        let req = self.redis.send(Eval {
            script: &TAKE,
            keys: vec![self.key.clone()],
            args: vec![
                format!("{:.9}", self.limit.per_ms()).into_bytes(),
                self.limit.burst().to_string().into_bytes(),
                ask.to_string().into_bytes(),
            ],
        });
        self.asking = Some(Box::pin(async move {
            tokio::time::sleep_until(not_before).await;
            let v = req.await.map_err(|_| Error::ShutDown)??;
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
