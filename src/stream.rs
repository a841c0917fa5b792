//! [`Stream`]: one description of a Redis stream shared by producers and
//! consumers, and the [`Codec`] that turns values into the bytes of its `data`
//! field.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::connection::Topology;
use crate::error::{BoxError, ConfigError};
use crate::kind::SourceKind;

/// Turns values into the bytes stored in an entry's data field and back.
///
/// The default is [`Json`]. A codec is a small `Clone` value; implement this
/// trait to store another format (MessagePack, protobuf…) in the same field.
pub trait Codec: Clone + Send + Sync + 'static {
    /// Encodes a value.
    ///
    /// # Errors
    /// When the value cannot be represented in the format.
    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Vec<u8>, BoxError>;

    /// Decodes the bytes of a data field.
    ///
    /// # Errors
    /// When the bytes are not a valid document of the format or do not fit `T`.
    /// rillkit sends such an entry to the dead-letter stream at once.
    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, BoxError>;
}

/// JSON via `serde_json`: the wire format of rillkit (one field `data` holding a
/// JSON document).
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

impl Codec for Json {
    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Vec<u8>, BoxError> {
        Ok(serde_json::to_vec(value)?)
    }

    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, BoxError> {
        Ok(serde_json::from_slice(bytes)?)
    }
}

/// A Redis stream as producers and consumers both see it.
///
/// | part | default | Redis |
/// |------|---------|-------|
/// | name | (required) | the stream key |
/// | group | (required) | the consumer group consumers of this value join |
/// | DLQ name | `<name>-dlq`; `{<name>}-dlq` under a cluster | the dead-letter stream |
/// | length cap | none | `XADD <name> MAXLEN ~ <cap>` on publish |
/// | data field | `data` | the field holding the encoded value |
/// | codec | [`Json`] | how the data field is encoded |
///
/// Same group means consumers share the work; different groups (see
/// [`with_group`](Self::with_group)) each see every entry.
///
/// ```
/// use rillkit::Stream;
///
/// let orders = Stream::new("orders", "billing").with_max_len(100_000);
/// let audit = orders.with_group("audit");
/// assert_eq!(orders.dlq_name(), "orders-dlq");
/// assert_eq!(orders.max_len(), Some(100_000));
/// assert_eq!(audit.group(), "audit");
/// ```
#[derive(Clone)]
pub struct Stream<C = Json> {
    name: Arc<str>,
    group: Arc<str>,
    dlq: Arc<str>,
    /// Whether `dlq` is the default (set per topology at build).
    dlq_default: bool,
    max_len: Option<usize>,
    dlq_max_len: Option<usize>,
    retain_acked: bool,
    idempotency_window: Duration,
    field: Arc<str>,
    /// Ordered by key over partitions (`None`: one stream).
    order: Option<crate::order::Order>,
    codec: C,
}

/// [`Stream::idempotency_window`]'s default.
const DEFAULT_IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(3600);
const MIN_IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(1);
const MAX_IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(86_400);

impl Stream<Json> {
    /// A stream named `name`, consumed by group `group`, with JSON in field
    /// `data` and the dead-letter stream `<name>-dlq`.
    pub fn new(name: impl Into<String>, group: impl Into<String>) -> Self {
        let name: String = name.into();
        let dlq = crate::keys::dead_letter_name(&name, false);
        Stream {
            name: name.into(),
            group: group.into().into(),
            dlq: dlq.into(),
            dlq_default: true,
            max_len: None,
            dlq_max_len: None,
            retain_acked: false,
            idempotency_window: DEFAULT_IDEMPOTENCY_WINDOW,
            field: "data".into(),
            order: None,
            codec: Json,
        }
    }
}

impl<C: Codec> Stream<C> {
    /// The same stream seen by another consumer group.
    pub fn with_group(&self, group: impl Into<String>) -> Self {
        Stream {
            group: group.into().into(),
            ..self.clone()
        }
    }

    /// Sets the dead-letter stream's key (default `<name>-dlq`, and
    /// `{<name>}-dlq` under a cluster). Under a cluster it must hash to the
    /// stream's slot (share its hash tag), or
    /// [`build`](crate::BrokerBuilder::build) fails.
    #[must_use]
    pub fn with_dlq_name(mut self, dlq: impl Into<String>) -> Self {
        self.dlq = dlq.into().into();
        self.dlq_default = false;
        self
    }

    /// Caps the stream at about `entries` entries: publishes send
    /// `XADD … MAXLEN ~ entries`. Trimming is approximate (whole macro nodes), as
    /// Redis does it.
    ///
    /// **It can drop work**: the cap trims the oldest entries whether or not
    /// any group has read or acked them, silently. To remove only what every
    /// group is done with, use [`with_retain_acked`](Self::with_retain_acked) instead.
    #[must_use]
    pub fn with_max_len(mut self, entries: usize) -> Self {
        self.max_len = Some(entries);
        self
    }

