//! `ReclaimerActor`: one per (stream, group) in a process.
//!
//! It takes over entries that have been idle in the group's pending entries
//! list for at least `claim_idle`: entries whose handler failed (the retry
//! path) and entries of consumers that died, in this process or any other.
//!
//! Consumers pull from it: when a consumer has a free handler slot and nothing
//! queued, and its reclaim check is due, it sends [`Claim`]. The reclaimer
//! answers with one page:
//!
//! 1. `XPENDING <stream> <group> IDLE <claim_idle> <cursor> + <count>` lists idle
//!    entries with their delivery counts, starting after the cursor;
//! 2. `XCLAIM <stream> <group> <consumer> <claim_idle> <ids…> RETRYCOUNT <n>
//!    JUSTID` takes them over, one command per delivery count, each entry's
//!    count set to the one XPENDING showed plus one. The min-idle guard makes
//!    the claim atomic: when two processes race for one entry, the first
//!    claim resets its idle time and the second skips it. Entries deleted or
//!    trimmed meanwhile are dropped from the PEL by XCLAIM (Redis ≥ 7).
//!
//! The claim answers ids only: the consumer fetches the bodies on its own
//! read connection, as a re-read of its own PEL. An entry too large for the
//! server to send one client then drops that dedicated connection, where it
//! is counted and dead-lettered by id, never the shared connections.
//!
//! The cursor advances page by page through the whole PEL and starts again at
//! `-` after the last page, so a large PEL of fresh entries never hides idle
//! ones behind it. Pulling keeps reclaim rate-matched to consumption: a consumer
//! only ever holds what it is about to start.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use actix::prelude::*;

use crate::error::Error;
use crate::redis::{Query, RedisActor};
use crate::stream::{EntryId, StreamNames};

