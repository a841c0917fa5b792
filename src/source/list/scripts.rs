//! The Lua scripts of reliable list consumers. Every key of one script
//! shares the list's hash slot (see `slot_prefix`), so they run in a
//! cluster as well.
//!
//! A processing list holds the newest item on its left (`BLMOVE … RIGHT
//! LEFT`); moving it back with `LMOVE … LEFT RIGHT` one item at a time
//! puts its oldest item at the right end of the list, where it is popped
//! next, so recovered work keeps its order and goes first.
//!
//! A consumer's heartbeat key is a liveness record that eviction cannot
//! take: `<token> <expiry ms>`, the expiry on the server's clock (`TIME`),
//! in a key without a TTL (a `volatile-*` policy evicts only keys with
//! one). A record past its expiry is a dead consumer's; a registered
//! consumer with no record at all (evicted under an `allkeys-*` policy,
//! deleted by hand) is not taken for dead: it gets a placeholder record
//! (`? <expiry>`), a whole window in which its owner's next beat takes it
//! back, and is recovered only if that window passes.

use std::sync::LazyLock;

use redis::Script;

/// Lua shared by the scripts that read a heartbeat record: `now()` in ms on
/// the server's clock, and `record(key)`, the token and expiry of a record
/// (`nil` when there is none). A record written before records carried
/// their expiry (a bare token, with a TTL) counts as live until its TTL
/// ends.
macro_rules! with_record {
    ($body:literal) => {
        concat!(
            r"
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function record(key)
  local v = redis.call('GET', key)
  if not v then return nil end
  local token, expiry = string.match(v, '^(%S+) (%d+)$')
  if token then return token, tonumber(expiry) end
  return v, now() + math.max(redis.call('PTTL', key), 0)
end
",
            $body
        )
    };
}

/// Registers the consumer and renews its heartbeat, which is also the
/// consumer name's lease: a live record that holds another process's token
/// is left alone, and its token is the answer (1 when ours, or when the
/// record was free, lapsed or a placeholder).
/// KEYS: registry, heartbeat. ARGV: consumer, ttl (ms), token.
pub(super) static HEARTBEAT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(with_record!(
        r"
local t = now()
local holder, expiry = record(KEYS[2])
if holder and holder ~= ARGV[3] and holder ~= '?' and expiry > t then
  return holder
end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[3] .. ' ' .. (t + tonumber(ARGV[2])))
return 1
"
    ))
});

/// Moves the processing list of every registered consumer whose heartbeat
/// record has lapsed (other than the caller) back onto the list, and
/// unregisters it and deletes its record: once, since it all happens in
/// the same script. A registered consumer without a record gets a
/// placeholder for `ARGV[3]` ms instead (see the module docs). Answers
/// `{consumers recovered, items moved, records missing}`.
/// KEYS: list, registry. ARGV: key prefix (`…:rillkit:`), caller, grace (ms).
pub(super) static RECOVER_DEAD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(with_record!(
        r"
local t = now()
local dead, moved, missing = 0, 0, 0
for _, c in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local hb = ARGV[1] .. 'heartbeat:' .. c
  local holder, expiry = record(hb)
  if c == ARGV[2] then
  elseif not holder then
    redis.call('SET', hb, '? ' .. (t + tonumber(ARGV[3])))
    missing = missing + 1
  elseif expiry <= t then
    local processing = ARGV[1] .. 'processing:' .. c
    while redis.call('LMOVE', processing, KEYS[1], 'LEFT', 'RIGHT') do
      moved = moved + 1
    end
    redis.call('SREM', KEYS[2], c)
    redis.call('DEL', hb)
    dead = dead + 1
  end
end
return {dead, moved, missing}
"
    ))
});

/// Moves a processing list back onto the list (this consumer's own, left
/// by an earlier process under its name, or at the end of a stop), only
/// while the heartbeat record is not another live process's (answers -1
/// then, and touches nothing). With `ARGV[1] == 'leave'` also unregisters
/// the consumer and deletes its record. Answers the number of items moved.
/// KEYS: processing, list, registry, heartbeat. ARGV: mode, consumer, token.
pub(super) static RETURN_OWN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(with_record!(
        r"
local holder, expiry = record(KEYS[4])
if holder and holder ~= ARGV[3] and holder ~= '?' and expiry > now() then
  return -1
end
local moved = 0
while redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT') do
  moved = moved + 1
end
if ARGV[1] == 'leave' then
  redis.call('SREM', KEYS[3], ARGV[2])
  redis.call('DEL', KEYS[4])
end
return moved
"
    ))
});

