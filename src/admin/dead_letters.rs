//! Dead letters: reading them apart into the original entry and what the
//! dead-letter move appended, selecting them ([`DeadLetterFilter`]), and
//! putting them back ([`Admin::redrive`]) or deleting them
//! ([`Admin::purge`]).

use std::sync::LazyLock;

use super::Admin;
use crate::error::Error;
use crate::keys::{dlq_slot_error, key_slot, partition_keys};
use crate::order::{OnKeyFailure, partition_name};
use crate::redis::reply;
use crate::stream::EntryId;

/// The field/value pairs the dead-letter move appends after the original
/// fields, in this order (see `DEAD_LETTER_LUA` in `src/redis/mod.rs`).
const APPENDED: [&str; 7] = [
    "origin_stream",
    "origin_id",
    "origin_group",
    "origin_consumer",
    "delivery_count",
    "error",
    "failed_at_ms",
];

/// What the move appends after [`APPENDED`] for an entry of a stream
/// ordered by key.
const APPENDED_ORDER: [&str; 2] = ["order_key", "on_key_failure"];

/// Dead letters read per `XRANGE` while selecting.
const PAGE: usize = 100;

/// One entry of a dead-letter stream, read apart: the original entry's
/// fields, and where it came from and why it failed.
///
/// The dead-letter move copies every original field verbatim, then appends
/// `origin_stream`, `origin_id`, `origin_group`, `origin_consumer`,
/// `delivery_count`, `error` and `failed_at_ms`, and for an entry of a
/// stream [ordered by key](crate::Stream::ordered_by) `order_key` and
/// `on_key_failure` after them. The last seven field/value pairs (nine when
/// the last two are `order_key` and `on_key_failure`) are therefore the
/// appended ones, whatever the original fields were called: an original
/// field named `error` stays in [`fields`](Self::fields).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetter {
    /// The dead letter's own id, in the dead-letter stream.
    pub id: EntryId,
    /// The original entry's field/value pairs, verbatim and in order. For an
    /// entry that is not laid out as rillkit writes dead letters
    /// ([`origin`](Self::origin) is `None`), every field.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// What the dead-letter move appended, or `None` when the entry does not
    /// end with those seven fields, or those nine (written by something
    /// else than rillkit).
    pub origin: Option<DeadLetterOrigin>,
}

impl DeadLetter {
    /// The value of the first original field named `name`, if any.
    pub fn field(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(k, _)| k.as_slice() == name.as_bytes())
            .map(|(_, v)| v.as_slice())
    }
}

/// What the dead-letter move appended to a dead letter: where the entry
/// came from and why it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetterOrigin {
    /// `origin_stream`: the stream the entry was read from.
    pub stream: String,
    /// `origin_id`: its id there.
    pub id: EntryId,
    /// `origin_group`: the consumer group that failed it.
    pub group: String,
    /// `origin_consumer`: the consumer whose handler failed it last.
    pub consumer: String,
    /// `delivery_count`: the server's delivery count at the move.
    pub delivery_count: u64,
    /// `error`: the handler's error, or the decode failure.
    pub error: String,
    /// `failed_at_ms`: when it was moved, in ms since the Unix epoch.
    pub failed_at_ms: u64,
    /// `order_key`: for an entry of a stream [ordered by
    /// key](crate::Stream::ordered_by), its key.
    pub order_key: Option<Vec<u8>>,
    /// `on_key_failure`: for an entry of a stream ordered by key, what its
    /// failure meant for the key's later entries (`skip` or `fail_rest`).
    pub on_key_failure: Option<String>,
}

/// Reads a dead-letter stream entry apart (see [`DeadLetter`]).
pub(crate) fn split(id: EntryId, mut fields: Vec<(Vec<u8>, Vec<u8>)>) -> DeadLetter {
    let n = fields.len();
    let ordered = n >= APPENDED.len() + APPENDED_ORDER.len()
        && fields[n - APPENDED_ORDER.len()..]
            .iter()
            .zip(APPENDED_ORDER)
            .all(|((k, _), name)| k.as_slice() == name.as_bytes());
    let order = ordered.then(|| fields.split_off(n - APPENDED_ORDER.len()));
    let n = fields.len();
    let laid_out = n >= APPENDED.len()
        && fields[n - APPENDED.len()..]
            .iter()
            .zip(APPENDED)
            .all(|((k, _), name)| k.as_slice() == name.as_bytes());
    if !laid_out {
        fields.extend(order.into_iter().flatten());
        return DeadLetter {
            id,
            fields,
            origin: None,
        };
    }
    let appended = fields.split_off(n - APPENDED.len());
    let text = |i: usize| String::from_utf8_lossy(&appended[i].1).into_owned();
    let number = |i: usize| text(i).parse::<u64>().ok();
    match (number(4), number(6)) {
        (Some(delivery_count), Some(failed_at_ms)) => DeadLetter {
            id,
            fields,
            origin: Some(DeadLetterOrigin {
                stream: text(0),
                id: EntryId(text(1)),
                group: text(2),
                consumer: text(3),
                delivery_count,
                error: text(5),
                failed_at_ms,
                order_key: order.as_ref().map(|o| o[0].1.clone()),
                on_key_failure: order
                    .as_ref()
                    .map(|o| String::from_utf8_lossy(&o[1].1).into_owned()),
            }),
        },
        _ => {
            fields.extend(appended);
            fields.extend(order.into_iter().flatten());
            DeadLetter {
                id,
                fields,
                origin: None,
            }
        }
    }
}

