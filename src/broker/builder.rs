//! [`BrokerBuilder`]: the configuration of a [`Broker`], checked by
//! [`build`](BrokerBuilder::build) without I/O.

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::batch::BatchOptions;
use super::bind::{self, BrokerCell, typed_item, typed_item_with_context};
use super::delivery::{Delivery, ItemDelivery};
use super::hooks::{self, Hooks};
use super::{Broker, Inner, Phase};
use crate::connection::{Connector, Timeouts, Tls, Topology};
use crate::delivery::MAX_DURATION;
use crate::error::{BoxError, ConfigError};
use crate::handler::{
    BatchEntry, BatchHandler, BatchOutcome, ErasedHandler, HandlerError, ItemHandler, Message,
};
use crate::source::Source;
use crate::source::channel::{Channel, ChannelOptions, ChannelSub};
use crate::source::list::{List, ListOptions, ListSub};
use crate::source::stream::{ConsumerOptions, Subscription};
use crate::status::Boards;
use crate::stream::{Codec, Stream, StreamNames};
use crate::supervisor::RestartPolicy;

/// Configures a [`Broker`]: where Redis is ([`Topology`], [`Tls`]),
/// subscriptions, hooks and shutdown settings. Building does no I/O.
///
/// | option | default |
/// |--------|---------|
/// | [`tls`](Self::tls) | system trust store for `rediss://` |
/// | [`pool_size`](Self::pool_size) | 4 shared connections |
/// | [`startup_timeout`](Self::startup_timeout) | 60 s |
/// | [`publish_timeout`](Self::publish_timeout) | 5 s |
/// | [`shutdown_timeout`](Self::shutdown_timeout) | 30 s |
/// | [`handle_signals`](Self::handle_signals) | `true` (in [`Broker::run`]) |
/// | [`restart_policy`](Self::restart_policy) | 5 restarts in 60 s |
/// | [`connect_timeout`](Self::connect_timeout) | 5 s |
/// | [`response_timeout`](Self::response_timeout) | 10 s |
/// | [`retention_period`](Self::retention_period) | 5 s |
/// | [`status_period`](Self::status_period) | 5 s |
#[must_use = "call build() to get a Broker"]
pub struct BrokerBuilder {
    topology: Topology,
    tls: Option<Tls>,
    startup_timeout: Duration,
    publish_timeout: Duration,
    hooks: Hooks,
    subs: Vec<Pending>,
    pool_size: usize,
    shutdown_timeout: Duration,
    handle_signals: bool,
    restart: RestartPolicy,
    timeouts: Timeouts,
    retention_period: Duration,
    status_period: Duration,
    /// The broker `build()` makes, for the handlers with context.
    cell: BrokerCell,
}

impl BrokerBuilder {
    pub(super) fn new(topology: Topology) -> Self {
        BrokerBuilder {
            topology,
            tls: None,
            startup_timeout: Duration::from_secs(60),
            publish_timeout: Duration::from_secs(5),
            timeouts: Timeouts::default(),
            retention_period: Duration::from_secs(5),
            status_period: Duration::from_secs(5),
            hooks: Hooks::default(),
            subs: Vec::new(),
            pool_size: 4,
            shutdown_timeout: Duration::from_secs(30),
            handle_signals: true,
            restart: RestartPolicy::default(),
            cell: BrokerCell::default(),
        }
    }

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
    /// batch of its own; the drain waits for a running batch.
    /// `options`' [`concurrency`](ConsumerOptions::with_concurrency) counts
    /// batches run at once (default 1); its
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
        let (h, native) = bind::typed_batch(
            stream.codec().clone(),
            batch,
            options.concurrency(),
            handler,
        );
        let options = batched(options, batch);
        self.subs
            .push(stream_batch_source(stream.names(), options, h, native));
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
        let (h, native) = bind::typed_batch_with_context(
            stream.codec().clone(),
            batch,
            options.concurrency(),
            handler,
            self.cell.clone(),
        );
        let options = batched(options, batch);
        self.subs
            .push(stream_batch_source(stream.names(), options, h, native));
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
        let batches = options.concurrency();
        let h = bind::typed_item_batch(list.codec().clone(), batch, batches, handler);
        // Room for one more batch to gather while the others run.
        let runs = batches
            .saturating_add(1)
            .saturating_mul(batch.max_entries());
        let options = options.with_concurrency(runs);
        self.subs.push(list_source_erased(list, options, h));
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

    /// Adds a hook run first in `start()`, before any Redis I/O. A failure
    /// stops startup: no other hook runs and `start()` returns it.
    pub fn on_startup<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(Broker) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + 'static,
    {
        self.hooks.on_startup.push(hooks::hook(hook));
        self
    }

