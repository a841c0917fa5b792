//! Idempotent adds: an entry published again under the same producer and
//! message id, within a window, is not added again; the add answers the
//! first entry's id. One mechanism for the broker's
//! `publish_idempotent` and the admin's `add_idempotent` (the CLI's
//! `publish --idempotency-key-field`).
//!
//! Where the stream's master has `XADD … IDMP` (Redis 8.6), the add is
//! `XADD <stream> IDMP <producer> <message id> * …`, and the stream's own
//! history keeps the ids: the first add of a stream by this process makes
//! sure the stream keeps them long enough (`XCFGSET <stream> IDMP-DURATION
//! <window s> IDMP-MAXSIZE 10000`, only when the stream keeps them shorter
//! or fewer: a change clears the history). Elsewhere one script checks a
//! marker key in the stream's hash slot
//! (`<slot>:rillkit:idmp:<producer>:<message id>`, holding the entry id,
//! expiring after the window) and adds the entry and the marker together.
//!
//! The contract on both paths: a resend within `window` of the first add
//! answers the first entry's id and adds nothing. On Redis 8.6 and later
//! the server also forgets a producer's ids past the newest
//! [`IDS_KEPT`]; the script keeps every marker for the window. Markers are
//! keys: an eviction policy that may evict any key (`allkeys-*`) can
//! forget one early.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use super::commands::{self, ServerCommands};
use crate::connection::Shared;
use crate::error::classify;
use crate::stream::EntryId;

/// How many message ids per producer a stream keeps on Redis 8.6 and later
/// (its `IDMP-MAXSIZE`; the server's limit).
pub(crate) const IDS_KEPT: u32 = 10_000;

/// KEYS: stream, marker. ARGV: window ms, max len (`''` none), create
/// (`1`/`0`), producer and message id for `IDMP` (`''`: the marker's path),
/// then the field/value pairs. Answers `{id, 1}` for a marked resend,
/// `{id, 0}` for an add, nil when the stream does not exist and may not be
/// created.
///
/// Both paths look at the marker first, so a message added by the marker's
/// path and resent after the stream's master was upgraded (a failover, a
/// rolling upgrade) is not added again by `IDMP`.
const ADD_ONCE_LUA: &str = r#"
local seen = redis.call('GET', KEYS[2])
if seen then return {seen, 1} end
if ARGV[3] == '0' and redis.call('EXISTS', KEYS[1]) == 0 then return false end
local args = {'XADD', KEYS[1]}
if ARGV[2] ~= '' then
  args[#args + 1] = 'MAXLEN'; args[#args + 1] = '~'; args[#args + 1] = ARGV[2]
end
if ARGV[4] ~= '' then
  args[#args + 1] = 'IDMP'; args[#args + 1] = ARGV[4]; args[#args + 1] = ARGV[5]
end
args[#args + 1] = '*'
for i = 6, #ARGV do args[#args + 1] = ARGV[i] end
local id = redis.call(unpack(args))
if ARGV[4] == '' then redis.call('SET', KEYS[2], id, 'PX', ARGV[1]) end
return {id, 0}
"#;

/// The most field/value pairs an idempotent add takes (Lua's `unpack`
/// limit, with room to spare).
pub(crate) const MAX_FIELDS: usize = 1_000;

static ADD_ONCE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(ADD_ONCE_LUA));

/// KEYS: stream. ARGV: window s, ids kept, create (`1`/`0`). Makes the
/// stream keep its producers' ids at least that long and that many
/// (exactly that for a stream it creates, empty, when allowed: a change of
/// the settings clears the ids kept, so it comes before the first add). Answers -1 when the stream
/// does not exist and may not be created, 1 when the settings changed.
const KEEP_IDS_LUA: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[3] == '0' then return -1 end
  redis.call('XADD', KEYS[1], 'MAXLEN', '0', '*', 'rillkit', 'created')
  redis.call('XCFGSET', KEYS[1], 'IDMP-DURATION', ARGV[1], 'IDMP-MAXSIZE', ARGV[2])
  return 1
end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local duration, size = 0, 0
for i = 1, #info, 2 do
  if info[i] == 'idmp-duration' then duration = tonumber(info[i + 1]) end
  if info[i] == 'idmp-maxsize' then size = tonumber(info[i + 1]) end
end
if duration >= tonumber(ARGV[1]) and size >= tonumber(ARGV[2]) then return 0 end
redis.call('XCFGSET', KEYS[1], 'IDMP-DURATION', math.max(duration, tonumber(ARGV[1])),
  'IDMP-MAXSIZE', math.max(size, tonumber(ARGV[2])))
return 1
"#;

static KEEP_IDS: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(KEEP_IDS_LUA));

/// One idempotent add.
pub(crate) struct AddOnce<'a> {
    pub stream: &'a str,
    pub producer: &'a str,
    pub message_id: &'a [u8],
    pub fields: &'a [(&'a [u8], &'a [u8])],
    pub max_len: Option<usize>,
    pub window: Duration,
    /// Create the stream when there is none (else the add answers `None`).
    pub create: bool,
}

