//! Consumer hygiene: what keeps a group's consumer list true to the
//! processes behind it.
//!
//! * **The lease.** A consumer name is held by one live process at a time: a
//!   key `rillkit:lease:<stream>:<group>:<consumer>` (each name with `%`
//!   and `:` percent-encoded) holding a token of the
//!   process (`<hostname>-<pid>-<random>`), taken with `SET … PX <ttl>` when
//!   free (or already ours) and renewed every `ttl / 3` by the consumer loop.
//!   A process started under a name whose lease is live elsewhere waits for
//!   it to lapse, up to the startup deadline, then fails with
//!   [`Error::ConsumerNameInUse`]. A renewal that finds the key held by
//!   another process ends the consumer loop with that error; the supervisor
//!   restarts it, and the restarted loop waits for the lease again.
//! * **Leaving the group** on a clean stop, only when holding nothing.
//! * **Pruning** the group's consumers that hold nothing and have been idle
//!   longer than a TTL.
//!
//! Each check-and-change is one Lua script over one key, so it holds under a
//! cluster as anywhere else.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use actix::Addr;
use redis::Value;
use tokio::sync::watch;

use crate::delivery::claim::{Taken, take_when_free};
use crate::error::Error;
use crate::kind::SourceKind;
use crate::redis::{Eval, RedisActor};

/// KEYS: stream. ARGV: group, consumer. Deletes the consumer from the group
/// (`XGROUP DELCONSUMER`) only when it holds no pending entry, checked in the
/// same script. Answers 1 when deleted, 0 when it holds entries, -1 when it
/// was not there.
const LEAVE_GROUP_LUA: &str = r#"
local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #p > 0 then return 0 end
local consumers = redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
for _, c in ipairs(consumers) do
  for i = 1, #c, 2 do
    if c[i] == 'name' and c[i + 1] == ARGV[2] then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
      return 1
    end
  end
end
return -1
"#;

pub(crate) static LEAVE_GROUP: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(LEAVE_GROUP_LUA));

/// KEYS: stream. ARGV: group, idle ms, then the consumer names to spare.
/// Deletes (`XGROUP DELCONSUMER`) every other consumer of the group that
/// holds no pending entry and whose `idle` (`XINFO CONSUMERS`) is above the
/// given ms, checked and deleted in the same script. Answers the names
/// deleted.
const PRUNE_IDLE_LUA: &str = r#"
local limit = tonumber(ARGV[2])
local spare = {}
for i = 3, #ARGV do spare[ARGV[i]] = true end
local pruned = {}
local consumers = redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
for _, c in ipairs(consumers) do
  local name, pending, idle
  for i = 1, #c, 2 do
    if c[i] == 'name' then name = c[i + 1]
    elseif c[i] == 'pending' then pending = c[i + 1]
    elseif c[i] == 'idle' then idle = c[i + 1] end
  end
  if not spare[name] and pending == 0 and idle > limit then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], name)
    pruned[#pruned + 1] = name
  end
end
return pruned
"#;

pub(crate) static PRUNE_IDLE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(PRUNE_IDLE_LUA));

/// The shortest TTL [`ConsumerOptions::with_prune_idle`](crate::ConsumerOptions::with_prune_idle)
/// takes: a live consumer reads at least every `block`, so its idle time
/// stays below that; the TTL must be well above it.
pub(crate) fn min_prune_ttl(block: Duration) -> Duration {
    (block * 3).max(Duration::from_secs(1))
}

/// How often a consumer runs the prune script for a TTL: half of it, at
/// most once a minute.
pub(crate) fn prune_period(ttl: Duration) -> Duration {
    (ttl / 2).min(Duration::from_secs(60))
}