    /// Adds a hook run last in `start()`: groups exist, consumers run. A
    /// failure makes `start()` return it after the shutdown path ran (without
    /// `on_shutdown` hooks, with `after_shutdown` hooks).
    pub fn after_startup<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(Broker) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + 'static,
    {
        self.hooks.after_startup.push(hooks::hook(hook));
        self
    }

    /// Adds a hook run in `stop()` after consumers drained, while the Redis
    /// connections still work. A failure skips the remaining `on_shutdown`
    /// hooks; the connections still close and `after_shutdown` hooks still run.
    pub fn on_shutdown<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(Broker) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + 'static,
    {
        self.hooks.on_shutdown.push(hooks::hook(hook));
        self
    }

    /// Adds a hook run last in `stop()`, after the connections closed. Every
    /// `after_shutdown` hook runs even when one fails; all failures are
    /// reported together.
    pub fn after_shutdown<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(Broker) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), BoxError>> + 'static,
    {
        self.hooks.after_shutdown.push(hooks::hook(hook));
        self
    }

    /// TLS settings beyond the `rediss://` scheme: a private CA, a client
    /// certificate for mutual TLS, or (tests only) no verification. With a
    /// standalone URL it needs `rediss://`; with Sentinel it makes every
    /// connection TLS.
    pub fn tls(mut self, tls: Tls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sets how long [`Broker::start`] waits for a server that answers it is
    /// starting — `LOADING` (a restart reading a large RDB/AOF), `BUSY`,
    /// `MASTERDOWN`, `READONLY` or a replica (a failover under way) — before it
    /// gives up with [`Error::StartupTimeout`](crate::Error::StartupTimeout) (default 60 s). An unreachable
    /// server (connection refused) fails at once regardless.
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// Sets how long a publish waits for the shared connections while they
    /// reconnect (a lost connection, a failover) before it answers
    /// [`Error::Unavailable`](crate::Error::Unavailable) (default 5 s). A publish is sent at most once:
    /// rillkit never retries it after sending, since a lost reply may hide an
    /// entry that was added. Errors with
    /// [`Error::is_retryable`](crate::Error::is_retryable) true are safe to answer with 503.
    pub fn publish_timeout(mut self, timeout: Duration) -> Self {
        self.publish_timeout = timeout;
        self
    }

    /// Sets how often streams with
    /// [`Stream::with_retain_acked`](crate::Stream::with_retain_acked) are trimmed of
    /// what every group has acked (default 5 s).
    pub fn retention_period(mut self, period: Duration) -> Self {
        self.retention_period = period;
        self
    }

    /// Sets how often [`Broker::status`]'s server-side figures (lag,
    /// pending, oldest pending entry, dead-letter length) are read from
    /// Redis (default 5 s; `XINFO GROUPS`, `XPENDING`, `XLEN` per
    /// subscription).
    pub fn status_period(mut self, period: Duration) -> Self {
        self.status_period = period;
        self
    }

    /// Sets how long opening a connection may take — TCP connect, TLS and
    /// `HELLO`/`AUTH` — before the attempt counts as failed (default 5 s).
    /// At start a failed attempt fails `start()`; later it is retried with
    /// backoff.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.connect = timeout;
        self
    }

    /// Sets how long a command on a shared connection waits for its reply
    /// before the connection counts as broken and is opened again (default
    /// 10 s). A consumer's blocking `XREADGROUP` waits `block` plus 5 s
    /// instead.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.response = timeout;
        self
    }

    /// Sets how many shared connections carry publishes, acks and the other
    /// non-blocking commands (default 4). Each consumer has its own read
    /// connection on top. Under a cluster the shared connection is one
    /// cluster connection (a connection to each master) and this does not
    /// apply.
    pub fn pool_size(mut self, connections: usize) -> Self {
        self.pool_size = connections;
        self
    }

    /// Sets the drain deadline used by [`Broker::stop`] and [`Broker::run`]
    /// (default 30 s): how long running handlers may take to finish once a stop
    /// is requested. Keep it below your process manager's kill timeout (e.g.
    /// Kubernetes' `terminationGracePeriodSeconds`).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// Whether [`Broker::run`] installs SIGINT/SIGTERM handlers (default
    /// `true`). Turn it off when your application owns the signals, and stop
    /// the broker yourself.
    pub fn handle_signals(mut self, install: bool) -> Self {
        self.handle_signals = install;
        self
    }

    /// Sets how often a failed consumer is restarted (default: 5 restarts in
    /// 60 s, backoff 100 ms to 10 s).
    pub fn restart_policy(mut self, policy: RestartPolicy) -> Self {
        self.restart = policy;
        self
    }

    /// Checks the configuration and builds the broker. No I/O.
    ///
    /// With TLS in use (`rediss://`, or [`tls`](Self::tls)) and no rustls
    /// crypto provider installed in the process yet, this installs `ring`'s.
    ///
    /// # Errors
    /// * [`ConfigError::Url`]: the URL does not parse as a Redis URL.
    /// * [`ConfigError::Invalid`]: `pool_size` is 0; TLS options with a
    ///   `redis://` URL; a Sentinel topology without sentinels, with an empty
    ///   master name or an address that is not `host:port`; a cluster
    ///   topology without seed nodes or with an address that is not
    ///   `host:port`; under a cluster, a subscription whose dead-letter stream
    ///   hashes to another slot than its stream (`option` `"dlq_name"`; the
    ///   reason names a name that fits); or a subscription's options are
    ///   invalid (see [`ConsumerOptions`]).
    /// * [`ConfigError::DuplicateConsumer`]: two subscriptions on one stream
    ///   use the same group and consumer name.
    pub fn build(self) -> Result<Broker, ConfigError> {
        for (what, d) in [
            ("connect_timeout", self.timeouts.connect),
            ("response_timeout", self.timeouts.response),
            ("retention_period", self.retention_period),
            ("status_period", self.status_period),
        ] {
            if d < Duration::from_millis(1) || d > MAX_DURATION {
                return Err(ConfigError::Invalid {
                    kind: None,
                    key: String::new(),
                    option: what,
                    reason: "must be at least 1 ms and at most 365 days".into(),
                });
            }
        }
        let connector = Connector::new(&self.topology, self.tls.as_ref(), self.timeouts)?;
        if self.pool_size == 0 {
            return Err(ConfigError::Invalid {
                kind: None,
                key: String::new(),
                option: "pool_size",
                reason: "must be at least 1 connection".into(),
            });
        }
        for (what, d) in [
            ("startup_timeout", self.startup_timeout),
            ("publish_timeout", self.publish_timeout),
            ("shutdown_timeout", self.shutdown_timeout),
        ] {
            if d > MAX_DURATION {
                return Err(ConfigError::Invalid {
                    kind: None,
                    key: String::new(),
                    option: what,
                    reason: "must be at most 365 days".into(),
                });
            }
        }
        let cluster = connector.is_cluster();
        let mut subs: Vec<Source> = Vec::with_capacity(self.subs.len());
        for pending in self.subs {
            let source = pending(cluster, self.shutdown_timeout)?;
            check_unique(&subs, &source)?;
            subs.push(source);
        }
        let boards = subs.iter().map(|s| s.board().clone()).collect();
        let broker = Broker {
            inner: Arc::new(Inner {
                connector,
                startup_timeout: self.startup_timeout,
                retention_period: self.retention_period,
                status_period: self.status_period,
                boards: Boards::new(boards),
                publish_timeout: self.publish_timeout,
                pool_size: self.pool_size,
                shutdown_timeout: self.shutdown_timeout,
                handle_signals: self.handle_signals,
                restart: self.restart,
                setup: Mutex::new(Some((self.hooks, subs))),
                supervisor: OnceLock::new(),
                phase: watch::channel(Phase::Configured).0,
                stop_req: watch::channel(None).0,
                redis: OnceLock::new(),
                result: Mutex::new(None),
                done: watch::channel(false).0,
                orders_checked: Mutex::new(std::collections::HashSet::new()),
            }),
        };
        self.cell.set(&broker);
        Ok(broker)
    }
}

