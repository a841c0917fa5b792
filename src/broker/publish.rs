//! Publishing: to streams (`XADD` through the Redis actor, in a send span
//! whose context the entry carries), to lists and to channels.

use serde::Serialize;

use super::{Broker, spans};
use crate::error::{ConfigError, Error};
use crate::kind::SourceKind;
use crate::redis::{Publish, PublishOnce, Query};
use crate::source::channel::Channel;
use crate::source::list::List;
use crate::stream::{Codec, EntryId, MessageKey, Stream, StreamNames};

impl Broker {
    /// Encodes `value` with the stream's codec and adds it as one entry
    /// (`XADD <stream> [MAXLEN ~ n] * data <bytes>`). Returns its entry id.
    ///
    /// The command is sent at most once. While the shared connections
    /// reconnect, the publish waits for them up to
    /// [`publish_timeout`](crate::BrokerBuilder::publish_timeout).
    ///
    /// It runs in a `rillkit.publish` span, an OpenTelemetry messaging send
    /// span (`send <stream>`, kind producer, `messaging.message.id` the
    /// entry id). With feature `otel`, called inside a span with a valid
    /// OpenTelemetry context, the entry gets a `traceparent` field holding
    /// the send span's context (`XADD <stream> * data <bytes> traceparent
    /// <value>`), which the consumer's span links to (or is a child of, with
    /// [`TraceLinking::Parent`](crate::TraceLinking::Parent)); outside one
    /// it gets none.
    ///
    /// # Errors
    /// [`Error::Config`] for a stream whose names or length cap cannot work
    /// (an empty name, `with_max_len(0)`); [`Error::Encode`];
    /// [`Error::NotStarted`] before `start()`;
    /// [`Error::ShutDown`] once the connections are closed;
    /// [`Error::Unavailable`] when they did not come back within
    /// `publish_timeout`; [`Error::Connect`] or [`Error::Redis`] when Redis
    /// fails the command. [`Error::is_retryable`] tells whether trying again
    /// later may succeed (`READONLY` during a failover, `OOM`, `LOADING`, a
    /// lost connection…); the entry may have been added when the reply was
    /// lost.
    pub async fn publish<T: Serialize + ?Sized, C: Codec>(
        &self,
        stream: &Stream<C>,
        value: &T,
    ) -> Result<EntryId, Error> {
        let payload = encode(stream, value)?;
        let mut ids = self.send_publish(stream, vec![payload]).await?;
        ids.pop().ok_or(Error::ShutDown)
    }

    /// As [`publish`](Self::publish), and the entry gets a second field,
    /// `traceparent`, holding `traceparent` (W3C Trace Context): `XADD
    /// <stream> * data <bytes> traceparent <value>`. The consumer's
    /// `rillkit.handle` span records it as its `traceparent` field, and a
    /// handler reads it with [`TraceParent::of`](crate::TraceParent::of).
    ///
    /// The value is written as given, also with feature `otel`; the
    /// publish's send span (`rillkit.publish`, `send <stream>`) is then a
    /// child of the span it names.
    ///
    /// ```no_run
    /// # async fn f(broker: rillkit::Broker) -> Result<(), Box<dyn std::error::Error>> {
    /// use rillkit::{Stream, TraceParent};
    ///
    /// // From the incoming request's `traceparent` header, or your tracer.
    /// let tp: TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".parse()?;
    /// broker.publish_traced(&Stream::new("orders", "billing"), &42u64, &tp).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`publish`](Self::publish).
    pub async fn publish_traced<T: Serialize + ?Sized, C: Codec>(
        &self,
        stream: &Stream<C>,
        value: &T,
        traceparent: &crate::TraceParent,
    ) -> Result<EntryId, Error> {
        let payload = encode(stream, value)?;
        let span = spans::send(&stream.names().name, 1);
        #[cfg(feature = "otel")]
        crate::otel::set_parent(&span, traceparent);
        let mut ids = spans::run(
            &span,
            self.send(stream, vec![payload], Some(traceparent.clone())),
        )
        .await?;
        ids.pop().ok_or(Error::ShutDown)
    }

    /// Adds one entry per value, pipelined in one round trip. Returns the entry
    /// ids in the order of `values`. Nothing is sent when a value fails to
    /// encode.
    ///
    /// One `rillkit.publish` send span covers them all
    /// (`messaging.batch.message_count` the number of entries, or
    /// `messaging.message.id` for a single one); with feature `otel` each
    /// entry's `traceparent` holds its context, as for
    /// [`publish`](Self::publish).
    ///
    /// # Errors
    /// As [`publish`](Self::publish).
    pub async fn publish_batch<T, C, I>(
        &self,
        stream: &Stream<C>,
        values: I,
    ) -> Result<Vec<EntryId>, Error>
    where
        T: Serialize,
        C: Codec,
        I: IntoIterator<Item = T>,
    {
        let payloads = encode_all(stream, values)?;
        if payloads.is_empty() {
            return Ok(Vec::new());
        }
        self.send_publish(stream, payloads).await
    }