/// The consumers of `group` a prune must spare beside `me`: those whose
/// name's lease a live process holds. `idle` alone does not tell a live
/// consumer from a dead one: before Redis 7.2 a read that finds nothing
/// does not reset it, so a live consumer waiting on a quiet stream looks
/// idle. Asks `XINFO CONSUMERS`, then `EXISTS` of each empty consumer's
/// lease key, through `query`. (A consumer run `without_lease` has no such
/// record: on Redis 7.0 a prune may delete it while it waits; its next read
/// that delivers something creates it again.)
///
/// # Errors
/// What `query` answers, or an unparsable `XINFO CONSUMERS` reply.
pub(crate) async fn spared<Q, F>(
    stream: &str,
    group: &str,
    me: &str,
    query: Q,
) -> Result<Vec<String>, Error>
where
    Q: Fn(&'static str, redis::Cmd) -> F,
    F: std::future::Future<Output = Result<Value, Error>>,
{
    let mut info = redis::cmd("XINFO");
    info.arg("CONSUMERS").arg(stream).arg(group);
    let consumers = crate::redis::info::consumers(query("xinfo|consumers", info).await?)
        .map_err(|m| Error::unparsable("XINFO CONSUMERS reply", m))?;
    let mut spare = vec![me.to_owned()];
    for c in consumers {
        if c.pending > 0 || c.name == me {
            continue;
        }
        let mut exists = redis::cmd("EXISTS");
        exists.arg(crate::keys::lease_key(stream, group, &c.name));
        if query("exists", exists).await? == Value::Int(1) {
            spare.push(c.name);
        }
    }
    Ok(spare)
}

/// Parses the prune script's answer: the names deleted.
pub(crate) fn pruned_names(v: Value) -> Result<Vec<String>, Error> {
    redis::from_redis_value(v).map_err(|e| Error::unparsable("prune script reply", e.to_string()))
}

/// KEYS: lease key. ARGV: token, ttl ms. Takes the lease when it is free or
/// already ours (and sets its TTL again). Answers `{1}` when held now, or
/// `{0, <holder's token>, <its remaining ms>}`.
const TAKE_LEASE_LUA: &str = r#"
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1}
end
return {0, cur, redis.call('PTTL', KEYS[1])}
"#;

static TAKE_LEASE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(TAKE_LEASE_LUA));

/// KEYS: lease key. ARGV: token. Deletes the lease when it is ours.
const DROP_LEASE_LUA: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"#;

static DROP_LEASE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(DROP_LEASE_LUA));

/// The lease of one subscription's consumer name. See the module docs.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    key: Arc<str>,
    token: Arc<str>,
    pub ttl: Duration,
    stream: Arc<str>,
    group: Arc<str>,
    consumer: Arc<str>,
    /// A partition's lease (see [`Lease::partition`]), not a consumer name's.
    partition: bool,
}

impl Lease {
    /// The lease of `consumer` in `group` on `stream`, for this process
    /// (the token is made here, once).
    pub(crate) fn new(stream: &str, group: &str, consumer: &str, ttl: Duration) -> Self {
        Lease {
            key: crate::keys::lease_key(stream, group, consumer).into(),
            token: crate::keys::process_token().into(),
            ttl,
            stream: stream.into(),
            group: group.into(),
            consumer: consumer.into(),
            partition: false,
        }
    }

    /// The lease of one partition of an ordered stream for `group`, held
    /// by the consumer that reads it (`<slot>:rillkit:owner:<group>`, in the
    /// partition's hash slot); its token is `<consumer> <process token>`, so
    /// the owner's name shows wherever the holder does.
    pub(crate) fn partition(partition: &str, group: &str, consumer: &str, ttl: Duration) -> Self {
        Lease {
            key: crate::keys::partition_keys(partition, group).0.into(),
            token: format!("{consumer} {}", crate::keys::process_token()).into(),
            ttl,
            stream: partition.into(),
            group: group.into(),
            consumer: consumer.into(),
            partition: true,
        }
    }

