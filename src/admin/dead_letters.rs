//! Dead letters: reading them apart into the original entry and what the
//! dead-letter move appended, selecting them ([`DeadLetterFilter`]), and
//! putting them back ([`Admin::redrive`]) or deleting them
//! ([`Admin::purge`]).

mod redrive;

pub use redrive::{RedriveReport, Redriven, Skipped};

use super::Admin;
use crate::error::Error;

use crate::order::partition_name;
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

/// What the move appends after [`APPENDED`] (before [`APPENDED_ORDER`])
/// when the consumer saw the entry fail: its failed runs.
const APPENDED_ATTEMPTS: &str = "attempts";

/// Dead letters read per `XRANGE` while selecting.
const PAGE: usize = 100;

/// One entry of a dead-letter stream, read apart: the original entry's
/// fields, and where it came from and why it failed.
///
/// The dead-letter move copies every original field verbatim, then appends
/// `origin_stream`, `origin_id`, `origin_group`, `origin_consumer`,
/// `delivery_count`, `error` and `failed_at_ms`, then `attempts` when its
/// consumer saw it fail, and for an entry of a stream [ordered by
/// key](crate::Stream::ordered_by) `order_key` and `on_key_failure` after
/// them. Read from the end (the last two pairs when they are `order_key` and
/// `on_key_failure`, then the last one when it is `attempts`, then seven),
/// the appended pairs are found whatever the original fields were called: an
/// original field named `error` stays in [`fields`](Self::fields).
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
    /// Reads a dead-letter stream's entry apart (see [`DeadLetter`]): `id`
    /// and its field/value pairs as `XRANGE` answers them.
    pub fn from_entry(id: EntryId, fields: Vec<(Vec<u8>, Vec<u8>)>) -> DeadLetter {
        split(id, fields)
    }

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
    /// `attempts`: its failed runs that the consumer which moved it saw, the
    /// last 10, oldest first (empty for a dead letter written without them,
    /// or for an entry that never ran there: it failed to decode, or ran
    /// out of runs elsewhere).
    pub attempts: Vec<DeadLetterAttempt>,
}

/// One failed run of a dead letter's entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[non_exhaustive]
pub struct DeadLetterAttempt {
    /// The delivery count of the run.
    pub delivery_count: u64,
    /// When it ended, in ms since the Unix epoch.
    pub at_ms: u64,
    /// Its error (with its chain of causes).
    pub error: String,
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
    let with_attempts = n > APPENDED.len()
        && fields[n - 1].0.as_slice() == APPENDED_ATTEMPTS.as_bytes()
        && fields[n - 2].0.as_slice() == APPENDED[6].as_bytes();
    let attempts = with_attempts.then(|| fields.pop().expect("an attempts pair"));
    let n = fields.len();
    let laid_out = n >= APPENDED.len()
        && fields[n - APPENDED.len()..]
            .iter()
            .zip(APPENDED)
            .all(|((k, _), name)| k.as_slice() == name.as_bytes());
    if !laid_out {
        fields.extend(attempts);
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
                attempts: attempts
                    .and_then(|(_, v)| serde_json::from_slice(&v).ok())
                    .unwrap_or_default(),
            }),
        },
        _ => {
            fields.extend(appended);
            fields.extend(attempts);
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
/// of one origin group,
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
    group: Option<String>,
    count: Option<usize>,
}

impl Default for DeadLetterFilter {
    fn default() -> Self {
        DeadLetterFilter {
            start: "-".into(),
            end: "+".into(),
            error: None,
            group: None,
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

    /// Only dead letters whose appended `origin_group` is `group`: the dead
    /// letters of one consumer group of a stream several groups read. A dead
    /// letter without the appended fields never matches.
    #[must_use]
    pub fn with_group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
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

    /// The origin group, set with [`with_group`](Self::with_group).
    pub fn group(&self) -> Option<&str> {
        self.group.as_deref()
    }

    /// The cap, in entries, set with [`with_count`](Self::with_count).
    pub fn count(&self) -> Option<usize> {
        self.count
    }

    fn matches(&self, dl: &DeadLetter) -> bool {
        let origin = dl.origin.as_ref();
        let error = self
            .error
            .as_ref()
            .is_none_or(|text| origin.is_some_and(|o| o.error.contains(text.as_str())));
        let group = self
            .group
            .as_ref()
            .is_none_or(|g| origin.is_some_and(|o| &o.group == g));
        error && group
    }
}

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
            // Without a text or group filter every entry read is selected: read no
            // more than are still wanted (entries may be large).
            let page = match (self.left, &self.filter.error, &self.filter.group) {
                (Some(left), None, None) => left.min(PAGE),
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
