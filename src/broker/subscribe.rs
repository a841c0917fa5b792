//! The subscribe surface of [`BrokerBuilder`]: each handler style (typed,
//! with context, whole message, batch; for streams, lists and channels)
//! made into a [`Pending`] subscription, which `build()` (or a subscription
//! added at run time) turns into a [`Source`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;

use super::Broker;
use super::batch::BatchOptions;
use super::bind::{self, typed_item, typed_item_with_context};
use super::builder::BrokerBuilder;
use super::delivery::{Delivery, ItemDelivery};
use crate::error::ConfigError;
use crate::handler::{BatchEntry, BatchOutcome, ErasedHandler, HandlerError, ItemHandler, Message};
use crate::source::Source;
use crate::source::channel::{Channel, ChannelOptions, ChannelSub};
use crate::source::list::{List, ListHandler, ListOptions, ListSub};
use crate::source::stream::{ConsumerOptions, StreamHandler, Subscription};
use crate::stream::{Codec, Stream, StreamNames};

impl BrokerBuilder {
    /// Subscribes a typed handler: each entry's data field is decoded with the
    /// stream's codec into `T` and passed to `handler`.
    ///
    /// `Ok(())` acks the entry (XACK); an error leaves it pending for a retry;
    /// [`HandlerError::Reject`](crate::HandlerError::Reject) sends it to the
    /// dead-letter stream now. An entry whose data field is missing, empty or
    /// does not decode never reaches the handler: it goes to the dead-letter
    /// stream at once.
    pub fn subscribe<T, C, F, Fut, E>(
        mut self,
        stream: &Stream<C>,
        options: ConsumerOptions,
        handler: F,
    ) -> Self
    where
        T: DeserializeOwned + 'static,
        C: Codec,
        F: Fn(T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<HandlerError> + 'static,
    {
        let h = bind::typed(stream.codec().clone(), handler);
        self.subs.push(stream_source(stream.names(), options, h));
        self
    }

    /// Subscribes one typed handler to several streams read in priority
    /// order, highest first: while a stream has new entries, the streams
    /// after it read none. Each stream is consumed as by
    /// [`subscribe`](Self::subscribe) with `options` (its own group,
    /// consumer, handler slots, dead-letter stream, retention, status row);
    /// a stream reads new entries only while every stream before it is
    /// clear — its last read of new entries came back empty and nothing it
    /// read waits to start — or is paused or stopped. A stream followed by
    /// others reads without `BLOCK` until it finds nothing, so they learn it
    /// at once. There is no starvation guard: a stream that never runs dry
    /// keeps the ones after it waiting. An entry of a lower stream read just
    /// before a higher one filled up still runs (at most one read's
    /// `count`); a consumer's own pending entries (retries, re-reads) run
    /// whatever the order.
    ///
    /// ```no_run
    /// use rillkit::prelude::*;
    ///
    /// let urgent = Stream::new("mail:urgent", "mailer");
    /// let bulk = Stream::new("mail:bulk", "mailer");
    /// let builder = Broker::builder("redis://127.0.0.1:6379").subscribe_prioritized(
    ///     &[&urgent, &bulk],
    ///     ConsumerOptions::default().with_concurrency(8),
    ///     |to: String| async move {
    ///         println!("mail to {to}");
    ///         HandlerResult::Ok(())
    ///     },
    /// );
    /// ```
    ///
    /// `build()` fails ([`ConfigError::Invalid`], option `streams`) for no
    /// stream, a stream given twice, or a stream ordered by key.
    pub fn subscribe_prioritized<T, C, F, Fut, E>(
        mut self,
        streams: &[&Stream<C>],
        options: ConsumerOptions,
        handler: F,
    ) -> Self
    where
        T: DeserializeOwned + 'static,
        C: Codec,
        F: Fn(T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<HandlerError> + 'static,
    {
        let handler = Arc::new(handler);
        let subs = prioritized(streams, options, |stream| {
            let f = handler.clone();
            bind::typed(stream.codec().clone(), move |t: T| f(t))
        });
        self.subs.extend(subs);
        self
    }

    /// As [`subscribe_prioritized`](Self::subscribe_prioritized), with the
    /// delivery's context, as
    /// [`subscribe_with_context`](Self::subscribe_with_context) gives it
    /// ([`Delivery::stream`](crate::Delivery::stream) tells which stream
    /// the entry came from).
    pub fn subscribe_prioritized_with_context<T, C, F, Fut, E>(
        mut self,
        streams: &[&Stream<C>],
        options: ConsumerOptions,
        handler: F,
    ) -> Self
    where
        T: DeserializeOwned + 'static,
        C: Codec,
        F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<HandlerError> + 'static,
    {
        let handler = Arc::new(handler);
        let cell = self.cell.clone();
        let subs = prioritized(streams, options, |stream| {
            let f = handler.clone();
            bind::typed_with_context(
                stream.codec().clone(),
                move |t: T, d: Delivery| f(t, d),
                cell.clone(),
            )
        });
        self.subs.extend(subs);
        self
    }

    /// Subscribes a typed handler that also receives the delivery's context
    /// ([`Delivery`](crate::Delivery): entry id, delivery count, stream,
    /// group, consumer, and a [`Broker`] handle to publish onward with).
    /// Decoding and dead-lettering are as for [`subscribe`](Self::subscribe):
    /// an entry that does not decode into `T` goes to the dead-letter stream
    /// without reaching the handler.
    pub fn subscribe_with_context<T, C, F, Fut, E>(
        mut self,
        stream: &Stream<C>,
        options: ConsumerOptions,
        handler: F,
    ) -> Self
    where
        T: DeserializeOwned + 'static,
        C: Codec,
        F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<HandlerError> + 'static,
    {
        let h = bind::typed_with_context(stream.codec().clone(), handler, self.cell.clone());
        self.subs.push(stream_source(stream.names(), options, h));
        self
    }

    /// Subscribes a batch handler: it gets up to
    /// [`max_entries`](BatchOptions::max_entries) decoded entries at once
    /// (each with its id and its own delivery count), a batch starting when
    /// it is full or when its first entry has waited
    /// [`max_wait`](BatchOptions::max_wait). It answers a
    /// [`BatchOutcome`](crate::BatchOutcome): any `Result<(), E>` for the
    /// whole batch, or [`BatchOutcome::each`](crate::BatchOutcome::each)
    /// with one result per entry, so the entries that succeeded are acked
    /// (XACK) and never run again while only the failed ones are retried.
    ///
    /// Each entry keeps its own rules, as with [`subscribe`](Self::subscribe):
    /// an entry that does not decode is dead-lettered before any batch and
    /// never reaches the handler; a failed entry runs again after the retry
    /// backoff, in a later batch, until its delivery count passes
    /// `max_retries`; a redelivered entry of a crashed consumer runs in a
    /// batch of its own; the drain waits for a running batch. On a stream
    /// ordered by key a batch holds at most one entry of each key, and a
    /// key's next entry joins a later batch once this one is acked or
    /// dead-lettered.
    /// `options`' [`concurrency`](ConsumerOptions::with_concurrency) counts
    /// batches run at once (default 1; on an ordered stream, over all the
    /// partitions the consumer owns; on a plain stream `rillkit scale`
    /// changes it as for any subscription); its
    /// [`count`](ConsumerOptions::with_count) is raised to `max_entries`.
    ///
    /// ```no_run
    /// use rillkit::prelude::*;
    /// use rillkit::{BatchEntry, BatchOptions};
    ///
    /// # fn f(orders: Stream) {
    /// let builder = Broker::builder("redis://127.0.0.1:6379").subscribe_batch(
    ///     &orders,
    ///     ConsumerOptions::default(),
    ///     BatchOptions::new().with_max_entries(500),
    ///     |batch: Vec<BatchEntry<u64>>| async move {
    ///         let total: u64 = batch.iter().map(|e| *e.value()).sum();
    ///         println!("{} entries, {total} in all", batch.len());
    ///         anyhow::Ok(()) // one INSERT for all, say
    ///     },
    /// );
    /// # let _ = builder; }
    /// ```
    pub fn subscribe_batch<T, C, F, Fut, O>(
        mut self,
        stream: &Stream<C>,
        options: ConsumerOptions,
        batch: BatchOptions,
        handler: F,
    ) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        C: Codec,
        F: Fn(Vec<BatchEntry<T>>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = O> + 'static,
        O: Into<BatchOutcome>,
    {
        let h = bind::typed_batch(stream.codec().clone(), batch, handler);
        let options = batched(options, batch);
        self.subs.push(stream_source(stream.names(), options, h));
        self
    }

    /// As [`subscribe_batch`](Self::subscribe_batch), and the handler also
    /// gets a [`Broker`] to publish onward with.
    pub fn subscribe_batch_with_context<T, C, F, Fut, O>(
        mut self,
        stream: &Stream<C>,
        options: ConsumerOptions,
        batch: BatchOptions,
        handler: F,
    ) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        C: Codec,
        F: Fn(Vec<BatchEntry<T>>, Broker) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = O> + 'static,
        O: Into<BatchOutcome>,
    {
        let h = bind::typed_batch_with_context(
            stream.codec().clone(),
            batch,
            handler,
            self.cell.clone(),
        );
        let options = batched(options, batch);
        self.subs.push(stream_source(stream.names(), options, h));
        self
    }

    /// A batch handler for a list, as
    /// [`subscribe_batch`](Self::subscribe_batch) for a stream: each item
    /// keeps its own run count (its [`delivery_count`](BatchEntry::delivery_count)),
    /// retries and dead letter; `options`'
    /// [`concurrency`](ListOptions::with_concurrency) counts batches run at
    /// once.
    pub fn subscribe_list_batch<T, C, F, Fut, O>(
        mut self,
        list: &List<C>,
        options: ListOptions,
        batch: BatchOptions,
        handler: F,
    ) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        C: Codec,
        F: Fn(Vec<BatchEntry<T>>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = O> + 'static,
        O: Into<BatchOutcome>,
    {
        let h = bind::typed_item_batch(list.codec().clone(), batch, handler);
        self.subs
            .push(list_source_erased(list, options, ListHandler::Batch(h)));
        self
    }

    /// Subscribes a handler that receives the whole [`Message`](crate::Message): entry id,
    /// stream, group, consumer, the server's delivery count and every raw field.
    /// It is called for every entry, also those without a valid data field
    /// (decode with [`Message::decode`]).
    pub fn subscribe_message<C, F, Fut, E>(
        mut self,
        stream: &Stream<C>,
        options: ConsumerOptions,
        handler: F,
    ) -> Self
    where
        C: Codec,
        F: Fn(Message) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<HandlerError> + 'static,
    {
        self.subs
            .push(stream_source(stream.names(), options, bind::whole(handler)));
        self
    }

    /// Subscribes a typed handler to a list: each item is decoded with the
    /// list's codec into `T`. Reliable by default (`BLMOVE` onto this
    /// consumer's processing list, `LREM` after `Ok`); see [`List`] and
    /// [`ListOptions`] for retries, dead letters, crash recovery and the at
    /// most once mode. An item that does not decode goes to the dead-letter
    /// list at once.
    pub fn subscribe_list<T, C, F, Fut, E>(
        mut self,
        list: &List<C>,
        options: ListOptions,
        handler: F,
    ) -> Self
    where
        T: DeserializeOwned + 'static,
        C: Codec,
        F: Fn(T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<HandlerError> + 'static,
    {
        self.subs.push(list_source(list, options, handler));
        self
    }

    /// As [`subscribe_list`](Self::subscribe_list), and the handler also
    /// receives an [`ItemDelivery`](crate::ItemDelivery): the list, the
    /// consumer, which run this is, and a broker to publish onward with.
    pub fn subscribe_list_with_context<T, C, F, Fut, E>(
        mut self,
        list: &List<C>,
        options: ListOptions,
        handler: F,
    ) -> Self
    where
        T: DeserializeOwned + 'static,
        C: Codec,
        F: Fn(T, ItemDelivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<HandlerError> + 'static,
    {
        let h = typed_item_with_context(list.codec().clone(), handler, self.cell.clone());
        self.subs.push(list_source_erased(list, options, h));
        self
    }

    /// As [`subscribe_channel`](Self::subscribe_channel), and the handler
    /// also receives an [`ItemDelivery`](crate::ItemDelivery): the channel
    /// the message came on (for a pattern, the one that matched), the
    /// pattern, and a broker to publish onward with.
    pub fn subscribe_channel_with_context<T, C, F, Fut, E>(
        mut self,
        channel: &Channel<C>,
        options: ChannelOptions,
        handler: F,
    ) -> Self
    where
        T: DeserializeOwned + 'static,
        C: Codec,
        F: Fn(T, ItemDelivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<HandlerError> + 'static,
    {
        let h = typed_item_with_context(channel.codec().clone(), handler, self.cell.clone());
        self.subs.push(channel_source_erased(channel, options, h));
        self
    }

    /// Subscribes a typed handler to a Pub/Sub channel or pattern: each
    /// message is decoded with the channel's codec into `T`. At most once:
    /// see [`Channel`] and [`ChannelOptions`]. A message that does not
    /// decode, or whose handler fails, is logged and dropped.
    pub fn subscribe_channel<T, C, F, Fut, E>(
        mut self,
        channel: &Channel<C>,
        options: ChannelOptions,
        handler: F,
    ) -> Self
    where
        T: DeserializeOwned + 'static,
        C: Codec,
        F: Fn(T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<HandlerError> + 'static,
    {
        self.subs.push(channel_source(channel, options, handler));
        self
    }
}

/// The subscriptions of streams read in priority order (see
/// [`BrokerBuilder::subscribe_prioritized`]): one per stream, each with its
/// handler from `bind`, sharing one [`Priority`](crate::source::stream::priority::Priority);
/// or one that fails `build()` when the streams cannot be prioritized.
fn prioritized<C: Codec>(
    streams: &[&Stream<C>],
    options: ConsumerOptions,
    mut bind: impl FnMut(&Stream<C>) -> ErasedHandler,
) -> Vec<Pending> {
    use crate::source::stream::priority::{Level, Priority};
    let invalid = |key: &str, reason: &str| -> Vec<Pending> {
        let (key, reason) = (key.to_owned(), reason.to_owned());
        vec![Box::new(move |_, _| {
            Err(ConfigError::Invalid {
                kind: Some(crate::SourceKind::Stream),
                key,
                option: "streams",
                reason,
            })
        })]
    };
    let mut names: Vec<&str> = streams.iter().map(|s| s.name()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return invalid(w[0], "subscribe_prioritized got this stream twice");
    }
    if streams.is_empty() {
        return invalid("", "subscribe_prioritized needs at least one stream");
    }
    if let Some(s) = streams.iter().find(|s| s.names().order.is_some()) {
        return invalid(s.name(), "a stream ordered by key cannot be prioritized");
    }
    let priority = Priority::new(streams.len());
    streams
        .iter()
        .enumerate()
        .map(|(index, stream)| {
            let h = bind(stream);
            let level = Level {
                priority: priority.clone(),
                index,
            };
            let (names, opts) = (stream.names(), options.clone());
            Box::new(move |cluster, drain| {
                let mut sub = Subscription::build(names, opts, h, cluster, drain)?;
                sub.priority = Some(level);
                Ok(Source::Stream(Arc::new(sub)))
            }) as Pending
        })
        .collect()
}

/// A subscription as given to the builder, made into a [`Source`] by
/// `build()` (or at once, for one added at run time), knowing whether the
/// topology is a cluster and the drain deadline.
pub(crate) type Pending = Box<dyn FnOnce(bool, Duration) -> Result<Source, ConfigError> + Send>;

/// A stream batch subscription's options: a read fetches at least a batch.
fn batched(options: ConsumerOptions, batch: BatchOptions) -> ConsumerOptions {
    let count = options.count().max(batch.max_entries());
    options.with_count(count)
}

pub(crate) fn stream_source(
    names: StreamNames,
    opts: ConsumerOptions,
    handler: impl Into<StreamHandler> + Send + 'static,
) -> Pending {
    Box::new(move |cluster, drain| {
        Subscription::build(names, opts, handler, cluster, drain)
            .map(|s| Source::Stream(Arc::new(s)))
    })
}

pub(crate) fn list_source<T, C, F, Fut, E>(list: &List<C>, opts: ListOptions, handler: F) -> Pending
where
    T: DeserializeOwned + 'static,
    C: Codec,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + 'static,
    E: Into<HandlerError> + 'static,
{
    list_source_erased(list, opts, typed_item(list.codec().clone(), handler))
}

pub(crate) fn list_source_erased<C: Codec>(
    list: &List<C>,
    opts: ListOptions,
    h: impl Into<ListHandler>,
) -> Pending {
    let h = h.into();
    let list = list.clone();
    Box::new(move |cluster, drain| {
        ListSub::build(&list, opts, h, cluster, drain).map(|s| Source::List(Arc::new(s)))
    })
}

pub(crate) fn channel_source<T, C, F, Fut, E>(
    channel: &Channel<C>,
    opts: ChannelOptions,
    handler: F,
) -> Pending
where
    T: DeserializeOwned + 'static,
    C: Codec,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + 'static,
    E: Into<HandlerError> + 'static,
{
    channel_source_erased(channel, opts, typed_item(channel.codec().clone(), handler))
}

pub(crate) fn channel_source_erased<C: Codec>(
    channel: &Channel<C>,
    opts: ChannelOptions,
    h: ItemHandler,
) -> Pending {
    let channel = channel.clone();
    Box::new(move |_, _| ChannelSub::build(&channel, opts, h).map(|s| Source::Channel(Arc::new(s))))
}

/// Two subscriptions must not read as one consumer: the same stream, group
/// and consumer name, or the same list and consumer name.
pub(crate) fn check_unique(subs: &[Source], new: &Source) -> Result<(), ConfigError> {
    let clash = |a: &Source| match (a, new) {
        (Source::Stream(a), Source::Stream(b)) => {
            a.names.name == b.names.name
                && a.names.group == b.names.group
                && a.consumer == b.consumer
        }
        (Source::List(a), Source::List(b)) => {
            a.keys.list == b.keys.list && a.consumer == b.consumer
        }
        _ => false,
    };
    if subs.iter().any(clash) {
        let b = new.board();
        return Err(ConfigError::DuplicateConsumer {
            kind: b.kind,
            key: b.stream.to_string(),
            group: b.group.to_string(),
            consumer: b.consumer.to_string(),
        });
    }
    Ok(())
}