/// Items whose handler succeeded (one, or a batch's): each leaves the
/// processing list once, and its attempt count goes. Answers how many were
/// removed.
/// KEYS: processing, attempts. ARGV: item, item, …
pub(super) static DONE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local n = 0
for i = 1, #ARGV do
  n = n + redis.call('LREM', KEYS[1], -1, ARGV[i])
  redis.call('HDEL', KEYS[2], ARGV[i])
end
return n
",
    )
});

/// Moves an item from the processing list to the dead-letter list, only if
/// it is still on the processing list (a survivor may have moved it back
/// while this process was cut off): at most one dead letter per pop. The
/// push comes before the removal: Redis does not undo a script's earlier
/// writes when a later command fails, so a refused push (`WRONGTYPE`, say)
/// leaves the item where it was, and the script may run again.
/// KEYS: processing, dlq, attempts. ARGV: item, dead letter.
pub(super) static DEAD_LETTER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if not redis.call('LPOS', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('LREM', KEYS[1], -1, ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
",
    )
});

/// An item popped after a stop was asked for, never run (or one a lost
/// reply stranded): back to the right end of the list, where it is popped
/// next; with `ARGV[2] == '1'` the run its pop counted is taken back.
/// Pushed before it is removed, as in [`DEAD_LETTER`].
/// KEYS: processing, list, attempts. ARGV: item, uncount.
pub(super) static PUT_BACK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if not redis.call('LPOS', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('LREM', KEYS[1], -1, ARGV[1])
if ARGV[2] == '1' and redis.call('HINCRBY', KEYS[3], ARGV[1], -1) <= 0 then
  redis.call('HDEL', KEYS[3], ARGV[1])
end
return 1
",
    )
});

/// The pop of a busy list: up to `ARGV[1]` items move onto the processing
/// list and each one's run is counted in the same step, so no crash falls
/// between the two. Answers `{item, count, item, count, …}`, empty on an
/// empty list (then the consumer blocks in `BLMOVE`). An item longer than
/// `ARGV[2]` bytes is answered as `{its length}` instead, and ends the pop:
/// it is at the head of the processing list, where `ITEM_PIECE` reads it
/// (a server closes a client whose reply outgrows its output buffer).
/// KEYS: list, processing, attempts. ARGV: how many at most, inline limit.
pub(super) static POP_COUNTED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local out = {}
local limit = tonumber(ARGV[2])
for _ = 1, tonumber(ARGV[1]) do
  local item = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  if not item then
    break
  end
  local count = redis.call('HINCRBY', KEYS[3], item, 1)
  if #item > limit then
    out[#out + 1] = {#item}
    out[#out + 1] = count
    break
  end
  out[#out + 1] = item
  out[#out + 1] = count
end
return out
",
    )
});

/// A window of the item at `ARGV[1]` (an index) of the processing list,
/// for `redis::chunked::read_in_pieces`: `{{its length}, its bytes from
/// ARGV[2] for ARGV[3]}`, or false when there is no such item.
/// KEYS: processing. ARGV: index, byte offset, window size.
pub(super) static ITEM_PIECE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local item = redis.call('LINDEX', KEYS[1], ARGV[1])
if not item then
  return false
end
local from = tonumber(ARGV[2]) + 1
return {{#item}, string.sub(item, from, from + tonumber(ARGV[3]) - 1)}
",
    )
});

/// Puts every item of the processing list that the loop does not hold back
/// onto the list (the oldest where it is popped next), in one step, so an
/// item settled meanwhile is left alone and no item's body comes back to
/// the client. ARGV holds the held items with their numbers of copies, as
/// pairs. Each is pushed before it is removed, as in [`DEAD_LETTER`].
/// Answers how many went back.
/// KEYS: processing, list. ARGV: item, copies, item, copies, …
pub(super) static PUT_BACK_UNHELD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local keep = {}
for i = 1, #ARGV, 2 do
  keep[ARGV[i]] = (keep[ARGV[i]] or 0) + tonumber(ARGV[i + 1])
end
local moved = 0
for _, item in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  local k = keep[item]
  if k and k > 0 then
    keep[item] = k - 1
  else
    redis.call('RPUSH', KEYS[2], item)
    redis.call('LREM', KEYS[1], -1, item)
    moved = moved + 1
  end
end
return moved
",
    )
});
