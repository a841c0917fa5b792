//! A stream ordered by key ([`Stream::ordered_by`](crate::Stream::ordered_by)):
//! one subscription over `P` partition streams.
//!
//! * **Membership.** Each consumer of the group keeps itself in a sorted
//!   set (`{<name>}:rillkit:members:<group>`) with its expiry (server time
//!   plus the lease TTL) as score, renewed every third of the TTL; the live
//!   members are those not expired. Partition `i` belongs to the
//!   `i mod n`-th live member in name order, so every consumer computes the
//!   same share-out from the same set.
//! * **Partition leases.** A consumer reads a partition only while it holds
//!   the partition's lease (`<partition's slot>:rillkit:owner:<group>`), by
//!   the same liveness rule as every claim in the crate: renewed every third
//!   of the TTL, nothing new starts past the TTL since the last confirmed
//!   renewal. A partition that moves to another consumer is drained by its
//!   old owner (running handlers finish, unstarted entries are handed back,
//!   acks flushed, up to the drain deadline) before the lease is dropped;
//!   the new owner waits for the lease, then takes the whole pending entries
//!   list of the partition (`XCLAIM` of every entry, every page, one
//!   script) and runs it in id order before anything newer.
//! * **The lease as a fence.** Every command that takes entries into a
//!   partition consumer's PEL checks the lease on the server first
//!   (`fence.rs`), so an old owner's late command delivers nothing, and no
//!   reclaim by idle time runs in a partition. An owner whose lease lapses on
//!   its own clock, or whose command meets `LEASELOST`, gives the partition
//!   up at once (running handlers dropped, entries left pending) and takes
//!   it again only through the lease.
//! * **Order inside a partition.** The partition's consumer loop is the
//!   stream loop with a key gate: entries of one key start one at a time, in
//!   id order, each once the one before is settled in Redis (acked or
//!   dead-lettered); a key whose entry waits for its retry holds its later
//!   entries back; other keys go on (see `run/order.rs`).

mod fence;
mod run;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use actix::Addr;
use redis::Value;

use super::hygiene::Lease;
use super::{Shape, Subscription};
use crate::error::{ConfigError, Error};
use crate::order::{OnKeyFailure, Order, partition_name};
use crate::redis::{Eval, Query, RedisActor};

pub(crate) use fence::{Fence, FencedRead};
pub(crate) use run::consume;

/// What makes a subscription the reader of an ordered stream.
pub(crate) struct Ordered {
    pub order: Order,
    /// Where the partition count is recorded.
    pub record_key: Arc<str>,
    /// The group's live consumers, with their expiry.
    pub members_key: Arc<str>,
    /// The members' and partition leases' TTL.
    pub ttl: Duration,
    /// One subscription per partition, by index.
    pub parts: Vec<Arc<Subscription>>,
}

/// What makes a partition's consumer loop keep the order of keys.
pub(crate) struct KeyOrder {
    pub key_field: Arc<str>,
    pub on_failure: OnKeyFailure,
    /// The hash of this group's keys marked failed (`fail_rest`).
    pub failed_keys: Arc<str>,
    /// The consumer's handler slots, shared by its partitions' loops.
    pub slots: Arc<Slots>,
}

/// Handler slots shared by the loops of one consumer's partitions:
/// `concurrency` handlers run at once across all the partitions it owns.
/// The loops run on one thread; a slot given back wakes the others.
pub(crate) struct Slots {
    limit: usize,
    used: std::sync::atomic::AtomicUsize,
    freed: tokio::sync::Notify,
}

impl Slots {
    pub(crate) fn new(limit: usize) -> Self {
        Slots {
            limit,
            used: 0.into(),
            freed: tokio::sync::Notify::new(),
        }
    }

    /// Whether a handler may start now.
    pub(crate) fn free(&self) -> bool {
        self.used.load(std::sync::atomic::Ordering::Relaxed) < self.limit
    }

    /// How many handlers may start now.
    pub(crate) fn available(&self) -> usize {
        self.limit
            .saturating_sub(self.used.load(std::sync::atomic::Ordering::Relaxed))
    }