    /// Trims, every few seconds (the broker's
    /// [`retention_period`](crate::BrokerBuilder::retention_period), 5 s by
    /// default), the entries every consumer group has acked: everything older
    /// than the oldest entry some group still needs — its oldest pending
    /// entry, or the first it has not read yet. One script computes that from
    /// `XINFO GROUPS` and `XPENDING` and runs `XTRIM … MINID ~` up to it, so an
    /// entry some group has not read or not acked is never removed. A stream
    /// with no group is never trimmed. Runs in brokers that subscribe to the
    /// stream. Off by default.
    #[must_use]
    pub fn with_retain_acked(mut self, on: bool) -> Self {
        self.retain_acked = on;
        self
    }

    /// Caps the dead-letter stream at about `entries` entries: each move to
    /// it sends `XADD … MAXLEN ~ entries`, and the dead letters that removes
    /// (the oldest) are counted and logged at WARN. Default: no cap.
    #[must_use]
    pub fn with_dlq_max_len(mut self, entries: usize) -> Self {
        self.dlq_max_len = Some(entries);
        self
    }

    /// The dead-letter cap set with [`with_dlq_max_len`](Self::with_dlq_max_len).
    pub fn dlq_max_len(&self) -> Option<usize> {
        self.dlq_max_len
    }

    /// How long a message published with
    /// [`Broker::publish_idempotent`](crate::Broker::publish_idempotent) is
    /// recognised when it is published again: a resend within `window` of
    /// the first publish adds nothing and answers the first entry's id.
    /// From 1 s to 24 h, whole seconds on Redis 8.6 and later (the stream's
    /// `IDMP-DURATION`, which also keeps only each producer's newest 10,000
    /// ids). Default: 1 hour.
    ///
    /// On Redis 8.6 and later the window is the stream's: set the same one
    /// in every producer of a stream. The first idempotent publish that
    /// creates the stream sets it; one that asks for more raises it, which
    /// clears the ids the stream kept so far; one that asks for less
    /// changes nothing (a stream made by a plain `XADD` keeps the server's
    /// 100 s until then). Raise it while nothing publishes to the stream:
    /// ids sent before the change are forgotten.
    #[must_use]
    pub fn with_idempotency_window(mut self, window: Duration) -> Self {
        self.idempotency_window = window;
        self
    }

    /// The window set with
    /// [`with_idempotency_window`](Self::with_idempotency_window).
    pub fn idempotency_window(&self) -> Duration {
        self.idempotency_window
    }

    /// Whether acked entries are trimmed, set with
    /// [`with_retain_acked`](Self::with_retain_acked).
    pub fn retain_acked(&self) -> bool {
        self.retain_acked
    }

    /// Sets the field that holds the encoded value (default `data`).
    #[must_use]
    pub fn with_data_field(mut self, field: impl Into<String>) -> Self {
        self.field = field.into().into();
        self
    }

    /// Orders the stream by key: entries of one key run one at a time, in
    /// the order they were published, while different keys run side by
    /// side (up to `concurrency`). The key of an entry is its field
    /// `key_field`, or else the member `key_field` of the JSON object in its
    /// data field.
    ///
    /// The stream becomes `partitions` streams, `<name>:p0` …
    /// `<name>:p<partitions − 1>`, each with its own dead-letter stream
    /// (`<partition>-dlq`; `{<partition>}-dlq` under a cluster); a key's
    /// entries all go to partition [`partition_of(key, partitions)`](crate::partition_of)
    /// ([`Broker::publish_keyed`](crate::Broker::publish_keyed) does it, as
    /// can any client with `XADD`). Under a cluster the partitions spread over
    /// the shards (unless `name` holds a hash tag, which puts them all in its
    /// slot). Each partition is read by one consumer of the group at a time
    /// (a lease per partition), and the partitions are shared out among the
    /// group's live consumers.
    ///
    /// The partition count is fixed when the stream is first used: it is
    /// recorded in Redis (`{<name>}:rillkit:partitions`), and a consumer or
    /// producer configured with another count fails with
    /// [`Error::Config`](crate::Error::Config) naming both. 1 to
    /// [`MAX_PARTITIONS`](crate::MAX_PARTITIONS); a count well above the
    /// number of consumers you expect spreads them evenly (16 is a good
    /// start).
    ///
    /// ```
    /// use rillkit::Stream;
    ///
    /// let orders = Stream::new("orders", "billing").ordered_by("order_id", 16);
    /// assert_eq!(orders.partitions(), Some(16));
    /// assert_eq!(orders.partition_key(b"order-42").as_deref(), Some("orders:p14"));
    /// ```
    #[must_use]
    pub fn ordered_by(mut self, key_field: impl Into<String>, partitions: u16) -> Self {
        self.order = Some(crate::order::Order {
            key_field: key_field.into().into(),
            partitions,
        });
        self
    }

