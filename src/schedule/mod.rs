//! Delayed delivery: entries scheduled for a time, kept in Redis beside their
//! stream until they are due, then added to it by one of the processes that
//! consume it.
//!
//! A scheduled entry is a member of a sorted set scored by its due time in
//! ms since the epoch (`<slot>:rillkit:scheduled:<stream>`), its fields packed with
//! MessagePack in a hash beside it (`<slot>:rillkit:scheduled-entries:<stream>`),
//! both in the stream's hash slot. Scheduling is one script (`ZADD` and
//! `HSET`); a delay is counted from the server's clock (`TIME`), a due time
//! is the caller's. The [`mover`] moves due entries to the stream in one
//! script (`XADD`, `ZREM`, `HDEL` per entry), so an entry is added exactly
//! once whoever runs it and however often; the mover's lease only keeps
//! every other process from doing the same work.

use std::fmt;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use crate::error::{ConfigError, Error};
use crate::kind::SourceKind;

pub(crate) mod mover;

/// The id of a scheduled entry, answered by
/// [`Broker::publish_after`](crate::Broker::publish_after) and
/// [`publish_at`](crate::Broker::publish_at), and taken by
/// [`cancel_scheduled`](crate::Broker::cancel_scheduled): 32 hexadecimal
/// digits, 64 random bits for the publish and the entry's place in it. It
/// is not the entry id the entry gets in the stream when it is due. Kept
/// as text (`Display`, `FromStr`, serde as a string).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScheduleId(String);

impl ScheduleId {
    /// The ids of `n` entries scheduled together: 64 random bits, then the
    /// entry's place (16 hex digits each), so entries due in the same ms
    /// are added in the order they were given (a sorted set orders equal
    /// scores by member).
    pub(crate) fn batch(n: usize) -> Vec<Self> {
        let random = crate::keys::random_id();
        (0..n)
            .map(|i| ScheduleId(format!("{random}{i:016x}")))
            .collect()
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ScheduleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A schedule id that is not 1 to 64 ASCII letters, digits, `-` or `_`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a schedule id is 1 to 64 ASCII letters, digits, '-' or '_': {0:?}")]
pub struct InvalidScheduleId(String);

impl serde::Serialize for ScheduleId {
    /// As its text.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for ScheduleId {
    /// From its text, checked as [`FromStr`](std::str::FromStr) checks it.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl std::str::FromStr for ScheduleId {
    type Err = InvalidScheduleId;

    /// Takes back an id kept as text (as [`Display`](fmt::Display) wrote it).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = (1..=64).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if ok {
            Ok(ScheduleId(s.to_owned()))
        } else {
            Err(InvalidScheduleId(s.to_owned()))
        }
    }
}

/// When a scheduled entry is due.
#[derive(Debug, Clone, Copy)]
pub(crate) enum When {
    /// This long after the server receives the schedule.
    After(Duration),
    /// At this time (the caller's clock).
    At(SystemTime),
}

impl When {
    /// The script's arguments: the delay in ms (or empty), the due time in
    /// ms since the epoch (or empty). A time before the epoch is due at once.
    fn args(self) -> (Vec<u8>, Vec<u8>) {
        match self {
            When::After(d) => (
                u64::try_from(d.as_millis())
                    .unwrap_or(u64::MAX)
                    .to_string()
                    .into_bytes(),
                Vec::new(),
            ),
            When::At(t) => (
                Vec::new(),
                t.duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                    .to_string()
                    .into_bytes(),
            ),
        }
    }
}

/// The longest delay or the furthest due time accepted: 10 years.
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(10 * 365 * 86_400);

/// Checks a `When` and the number of fields before anything is sent.
pub(crate) fn check(stream: &str, when: When, fields: usize) -> Result<(), Error> {
    let invalid = |option: &'static str, reason: String| {
        Err(Error::Config(ConfigError::Invalid {
            kind: Some(SourceKind::Stream),
            key: stream.to_owned(),
            option,
            reason,
        }))
    };
    let far = match when {
        When::After(d) => d > MAX_DELAY,
        When::At(t) => t
            .duration_since(SystemTime::now())
            .is_ok_and(|d| d > MAX_DELAY),
    };
    if far {
        return invalid(
            "delay",
            "a delay or due time is at most 10 years away".into(),
        );
    }
    if fields == 0 || fields > crate::redis::idempotent::MAX_FIELDS {
        return invalid(
            "fields",
            format!(
                "a scheduled entry has 1 to {} field/value pairs",
                crate::redis::idempotent::MAX_FIELDS
            ),
        );
    }
    Ok(())
}

