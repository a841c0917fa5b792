//! Putting dead letters back ([`Admin::redrive`]): one script per dead
//! letter moves it from the dead-letter stream to its origin stream, and
//! what was done is reported ([`RedriveReport`]).

use std::sync::LazyLock;

use super::{DeadLetterFilter, Selection};
use crate::admin::Admin;
use crate::error::Error;
use crate::keys::{dlq_slot_error, key_slot, partition_keys};
use crate::order::OnKeyFailure;
use crate::stream::EntryId;

/// What [`Admin::redrive`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedriveReport {
    /// The dead letters put back on their origin stream, oldest first.
    pub redriven: Vec<Redriven>,
    /// The selected dead letters left where they are, each with the reason.
    pub skipped: Vec<Skipped>,
}

impl RedriveReport {
    /// How many dead letters were redriven.
    pub fn count(&self) -> usize {
        self.redriven.len()
    }

    /// Whether dead letters were selected and every one was skipped: a
    /// redrive that did nothing, which is not a success. The CLI exits 1 on
    /// it and the dashboard's banner says "Nothing redriven"; the reasons
    /// are in [`skipped`](Self::skipped). `false` when nothing was selected.
    pub fn all_skipped(&self) -> bool {
        self.redriven.is_empty() && !self.skipped.is_empty()
    }
}

/// One dead letter put back on its origin stream.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Redriven {
    /// Its id in the dead-letter stream (deleted from there now).
    pub dead_letter: EntryId,
    /// The stream it went back to (its `origin_stream`).
    pub stream: String,
    /// The new entry's id on that stream.
    pub id: EntryId,
    /// The group it runs again in (its `origin_group`): the only group of
    /// the stream that runs it.
    pub group: String,
    /// For a dead letter of a stream [ordered by key](crate::Stream::ordered_by)
    /// with `on_key_failure` = `fail_rest`: its key, when the redrive deleted
    /// the key's mark (see [`Admin::redrive`]); `None` otherwise.
    pub lifted_mark: Option<Vec<u8>>,
}

/// A selected dead letter [`Admin::redrive`] left in the dead-letter stream.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Skipped {
    /// Its id in the dead-letter stream.
    pub id: EntryId,
    /// Why it stayed.
    pub reason: String,
}

/// KEYS: origin stream, dead-letter stream, and for a `fail_rest` dead
/// letter the origin partition's hash of failed keys. ARGV: the dead
/// letter's id, its `origin_group` as the caller read it. Answers
/// `{1, new id, 1 when the key's mark was deleted else 0, the groups moved
/// past the new entry}`, or `{0, reason, 0, 0}` when it leaves the dead
/// letter alone.
///
/// It reads the dead letter itself, so what it puts back is what is there
/// now; checks that the entry ends with the seven appended fields (then
/// `attempts` when the move recorded them, and for an entry of a stream
/// ordered by key `order_key` and `on_key_failure`) and that its
/// `origin_stream` is KEYS[1]; reads the
/// origin stream's groups (`XINFO GROUPS`): the dead letter stays when the
/// stream has groups but not its `origin_group` (no one would run it); for
/// `on_key_failure` = `fail_rest` reads the key's mark (`HGET`: a key of
/// another type fails here, before any write) and deletes it when it is
/// not newer than the dead letter's `origin_id` (the mark this failure or
/// an earlier one of the key set; a newer mark was set by a later failure
/// of the key, a redriven entry failing again, and stays); checks with
/// `redis.acl_check_cmd` that every write is allowed before the first
/// (`NOPERM` otherwise, so a refusal never leaves a copy); then `XADD`s the
/// original fields (an earlier `redriven_from` and `redriven_for` left out)
/// plus `redriven_from` = `origin_id` and, when the stream has other
/// groups, `redriven_for` = `origin_group` to the origin stream; moves
/// every other group that had been delivered everything (its last-delivered
/// id at or past the newest entry before the `XADD`) past the new entry
/// (`XGROUP SETID … ENTRIESREAD`, when the ACL allows it), so it never
/// reads it; deletes the mark, and `XDEL`s the dead letter. A failing
/// `XADD` (the origin key holds another type) aborts before anything else.
const REDRIVE_LUA: &str = r#"
local rows = redis.call('XRANGE', KEYS[2], ARGV[1], ARGV[1])
if #rows == 0 then return {0, 'no longer in the dead-letter stream', 0, 0} end
local f = rows[1][2]
local n = #f
local foreign = 'no origin_stream: not a dead letter rillkit wrote'
local key, rule = nil, nil
if n >= 18 and f[n - 3] == 'order_key' and f[n - 1] == 'on_key_failure' then
  key, rule = f[n - 2], f[n]
  n = n - 4
end
if n >= 16 and f[n - 1] == 'attempts' and f[n - 3] == 'failed_at_ms' then
  n = n - 2
end
local names = {'origin_stream', 'origin_id', 'origin_group', 'origin_consumer',
               'delivery_count', 'error', 'failed_at_ms'}