    /// What the lease is, for log lines.
    pub(crate) fn what(&self) -> &'static str {
        if self.partition {
            "the partition's lease"
        } else {
            "the consumer name's lease"
        }
    }

    /// The key (`rillkit:lease:<stream>:<group>:<consumer>`).
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// This process's token, the lease's value while it is held here.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// Takes or renews the lease, once.
    pub(crate) async fn take(&self, redis: &Addr<RedisActor>) -> Result<Taken, Error> {
        let answer = redis
            .send(Eval {
                script: &TAKE_LEASE,
                keys: vec![self.key.as_bytes().to_vec()],
                args: vec![
                    self.token.as_bytes().to_vec(),
                    (self.ttl.as_millis() as u64).to_string().into_bytes(),
                ],
            })
            .await
            .unwrap_or(Err(Error::ShutDown))
            .map_err(|e| self.denied(e))?;
        let bad = || Error::unparsable("lease script reply", format!("{answer:?}"));
        let Value::Array(items) = &answer else {
            return Err(bad());
        };
        match items.as_slice() {
            [Value::Int(1)] => Ok(Taken::Held),
            [Value::Int(0), holder, Value::Int(ms)] => Ok(Taken::Elsewhere {
                holder: redis::from_redis_value(holder.clone()).map_err(|_| bad())?,
                remaining: Duration::from_millis((*ms).max(0) as u64),
            }),
            _ => Err(bad()),
        }
    }

    /// Takes the lease, waiting while another process holds it (logged at
    /// WARN once, with the holder, and shown on `board` as
    /// `WaitingForLease`), until `deadline` (then
    /// [`Error::ConsumerNameInUse`]) or until `stop` changes (then
    /// [`Error::StartAborted`]). Errors other than the lease being held are
    /// answered at once (the caller decides whether to wait for Redis).
    /// Answers when the take that succeeded was sent: the lease is surely
    /// ours until a TTL after that.
    pub(crate) async fn acquire(
        &self,
        redis: &Addr<RedisActor>,
        deadline: Option<Instant>,
        stop: Option<&mut watch::Receiver<Option<Instant>>>,
        board: &crate::status::Board,
    ) -> Result<Instant, Error> {
        let (stream, group, consumer) = (&self.stream, &self.group, &self.consumer);
        let first_wait = |holder: &str, remaining: Duration| {
            let lease_ms = remaining.as_millis() as u64;
            if self.partition {
                // A hand-over: the previous owner finishes what it holds first.
                tracing::info!(
                    %stream, %group, %consumer, %holder, lease_ms,
                    "the partition's previous owner still holds it; waiting until it hands it over or its lease lapses"
                );
            } else {
                tracing::warn!(
                    %stream, %group, %consumer, %holder, lease_ms,
                    "another live process holds this consumer name; waiting for its lease to lapse (two processes must not run one consumer's entries)"
                );
            }
        };
        let in_use = |holder, waited| Error::ConsumerNameInUse {
            kind: SourceKind::Stream,
            key: stream.to_string(),
            group: group.to_string(),
            consumer: consumer.to_string(),
            holder,
            waited,
        };
        let took = take_when_free(
            || self.take(redis),
            deadline,
            stop,
            board,
            first_wait,
            in_use,
        );
        let took = took.await?;
        if let Some(waited) = took.waited {
            tracing::info!(%stream, %group, %consumer, waited_ms = waited.as_millis() as u64, lease = self.what(), "the lease is free again; it is ours now");
        }
        Ok(took.sent)
    }

    /// Drops the lease when it is still ours (a clean stop), so a successor
    /// under the same name starts at once. Failures are logged, not
    /// answered: the lease then lapses after its TTL.
    pub(crate) async fn release(&self, redis: &Addr<RedisActor>) {
        let req = redis.send(Eval {
            script: &DROP_LEASE,
            keys: vec![self.key.as_bytes().to_vec()],
            args: vec![self.token.as_bytes().to_vec()],
        });
        if let Ok(Err(e)) = req.await {
            let e = self.denied(e);
            tracing::warn!(key = %self.key, error = %e, lease = self.what(), "could not drop the lease; it lapses after its TTL");
        }
    }

    /// A refusal of the lease script by the ACL, told as such.
    fn denied(&self, e: Error) -> Error {
        if e.class() == crate::error::Class::Permission {
            Error::LeaseDenied {
                key: self.key.to_string(),
                source: Box::new(e),
            }
        } else {
            e
        }
    }

    /// The error a renewal that found the lease held elsewhere ends with.
    pub(crate) fn lost(&self, holder: String) -> Error {
        Error::ConsumerNameInUse {
            kind: SourceKind::Stream,
            key: self.stream.to_string(),
            group: self.group.to_string(),
            consumer: self.consumer.to_string(),
            holder,
            waited: Duration::ZERO,
        }
    }
}