    /// The partition count set with [`ordered_by`](Self::ordered_by), if
    /// the stream is ordered.
    pub fn partitions(&self) -> Option<u16> {
        self.order.as_ref().map(|o| o.partitions)
    }

    /// The key field set with [`ordered_by`](Self::ordered_by), if the
    /// stream is ordered.
    pub fn key_field(&self) -> Option<&str> {
        self.order.as_ref().map(|o| &*o.key_field)
    }

    /// The stream key the entries of `key` go to: `<name>:p<partition>`
    /// ([`partition_of`](crate::partition_of)); `None` for a stream that is
    /// not ordered.
    pub fn partition_key(&self, key: &[u8]) -> Option<String> {
        let o = self.order.as_ref().filter(|o| o.partitions > 0)?;
        Some(crate::order::partition_name(
            &self.name,
            crate::order::partition_of(key, o.partitions),
        ))
    }

    /// Replaces the codec (default [`Json`]).
    #[must_use]
    pub fn with_codec<D: Codec>(self, codec: D) -> Stream<D> {
        Stream {
            name: self.name,
            group: self.group,
            dlq: self.dlq,
            dlq_default: self.dlq_default,
            max_len: self.max_len,
            dlq_max_len: self.dlq_max_len,
            retain_acked: self.retain_acked,
            idempotency_window: self.idempotency_window,
            field: self.field,
            order: self.order,
            codec,
        }
    }

    /// The stream key.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The consumer group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The dead-letter stream key for a standalone or Sentinel server: the
    /// name set with [`with_dlq_name`](Self::with_dlq_name), or `<name>-dlq`. Under a
    /// cluster the default differs; see [`dlq_for`](Self::dlq_for).
    pub fn dlq_name(&self) -> &str {
        &self.dlq
    }

    /// The dead-letter stream key a broker on `topology` uses: the name set
    /// with [`with_dlq_name`](Self::with_dlq_name), else `<name>-dlq`, or under a
    /// cluster `{<name>}-dlq` (`<name>-dlq` when the name already holds a
    /// hash tag), so that the stream and its dead-letter stream share a hash
    /// slot.
    ///
    /// ```
    /// use rillkit::{Stream, Topology};
    ///
    /// let orders = Stream::new("orders", "billing");
    /// let cluster = Topology::cluster(["10.0.0.1:6379"]);
    /// assert_eq!(orders.dlq_for(&cluster), "{orders}-dlq");
    /// assert_eq!(orders.dlq_for(&Topology::standalone("redis://h")), "orders-dlq");
    /// ```
    pub fn dlq_for(&self, topology: &Topology) -> String {
        if self.dlq_default && topology.is_cluster() {
            crate::keys::dead_letter_name(&self.name, true)
        } else {
            self.dlq.to_string()
        }
    }

    /// The length cap set with [`with_max_len`](Self::with_max_len), in entries, if
    /// any.
    pub fn max_len(&self) -> Option<usize> {
        self.max_len
    }

    /// The field holding the encoded value, set with
    /// [`with_data_field`](Self::with_data_field).
    pub fn data_field(&self) -> &str {
        &self.field
    }

    /// The codec, set with [`with_codec`](Self::with_codec).
    pub fn codec(&self) -> &C {
        &self.codec
    }

    pub(crate) fn names(&self) -> StreamNames {
        StreamNames {
            name: self.name.clone(),
            group: self.group.clone(),
            dlq: self.dlq.clone(),
            dlq_default: self.dlq_default,
            field: self.field.clone(),
            max_len: self.max_len,
            dlq_max_len: self.dlq_max_len,
            retain_acked: self.retain_acked,
            idempotency_window: self.idempotency_window,
            order: self.order.clone(),
        }
    }
}

impl<C> fmt::Debug for Stream<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("name", &self.name)
            .field("group", &self.group)
            .field("dlq", &self.dlq)
            .field("max_len", &self.max_len)
            .field("field", &self.field)
            .field("order", &self.order)
            .field("codec", &std::any::type_name::<C>())
            .finish()
    }
}

