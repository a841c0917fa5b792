//! The Lua scripts of reliable list consumers. Every key of one script
//! shares the list's hash slot (see `slot_prefix`), so they run in a
//! cluster as well.
//!
//! A processing list holds the newest item on its left (`BLMOVE … RIGHT
//! LEFT`); moving it back with `LMOVE … LEFT RIGHT` one item at a time
//! puts its oldest item at the right end of the list, where it is popped
//! next, so recovered work keeps its order and goes first.

use std::sync::LazyLock;

use redis::Script;

/// Registers the consumer and renews its heartbeat, which is also the
/// consumer name's lease: a heartbeat key that holds another process's
/// token is left alone, and its token is the answer (1 when ours).
/// KEYS: registry, heartbeat. ARGV: consumer, ttl (ms), token.
pub(super) static HEARTBEAT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[3] then
  return holder
end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
return 1
",
    )
});

/// Moves the processing list of every registered consumer whose heartbeat
/// has lapsed (other than the caller) back onto the list, and unregisters
/// it: once, since the unregistering happens in the same script. Answers
/// `{consumers recovered, items moved}`.
/// KEYS: list, registry. ARGV: key prefix (`…:rillkit:`), caller.
pub(super) static RECOVER_DEAD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local dead, moved = 0, 0
for _, c in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if c ~= ARGV[2] and redis.call('EXISTS', ARGV[1] .. 'heartbeat:' .. c) == 0 then
    local processing = ARGV[1] .. 'processing:' .. c
    while redis.call('LMOVE', processing, KEYS[1], 'LEFT', 'RIGHT') do
      moved = moved + 1
    end
    redis.call('SREM', KEYS[2], c)
    dead = dead + 1
  end
end
return {dead, moved}
",
    )
});

/// Moves a processing list back onto the list (this consumer's own, left
/// by an earlier process under its name, or at the end of a stop), only
/// while the heartbeat is not another process's (answers -1 then, and
/// touches nothing). With `ARGV[1] == 'leave'` also unregisters the
/// consumer and deletes its heartbeat. Answers the number of items moved.
/// KEYS: processing, list, registry, heartbeat. ARGV: mode, consumer, token.
pub(super) static RETURN_OWN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local holder = redis.call('GET', KEYS[4])
if holder and holder ~= ARGV[3] then
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
",
    )
});

/// An item's handler succeeded: it leaves the processing list, and its
/// attempt count goes.
/// KEYS: processing, attempts. ARGV: item.
pub(super) static DONE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local n = redis.call('LREM', KEYS[1], -1, ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return n
",
    )
});

/// Moves an item from the processing list to the dead-letter list, only if
/// it is still on the processing list (a survivor may have moved it back
/// while this process was cut off): at most one dead letter per pop.
/// KEYS: processing, dlq, attempts. ARGV: item, dead letter.
pub(super) static DEAD_LETTER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
redis.call('LPUSH', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
",
    )
});

/// An item popped after a stop was asked for, never run (or one a lost
/// reply stranded): back to the right end of the list, where it is popped
/// next; with `ARGV[2] == '1'` the run its pop counted is taken back.
/// KEYS: processing, list, attempts. ARGV: item, uncount.
pub(super) static PUT_BACK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then
  return 0
end
redis.call('RPUSH', KEYS[2], ARGV[1])
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
/// empty list (then the consumer blocks in `BLMOVE`).
/// KEYS: list, processing, attempts. ARGV: how many at most.
pub(super) static POP_COUNTED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local out = {}
for _ = 1, tonumber(ARGV[1]) do
  local item = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  if not item then
    break
  end
  out[#out + 1] = item
  out[#out + 1] = redis.call('HINCRBY', KEYS[3], item, 1)
end
return out
",
    )
});
