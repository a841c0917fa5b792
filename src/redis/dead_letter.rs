//! The dead-letter move: one script that copies an entry to the
//! dead-letter stream and acks it, only while it is still pending for the
//! consumer that moves it.

use std::sync::{Arc, LazyLock};

use actix::prelude::*;
use redis::Value;

use super::{COMMAND_WAIT, RedisActor};
use crate::error::Error;
use crate::stream::EntryId;

/// An entry's field/value pairs, shared.
pub(crate) type Fields = Arc<[(Vec<u8>, Vec<u8>)]>;

/// One entry on its way to the dead-letter stream.
#[derive(Debug)]
pub(crate) struct DeadLetterEntry {
    pub stream: Arc<str>,
    pub group: Arc<str>,
    pub dlq: Arc<str>,
    pub consumer: Arc<str>,
    pub id: EntryId,
    pub delivery_count: u64,
    /// The entry's fields; `None`: copy them on the server, from the stream
    /// (an entry too large to be sent to this client).
    pub fields: Option<Fields>,
    pub error: String,
    /// The dead-letter stream's cap, in entries (`MAXLEN ~`), if any.
    pub dlq_max_len: Option<usize>,
    /// An entry of a stream ordered by key: its key and what its failure
    /// means for the key's later entries, recorded in the copy.
    pub order: Option<DeadLetterOrder>,
    /// Its failed runs seen by this consumer (the last 10, oldest first), a
    /// JSON array of `{delivery_count, at_ms, error}`: the copy's
    /// `attempts`.
    pub attempts: Option<String>,
}

/// The ordering part of a dead letter.
#[derive(Debug)]
pub(crate) struct DeadLetterOrder {
    pub key: Vec<u8>,
    /// `skip` or `fail_rest`.
    pub on_key_failure: &'static str,
    /// With `fail_rest`: the hash of failed keys where the move marks the
    /// key (`HSETNX <hash> <key> <id>`), in the same script.
    pub mark: Option<Arc<str>>,
    /// The entry goes because its key is marked failed: the move happens
    /// only while the mark is still in the hash (a redrive or an operator
    /// deletes it to let the key run again), checked in the same script.
    pub because_marked: bool,
}

/// What a dead-letter move answered.
#[derive(Debug)]
pub(crate) enum MoveAnswer {
    /// Copied and acked.
    Moved(Moved),
    /// The entry was no longer pending for this consumer: nothing done.
    NotPending,
    /// Moved only while its key is marked failed, and the mark is gone:
    /// nothing done, the entry may run.
    Unmarked,
}

/// A dead-letter move done: the dead-letter entry's id, and how many of the
/// oldest dead letters the cap removed to make room.
#[derive(Debug)]
pub(crate) struct Moved {
    pub id: EntryId,
    pub trimmed: u64,
    /// For a copy made on the server: the entry's size (its fields' and
    /// values' bytes).
    pub entry_bytes: Option<u64>,
}

/// Copy an entry to the dead-letter stream and XACK it, atomically, but only
/// while it is still pending for this consumer (so an entry acked or taken
/// over meanwhile is never copied twice). Answers the dead-letter entry's id
/// (and how many old dead letters its cap removed), or that nothing was done:
/// the entry was no longer this consumer's, or it was to go for its key's
/// mark and the mark is gone.
///
/// The copy keeps every original field verbatim and adds `origin_stream`,
/// `origin_id`, `origin_group`, `origin_consumer`, `delivery_count`, `error`
/// and `failed_at_ms` (ms since the Unix epoch), then `attempts` when the
/// consumer saw the entry fail (a JSON array of its failed runs), and for an
/// entry of a stream ordered by key `order_key` and `on_key_failure`. An entry this client could
/// not be sent (`fields: None`) is copied by the script from the stream
/// (`XRANGE <id> <id>`), and `{entry_bytes}` in its error text is replaced
/// by the entry's size; an entry deleted meanwhile leaves a copy with the
/// added fields only.
///
/// A Lua script rather than MULTI/EXEC: in a transaction a failing XADD (say
/// the dead-letter key holds a string) would not stop the XACK, and the entry
/// would be lost; in the script the failure aborts before anything is acked.
#[derive(Message, Clone)]
#[rtype(result = "Result<MoveAnswer, Error>")]
pub(crate) struct DeadLetter(pub Arc<DeadLetterEntry>);

