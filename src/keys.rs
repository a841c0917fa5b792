//! Key naming: every key rillkit derives from a name the user gave (the
//! default dead-letter stream or list, the keys beside a list, the
//! consumer-name lease), the hash slot a key lives in, and the token that
//! tells this process's claims from another's.
//!
//! Every multi-key script runs over keys of one hash slot, so the keys
//! derived here share their source's slot under a cluster.

use std::sync::Arc;

use crate::error::ConfigError;
use crate::kind::SourceKind;

/// The default dead-letter stream (or list) of the source `name`:
/// `<name>-dlq`; under a cluster `{<name>}-dlq` (`<name>-dlq` when the name
/// already holds a hash tag), so it shares the source's hash slot.
pub(crate) fn dead_letter_name(name: &str, cluster: bool) -> String {
    if cluster {
        cluster_dlq(name)
    } else {
        format!("{name}-dlq")
    }
}

/// Hash slots in a cluster.
pub(crate) const SLOTS: u16 = 16_384;

/// The hash slot of `key`: CRC16 (XMODEM) of its hash tag (the part between
/// the first `{` and the next `}`, when not empty) or of the whole key,
/// modulo 16 384, as Redis computes it.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|b| *b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|b| *b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tagged.unwrap_or(key)) % SLOTS
}

/// The cluster form of the default dead-letter name: `<name>-dlq` when the
/// name already holds a hash tag (it then hashes like the source), else
/// `{<name>}-dlq`.
fn cluster_dlq(stream: &str) -> String {
    let plain = format!("{stream}-dlq");
    if key_slot(plain.as_bytes()) == key_slot(stream.as_bytes()) && stream.contains('{') {
        plain
    } else {
        format!("{{{stream}}}-dlq")
    }
}

/// The error `build()` returns when a stream and its dead-letter stream hash
/// to different slots (the dead-letter move, one script over both keys, would
/// fail with `CROSSSLOT`).
pub(crate) fn dlq_slot_error(stream: &str, dlq: &str) -> Option<ConfigError> {
    let (s, d) = (key_slot(stream.as_bytes()), key_slot(dlq.as_bytes()));
    (s != d).then(|| ConfigError::Invalid {
        kind: Some(SourceKind::Stream),
        key: stream.to_owned(),
        option: "dlq_name",
        reason: format!(
            "under Redis Cluster the dead-letter stream must share its stream's hash slot \
             (the move to it is one script over both keys), but {stream:?} is in slot {s} and \
             {dlq:?} in slot {d}; give both the same hash tag, e.g. {:?}, or leave the \
             dead-letter name to its default",
            dead_letter_name(stream, true)
        ),
    })
}

/// The sibling keys of a list under one hash slot: `<name>` when the name
/// holds a hash tag (they then hash like it), else `{<name>}`; rillkit's own
/// keys for the list are `<that>:rillkit:<what>`, so every script over the
/// list and them works in a cluster too.
pub(crate) fn slot_prefix(name: &str) -> String {
    let tagged = name
        .find('{')
        .and_then(|open| name[open + 1..].find('}'))
        .is_some_and(|close| close > 0);
    if tagged {
        name.to_owned()
    } else {
        format!("{{{name}}}")
    }
}

/// The keys of an ordered stream `name` read by `group`: where its
/// partition count is recorded (`<slot>:rillkit:partitions`) and the
/// sorted set of the group's live consumers with the expiry of each
/// (`<slot>:rillkit:members:<group>`), `<slot>` being `name` when it holds
/// a hash tag, else `{<name>}`.
pub(crate) fn ordered_keys(name: &str, group: &str) -> (String, String) {
    let slot = slot_prefix(name);
    (
        format!("{slot}:rillkit:partitions"),
        format!("{slot}:rillkit:members:{}", key_part(group)),
    )
}

