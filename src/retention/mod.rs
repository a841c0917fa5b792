//! Retention that never drops work: `RetentionActor`, one per stream with
//! [`Stream::with_retain_acked`](crate::Stream::with_retain_acked) in a broker that
//! subscribes to it, trims every `retention_period` the entries every
//! consumer group is done with.
//!
//! Where the stream's server has `XTRIM … ACKED` (Redis 8.2; asked with
//! `COMMAND DOCS` of the master that holds the stream, before the first
//! sweep, after a failed one and every [`ASK_AGAIN`]), a sweep is one
//! script that runs `XTRIM <stream> MAXLEN 0 ACKED` when the stream has a
//! group: every entry acked by every group goes, wherever it sits. On such
//! a server the consumers' acks are `XACKDEL … ACKED` (see the stream
//! loop's acks), so most entries leave the stream with their last ack and
//! the sweep catches those whose last ack was a plain `XACK` (another
//! client, a node of an older version).
//!
//! Elsewhere one script ([`TRIM_ACKED_LUA`]) finds, for each group, the
//! oldest entry it still needs — its oldest pending entry, or the first
//! entry after its last-delivered id, whichever is older — and runs `XTRIM
//! <stream> MINID ~` up to the oldest of those. `MINID ~` removes whole
//! macro nodes only, so up to about a hundred acked entries may stay a
//! little longer.
//!
//! Either way a stream with no group is never trimmed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use actix::prelude::*;
use redis::Value;

use crate::redis::commands::ServerCommands;
use crate::redis::{CommandsOf, Eval, RedisActor};
use crate::stream::StreamNames;

/// KEYS: stream. Answers how many entries were trimmed, or -1 when the
/// stream or its groups do not exist.
const TRIM_ACKED_LUA: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
if #groups == 0 then return -1 end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function older(ams, aseq, bms, bseq)
  return ams < bms or (ams == bms and aseq < bseq)
end
local min_ms, min_seq
for _, g in ipairs(groups) do
  local name, last
  for i = 1, #g, 2 do
    if g[i] == 'name' then name = g[i + 1] end
    if g[i] == 'last-delivered-id' then last = g[i + 1] end
  end
  -- The first entry this group has not read yet.
  local ms, seq = parse(last)
  seq = seq + 1
  local p = redis.call('XPENDING', KEYS[1], name)
  if p[1] > 0 then
    local pms, pseq = parse(p[2])
    if older(pms, pseq, ms, seq) then ms, seq = pms, pseq end
  end
  if min_ms == nil or older(ms, seq, min_ms, min_seq) then
    min_ms, min_seq = ms, seq
  end
end
return redis.call('XTRIM', KEYS[1], 'MINID', '~', string.format('%.0f-%.0f', min_ms, min_seq))
"#;

static TRIM_ACKED: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(TRIM_ACKED_LUA));

/// KEYS: stream. As [`TRIM_ACKED_LUA`], with the server's own `ACKED`
/// trimming (which would empty a stream that has no group).
const TRIM_ACKED_NATIVE_LUA: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if #redis.call('XINFO', 'GROUPS', KEYS[1]) == 0 then return -1 end
return redis.call('XTRIM', KEYS[1], 'MAXLEN', '0', 'ACKED')
"#;

static TRIM_ACKED_NATIVE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(TRIM_ACKED_NATIVE_LUA));

/// How long what the stream's server has is trusted before it is asked
/// again (an upgrade, a failover to a node of another version).
const ASK_AGAIN: Duration = Duration::from_secs(600);

/// What the stream's server has, and when it was asked.
type Asked = Option<(ServerCommands, std::time::Instant)>;

/// Trims one stream every `period`. Stopped with [`Stop`].
pub(crate) struct RetentionActor {
    stream: Arc<str>,
    redis: Addr<RedisActor>,
    period: Duration,
    /// A trim is on its way: skip a tick rather than pile them up.
    busy: Arc<AtomicBool>,
    /// What the stream's server has (`None`: to ask before the next sweep).
    asked: Arc<Mutex<Asked>>,
}

impl RetentionActor {
    pub(crate) fn new(names: &StreamNames, redis: Addr<RedisActor>, period: Duration) -> Self {
        RetentionActor {
            stream: names.name.clone(),
            redis,
            period,
            busy: Arc::default(),
            asked: Arc::default(),
        }
    }

    fn trim(&self) {
        if self.busy.swap(true, Ordering::SeqCst) {
            return;
        }
        let (stream, busy, asked, redis) = (
            self.stream.clone(),
            self.busy.clone(),
            self.asked.clone(),
            self.redis.clone(),
        );
        actix_rt::spawn(async move {
            let known = *asked.lock().expect("asked lock");
            let found = match known {
                Some((found, at)) if at.elapsed() < ASK_AGAIN => Some(found),
                _ => match redis.send(CommandsOf(stream.clone())).await {
                    Ok(Ok(found)) => {
                        *asked.lock().expect("asked lock") =
                            Some((found, std::time::Instant::now()));
                        Some(found)
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(%stream, error = %e, "retention: the server did not answer; trying again next period");
                        None
                    }
                    Err(_) => None,
                },
            };
            if let Some(found) = found {
                let script = if found.trim_acked() {
                    &*TRIM_ACKED_NATIVE
                } else {
                    &*TRIM_ACKED
                };
                let req = redis.send(Eval {
                    script,
                    keys: vec![stream.as_bytes().to_vec()],
                    args: Vec::new(),
                });
                match req.await {
                    Ok(Ok(Value::Int(n))) if n > 0 => {
                        tracing::debug!(%stream, trimmed = n, "trimmed entries every group has acked")
                    }
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        // Ask the server again: it may be another one now.
                        *asked.lock().expect("asked lock") = None;
                        tracing::warn!(%stream, error = %e, "retention trim failed; trying again next period")
                    }
                    Err(_) => {}
                }
            }
            busy.store(false, Ordering::SeqCst);
        });
    }
}

impl Actor for RetentionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        tracing::info!(stream = %self.stream, period_ms = self.period.as_millis() as u64, "retention: trimming entries every group has acked");
        self.trim();
        ctx.run_interval(self.period, |act, _| act.trim());
    }
}

/// Stops a [`RetentionActor`].
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Stop;

impl Handler<Stop> for RetentionActor {
    type Result = ();

    fn handle(&mut self, _: Stop, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

/// Starts one actor per distinct stream of `streams` that asks for
/// retention.
pub(crate) fn start<'a>(
    streams: impl IntoIterator<Item = &'a StreamNames>,
    redis: &Addr<RedisActor>,
    period: Duration,
) -> Vec<Addr<RetentionActor>> {
    let mut seen = std::collections::HashSet::new();
    streams
        .into_iter()
        .filter(|n| n.retain_acked && seen.insert(n.name.clone()))
        .map(|n| RetentionActor::new(n, redis.clone(), period).start())
        .collect()
}