    /// As [`publish`](Self::publish), but a message published again under
    /// the same `key` (its producer and message id) within the stream's
    /// [`idempotency_window`](Stream::idempotency_window) (1 hour by
    /// default) is not added again: the call answers the first entry's id.
    /// So a producer that lost a publish's reply, or restarted before it
    /// knew, sends it again without making a copy a consumer would run
    /// twice.
    ///
    /// Where the stream's server has it (Redis 8.6 and later), it is the
    /// server's own `XADD <stream> IDMP <producer> <message id> * data
    /// <bytes>`; the first such publish of a stream by this broker makes the
    /// stream keep its producers' ids for the window and up to 10,000 per
    /// producer (`XCFGSET … IDMP-DURATION … IDMP-MAXSIZE 10000`, only when it
    /// keeps them shorter or fewer). On other servers one script adds the
    /// entry with a marker key beside the stream
    /// (`<stream slot>:rillkit:idmp:<producer>:<message id>`, expiring
    /// after the window) and answers the marked id for a resend. Markers
    /// are keys: an eviction policy that may evict any key (`allkeys-*`)
    /// can forget one before its window ends.
    ///
    /// A publish that failed may have been added; unlike
    /// [`publish`](Self::publish), sending it again is safe (within the
    /// window), and this call does so itself, up to 5 times 50 ms apart,
    /// after an error [`Error::is_retryable`] calls retryable (a
    /// redirection, `LOADING`, a lost connection, `OOM`…).
    ///
    /// ```no_run
    /// # async fn f(broker: rillkit::Broker) -> Result<(), rillkit::Error> {
    /// use rillkit::{MessageKey, Stream};
    ///
    /// let orders = Stream::new("orders", "billing");
    /// let key = MessageKey::new("checkout-api", "order-1042");
    /// let first = broker.publish_idempotent(&orders, &key, &1042u64).await?;
    /// let again = broker.publish_idempotent(&orders, &key, &1042u64).await?;
    /// assert_eq!(first, again);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`publish`](Self::publish); [`Error::Config`] also for an ordered
    /// stream (not supported) or a window outside 1 s ..= 24 h.
    pub async fn publish_idempotent<T: Serialize + ?Sized, C: Codec>(
        &self,
        stream: &Stream<C>,
        key: &MessageKey,
        value: &T,
    ) -> Result<EntryId, Error> {
        let names = unordered(stream, "publish_idempotent")?;
        let payload = encode(stream, value)?;
        let redis = self.redis_addr()?;
        let span = spans::send(&names.name, 1);
        let fields = entry_fields(&names, payload, traceparent_for(&span).as_ref());
        let send = async {
            redis
                .send(PublishOnce {
                    stream: names.name.clone(),
                    key: key.clone(),
                    fields,
                    max_len: names.max_len,
                    window: names.idempotency_window,
                })
                .await
                .map_err(|_| Error::ShutDown)?
                .map(|id| vec![id])
        };
        let mut ids = spans::run(&span, send).await?;
        ids.pop().ok_or(Error::ShutDown)
    }