/// What a connection's owner learned per stream: the stream's server's
/// commands, and the window (s) the stream was made to keep its ids for
/// (0: not yet). Forgotten for a stream whose add failed (the server may
/// have changed) or that was gone.
#[derive(Default)]
pub(crate) struct Known(Mutex<HashMap<String, (ServerCommands, u64)>>);

impl Known {
    fn get(&self, stream: &str) -> Option<(ServerCommands, u64)> {
        self.0.lock().expect("known lock").get(stream).copied()
    }

    fn set(&self, stream: &str, known: (ServerCommands, u64)) {
        self.0
            .lock()
            .expect("known lock")
            .insert(stream.to_owned(), known);
    }

    fn forget(&self, stream: &str) {
        self.0.lock().expect("known lock").remove(stream);
    }
}

/// The marker key of a message on servers without `IDMP`.
pub(crate) fn marker_key(stream: &str, producer: &str, message_id: &[u8]) -> Vec<u8> {
    let mut key = format!(
        "{}:rillkit:idmp:{}:",
        crate::keys::slot_prefix(stream),
        crate::keys::key_part(producer)
    )
    .into_bytes();
    key.extend_from_slice(message_id);
    key
}

/// Adds `add`'s entry unless its producer and message id were added within
/// the window; answers the entry's id (the first one's for a resend), or
/// `None` when the stream does not exist and `create` is off.
///
/// # Errors
/// What Redis answers (a connection error, `READONLY`, `OOM`, the ACL…);
/// the stream's server is asked again before the next add.
pub(crate) async fn add(
    conn: &mut Shared,
    known: &Known,
    add: &AddOnce<'_>,
) -> redis::RedisResult<Option<EntryId>> {
    let result = add_known(conn, known, add).await;
    if result.is_err() {
        known.forget(add.stream);
    }
    result
}

async fn add_known(
    conn: &mut Shared,
    known: &Known,
    add: &AddOnce<'_>,
) -> redis::RedisResult<Option<EntryId>> {
    let (found, kept) = match known.get(add.stream) {
        Some(k) => k,
        None => {
            let reply = conn
                .on_key(&commands::question(), add.stream.as_bytes())
                .await;
            let found = match reply {
                Ok(reply) => commands::parse(&reply),
                Err(e) if classify(&e).is_retryable() => return Err(e),
                // Refused (an ACL, an old server): the marker's path.
                Err(_) => ServerCommands::default(),
            };
            (found, 0)
        }
    };
    if !found.idempotent_add() {
        known.set(add.stream, (found, 0));
        return by_script(conn, add, false).await;
    }
    // Whole seconds, rounded up: a window is never shortened.
    let window_s = add.window.as_millis().div_ceil(1000).max(1) as u64;
    if kept < window_s {
        let answer: i64 = KEEP_IDS
            .key(add.stream)
            .arg(window_s)
            .arg(IDS_KEPT)
            .arg(if add.create { "1" } else { "0" })
            .invoke_async(&mut *conn)
            .await?;
        if answer < 0 {
            return Ok(None);
        }
        known.set(add.stream, (found, window_s));
    }
    // Never created here: a stream made by the add would keep the server's
    // 100 s and 100 ids; a stream gone since is made again by `KEEP_IDS`.
    let added = by_script(conn, add, true).await?;
    if added.is_none() && add.create {
        known.forget(add.stream);
        let answer: i64 = KEEP_IDS
            .key(add.stream)
            .arg(window_s)
            .arg(IDS_KEPT)
            .arg("1")
            .invoke_async(&mut *conn)
            .await?;
        if answer >= 0 {
            known.set(add.stream, (found, window_s));
        }
        return by_script(conn, add, true).await;
    }
    Ok(added)
}

/// The add script: with `idmp`, the server's `XADD … IDMP` and no stream
/// made; else a marker beside the entry.
async fn by_script(
    conn: &mut Shared,
    add: &AddOnce<'_>,
    idmp: bool,
) -> redis::RedisResult<Option<EntryId>> {
    let mut invocation = ADD_ONCE.key(add.stream);
    invocation
        .key(marker_key(add.stream, add.producer, add.message_id))
        .arg(add.window.as_millis().max(1) as u64)
        .arg(add.max_len.map(|n| n.to_string()).unwrap_or_default())
        .arg(if add.create && !idmp { "1" } else { "0" });
    if idmp {
        invocation.arg(add.producer).arg(add.message_id);
    } else {
        invocation.arg("").arg("");
    }
    for (k, v) in add.fields {
        invocation.arg(*k).arg(*v);
    }
    let reply: Option<(String, i64)> = invocation.invoke_async(conn).await?;
    Ok(reply.map(|(id, _)| EntryId(id)))
}
