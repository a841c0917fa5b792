//! What the server tells about a stream's groups, consumers and pending
//! entries ([`GroupInfo`], [`ConsumerInfo`], [`PendingEntry`]), and the
//! parsing of the replies that carry it: `SCAN`, `XINFO GROUPS`,
//! `XINFO CONSUMERS` and `XPENDING` (extended form), in RESP2 (flat
//! field/value arrays) and RESP3 (maps) alike; the masters of a `CLUSTER
//! SLOTS` reply, read by the connection layer's one parser of it.

use redis::Value;

use crate::stream::EntryId;

/// One consumer group of a stream, from `XINFO GROUPS`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupInfo {
    /// The group's name.
    pub name: String,
    /// Its consumers (names known to the group, active or not).
    pub consumers: u64,
    /// Entries delivered to it and not yet acked: its pending entries list.
    pub pending: u64,
    /// The id of the last entry delivered to the group.
    pub last_delivered_id: EntryId,
    /// Entries the group has read (`entries-read`), `None` when Redis cannot
    /// tell.
    pub entries_read: Option<u64>,
    /// Entries added to the stream and not yet delivered to the group.
    /// `None` when Redis cannot count them (it answers nil): entries were
    /// deleted from the stream (`XDEL`) after the group's last-delivered
    /// entry, or the group was placed at an arbitrary id (`XGROUP CREATE` or
    /// `SETID` with an id other than `0` or `$` and no `ENTRIESREAD`). Redis
    /// then knows only that some may be waiting.
    pub lag: Option<u64>,
}

/// One consumer of a group, from `XINFO CONSUMERS`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerInfo {
    /// The consumer's name.
    pub name: String,
    /// Entries delivered to it and not yet acked.
    pub pending: u64,
    /// Milliseconds since it last interacted with the server (a read, a
    /// claim, an ack…).
    pub idle_ms: u64,
    /// Milliseconds since its last successful read or claim; `None` before
    /// Redis 7.2, or when it never read one (the server sends `-1` then).
    pub inactive_ms: Option<u64>,
}

/// One pending entry of a group, from `XPENDING`'s extended form.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PendingEntry {
    /// The entry's id.
    pub id: EntryId,
    /// The consumer that holds it; empty for an entry handed back to the
    /// group with `XNACK` (Redis 8.8+), which no consumer holds until a read
    /// or a claim takes it.
    pub consumer: String,
    /// Milliseconds since it was last delivered (or claimed, or refreshed);
    /// `None` for an entry handed back with `XNACK` (the server answers
    /// `-1` for it).
    pub idle_ms: Option<u64>,
    /// How many times it was delivered (the server's count).
    pub delivery_count: u64,
}

/// A reply's text (a bulk or simple string, or an integer's digits).
pub(crate) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// A reply's non-negative integer (an integer, or a string of digits).
fn uint(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => text(other)?.parse().ok(),
    }
}

/// An integer that may be unknown: nil, or a negative integer (Redis 7.2+
/// and Valkey answer `-1` for "never", e.g. `XINFO CONSUMERS`' `inactive`
/// of a consumer that never read) are `None`.
fn opt_uint(v: &Value) -> Result<Option<u64>, String> {
    let negative = match v {
        Value::Int(i) => *i < 0,
        other => text(other).is_some_and(|t| t.parse::<i64>().is_ok_and(|i| i < 0)),
    };
    match v {
        Value::Nil => Ok(None),
        _ if negative => Ok(None),
        other => uint(other).map(Some).ok_or_else(|| {
            format!("expected a non-negative integer, a negative one or nil, got {other:?}")
        }),
    }
}

fn list(v: Value) -> Result<Vec<Value>, String> {
    match v {
        Value::Array(a) | Value::Set(a) => Ok(a),
        Value::Nil => Ok(Vec::new()),
        other => Err(format!("expected an array, got {other:?}")),
    }
}

/// A record as name → value pairs: a RESP3 map, or a RESP2 flat array
/// `[name, value, name, value, …]`.
fn record(v: Value) -> Result<Vec<(String, Value)>, String> {
    let pairs: Vec<(Value, Value)> = match v {
        Value::Map(kv) => kv,
        other => {
            let flat = list(other)?;
            if flat.len() % 2 != 0 {
                return Err("a record has an odd number of items".into());
            }
            let mut it = flat.into_iter();
            let mut kv = Vec::new();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                kv.push((k, v));
            }
            kv
        }
    };
    pairs
        .into_iter()
        .map(|(k, v)| Ok((text(&k).ok_or("a record name is not a string")?, v)))
        .collect()
}