/// A subscription as given to the builder, made into a [`Source`] by
/// `build()` (or at once, for one added at run time), knowing whether the
/// topology is a cluster and the drain deadline.
pub(crate) type Pending = Box<dyn FnOnce(bool, Duration) -> Result<Source, ConfigError> + Send>;

/// A batch subscription's options: room for `concurrency` batches of
/// `max_entries` handler runs and one more gathering (fetched ahead while
/// the others run; the gatherer lets only `concurrency` run), and reads of a
/// batch at once.
fn batched(options: ConsumerOptions, batch: BatchOptions) -> ConsumerOptions {
    let runs = options
        .concurrency()
        .saturating_add(1)
        .saturating_mul(batch.max_entries());
    let count = options.count().max(batch.max_entries());
    options.with_concurrency(runs).with_count(count)
}

pub(crate) fn stream_source(
    names: StreamNames,
    opts: ConsumerOptions,
    handler: ErasedHandler,
) -> Pending {
    Box::new(move |cluster, drain| {
        Subscription::build(names, opts, handler, cluster, drain)
            .map(|s| Source::Stream(Arc::new(s)))
    })
}

/// A stream's batch handler: natively on a plain stream's loop (one
/// future per batch); the partitions of an ordered stream run `each`, the
/// per-entry form.
fn stream_batch_source(
    names: StreamNames,
    opts: ConsumerOptions,
    each: ErasedHandler,
    native: BatchHandler,
) -> Pending {
    Box::new(move |cluster, drain| {
        let mut sub = Subscription::build(names, opts, each, cluster, drain)?;
        if sub.ordered.is_none() {
            sub.batch = Some(native);
        }
        Ok(Source::Stream(Arc::new(sub)))
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
    h: ItemHandler,
) -> Pending {
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