/// KEYS: the sorted set, the hash. ARGV: delay ms or '', due ms or '', the
/// stream's `MAXLEN ~` or '', then per entry: its schedule id, its number
/// of field/value pairs, the fields and values. Every entry is due at the
/// same time. Answers the due time in ms since the epoch.
const SCHEDULE_LUA: &str = r#"
local due
if ARGV[1] ~= '' then
  local t = redis.call('TIME')
  due = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
else
  due = tonumber(ARGV[2])
end
local score = string.format('%.0f', due)
local i = 4
while i <= #ARGV do
  local id, pairs = ARGV[i], tonumber(ARGV[i + 1])
  local body = {ARGV[3]}
  for j = i + 2, i + 1 + 2 * pairs do body[#body + 1] = ARGV[j] end
  redis.call('ZADD', KEYS[1], score, id)
  redis.call('HSET', KEYS[2], id, cmsgpack.pack(body))
  i = i + 2 + 2 * pairs
end
return due
"#;

pub(crate) static SCHEDULE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(SCHEDULE_LUA));

/// KEYS: the sorted set, the hash. ARGV: schedule id. Answers 1 when the
/// entry was still scheduled (and is no longer), else 0.
const CANCEL_LUA: &str = r#"
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"#;

pub(crate) static CANCEL: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(CANCEL_LUA));

/// The keys of [`SCHEDULE`] and [`CANCEL`] for `stream`.
pub(crate) fn keys(stream: &str) -> Vec<Vec<u8>> {
    let [due, entries, _] = crate::keys::scheduled_keys(stream);
    vec![due.into_bytes(), entries.into_bytes()]
}

/// Entries one [`SCHEDULE`] call takes at most (a longer batch is sent in
/// calls of this many, one after another).
pub(crate) const PER_CALL: usize = 1000;

/// The arguments of [`SCHEDULE`]: the entries, each with its id and fields.
pub(crate) fn schedule_args<F: AsRef<[u8]>, V: AsRef<[u8]>>(
    when: When,
    max_len: Option<usize>,
    entries: &[(&ScheduleId, &[(F, V)])],
) -> Vec<Vec<u8>> {
    let (delay, at) = when.args();
    let mut args = vec![
        delay,
        at,
        max_len
            .map(|n| n.to_string().into_bytes())
            .unwrap_or_default(),
    ];
    for (id, fields) in entries {
        args.push(id.as_str().as_bytes().to_vec());
        args.push(fields.len().to_string().into_bytes());
        for (f, v) in *fields {
            args.push(f.as_ref().to_vec());
            args.push(v.as_ref().to_vec());
        }
    }
    args
}

impl Scheduled {
    /// [`next_due_ms`](Self::next_due_ms) as a time.
    pub fn next_due(&self) -> Option<SystemTime> {
        self.next_due_ms
            .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
    }
}

/// How many entries are scheduled on a stream, and when the first is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Scheduled {
    /// Entries scheduled and not yet added to the stream.
    pub count: u64,
    /// When the first of them is due, in ms since the epoch (`None` when
    /// there is none). A time in the past means no consuming process has
    /// moved it yet.
    pub next_due_ms: Option<u64>,
}

/// `ZCARD` and `ZRANGE … 0 0 WITHSCORES` of a stream's sorted set, read by
/// [`Admin::scheduled`](crate::admin::Admin::scheduled).
pub(crate) fn parse_scheduled(count: u64, first: &[(String, f64)]) -> Scheduled {
    Scheduled {
        count,
        next_due_ms: first.first().map(|(_, score)| *score as u64),
    }
}

/// The key of the sorted set of `stream`'s scheduled entries.
pub(crate) fn due_key(stream: &str) -> String {
    let [due, _, _] = crate::keys::scheduled_keys(stream);
    due
}