/// Looks a record's fields up by name.
struct Record(Vec<(String, Value)>);

impl Record {
    fn get(&self, name: &str) -> Result<&Value, String> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
            .ok_or_else(|| format!("the reply has no {name:?}"))
    }

    fn text(&self, name: &str) -> Result<String, String> {
        let v = self.get(name)?;
        text(v).ok_or_else(|| format!("{name:?} is not a string: {v:?}"))
    }

    fn uint(&self, name: &str) -> Result<u64, String> {
        let v = self.get(name)?;
        uint(v).ok_or_else(|| format!("{name:?} is not an integer: {v:?}"))
    }

    /// A field that is absent on older servers, or nil: `None` either way.
    fn opt_uint(&self, name: &str) -> Result<Option<u64>, String> {
        match self.get(name) {
            Err(_) => Ok(None),
            Ok(v) => opt_uint(v),
        }
    }
}

/// The eviction settings in an `INFO memory` reply: `maxmemory` (bytes, 0 =
/// no limit) and `maxmemory_policy`, or `None` when either is missing.
pub(crate) fn eviction(info: &str) -> Option<(u64, String)> {
    let field = |name: &str| {
        info.lines().find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(':')
                .map(|v| v.trim().to_owned())
        })
    };
    Some((
        field("maxmemory")?.parse().ok()?,
        field("maxmemory_policy")?,
    ))
}

/// `SCAN`: `[cursor, [key, …]]`.
pub(crate) fn scan(v: Value) -> Result<(u64, Vec<String>), String> {
    let mut it = list(v)?.into_iter();
    let (Some(cursor), Some(keys)) = (it.next(), it.next()) else {
        return Err("expected [cursor, keys]".into());
    };
    let cursor = uint(&cursor).ok_or("the cursor is not an integer")?;
    let keys = list(keys)?
        .iter()
        .map(|k| text(k).ok_or_else(|| "a key is not a string".to_owned()))
        .collect::<Result<_, _>>()?;
    Ok((cursor, keys))
}

/// `XINFO GROUPS`. Fields a server adds are ignored.
pub(crate) fn groups(v: Value) -> Result<Vec<GroupInfo>, String> {
    list(v)?
        .into_iter()
        .map(|g| {
            let r = Record(record(g)?);
            Ok(GroupInfo {
                name: r.text("name")?,
                consumers: r.uint("consumers")?,
                pending: r.uint("pending")?,
                last_delivered_id: EntryId(r.text("last-delivered-id")?),
                entries_read: r.opt_uint("entries-read")?,
                lag: r.opt_uint("lag")?,
            })
        })
        .collect()
}

/// `XINFO CONSUMERS`: `name`, `pending`, `idle` (every server), `inactive`
/// (Redis 7.2+ and Valkey; `-1` for a consumer that never read). Fields a
/// server adds are ignored.
pub(crate) fn consumers(v: Value) -> Result<Vec<ConsumerInfo>, String> {
    list(v)?
        .into_iter()
        .map(|c| {
            let r = Record(record(c)?);
            Ok(ConsumerInfo {
                name: r.text("name")?,
                pending: r.uint("pending")?,
                idle_ms: r.uint("idle")?,
                inactive_ms: r.opt_uint("inactive")?,
            })
        })
        .collect()
}

/// `XPENDING <stream> <group> <start> <end> <count>`: `[[id, consumer, idle
/// ms, delivery count], …]` (an entry handed back with `XNACK`: consumer
/// `""`, idle `-1`).
pub(crate) fn pending(v: Value) -> Result<Vec<PendingEntry>, String> {
    list(v)?
        .into_iter()
        .map(|row| {
            let row = list(row)?;
            let [id, consumer, idle, count] = row.as_slice() else {
                return Err(format!("expected 4 items, got {row:?}"));
            };
            Ok(PendingEntry {
                id: EntryId(text(id).ok_or("the id is not a string")?),
                consumer: text(consumer).ok_or("the consumer is not a string")?,
                idle_ms: opt_uint(idle)?,
                delivery_count: uint(count).ok_or("the delivery count is not an integer")?,
            })
        })
        .collect()
}

/// The masters' `host:port` in a `CLUSTER SLOTS` reply (`[[start, end,
/// [host, port, id, …], replicas…], …]`), each once. An empty host means
/// the node that answered, which cannot be told here: such rows are left
/// out.
pub(crate) fn cluster_masters(v: Value) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for range in crate::connection::parse_slots(v, "")? {
        let (host, port) = range.master;
        if host.is_empty() {
            continue;
        }
        let addr = format!("{host}:{port}");
        if !out.contains(&addr) {
            out.push(addr);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