    /// Adds `value` to a stream [ordered by key](Stream::ordered_by), in the
    /// partition of `key` ([`partition_of`](crate::partition_of)): `XADD
    /// <name>:p<partition> * data <bytes> <key_field> <key>`. Entries
    /// published with one key are handled in the order of their publishes.
    /// Returns the entry id (in its partition).
    ///
    /// The first publish to a stream by this broker records its partition
    /// count in Redis if none is (`SET … NX`), or checks it.
    ///
    /// The `XADD` runs in a send span whose destination is the partition's
    /// stream (`send <name>:p<partition>`), with the `traceparent` rules of
    /// [`publish`](Self::publish).
    ///
    /// # Errors
    /// [`Error::Config`] for a stream that is not ordered, or when Redis
    /// records another partition count for it (both named); else as
    /// [`publish`](Self::publish).
    pub async fn publish_keyed<T: Serialize + ?Sized, C: Codec>(
        &self,
        stream: &Stream<C>,
        key: impl AsRef<[u8]>,
        value: &T,
    ) -> Result<EntryId, Error> {
        let key = key.as_ref();
        let names = stream.names();
        names.validate()?;
        let Some(order) = names.order.clone() else {
            return Err(Error::Config(ConfigError::Invalid {
                kind: Some(crate::kind::SourceKind::Stream),
                key: names.name.to_string(),
                option: "partitions",
                reason: "publish_keyed needs a stream ordered by key (Stream::ordered_by)".into(),
            }));
        };
        let payload = encode(stream, value)?;
        let redis = self.redis_addr()?;
        let checked = (names.name.to_string(), order.partitions);
        if !self
            .inner
            .orders_checked
            .lock()
            .expect("lock")
            .contains(&checked)
        {
            let (record, _) = crate::keys::ordered_keys(&names.name, &names.group);
            let answer = redis
                .send(Query(
                    "set",
                    crate::source::stream::ordered::record_command(&record, order.partitions),
                ))
                .await
                .map_err(|_| Error::ShutDown)??;
            crate::source::stream::ordered::check_recorded(
                &names.name,
                &record,
                order.partitions,
                &answer,
            )?;
            self.inner
                .orders_checked
                .lock()
                .expect("lock")
                .insert(checked);
        }
        let partition = crate::order::partition_name(
            &names.name,
            crate::order::partition_of(key, order.partitions),
        );
        let span = spans::send(&partition, 1);
        let traceparent = traceparent_for(&span);
        let xadd = async {
            redis
                .send(Publish {
                    stream: partition.into(),
                    field: names.field,
                    max_len: names.max_len,
                    payloads: vec![payload],
                    traceparent,
                    key: Some((order.key_field, key.to_vec())),
                })
                .await
                .map_err(|_| Error::ShutDown)?
        };
        let mut ids = spans::run(&span, xadd).await?;
        ids.pop().ok_or(Error::ShutDown)
    }

    async fn send_publish<C: Codec>(
        &self,
        stream: &Stream<C>,
        payloads: Vec<Vec<u8>>,
    ) -> Result<Vec<EntryId>, Error> {
        let span = spans::send(&stream.names().name, payloads.len());
        let traceparent = traceparent_for(&span);
        spans::run(&span, self.send(stream, payloads, traceparent)).await
    }

    async fn send<C: Codec>(
        &self,
        stream: &Stream<C>,
        payloads: Vec<Vec<u8>>,
        traceparent: Option<crate::TraceParent>,
    ) -> Result<Vec<EntryId>, Error> {
        let names = stream.names();
        // A producer's `Stream` never went through `build()`.
        names.validate()?;
        if names.order.is_some() {
            return Err(Error::Config(ConfigError::Invalid {
                kind: Some(crate::kind::SourceKind::Stream),
                key: names.name.to_string(),
                option: "partitions",
                reason: "the stream is ordered by key: publish with publish_keyed, which picks the key's partition".into(),
            }));
        }
        self.redis_addr()?
            .send(Publish {
                stream: names.name,
                field: names.field,
                max_len: names.max_len,
                payloads,
                traceparent,
                key: None,
            })
            .await
            .map_err(|_| Error::ShutDown)?
    }

    /// Pushes one item onto a list (`LPUSH`), encoded with the list's codec.
    /// Answers the list's length after the push. Runs in a
    /// `rillkit.publish` span (OpenTelemetry `send <list>`, kind producer);
    /// an item carries no `traceparent`.
    ///
    /// # Errors
    /// [`Error::Encode`]; otherwise as [`publish`](Self::publish).
    pub async fn publish_list<T: Serialize + ?Sized, C: Codec>(
        &self,
        list: &List<C>,
        value: &T,
    ) -> Result<u64, Error> {
        let item = encode_item(list, value)?;
        self.push(list, vec![item]).await
    }

    /// Pushes many items onto a list in one `LPUSH` (in the order given, so
    /// consumers pop them in that order). Answers the list's length after
    /// the push; nothing is sent when a value fails to encode or there is
    /// none. One `rillkit.publish` span covers the push
    /// (`messaging.batch.message_count` the number of items).
    ///
    /// # Errors
    /// As [`publish_list`](Self::publish_list).
    pub async fn publish_list_batch<T, C, I>(&self, list: &List<C>, values: I) -> Result<u64, Error>
    where
        T: Serialize,
        C: Codec,
        I: IntoIterator<Item = T>,
    {
        let items = values
            .into_iter()
            .map(|v| encode_item(list, &v))
            .collect::<Result<Vec<_>, _>>()?;
        if items.is_empty() {
            return Ok(0);
        }
        self.push(list, items).await
    }

