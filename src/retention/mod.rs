//! Retention that never drops work: `RetentionActor`, one per stream with
//! [`Stream::with_retain_acked`](crate::Stream::with_retain_acked) in a broker that
//! subscribes to it, trims every `retention_period` the entries every
//! consumer group is done with.
//!
//! One script ([`TRIM_ACKED_LUA`]) finds, for each group, the oldest entry
//! it still needs — its oldest pending entry, or the first entry after its
//! last-delivered id, whichever is older — and runs `XTRIM <stream> MINID ~`
//! up to the oldest of those: Redis 8.2's `ACKED` trimming, on Redis 7. A
//! stream with no group is never trimmed. `MINID ~` removes whole macro nodes
//! only, so up to about a hundred acked entries may stay a little longer.

use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix::prelude::*;
use redis::Value;

use crate::redis::{Eval, RedisActor};
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

/// Trims one stream every `period`. Stopped with [`Stop`].
pub(crate) struct RetentionActor {
    stream: Arc<str>,
    redis: Addr<RedisActor>,
    period: Duration,
    /// A trim is on its way: skip a tick rather than pile them up.
    busy: Arc<AtomicBool>,
}

impl RetentionActor {
    pub(crate) fn new(names: &StreamNames, redis: Addr<RedisActor>, period: Duration) -> Self {
        RetentionActor {
            stream: names.name.clone(),
            redis,
            period,
            busy: Arc::default(),
        }
    }

    fn trim(&self) {
        if self.busy.swap(true, Ordering::SeqCst) {
            return;
        }
        let req = self.redis.send(Eval {
            script: &TRIM_ACKED,
            keys: vec![self.stream.as_bytes().to_vec()],
            args: Vec::new(),
        });
        let (stream, busy) = (self.stream.clone(), self.busy.clone());
        actix_rt::spawn(async move {
            match req.await {
                Ok(Ok(Value::Int(n))) if n > 0 => {
                    tracing::debug!(%stream, trimmed = n, "trimmed entries every group has acked")
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(%stream, error = %e, "retention trim failed; trying again next period")
                }
                Err(_) => {}
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