    pub(crate) fn take(&self) {
        self.used.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Gives back `n` slots and wakes the loops waiting for one.
    pub(crate) fn give(&self, n: usize) {
        if n > 0 {
            self.used.fetch_sub(n, std::sync::atomic::Ordering::Relaxed);
            self.freed.notify_waiters();
        }
    }

    /// Resolves when a slot is given back.
    pub(crate) async fn freed(&self) {
        self.freed.notified().await;
    }
}

/// The default TTL of membership and partition leases, when the options
/// run without a consumer name's lease.
const DEFAULT_TTL: Duration = Duration::from_secs(10);

impl Ordered {
    /// The partitions' subscriptions of the ordered stream `sub` (built
    /// already, with its board of partitions), one per partition: the same
    /// group, consumer, options and handler; the partition's default
    /// dead-letter stream; a partition lease instead of the consumer name's.
    pub(crate) fn build(
        order: Order,
        sub: &Subscription,
        cluster: bool,
    ) -> Result<Ordered, ConfigError> {
        let names = &sub.names;
        let ttl = sub.opts.lease_ttl.unwrap_or(DEFAULT_TTL);
        let (record_key, members_key) = crate::keys::ordered_keys(&names.name, &names.group);
        let slots = Arc::new(Slots::new(sub.opts.concurrency));
        let parts = (0..order.partitions)
            .map(|i| {
                let partition = partition_name(&names.name, i);
                let mut part_names = names.clone();
                part_names.dlq = crate::keys::dead_letter_name(&partition, cluster).into();
                part_names.name = partition.clone().into();
                part_names.order = None;
                if cluster {
                    if let Some(e) = crate::keys::dlq_slot_error(&part_names.name, &part_names.dlq)
                    {
                        return Err(e);
                    }
                }
                let board = sub.board.parts()[usize::from(i)].clone();
                Ok(Arc::new(Subscription {
                    lease: Some(Lease::partition(
                        &partition,
                        &names.group,
                        &sub.consumer,
                        ttl,
                    )),
                    shape: Shape::Partition(KeyOrder {
                        key_field: order.key_field.clone(),
                        on_failure: sub.opts.on_key_failure,
                        failed_keys: crate::keys::partition_keys(&partition, &names.group)
                            .1
                            .into(),
                        slots: slots.clone(),
                    }),
                    names: part_names,
                    consumer: sub.consumer.clone(),
                    opts: sub.opts.clone(),
                    handler: sub.handler.clone(),
                    priority: None,
                    drain_timeout: sub.drain_timeout,
                    board,
                }))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Ordered {
            order,
            record_key: record_key.into(),
            members_key: members_key.into(),
            ttl,
            parts,
        })
    }
}

/// Records the partition count of an ordered stream the first time it is
/// used (`SET <record> <P> NX`), and answers what is recorded.
pub(crate) fn record_command(record_key: &str, partitions: u16) -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(record_key).arg(partitions).arg("NX").arg("GET");
    cmd
}

/// Checks a `SET … NX GET` answer against the partitions configured:
/// [`Error::Config`] naming both counts when they differ.
pub(crate) fn check_recorded(
    stream: &str,
    record_key: &str,
    partitions: u16,
    answer: &Value,
) -> Result<(), Error> {
    let recorded = match answer {
        Value::Nil | Value::Okay => return Ok(()),
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => {
            return Err(Error::unparsable(
                "partition count record",
                format!("{other:?}"),
            ));
        }
    };
    if recorded.trim() == partitions.to_string() {
        return Ok(());
    }
    Err(Error::Config(ConfigError::Invalid {
        kind: Some(crate::kind::SourceKind::Stream),
        key: stream.to_owned(),
        option: "partitions",
        reason: format!(
            "the stream is recorded in Redis ({record_key}) with {recorded} partitions, but this process is configured with {partitions}; the count is fixed when a stream is first used (to change it, move the entries to a new stream)"
        ),
    }))
}

/// Records or checks the partition count of `ordered` through `redis`.
///
/// # Errors
/// [`Error::Config`] when another count is recorded; what Redis answers.
pub(crate) async fn check_partitions(
    redis: &Addr<RedisActor>,
    stream: &str,
    ordered: &Ordered,
) -> Result<(), Error> {
    let cmd = record_command(&ordered.record_key, ordered.order.partitions);
    let answer = redis
        .send(Query("set", cmd))
        .await
        .unwrap_or(Err(Error::ShutDown))?;
    check_recorded(
        stream,
        &ordered.record_key,
        ordered.order.partitions,
        &answer,
    )
}

/// KEYS: members. ARGV: consumer, TTL ms. Puts the consumer in the set with
/// its expiry (server time + TTL), drops expired members, answers the live
/// ones.
const MEMBERS_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZRANGE', KEYS[1], 0, -1)
"#;

pub(crate) static MEMBERS: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(MEMBERS_LUA));