    async fn push<C: Codec>(&self, list: &List<C>, items: Vec<Vec<u8>>) -> Result<u64, Error> {
        if list.name().is_empty() {
            return Err(Error::Config(ConfigError::Invalid {
                kind: Some(SourceKind::List),
                key: String::new(),
                option: "name",
                reason: "a list needs a name".into(),
            }));
        }
        let span = super::spans::send(list.name(), items.len());
        let mut cmd = redis::cmd("LPUSH");
        cmd.arg(list.name()).arg(items);
        let pushed = async {
            let v = self.query("lpush", cmd).await?;
            Ok(crate::status::int(&v).unwrap_or(0))
        };
        super::spans::run(&span, pushed).await
    }

    /// A command on a shared connection.
    pub(crate) async fn query(
        &self,
        acl: &'static str,
        cmd: redis::Cmd,
    ) -> Result<redis::Value, Error> {
        self.redis_addr()?
            .send(Query(acl, cmd))
            .await
            .map_err(|_| Error::ShutDown)?
    }
}

fn encode_item<T: Serialize + ?Sized, C: Codec>(
    list: &List<C>,
    value: &T,
) -> Result<Vec<u8>, Error> {
    list.codec().encode(value).map_err(|source| Error::Encode {
        kind: SourceKind::List,
        key: list.name().to_owned(),
        source,
    })
}

impl Broker {
    /// Publishes one message on a channel (`PUBLISH`), encoded with the
    /// channel's codec. Answers how many subscribers received it (in a
    /// cluster: those connected to the node that took the command). Runs in
    /// a `rillkit.publish` span (OpenTelemetry `send <channel>`, kind
    /// producer); a message carries no `traceparent`.
    ///
    /// # Errors
    /// [`Error::Encode`]; otherwise as [`publish`](Self::publish).
    pub async fn publish_channel<T: Serialize + ?Sized, C: Codec>(
        &self,
        channel: &Channel<C>,
        value: &T,
    ) -> Result<u64, Error> {
        let payload = channel
            .codec()
            .encode(value)
            .map_err(|source| Error::Encode {
                kind: SourceKind::Channel,
                key: channel.name().to_owned(),
                source,
            })?;
        let span = super::spans::send(channel.name(), 1);
        let mut cmd = redis::cmd("PUBLISH");
        cmd.arg(channel.name()).arg(payload);
        let published = async {
            let v = self.query("publish", cmd).await?;
            Ok(crate::status::int(&v).unwrap_or(0))
        };
        super::spans::run(&span, published).await
    }
}

/// The `traceparent` a stream publish running in the send span `span`
/// writes: with feature `otel`, inside a span with a valid OpenTelemetry
/// context, the send span's context; otherwise none.
/// The names of `stream`, checked, for a publish (`what`) that does not go
/// to a stream ordered by key.
pub(super) fn unordered<C: Codec>(stream: &Stream<C>, what: &str) -> Result<StreamNames, Error> {
    let names = stream.names();
    names.validate()?;
    if names.order.is_some() {
        return Err(Error::Config(ConfigError::Invalid {
            kind: Some(SourceKind::Stream),
            key: names.name.to_string(),
            option: "partitions",
            reason: format!("{what} does not publish to a stream ordered by key"),
        }));
    }
    Ok(names)
}

/// An entry's fields: its data field holding `payload`, then `traceparent`
/// when there is one.
pub(super) fn entry_fields(
    names: &StreamNames,
    payload: Vec<u8>,
    traceparent: Option<&crate::TraceParent>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut fields = vec![(names.field.as_bytes().to_vec(), payload)];
    if let Some(tp) = traceparent {
        fields.push((
            crate::traceparent::TRACEPARENT_FIELD.as_bytes().to_vec(),
            tp.as_str().as_bytes().to_vec(),
        ));
    }
    fields
}

pub(super) fn traceparent_for(span: &tracing::Span) -> Option<crate::TraceParent> {
    #[cfg(feature = "otel")]
    {
        crate::otel::for_send(span)
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = span;
        None
    }
}

/// Every value encoded, or the first error.
pub(super) fn encode_all<T: Serialize, C: Codec>(
    stream: &Stream<C>,
    values: impl IntoIterator<Item = T>,
) -> Result<Vec<Vec<u8>>, Error> {
    values.into_iter().map(|v| encode(stream, &v)).collect()
}

pub(super) fn encode<T: Serialize + ?Sized, C: Codec>(
    stream: &Stream<C>,
    value: &T,
) -> Result<Vec<u8>, Error> {
    stream
        .codec()
        .encode(value)
        .map_err(|source| Error::Encode {
            kind: crate::SourceKind::Stream,
            key: stream.name().to_owned(),
            source,
        })
}