/// Which dead letters [`Admin::dead_letters`], [`Admin::redrive`] and
/// [`Admin::purge`] act on: those in an id range (`XRANGE`'s `start` and
/// `end`, inclusive, `-` and `+` by default), whose error contains a text,
/// at most `count` of them, oldest first. The default selects every dead
/// letter.
///
/// The three methods select alike, so `dead_letters` with a filter lists
/// exactly what `redrive` or `purge` with the same filter would act on (as
/// long as the dead-letter stream does not change in between).
///
/// ```
/// use rillkit::admin::DeadLetterFilter;
///
/// let timeouts = DeadLetterFilter::new()
///     .with_error_contains("timed out")
///     .with_count(50);
/// assert_eq!(timeouts.count(), Some(50));
/// let one = DeadLetterFilter::new().with_id("1700000000000-0");
/// assert_eq!((one.start(), one.end()), ("1700000000000-0", "1700000000000-0"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterFilter {
    start: String,
    end: String,
    error: Option<String>,
    count: Option<usize>,
}

impl Default for DeadLetterFilter {
    fn default() -> Self {
        DeadLetterFilter {
            start: "-".into(),
            end: "+".into(),
            error: None,
            count: None,
        }
    }
}

impl DeadLetterFilter {
    /// Every dead letter.
    pub fn new() -> Self {
        Self::default()
    }

    /// The first id of the range, inclusive (`XRANGE`'s `start`: an id,
    /// `<ms>` alone, `(<id>` for exclusive, or `-`, the default).
    #[must_use]
    pub fn with_start(mut self, id: impl Into<String>) -> Self {
        self.start = id.into();
        self
    }

    /// The last id of the range, inclusive (`XRANGE`'s `end`; `+`, the
    /// default, means the newest dead letter when the selection starts:
    /// dead letters added while a redrive runs are left for the next one).
    #[must_use]
    pub fn with_end(mut self, id: impl Into<String>) -> Self {
        self.end = id.into();
        self
    }

    /// Exactly the dead letter with this id (`start` and `end` both `id`).
    #[must_use]
    pub fn with_id(self, id: impl Into<String>) -> Self {
        let id = id.into();
        self.with_start(id.clone()).with_end(id)
    }

    /// Only dead letters whose appended `error` contains `text` (case
    /// sensitive). A dead letter without the appended fields has no error
    /// and never matches; an original field named `error` is not looked at.
    #[must_use]
    pub fn with_error_contains(mut self, text: impl Into<String>) -> Self {
        self.error = Some(text.into());
        self
    }

    /// At most `entries` dead letters: the oldest that match.
    #[must_use]
    pub fn with_count(mut self, entries: usize) -> Self {
        self.count = Some(entries);
        self
    }

    /// The range's start, set with [`with_start`](Self::with_start).
    pub fn start(&self) -> &str {
        &self.start
    }

    /// The range's end, set with [`with_end`](Self::with_end).
    pub fn end(&self) -> &str {
        &self.end
    }