/// KEYS: a partition, its lease. ARGV: group, consumer, the lease holder's
/// token. While the lease holds the token, claims every pending entry of
/// the group that another consumer holds (`XCLAIM … 0 … JUSTID`, the
/// delivery counts unchanged), a page of 500 at a time, all in one step.
/// Answers how many, or `LEASELOST` (see `fence.rs`).
const TAKE_PENDING_LUA: &str = r#"
local holder = redis.call('GET', KEYS[2])
if holder ~= ARGV[3] then
  return redis.error_reply('LEASELOST the partition lease is held by ' .. (holder or 'nobody'))
end
local taken = 0
local start = '-'
while true do
  local page = redis.call('XPENDING', KEYS[1], ARGV[1], start, '+', 500)
  if #page == 0 then break end
  local claim = {'XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0}
  for _, e in ipairs(page) do
    if e[2] ~= ARGV[2] then claim[#claim + 1] = e[1] end
  end
  local n = #claim - 5
  if n > 0 then
    claim[#claim + 1] = 'JUSTID'
    -- One table, unpacked last: an `unpack` followed by more arguments
    -- passes only its first value.
    taken = taken + #redis.call(unpack(claim))
  end
  if #page < 500 then break end
  start = '(' .. page[#page][1]
end
return taken
"#;

static TAKE_PENDING: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(TAKE_PENDING_LUA));

/// Takes every pending entry of `sub`'s partition that another consumer
/// of the group holds (a previous owner's, crashed or handed over), so
/// the loop's re-read of its own pending entries runs them, in id order,
/// before anything new. Answers how many it took.
///
/// # Errors
/// What Redis answers.
pub(crate) async fn take_pending(
    redis: &Addr<RedisActor>,
    sub: &Subscription,
) -> Result<u64, Error> {
    let lease = sub.lease.as_ref().expect("a partition's lease");
    let answer = redis
        .send(Eval {
            script: &TAKE_PENDING,
            keys: vec![
                sub.names.name.as_bytes().to_vec(),
                lease.key().as_bytes().to_vec(),
            ],
            args: vec![
                sub.names.group.as_bytes().to_vec(),
                sub.consumer.as_bytes().to_vec(),
                lease.token().as_bytes().to_vec(),
            ],
        })
        .await
        .unwrap_or(Err(Error::ShutDown))?;
    Ok(crate::status::int(&answer).unwrap_or(0))
}

/// The keys of `failed_keys` marked failed, with the entry that failed
/// first (`HGETALL`).
///
/// # Errors
/// What Redis answers.
pub(crate) async fn failed_keys(
    redis: &Addr<RedisActor>,
    failed_keys: &str,
) -> Result<std::collections::HashMap<Vec<u8>, String>, Error> {
    let mut cmd = redis::cmd("HGETALL");
    cmd.arg(failed_keys);
    let answer = redis
        .send(Query("hgetall", cmd))
        .await
        .unwrap_or(Err(Error::ShutDown))?;
    let pairs: Vec<(Vec<u8>, String)> = redis::from_redis_value(answer)
        .map_err(|e| Error::unparsable("HGETALL reply", e.to_string()))?;
    Ok(pairs.into_iter().collect())
}