if n < 14 then return {0, foreign, 0, 0} end
for i = 1, 7 do
  if f[n - 15 + 2 * i] ~= names[i] then return {0, foreign, 0, 0} end
end
if f[n - 12] ~= KEYS[1] then return {0, 'its origin_stream is not ' .. KEYS[1], 0, 0} end
local origin_id = f[n - 10]
local group = f[n - 8]
local function after(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if not am or not bm then return false end
  if #am ~= #bm then return #am > #bm end
  if am ~= bm then return am > bm end
  if #as ~= #bs then return #as > #bs end
  return as > bs
end
if not redis.acl_check_cmd('XINFO', 'GROUPS', KEYS[1]) then
  return redis.error_reply('NOPERM this user has no permissions to run the xinfo|groups command on ' .. KEYS[1])
end
local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
if groups['err'] then
  if not string.find(groups['err'], 'no such key', 1, true) then return groups end
  groups = {}
end
local others, own = {}, false
for _, g in ipairs(groups) do
  local info = {}
  for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
  if info['name'] == group then own = true else others[#others + 1] = info end
end
if #others > 0 and not own then
  return {0, 'its origin group ' .. group .. ' is not a group of ' .. KEYS[1] .. ' (its other groups must not run it)', 0, 0}
end
local lift = false
if rule == 'fail_rest' then
  if KEYS[3] == nil or group ~= ARGV[2] then
    return {0, 'the dead letter was read differently by the script; try again', 0, 0}
  end
  local mark = redis.call('HGET', KEYS[3], key)
  lift = mark ~= false and not after(mark, origin_id)
end
if not redis.acl_check_cmd('XADD', KEYS[1], '*', 'f', 'v') then
  return redis.error_reply('NOPERM this user has no permissions to run the xadd command on ' .. KEYS[1])
end
if not redis.acl_check_cmd('XDEL', KEYS[2], ARGV[1]) then
  return redis.error_reply('NOPERM this user has no permissions to run the xdel command on the dead-letter stream ' .. KEYS[2])
end
if lift and not redis.acl_check_cmd('HDEL', KEYS[3], key) then
  return redis.error_reply('NOPERM this user has no permissions to run the hdel command on ' .. KEYS[3])
end
local args = {}
for i = 1, n - 14, 2 do
  if f[i] ~= 'redriven_from' and f[i] ~= 'redriven_for' then
    args[#args + 1] = f[i]
    args[#args + 1] = f[i + 1]
  end
end
args[#args + 1] = 'redriven_from'
args[#args + 1] = origin_id
if #others > 0 then
  args[#args + 1] = 'redriven_for'
  args[#args + 1] = group
end
local top = nil
if #others > 0 then
  local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
  if #last > 0 then top = last[1][1] end
end
local id = redis.call('XADD', KEYS[1], '*', unpack(args))
local moved = 0
for _, g in ipairs(others) do
  local seen = g['last-delivered-id']
  if (top == nil or seen == top or after(seen, top))
      and redis.acl_check_cmd('XGROUP', 'SETID', KEYS[1], g['name'], id) then
    local read = tonumber(g['entries-read'])
    if read then
      redis.call('XGROUP', 'SETID', KEYS[1], g['name'], id, 'ENTRIESREAD', read + 1)
    else
      redis.call('XGROUP', 'SETID', KEYS[1], g['name'], id)
    end
    moved = moved + 1
  end
end
if lift then redis.call('HDEL', KEYS[3], key) end
redis.call('XDEL', KEYS[2], ARGV[1])
return {1, id, lift and 1 or 0, moved}
"#;

static REDRIVE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(REDRIVE_LUA));

impl Admin {
    /// Puts the dead letters of `dlq` that `filter` selects back on their
    /// origin stream, oldest first, each as a **new** entry (a new id) with
    /// its original fields verbatim plus `redriven_from` = the dead letter's
    /// `origin_id` (an earlier `redriven_from`, from an earlier redrive, is
    /// replaced; the appended fields, `attempts`, `order_key` and
    /// `on_key_failure` included, are left out), and deletes it from `dlq`. Each dead letter
    /// moves in one Lua script (`XRANGE`, `XADD`, `XDEL` over the origin
    /// stream and `dlq`), so it ends up in exactly one of the two streams.
    /// This is the one redrive: the `rillkit` tool and the dashboard call it
    /// too.
    ///
    /// **It runs again in its own group only** (its `origin_group`), with a
    /// fresh delivery count. When the origin stream has other consumer
    /// groups, the new entry also gets `redriven_for` = `origin_group`, and
    /// the script moves each other group that had been delivered every entry
    /// (`XINFO GROUPS`: its last-delivered id at or past the newest entry)
    /// past the new one (`XGROUP SETID … ENTRIESREAD`, so its lag stays
    /// right): it never reads it. A group still behind reads it later, and
    /// rillkit's consumers ack an entry redriven for another group without
    /// running it. A consumer that is not rillkit sees such an entry with
    /// its `redriven_for` field and should skip it when that is not its
    /// group. A stream with groups but not the dead letter's own is
    /// skipped: no group would run it. Select one group's dead letters with
    /// [`DeadLetterFilter::with_group`]; without it each dead letter goes
    /// back to its own group.
    ///
    /// **Streams ordered by key.** A partition's dead letters go back to
    /// their partition (`<name>:p<i>`, their `origin_stream`) in the order
    /// they failed, so a key's entries keep their order among themselves;
    /// they come after whatever the key had since, and run even if newer
    /// entries of the key have run meanwhile. For a dead letter with
    /// `on_key_failure` = `fail_rest`, the same script deletes its key's
    /// mark for its `origin_group` (`HDEL
    /// {<partition>}:rillkit:failed-keys:<group> <key>`), so the redriven
    /// entries run instead of following the mark back here, unless the
    /// mark is newer than the dead letter (the key failed again after it,
    /// say a redriven entry failing again: that mark stays, and what is
    /// redriven after it is dead-lettered behind it again, as `fail_rest`
    /// means). The deleted mark is reported in
    /// [`Redriven::lifted_mark`]. [`dead_letter_streams`](Self::dead_letter_streams)
    /// names every partition's dead-letter stream of an ordered stream.
    ///
    /// Skipped, with the reason, and left in `dlq`: an entry without the
    /// appended fields (no `origin_stream`), one whose origin key holds
    /// something else than a stream (`WRONGTYPE`), one deleted meanwhile,
    /// and under a cluster one whose origin stream is in another hash slot
    /// than `dlq` (a script's keys must share a slot; a default dead-letter
    /// name, `{<name>}-dlq`, always does). A report where every selected
    /// dead letter was skipped is a redrive that did nothing:
    /// [`RedriveReport::all_skipped`].
    ///
    /// # Errors
    /// [`Error::Redis`] when `dlq` is not a stream, an id of the filter is
    /// malformed, a key's mark is not a hash (`WRONGTYPE`), or the ACL user
    /// may not `XINFO GROUPS` or `XADD` the origin, `XDEL` from `dlq` or, for a
    /// `fail_rest` dead letter, `HGET` and `HDEL` the key's mark (`NOPERM`:
    /// nothing of that dead letter was written); a connection error. Dead
    /// letters redriven before the error stay redriven, the rest stay in
    /// `dlq`.
    pub async fn redrive(
        &self,
        dlq: &str,
        filter: &DeadLetterFilter,
    ) -> Result<RedriveReport, Error> {
        let mut report = RedriveReport::default();
        let mut sel = Selection::new(self, dlq, filter).await?;
        while let Some(page) = sel.next().await? {
            for dl in page {
                let skip = |reason: String| Skipped {
                    id: dl.id.clone(),
                    reason,
                };
                let Some(origin) = &dl.origin else {
                    report.skipped.push(skip(
                        "no origin_stream: not a dead letter rillkit wrote".into(),
                    ));
                    continue;
                };
                if self.cluster && dlq_slot_error(&origin.stream, dlq).is_some() {
                    report.skipped.push(skip(format!(
                        "its origin stream {:?} is in another hash slot than {dlq:?}",
                        origin.stream
                    )));
                    continue;
                }
                // A `fail_rest` dead letter: its key's mark, beside its
                // partition (in the partition's hash slot, so the script's
                // keys share one).
                let mark = (origin.on_key_failure.as_deref()
                    == Some(OnKeyFailure::FailRest.name()))
                .then(|| partition_keys(&origin.stream, &origin.group).1);
                let mark_away = mark.as_ref().filter(|m| {
                    self.cluster && key_slot(m.as_bytes()) != key_slot(origin.stream.as_bytes())
                });
                if let Some(mark) = mark_away {
                    report.skipped.push(skip(format!(
                        "its key's fail_rest mark {mark:?} is in another hash slot than {:?}",
                        origin.stream
                    )));
                    continue;
                }
                let mut call = REDRIVE.key(&origin.stream);
                call.key(dlq);
                if let Some(mark) = &mark {
                    call.key(mark);
                }
                call.arg(&dl.id).arg(&origin.group);
                let mut conn = self.conn.clone();
                let answer: Result<(i64, String, i64, i64), Error> = call
                    .invoke_async(&mut conn)
                    .await
                    .map_err(Error::from_redis);
                match answer {
                    Ok((1, id, lifted, moved)) => {
                        if moved > 0 {
                            tracing::debug!(stream = %origin.stream, groups = moved, "other groups moved past a redriven entry");
                        }
                        report.redriven.push(Redriven {
                            dead_letter: dl.id.clone(),
                            stream: origin.stream.clone(),
                            group: origin.group.clone(),
                            id: EntryId(id),
                            lifted_mark: (lifted == 1)
                                .then(|| origin.order_key.clone().unwrap_or_default()),
                        });
                    }
                    Ok((_, reason, _, _)) => report.skipped.push(skip(reason)),
                    Err(Error::Redis(e)) if e.code() == Some("WRONGTYPE") => {
                        report.skipped.push(skip(format!(
                            "its origin key {:?} is not a stream",
                            origin.stream
                        )));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(report)
    }
}