/// The claim interval for a given `claim_idle`: half of it, between 10 ms and
/// 1 s. Idle entries are taken over at most this long after they became
/// claimable.
pub(crate) fn interval(claim_idle: Duration) -> Duration {
    (claim_idle / 2).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

pub(crate) struct ReclaimerActor {
    names: StreamNames,
    redis: Addr<RedisActor>,
    /// Exclusive start of the next XPENDING page; `None` = from the start.
    cursor: Option<EntryId>,
}

impl ReclaimerActor {
    pub(crate) fn new(names: StreamNames, redis: Addr<RedisActor>) -> Self {
        ReclaimerActor {
            names,
            redis,
            cursor: None,
        }
    }
}

impl Actor for ReclaimerActor {
    type Context = Context<Self>;
}

/// Claim up to `count` entries idle for at least `min_idle` for `consumer`.
/// Answers the claimed entries' ids (in stream order, without bodies) and
/// whether the page was full (more may be waiting).
///
/// With `peek`, nothing is claimed: the answer says whether at least one idle
/// entry is waiting (so the consumer can make room to run it alone).
#[derive(Message)]
#[rtype(result = "Result<(Vec<EntryId>, bool), Error>")]
pub(crate) struct Claim {
    pub consumer: std::sync::Arc<str>,
    pub min_idle: Duration,
    pub count: usize,
    pub peek: bool,
}

async fn query(
    redis: &Addr<RedisActor>,
    command: &'static str,
    cmd: redis::Cmd,
) -> Result<redis::Value, Error> {
    redis
        .send(Query(command, cmd))
        .await
        .map_err(|_| Error::ShutDown)?
}

/// One row of `XPENDING … IDLE`: the entry id, its holder, its idle time
/// in ms and its delivery count. Since Redis 8.8 an entry handed back with
/// `XNACK` has no holder (`""`) and an idle time of `-1`; `XCLAIM` takes it
/// whatever the minimum idle time, like any idle entry.
type Row = (String, String, i64, u64);

/// Gives claimed entries back to the consumers that held them, with the
/// delivery counts they had: `XCLAIM <holder> 0 <ids> RETRYCOUNT <count>
/// JUSTID` per holder and count. A failure is logged; the entries are then
/// this consumer's, run once more at worst (at least once).
async fn give_back(redis: &Addr<RedisActor>, names: &StreamNames, rows: &[Row]) {
    let mut by_holder: HashMap<(&str, u64), Vec<&str>> = HashMap::new();
    // An entry no consumer held (handed back with XNACK) stays with the
    // claimer, unknown to it: it is idle again after `claim_idle`.
    for (id, holder, _, count) in rows.iter().filter(|r| !r.1.is_empty()) {
        by_holder
            .entry((holder.as_str(), *count))
            .or_default()
            .push(id.as_str());
    }
    for ((holder, count), ids) in by_holder {
        let mut cmd = redis::cmd("XCLAIM");
        cmd.arg(&*names.name)
            .arg(&*names.group)
            .arg(holder)
            .arg(0)
            .arg(&ids)
            .arg("RETRYCOUNT")
            .arg(count)
            .arg("JUSTID");
        if let Err(e) = query(redis, "xclaim", cmd).await {
            tracing::warn!(stream = %names.name, holder, entries = ids.len(), error = %e, "could not give late-claimed entries back to their holder");
        }
    }
}

impl Handler<Claim> for ReclaimerActor {
    type Result = AtomicResponse<Self, Result<(Vec<EntryId>, bool), Error>>;

    fn handle(&mut self, msg: Claim, _: &mut Self::Context) -> Self::Result {
        let redis = self.redis.clone();
        let names = self.names.clone();
        let start = match &self.cursor {
            Some(id) => format!("({id}"),
            None => "-".to_owned(),
        };
        let idle_ms = msg.min_idle.as_millis() as u64;
        let start_cursor = self.cursor.clone();
        let fut = async move {
            let mut pending = redis::cmd("XPENDING");
            pending
                .arg(&*names.name)
                .arg(&*names.group)
                .arg("IDLE")
                .arg(idle_ms)
                .arg(&start)
                .arg("+")
                .arg(msg.count);
            let asked = std::time::Instant::now();
            let answer = query(&redis, "xpending", pending).await?;
            let took = asked.elapsed();
            if !msg.peek && took > msg.min_idle / 3 {
                // The server stalled (a long script, a pause) while the
                // holders of these entries could not refresh them: their
                // idle times say nothing about whether they are alive.
                return Err(Error::Unavailable {
                    down_for: took,
                    last_error: "XPENDING answered late (the server stalled); nothing claimed"
                        .into(),
                });
            }
            let rows: Vec<Row> =
                redis::from_redis_value(answer).map_err(|e| Error::Redis(e.into()))?;
            let full = rows.len() >= msg.count;
            let last = rows.last().map(|r| EntryId(r.0.clone()));
            if rows.is_empty() {
                // Past the last idle entry: start again from the beginning.
                return Ok((Vec::new(), false, None));
            }
            if msg.peek {
                // Found one; keep the cursor where it was so the claim finds it.
                return Ok((Vec::new(), true, start_cursor));
            }
            let mut by_count: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
            for r in &rows {
                by_count.entry(r.3).or_default().push(&r.0);
            }
            let mut claimed = Vec::with_capacity(rows.len());
            let asked = std::time::Instant::now();
            for (count, ids) in by_count {
                let mut claim = redis::cmd("XCLAIM");
                claim
                    .arg(&*names.name)
                    .arg(&*names.group)
                    .arg(&*msg.consumer)
                    .arg(idle_ms)
                    .arg(&ids)
                    .arg("RETRYCOUNT")
                    .arg(count + 1)
                    .arg("JUSTID");
                let answer = query(&redis, "xclaim", claim).await?;
                let ids: Vec<String> = redis::from_redis_value(answer)
                    .map_err(|e| Error::unparsable("XCLAIM JUSTID reply", e.to_string()))?;
                claimed.extend(ids.into_iter().map(EntryId));
            }
            let took = asked.elapsed();
            if took > msg.min_idle / 3 {
                // Sent before a stall and run after it: the holders could not
                // refresh meanwhile. Give each entry back to its holder as it
                // was (its delivery count too), and claim nothing.
                give_back(&redis, &names, &rows).await;
                return Err(Error::Unavailable {
                    down_for: took,
                    last_error: "XCLAIM answered late (the server stalled); given back".into(),
                });
            }
            claimed.sort_by_key(|id| id.parts().unwrap_or_default());
            Ok((claimed, full, if full { last } else { None }))
        };
        AtomicResponse::new(Box::pin(fut.into_actor(self).map(|res, act, _| {
            res.map(|(claimed, full, cursor)| {
                act.cursor = cursor;
                (claimed, full)
            })
        })))
    }
}