    /// The error text, set with [`with_error_contains`](Self::with_error_contains).
    pub fn error_contains(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// The cap, in entries, set with [`with_count`](Self::with_count).
    pub fn count(&self) -> Option<usize> {
        self.count
    }

    fn matches(&self, dl: &DeadLetter) -> bool {
        match &self.error {
            None => true,
            Some(text) => dl
                .origin
                .as_ref()
                .is_some_and(|o| o.error.contains(text.as_str())),
        }
    }
}

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
/// `{1, new id, 1 when the key's mark was deleted else 0}`, or
/// `{0, reason, 0}` when it leaves the dead letter alone.
///
/// It reads the dead letter itself, so what it puts back is what is there
/// now; checks that the entry ends with the seven appended fields (for an
/// entry of a stream ordered by key, followed by `order_key` and
/// `on_key_failure`) and that its `origin_stream` is KEYS[1]; for
/// `on_key_failure` = `fail_rest` reads the key's mark (`HGET`: a key of
/// another type fails here, before any write) and deletes it when it is
/// not newer than the dead letter's `origin_id` (the mark this failure or
/// an earlier one of the key set; a newer mark was set by a later failure
/// of the key, a redriven entry failing again, and stays); checks with
/// `redis.acl_check_cmd` that every write is allowed before the first
/// (`NOPERM` otherwise, so a refusal never leaves a copy); then `XADD`s the
/// original fields (an earlier `redriven_from` left out) plus
/// `redriven_from` = `origin_id` to the origin stream, deletes the mark,
/// and `XDEL`s the dead letter. A failing `XADD` (the origin key holds
/// another type) aborts before anything else.
const REDRIVE_LUA: &str = r#"
local rows = redis.call('XRANGE', KEYS[2], ARGV[1], ARGV[1])
if #rows == 0 then return {0, 'no longer in the dead-letter stream', 0} end
local f = rows[1][2]
local n = #f
local foreign = 'no origin_stream: not a dead letter rillkit wrote'
local key, rule = nil, nil
if n >= 18 and f[n - 3] == 'order_key' and f[n - 1] == 'on_key_failure' then
  key, rule = f[n - 2], f[n]
  n = n - 4
end
local names = {'origin_stream', 'origin_id', 'origin_group', 'origin_consumer',
               'delivery_count', 'error', 'failed_at_ms'}
if n < 14 then return {0, foreign, 0} end
for i = 1, 7 do
  if f[n - 15 + 2 * i] ~= names[i] then return {0, foreign, 0} end
end
if f[n - 12] ~= KEYS[1] then return {0, 'its origin_stream is not ' .. KEYS[1], 0} end
local origin_id = f[n - 10]
local function after(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if not am or not bm then return false end
  if #am ~= #bm then return #am > #bm end
  if am ~= bm then return am > bm end
  if #as ~= #bs then return #as > #bs end
  return as > bs
end
local lift = false
if rule == 'fail_rest' then
  if KEYS[3] == nil or f[n - 8] ~= ARGV[2] then
    return {0, 'the dead letter was read differently by the script; try again', 0}
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
  if f[i] ~= 'redriven_from' then
    args[#args + 1] = f[i]
    args[#args + 1] = f[i + 1]
  end
end
args[#args + 1] = 'redriven_from'
args[#args + 1] = origin_id
local id = redis.call('XADD', KEYS[1], '*', unpack(args))
if lift then redis.call('HDEL', KEYS[3], key) end
redis.call('XDEL', KEYS[2], ARGV[1])
return {1, id, lift and 1 or 0}
"#;

static REDRIVE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(REDRIVE_LUA));

/// Walks a dead-letter stream oldest first, a page at a time, handing out
/// the dead letters a filter selects.
struct Selection<'a> {
    admin: &'a Admin,
    dlq: &'a str,
    filter: &'a DeadLetterFilter,
    /// The next `XRANGE` start: the filter's, then `(<last id read>`.
    start: String,
    end: String,
    left: Option<usize>,
    done: bool,
}

impl<'a> Selection<'a> {
    async fn new(
        admin: &'a Admin,
        dlq: &'a str,
        filter: &'a DeadLetterFilter,
    ) -> Result<Selection<'a>, Error> {
        let mut sel = Selection {
            admin,
            dlq,
            filter,
            start: filter.start.clone(),
            end: filter.end.clone(),
            left: filter.count,
            done: false,
        };
        if sel.end == "+" {
            // Fixed now: dead letters added while a redrive runs (the same
            // entries failing again) are not selected again.
            match admin.newest(dlq, 1).await?.pop() {
                Some(last) => sel.end = last.id.0,
                None => sel.done = true,
            }
        }
        Ok(sel)
    }

    /// The next selected dead letters, or `None` when there are no more.
    async fn next(&mut self) -> Result<Option<Vec<DeadLetter>>, Error> {
        loop {
            if self.done || self.left == Some(0) {
                return Ok(None);
            }
            // Without a text filter every entry read is selected: read no
            // more than are still wanted (entries may be large).
            let page = match (self.left, &self.filter.error) {
                (Some(left), None) => left.min(PAGE),
                _ => PAGE,
            };
            let mut cmd = redis::cmd("XRANGE");
            cmd.arg(self.dlq)
                .arg(&self.start)
                .arg(&self.end)
                .arg("COUNT")
                .arg(page);
            let rows = reply::entries(self.admin.query(&cmd).await?)
                .map_err(|m| Error::unparsable("XRANGE reply", m))?;
            self.done = rows.len() < page;
            if let Some(last) = rows.last() {
                self.start = format!("({}", last.id);
            }
            let mut out = Vec::new();
            for row in rows {
                let dl = split(row.id, row.fields.unwrap_or_default());
                if !self.filter.matches(&dl) {
                    continue;
                }
                if self.left == Some(0) {
                    break;
                }
                out.push(dl);
                if let Some(n) = &mut self.left {
                    *n -= 1;
                }
            }
            if !out.is_empty() {
                return Ok(Some(out));
            }
        }
    }
}

impl Admin {
    /// The dead letters in `dlq` (a dead-letter stream key, e.g.
    /// [`Stream::dlq_for`](crate::Stream::dlq_for) or
    /// [`Admin::dlq_of`]) that `filter` selects, oldest first, each read
    /// apart into its original fields and what the move appended (see
    /// [`DeadLetter`]). `XRANGE`, a page of 100 entries at a time; a missing
    /// key has none. Without a [`with_count`](DeadLetterFilter::with_count) every
    /// selected dead letter is held in memory.
    ///
    /// # Errors
    /// [`Error::Redis`] when the key is not a stream or an id of the filter
    /// is malformed; a connection error.
    pub async fn dead_letters(
        &self,
        dlq: &str,
        filter: &DeadLetterFilter,
    ) -> Result<Vec<DeadLetter>, Error> {
        let mut out = Vec::new();
        let mut sel = Selection::new(self, dlq, filter).await?;
        while let Some(page) = sel.next().await? {
            out.extend(page);
        }
        Ok(out)
    }

    /// Puts the dead letters of `dlq` that `filter` selects back on their
    /// origin stream, oldest first, each as a **new** entry (a new id) with
    /// its original fields verbatim plus `redriven_from` = the dead letter's
    /// `origin_id` (an earlier `redriven_from`, from an earlier redrive, is
    /// replaced; the appended fields, `order_key` and `on_key_failure`
    /// included, are left out), and deletes it from `dlq`. Each dead letter
    /// moves in one Lua script (`XRANGE`, `XADD`, `XDEL` over the origin
    /// stream and `dlq`), so it ends up in exactly one of the two streams.
    /// The groups of the origin stream see the new entry as any other: it
    /// runs again with a fresh delivery count. This is the one redrive: the
    /// `rillkit` tool and the dashboard call it too.
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
    /// may not `XADD` to the origin, `XDEL` from `dlq` or, for a
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
                let answer: Result<(i64, String, i64), Error> = call
                    .invoke_async(&mut conn)
                    .await
                    .map_err(Error::from_redis);
                match answer {
                    Ok((1, id, lifted)) => report.redriven.push(Redriven {
                        dead_letter: dl.id.clone(),
                        stream: origin.stream.clone(),
                        id: EntryId(id),
                        lifted_mark: (lifted == 1)
                            .then(|| origin.order_key.clone().unwrap_or_default()),
                    }),
                    Ok((_, reason, _)) => report.skipped.push(skip(reason)),
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

    /// The dead-letter streams that hold the dead letters of the stream
    /// `name`: for the base name of a stream [ordered by
    /// key](crate::Stream::ordered_by) (one with a recorded partition count,
    /// [`partitions`](Self::partitions)), each partition's (`<name>:p<i>`'s
    /// [`dlq_of`](Self::dlq_of)), in partition order; for any other stream,
    /// its own `dlq_of`. To redrive all of an ordered stream's dead letters,
    /// [`redrive`](Self::redrive) each: every partition's go back to it.
    ///
    /// # Errors
    /// As [`partitions`](Self::partitions).
    pub async fn dead_letter_streams(&self, name: &str) -> Result<Vec<String>, Error> {
        Ok(match self.partitions(name).await? {
            Some(p) => (0..p)
                .map(|i| self.dlq_of(&partition_name(name, i)))
                .collect(),
            None => vec![self.dlq_of(name)],
        })
    }

    /// Deletes the dead letters of `dlq` that `filter` selects (`XDEL`, a
    /// page of up to 100 ids at a time). Answers how many were deleted.
    ///
    /// # Errors
    /// [`Error::Redis`] when `dlq` is not a stream or an id of the filter is
    /// malformed; a connection error (pages deleted before it stay deleted).
    pub async fn purge(&self, dlq: &str, filter: &DeadLetterFilter) -> Result<u64, Error> {
        let mut deleted = 0;
        let mut sel = Selection::new(self, dlq, filter).await?;
        while let Some(page) = sel.next().await? {
            let mut cmd = redis::cmd("XDEL");
            cmd.arg(dlq);
            for dl in &page {
                cmd.arg(&dl.id);
            }
            let n: u64 = redis::from_redis_value(self.query(&cmd).await?)
                .map_err(|e| Error::unparsable("XDEL reply", e.to_string()))?;
            deleted += n;
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests;
