//! The partition lease as a fence in Redis.
//!
//! A partition's consumer stops starting entries when its lease lapses on
//! its own clock (see the parent module), but its commands may still be on
//! their way: a read sent just before a network cut reaches the server
//! after the cut heals, when another consumer owns the partition. Run
//! as sent, such a late `XREADGROUP` would deliver entries into the old
//! owner's PEL behind the new owner's back, and a late `XCLAIM` would take
//! entries back from it — and those entries would run after newer entries
//! of their keys.
//!
//! So every command by which a partition's consumer takes entries into its
//! PEL (the read of new entries, the re-read and refresh of its own, a
//! retry's take-back, a hand-back) runs in a script that first checks, on
//! the server and in the same step, that the partition's lease still holds
//! this consumer's token, and answers `LEASELOST <holder>` otherwise.
//! Nothing it does is then possible without the lease.
//!
//! A script cannot block, so the read of new entries is a fenced
//! `XREADGROUP` without `BLOCK`; when it finds nothing, the consumer waits
//! with a plain `XREAD BLOCK` after the stream's last entry (which delivers
//! nothing to a group and changes no PEL), then reads again.
//!
//! The token is the process's, so the fence cannot tell this loop's
//! commands from those of an earlier connection of the same process (a read
//! whose connection was dropped, its bytes still retransmitted; the loop
//! before a restart). So the fenced read also checks that this consumer's
//! PEL holds nothing newer than the newest entry the loop knows of; if it
//! does, a late read of this process delivered it, and the loop re-reads
//! its pending entries (in id order) before anything newer.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Value;
use redis::aio::ConnectionLike;

use crate::error::Error;
use crate::redis::reply::{self, Delivered};
use crate::source::stream::Subscription;

/// KEYS: the partition, its lease. ARGV: the lease holder's token, then a
/// command and its arguments. Runs the command only while the lease holds
/// the token.
const FENCED_LUA: &str = r#"
local holder = redis.call('GET', KEYS[2])
if holder ~= ARGV[1] then
  return redis.error_reply('LEASELOST the partition lease is held by ' .. (holder or 'nobody'))
end
return redis.call(unpack(ARGV, 2))
"#;

static FENCED: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(FENCED_LUA));

/// KEYS: the partition, its lease. ARGV: the token, group, consumer, count,
/// the newest entry id the loop knows of (empty: none). While the lease
/// holds the token: `STRAYS` when the consumer's PEL holds an entry newer
/// than that; else `XREADGROUP … COUNT <count> STREAMS <partition> >`,
/// answered as is when it delivered something, else the id of the
/// partition's last entry (`0-0` when empty), to wait after.
const FENCED_READ_LUA: &str = r#"
local holder = redis.call('GET', KEYS[2])
if holder ~= ARGV[1] then
  return redis.error_reply('LEASELOST the partition lease is held by ' .. (holder or 'nobody'))
end
local after = '-'
if ARGV[5] ~= '' then after = '(' .. ARGV[5] end
if #redis.call('XPENDING', KEYS[1], ARGV[2], after, '+', 1, ARGV[3]) > 0 then
  return redis.status_reply('STRAYS')
end
local r = redis.call('XREADGROUP', 'GROUP', ARGV[2], ARGV[3], 'COUNT', ARGV[4], 'STREAMS', KEYS[1], '>')
if r then return r end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last == 0 then return '0-0' end
return last[1][1]
"#;

static FENCED_READ: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(FENCED_READ_LUA));

/// A partition's lease as its commands' fence: the partition, the lease
/// key (in the partition's hash slot) and this consumer's token.
#[derive(Clone, Debug)]
pub(crate) struct Fence {
    partition: Arc<str>,
    lease_key: Arc<str>,
    token: Arc<str>,
}

impl Fence {
    /// The fence of `sub` when it reads a partition of a stream ordered by
    /// key; `None` for any other subscription.
    pub(crate) fn of(sub: &Subscription) -> Option<Fence> {
        sub.key_order()?;
        let lease = sub.lease.as_ref()?;
        Some(Fence {
            partition: sub.names.name.clone(),
            lease_key: lease.key().into(),
            token: lease.token().into(),
        })
    }