/// KEYS: stream, dlq, and for `fail_rest` the hash of failed keys. ARGV:
/// group, id, consumer, the dead-letter cap (`0`: none), whether to copy
/// the entry's fields from the stream (`1`) or take them from the arguments
/// (`0`), the key to mark failed (empty: none), whether the move requires
/// that mark to be there already (`1`: the entry goes because of it), then
/// XADD's field/value pairs. Answers
/// `{dlq id, dead letters the cap removed, the copied entry's bytes (-1: not
/// copied here)}`, false when the entry is no longer this consumer's, or 0
/// when the mark it requires is gone.
///
/// Before writing anything it checks with `redis.acl_check_cmd` that both
/// writes are allowed, and answers `NOPERM` otherwise: a script that added the
/// copy and then met a refused XACK would abort after the copy, and every
/// retry would add one more. (`OOM` and `READONLY` stop a script at its first
/// write, before any copy.)
const DEAD_LETTER_LUA: &str = r#"
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 or p[1][2] ~= ARGV[3] then return false end
if ARGV[7] == '1' and ARGV[6] ~= '' and redis.call('HEXISTS', KEYS[3], ARGV[6]) == 0 then return 0 end
if not redis.acl_check_cmd('XADD', KEYS[2], '*', 'f', 'v') then
  return redis.error_reply('NOPERM this user has no permissions to run the xadd command on the dead-letter stream ' .. KEYS[2])
end
if not redis.acl_check_cmd('XACK', KEYS[1], ARGV[1], ARGV[2]) then
  return redis.error_reply('NOPERM this user has no permissions to run the xack command on ' .. KEYS[1])
end
if ARGV[6] ~= '' and not redis.acl_check_cmd('HSETNX', KEYS[3], ARGV[6], ARGV[2]) then
  return redis.error_reply('NOPERM this user has no permissions to run the hsetnx command on ' .. KEYS[3])
end
local cap = tonumber(ARGV[4])
local fields = {}
local bytes = -1
if ARGV[5] == '1' then
  bytes = 0
  local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
  if #e > 0 then
    for _, v in ipairs(e[1][2]) do
      fields[#fields + 1] = v
      bytes = bytes + #v
    end
  end
end
for i = 8, #ARGV do
  local v = ARGV[i]
  if bytes >= 0 then v = (string.gsub(v, '{entry_bytes}', tostring(bytes))) end
  fields[#fields + 1] = v
end
local dlq_id, trimmed
if cap > 0 then
  local before = redis.call('XLEN', KEYS[2])
  dlq_id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', cap, '*', unpack(fields))
  trimmed = before + 1 - redis.call('XLEN', KEYS[2])
else
  dlq_id = redis.call('XADD', KEYS[2], '*', unpack(fields))
  trimmed = 0
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if ARGV[6] ~= '' then redis.call('HSETNX', KEYS[3], ARGV[6], ARGV[2]) end
return {dlq_id, trimmed, bytes}
"#;

static DEAD_LETTER: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(DEAD_LETTER_LUA));

impl Handler<DeadLetter> for RedisActor {
    type Result = ResponseFuture<Result<MoveAnswer, Error>>;

    fn handle(&mut self, msg: DeadLetter, _: &mut Self::Context) -> Self::Result {
        let pool = self.pool.clone();
        Box::pin(async move {
            let e = &*msg.0;
            let now_ms = crate::util::now_ms();
            let mut call = DEAD_LETTER.key(&*e.stream);
            call.key(&*e.dlq);
            let mark = e
                .order
                .as_ref()
                .and_then(|o| Some((o.mark.as_ref()?, &o.key)));
            if let Some((hash, _)) = mark {
                call.key(&**hash);
            }
            call.arg(&*e.group)
                .arg(&e.id)
                .arg(&*e.consumer)
                .arg(e.dlq_max_len.unwrap_or(0))
                .arg(if e.fields.is_some() { "0" } else { "1" })
                .arg(mark.map_or(&[][..], |(_, key)| key.as_slice()))
                .arg(if e.order.as_ref().is_some_and(|o| o.because_marked) {
                    "1"
                } else {
                    "0"
                });
            for (k, v) in e.fields.iter().flat_map(|f| f.iter()) {
                call.arg(k).arg(v);
            }
            call.arg("origin_stream")
                .arg(&*e.stream)
                .arg("origin_id")
                .arg(&e.id)
                .arg("origin_group")
                .arg(&*e.group)
                .arg("origin_consumer")
                .arg(&*e.consumer)
                .arg("delivery_count")
                .arg(e.delivery_count)
                .arg("error")
                .arg(&e.error)
                .arg("failed_at_ms")
                .arg(now_ms);
            if let Some(a) = &e.attempts {
                call.arg("attempts").arg(a.as_str());
            }
            if let Some(o) = &e.order {
                call.arg("order_key")
                    .arg(o.key.as_slice())
                    .arg("on_key_failure")
                    .arg(o.on_key_failure);
            }
            let answer: Value = pool
                .run("evalsha", COMMAND_WAIT, |mut conn| async move {
                    call.invoke_async(&mut conn).await
                })
                .await?;
            match answer {
                Value::Nil => Ok(MoveAnswer::NotPending),
                Value::Int(0) => Ok(MoveAnswer::Unmarked),
                v => {
                    let (id, trimmed, bytes): (String, u64, i64) = redis::from_redis_value(v)
                        .map_err(|e| {
                            Error::unparsable("dead-letter script reply", e.to_string())
                        })?;
                    Ok(MoveAnswer::Moved(Moved {
                        id: EntryId(id),
                        trimmed,
                        entry_bytes: u64::try_from(bytes).ok(),
                    }))
                }
            }
        })
    }
}