impl StreamNames {
    /// Names that cannot work: empty ones, a dead-letter stream that is the
    /// stream itself (every dead letter would be read again, forever), a
    /// length cap of 0 (every entry trimmed as it is added).
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let bad = |option: &'static str, reason: &str| {
            Err(ConfigError::Invalid {
                kind: Some(SourceKind::Stream),
                key: self.name.to_string(),
                option,
                reason: reason.to_owned(),
            })
        };
        if self.name.is_empty() {
            return bad("name", "the stream name must not be empty");
        }
        if self.group.is_empty() {
            return bad("group", "the consumer group name must not be empty");
        }
        if self.dlq.is_empty() {
            return bad("dlq_name", "the dead-letter stream name must not be empty");
        }
        if self.dlq == self.name {
            return bad(
                "dlq_name",
                "the dead-letter stream must not be the stream itself (each dead letter would be read and fail again, forever)",
            );
        }
        if self.field.is_empty() {
            return bad("data_field", "the data field name must not be empty");
        }
        if self.dlq_max_len == Some(0) {
            return bad(
                "dlq_max_len",
                "must be at least 1 entry (a cap of 0 would drop every dead letter)",
            );
        }
        if !(MIN_IDEMPOTENCY_WINDOW..=MAX_IDEMPOTENCY_WINDOW).contains(&self.idempotency_window) {
            return bad(
                "idempotency_window",
                "must be from 1 s to 24 h (86,400 s: the most Redis keeps a stream's message ids)",
            );
        }
        if self.max_len == Some(0) {
            return bad(
                "max_len",
                "must be at least 1 entry (MAXLEN 0 would trim every entry as soon as it is added)",
            );
        }
        if let Some(order) = &self.order {
            order.validate(&self.name)?;
            if !self.dlq_default {
                return bad(
                    "dlq_name",
                    "an ordered stream's dead-letter streams are named per partition (<partition>-dlq); leave the name to its default",
                );
            }
        }
        Ok(())
    }
}

/// The codec-free part of a [`Stream`], carried around inside the crate.
#[derive(Debug, Clone)]
pub(crate) struct StreamNames {
    pub name: Arc<str>,
    pub group: Arc<str>,
    pub dlq: Arc<str>,
    /// `dlq` is the default name (replaced at build under a cluster).
    pub dlq_default: bool,
    pub field: Arc<str>,
    pub max_len: Option<usize>,
    pub dlq_max_len: Option<usize>,
    pub retain_acked: bool,
    pub idempotency_window: Duration,
    /// Ordered by key over partitions.
    pub order: Option<crate::order::Order>,
}

/// An entry id as Redis gives it: `<ms since the epoch>-<sequence>`, for
/// example `1793094479536-0`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId(pub(crate) String);

impl EntryId {
    /// The id as Redis spells it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id's `(milliseconds, sequence)` parts, or `None` if it is not in the
    /// `<ms>-<seq>` form.
    pub fn parts(&self) -> Option<(u64, u64)> {
        let (ms, seq) = self.0.split_once('-')?;
        Some((ms.parse().ok()?, seq.parse().ok()?))
    }

    /// How long ago Redis added the entry, from the id's milliseconds and
    /// this machine's clock (`None` for an id not in `<ms>-<seq>` form; zero
    /// when the clocks disagree the other way).
    pub fn age(&self) -> Option<std::time::Duration> {
        let (ms, _) = self.parts()?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?;
        Some(now.saturating_sub(std::time::Duration::from_millis(ms)))
    }
}

impl fmt::Display for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for EntryId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<EntryId> for String {
    fn from(id: EntryId) -> String {
        id.0
    }
}

impl redis::ToRedisArgs for EntryId {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + redis::RedisWrite,
    {
        out.write_arg(self.0.as_bytes());
    }
}

impl redis::ToSingleRedisArg for EntryId {}

/// What a resent message is recognised by in
/// [`Broker::publish_idempotent`](crate::Broker::publish_idempotent): who
/// published it and its id within that producer.
///
/// The producer id must stay the same across the producer's restarts (a
/// service name, a job name), so a message resent after a crash is
/// recognised; two producers that number their messages on their own need
/// different ids. The message id is any bytes: an order number, a
/// document's id, a hash of the request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MessageKey {
    producer: String,
    id: Vec<u8>,
}

impl MessageKey {
    /// The message `id` of `producer`.
    pub fn new(producer: impl Into<String>, id: impl AsRef<[u8]>) -> Self {
        MessageKey {
            producer: producer.into(),
            id: id.as_ref().to_vec(),
        }
    }

    /// The producer id.
    pub fn producer(&self) -> &str {
        &self.producer
    }

    /// The message id.
    pub fn id(&self) -> &[u8] {
        &self.id
    }
}