    /// The keys and arguments of the fenced script that runs `cmd`.
    fn wrap(&self, cmd: &redis::Cmd) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let keys = vec![
            self.partition.as_bytes().to_vec(),
            self.lease_key.as_bytes().to_vec(),
        ];
        let mut args = vec![self.token.as_bytes().to_vec()];
        args.extend(cmd.args_iter().filter_map(|a| match a {
            redis::Arg::Simple(b) => Some(b.to_vec()),
            _ => None,
        }));
        (keys, args)
    }

    /// `cmd`, fenced, as a message for the shared [`RedisActor`](crate::redis::RedisActor).
    pub(crate) fn eval(&self, cmd: &redis::Cmd) -> crate::redis::Eval {
        let (keys, args) = self.wrap(cmd);
        crate::redis::Eval {
            script: &FENCED,
            keys,
            args,
        }
    }

    /// Runs `cmd`, fenced, on `conn` (the consumer's read connection).
    ///
    /// # Errors
    /// `LEASELOST` when the lease is not this consumer's; what Redis
    /// answers to `cmd`.
    pub(crate) async fn query<T: redis::FromRedisValue, C: ConnectionLike>(
        &self,
        conn: &mut C,
        cmd: &redis::Cmd,
    ) -> Result<T, Error> {
        let (keys, args) = self.wrap(cmd);
        run(conn, &FENCED, FENCED_LUA, &keys, &args).await
    }

    /// Reads up to `count` new entries of the partition for `consumer` of
    /// `group`, fenced; when there are none, waits up to `block` for the
    /// next one with `XREAD BLOCK` and answers none (the caller reads
    /// again). `newest` is the newest entry the loop knows of: a newer one
    /// in the consumer's PEL is answered as [`FencedRead::Strays`].
    ///
    /// # Errors
    /// `LEASELOST` when the lease is not this consumer's; what Redis
    /// answers.
    pub(crate) async fn read_new<C: ConnectionLike>(
        &self,
        conn: &mut C,
        group: &str,
        consumer: &str,
        count: usize,
        block: Duration,
        newest: Option<&str>,
    ) -> Result<FencedRead, Error> {
        let keys = [
            self.partition.as_bytes().to_vec(),
            self.lease_key.as_bytes().to_vec(),
        ];
        let args = [
            self.token.as_bytes().to_vec(),
            group.as_bytes().to_vec(),
            consumer.as_bytes().to_vec(),
            count.to_string().into_bytes(),
            newest.unwrap_or("").as_bytes().to_vec(),
        ];
        let v: Value = run(conn, &FENCED_READ, FENCED_READ_LUA, &keys, &args).await?;
        let after = match v {
            Value::SimpleString(s) if s == "STRAYS" => return Ok(FencedRead::Strays),
            Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            v => {
                let entries =
                    reply::read_reply(v).map_err(|m| Error::unparsable("XREADGROUP reply", m))?;
                return Ok(FencedRead::Entries(
                    entries
                        .into_iter()
                        .map(|raw| Delivered {
                            raw,
                            delivery_count: 1,
                        })
                        .collect(),
                ));
            }
        };
        let _: Value = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(1)
            .arg("BLOCK")
            .arg(block.as_millis() as u64)
            .arg("STREAMS")
            .arg(&*self.partition)
            .arg(after)
            .query_async(conn)
            .await
            .map_err(Error::from_redis)?;
        Ok(FencedRead::Entries(Vec::new()))
    }
}

/// Runs `script` (whose source is `source`) on `conn`: `EVALSHA`; on
/// `NOSCRIPT`, `SCRIPT LOAD` and `EVALSHA` again; and if that still
/// answers `NOSCRIPT`, the whole source with `EVAL` (`SCRIPT LOAD` has no
/// key: during a slot migration it goes to the slot's owner while the
/// `EVALSHA` follows `ASK` to the importing node).
async fn run<T: redis::FromRedisValue, C: ConnectionLike>(
    conn: &mut C,
    script: &redis::Script,
    source: &str,
    keys: &[Vec<u8>],
    args: &[Vec<u8>],
) -> Result<T, Error> {
    let call = |verb: &str, body: &str| {
        let mut cmd = redis::cmd(verb);
        cmd.arg(body).arg(keys.len()).arg(keys).arg(args);
        cmd
    };
    let no_script = |e: &redis::RedisError| {
        e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
    };
    match call("EVALSHA", script.get_hash()).query_async(conn).await {
        Err(e) if no_script(&e) => {}
        res => return res.map_err(Error::from_redis),
    }
    script.load_async(conn).await.map_err(Error::from_redis)?;
    match call("EVALSHA", script.get_hash()).query_async(conn).await {
        Err(e) if no_script(&e) => {}
        res => return res.map_err(Error::from_redis),
    }
    call("EVAL", source)
        .query_async(conn)
        .await
        .map_err(Error::from_redis)
}

/// What a fenced read of new entries found.
pub(crate) enum FencedRead {
    /// New entries, each on its first delivery (none: the wait ended).
    Entries(Vec<Delivered>),
    /// The consumer's PEL holds entries newer than any the loop knows of:
    /// a late read of this process delivered them. Nothing was read.
    Strays,
}
