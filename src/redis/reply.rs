//! Parsing of stream replies straight from [`redis::Value`], keeping field names
//! and values as bytes (no UTF-8 requirement, no per-entry map).

use redis::Value;

use crate::stream::EntryId;

/// One entry of an XREADGROUP / XCLAIM reply. `fields` is `None` when the
/// entry was deleted or trimmed while pending (Redis answers a nil body).
#[derive(Debug)]
pub(crate) struct RawEntry {
    pub id: EntryId,
    pub fields: Option<Vec<(Vec<u8>, Vec<u8>)>>,
}

fn bytes(v: Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.into_bytes()),
        Value::VerbatimString { text, .. } => Some(text.into_bytes()),
        Value::Int(i) => Some(i.to_string().into_bytes()),
        _ => None,
    }
}

fn list(v: Value) -> Option<Vec<Value>> {
    match v {
        Value::Array(a) | Value::Set(a) => Some(a),
        _ => None,
    }
}

/// Parses a list of `[id, [field, value, …] | nil]` pairs (the entries part of
/// XREADGROUP, XRANGE and XCLAIM replies).
pub(crate) fn entries(v: Value) -> Result<Vec<RawEntry>, String> {
    Ok(counted(v)?.into_iter().map(|(e, _)| e).collect())
}

/// As [`entries`], with the delivery count an `XREADGROUP … CLAIM` reply
/// gives each entry after its body (`[id, fields, idle-ms, count]`: the
/// count before this delivery, 0 for a new entry); `None` where the reply
/// gives none.
fn counted(v: Value) -> Result<Vec<(RawEntry, Option<u64>)>, String> {
    let items = match v {
        Value::Nil => return Ok(Vec::new()),
        other => list(other).ok_or("stream entries: expected an array")?,
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let pair = match item {
            // XCLAIM answers nil for ids that no longer exist.
            Value::Nil => continue,
            other => list(other).ok_or("stream entry: expected an array")?,
        };
        let mut it = pair.into_iter();
        let id = it
            .next()
            .and_then(bytes)
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or("stream entry: missing id")?;
        let fields = match it.next() {
            None | Some(Value::Nil) => None,
            Some(Value::Map(kv)) => Some(
                kv.into_iter()
                    .filter_map(|(k, v)| Some((bytes(k)?, bytes(v)?)))
                    .collect(),
            ),
            Some(other) => {
                let flat = list(other).ok_or("stream entry: fields are not an array")?;
                let mut fields = Vec::with_capacity(flat.len() / 2);
                let mut it = flat.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    let (Some(k), Some(v)) = (bytes(k), bytes(v)) else {
                        return Err("stream entry: field is not a string".into());
                    };
                    fields.push((k, v));
                }
                Some(fields)
            }
        };
        // `CLAIM`'s idle time, then the delivery count.
        let count = match (it.next(), it.next()) {
            (Some(_), Some(Value::Int(n))) => Some(u64::try_from(n).unwrap_or(0)),
            _ => None,
        };
        out.push((
            RawEntry {
                id: EntryId(id),
                fields,
            },
            count,
        ));
    }
    Ok(out)
}

/// Parses an XREADGROUP reply for a single stream: nil (the block timed out)
/// or `[[stream, entries]]` (RESP2) / `{stream: entries}` (RESP3).
pub(crate) fn read_reply(v: Value) -> Result<Vec<RawEntry>, String> {
    Ok(read_reply_counted(v)?.into_iter().map(|(e, _)| e).collect())
}

/// As [`read_reply`], with each entry's delivery count before this
/// delivery where the reply gives one (a read with `CLAIM`).
pub(crate) fn read_reply_counted(v: Value) -> Result<Vec<(RawEntry, Option<u64>)>, String> {
    match v {
        Value::Nil => Ok(Vec::new()),
        Value::Map(streams) => match streams.into_iter().next() {
            Some((_, e)) => counted(e),
            None => Ok(Vec::new()),
        },
        other => {
            let streams = list(other).ok_or("XREADGROUP: expected an array")?;
            let Some(first) = streams.into_iter().next() else {
                return Ok(Vec::new());
            };
            let mut pair = list(first).ok_or("XREADGROUP: expected [stream, entries]")?;
            if pair.len() != 2 {
                return Err("XREADGROUP: expected [stream, entries]".into());
            }
            counted(pair.pop().unwrap_or(Value::Nil))
        }
    }
}

/// An entry as read or claimed, with the server's delivery count.
pub(crate) struct Delivered {
    pub raw: RawEntry,
    pub delivery_count: u64,
}

/// A fetched or claimed entry waiting for a handler slot. Only entries with
/// a body get here: `enqueue` acks and skips deleted ones.
#[cfg(test)]
mod tests;
