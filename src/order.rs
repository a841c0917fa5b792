//! Ordered consumption by key: what an ordered stream is ([`Order`]), the
//! one mapping from a key to its partition ([`partition_of`]), what happens
//! to a key's later entries when one is dead-lettered ([`OnKeyFailure`]),
//! and where an entry's key is found.
//!
//! An ordered stream is `P` streams, its partitions, named `<name>:p<i>`
//! for `i` in `0..P`. A key's entries all go to one partition, so one
//! consumer at a time reads them (the partition's lease) and runs them one
//! after the other.

use std::fmt;
use std::sync::Arc;

use crate::error::ConfigError;
use crate::kind::SourceKind;

/// The most partitions an ordered stream may have.
pub const MAX_PARTITIONS: u16 = 1024;

/// The partition `key` maps to among `partitions`: the CRC-32 of the key's
/// bytes (the IEEE polynomial, as zlib's `crc32`, Python's `zlib.crc32`,
/// Go's `crc32.ChecksumIEEE` or PHP's `crc32` compute it) modulo
/// `partitions`. A producer in any language appends an entry of key `k` to
/// the stream `<name>:p<partition_of(k, P)>` with a plain `XADD`.
///
/// A JSON string key is hashed as its text without the quotes, a number as
/// its digits (`42` → the bytes `42`).
///
/// ```
/// assert_eq!(rillkit::partition_of(b"order-42", 16), 14);
/// assert_eq!(rillkit::partition_of(b"42", 16), 8);
/// ```
///
/// # Panics
/// When `partitions` is 0.
pub fn partition_of(key: &[u8], partitions: u16) -> u16 {
    assert!(
        partitions > 0,
        "an ordered stream has at least one partition"
    );
    (crc32fast::hash(key) % u32::from(partitions)) as u16
}

/// The key of partition `index` of the ordered stream `name`:
/// `<name>:p<index>`.
pub(crate) fn partition_name(name: &str, index: u16) -> String {
    format!("{name}:p{index}")
}

/// What happens to a key's later entries when one of its entries is
/// dead-lettered (its runs exhausted, rejected, or undecodable). Set with
/// [`ConsumerOptions::with_on_key_failure`](crate::ConsumerOptions::with_on_key_failure);
/// the choice is recorded in each dead letter's `on_key_failure` field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnKeyFailure {
    /// The key goes on with its next entry (the default).
    #[default]
    Skip,
    /// The key's later entries are dead-lettered too, each with an error
    /// naming the entry that failed first. The key is marked failed in a
    /// hash beside its partition (`{<partition>}:rillkit:failed-keys:<group>`,
    /// field: the key, value: the id of the entry that failed first), in the
    /// same script as the dead-letter move; the mark holds until an
    /// operator deletes it (`HDEL`), which the partition's consumer reads
    /// with its next lease renewal (every third of the lease TTL), or a
    /// redrive of the key's dead letters
    /// ([`Admin::redrive`](crate::admin::Admin::redrive)) deletes it with
    /// the first one it puts back, so they run again (a mark newer than the
    /// dead letter, from a later failure of the key, stays).
    FailRest,
}

impl OnKeyFailure {
    /// `skip` or `fail_rest`, as recorded in a dead letter.
    pub fn name(self) -> &'static str {
        match self {
            OnKeyFailure::Skip => "skip",
            OnKeyFailure::FailRest => "fail_rest",
        }
    }
}

impl fmt::Display for OnKeyFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a stream is ordered: the field holding an entry's key, and how many
/// partitions it is split into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Order {
    pub key_field: Arc<str>,
    pub partitions: u16,
}

impl Order {
    /// Checks the partition count and the key field.
    pub(crate) fn validate(&self, stream: &str) -> Result<(), ConfigError> {
        let bad = |option: &'static str, reason: String| {
            Err(ConfigError::Invalid {
                kind: Some(SourceKind::Stream),
                key: stream.to_owned(),
                option,
                reason,
            })
        };
        if self.partitions == 0 || self.partitions > MAX_PARTITIONS {
            return bad(
                "partitions",
                format!(
                    "an ordered stream has 1 to {MAX_PARTITIONS} partitions, not {}",
                    self.partitions
                ),
            );
        }
        if self.key_field.is_empty() {
            return bad("key_field", "the key field must not be empty".into());
        }
        Ok(())
    }
}

/// The key an entry is ordered by: the entry field `key_field` when it has
/// one, else the member `key_field` of the JSON object in the data field (a
/// string as its text, a number or a boolean as written). `None`: the
/// entry has no key, and runs without ordering.
pub(crate) fn entry_key(
    fields: &[(Vec<u8>, Vec<u8>)],
    key_field: &str,
    data_field: &str,
) -> Option<Vec<u8>> {
    if let Some((_, v)) = fields.iter().find(|(k, _)| k == key_field.as_bytes()) {
        return Some(v.clone());
    }
    let (_, data) = fields.iter().find(|(k, _)| k == data_field.as_bytes())?;
    json_key(data, key_field)
}

/// The key a consumer of an [ordered stream](crate::Stream::ordered_by)
/// finds in the JSON document `doc` when the entry has no field `name` of
/// its own: the member `name` of the object, a string as its text, a number
/// or a boolean as written (`{"order":42}` → `42`). `None` when `doc` is not
/// a JSON object or the member is missing, null, an array or an object.
///
/// ```
/// assert_eq!(rillkit::json_key(br#"{"order":"o-7"}"#, "order"), Some(b"o-7".to_vec()));
/// assert_eq!(rillkit::json_key(br#"{"order":42}"#, "order"), Some(b"42".to_vec()));
/// assert_eq!(rillkit::json_key(br#"{"other":1}"#, "order"), None);
/// ```
pub fn json_key(doc: &[u8], name: &str) -> Option<Vec<u8>> {
    let serde_json::Value::Object(mut map) = serde_json::from_slice(doc).ok()? else {
        return None;
    };
    match map.remove(name)? {
        serde_json::Value::String(s) => Some(s.into_bytes()),
        v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_)) => {
            Some(v.to_string().into_bytes())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