/// The keys beside one partition of an ordered stream, in its hash slot:
/// the partition's lease for `group` (`<slot>:rillkit:owner:<group>`) and
/// the keys of `group` marked failed (`<slot>:rillkit:failed-keys:<group>`).
pub(crate) fn partition_keys(partition: &str, group: &str) -> (String, String) {
    let slot = slot_prefix(partition);
    let group = key_part(group);
    (
        format!("{slot}:rillkit:owner:{group}"),
        format!("{slot}:rillkit:failed-keys:{group}"),
    )
}

/// The keys beside a stream that hold its scheduled entries, in its hash
/// slot: the sorted set of schedule ids by due time in ms
/// (`<slot>:rillkit:scheduled:<stream>`), the hash of their entries
/// (`<slot>:rillkit:scheduled-entries:<stream>`) and the lease of the
/// process that moves due ones (`<slot>:rillkit:due-mover:<stream>`); the
/// stream's name percent-encoded as in [`key_part`], so `orders` and
/// `{orders}`, which share a slot prefix, keep their own.
pub(crate) fn scheduled_keys(stream: &str) -> [String; 3] {
    let slot = slot_prefix(stream);
    let own = key_part(stream);
    [
        format!("{slot}:rillkit:scheduled:{own}"),
        format!("{slot}:rillkit:scheduled-entries:{own}"),
        format!("{slot}:rillkit:due-mover:{own}"),
    ]
}

/// The token bucket of `group`'s rate limit, in `stream`'s hash slot:
/// `<slot>:rillkit:rate:<stream>:<group>`, each name percent-encoded as in
/// [`key_part`].
pub(crate) fn rate_key(stream: &str, group: &str) -> String {
    format!(
        "{}:rillkit:rate:{}:{}",
        slot_prefix(stream),
        key_part(stream),
        key_part(group)
    )
}

/// 64 random bits in hex: the first half of the schedule ids of one
/// publish.
pub(crate) fn random_id() -> String {
    format!("{:016x}", unique())
}

/// A name as one part of the lease key: `%` and `:` percent-encoded, so
/// stream `x:y` with group `g` and stream `x` with group `y:g` get
/// different keys.
pub(crate) fn key_part(name: &str) -> String {
    name.replace('%', "%25").replace(':', "%3A")
}

/// 64 bits that differ between leases of one process and between processes
/// (std's per-process random hash keys, and a counter).
fn unique() -> u64 {
    use std::hash::BuildHasher;
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::collections::hash_map::RandomState::new().hash_one((n, std::process::id()))
}

/// The key of a stream consumer name's lease:
/// `rillkit:lease:<stream>:<group>:<consumer>`, each name with `%` and `:`
/// percent-encoded.
pub(crate) fn lease_key(stream: &str, group: &str, consumer: &str) -> String {
    format!(
        "rillkit:lease:{}:{}:{}",
        key_part(stream),
        key_part(group),
        key_part(consumer)
    )
}

/// A token naming this process in the keys that hold its claims (a lease,
/// a list consumer's heartbeat): `<hostname>-<pid>-<random>`, a new random
/// part per call.
pub(crate) fn process_token() -> String {
    format!(
        "{}-{}-{:016x}",
        gethostname::gethostname().to_string_lossy(),
        std::process::id(),
        unique()
    )
}

/// The keys one list consumer uses.
#[derive(Debug, Clone)]
pub(crate) struct ListKeys {
    pub list: Arc<str>,
    pub dlq: Arc<str>,
    /// `<prefix>:rillkit:` — the prefix of the consumer-specific keys.
    pub own: String,
    pub processing: String,
    pub heartbeat: String,
    pub registry: String,
    pub attempts: String,
}

impl ListKeys {
    pub(crate) fn new(list: Arc<str>, dlq: Arc<str>, consumer: &str) -> Self {
        let own = format!("{}:rillkit:", slot_prefix(&list));
        ListKeys {
            processing: format!("{own}processing:{consumer}"),
            heartbeat: format!("{own}heartbeat:{consumer}"),
            registry: format!("{own}consumers"),
            attempts: format!("{own}attempts"),
            own,
            list,
            dlq,
        }
    }
}

#[cfg(test)]
mod tests;
