//! [`BrokerBuilder`]: the configuration of a [`Broker`], checked by
//! [`build`](BrokerBuilder::build) without I/O.

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::watch;

use super::bind::BrokerCell;
use super::hooks::{self, Hooks};
use super::subscribe::{Pending, check_unique};
use super::{Broker, Inner, Phase};
use crate::connection::{Connector, Timeouts, Tls, Topology};
use crate::delivery::MAX_DURATION;
use crate::error::{BoxError, ConfigError};
use crate::source::Source;
use crate::status::Boards;
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
    pub(super) subs: Vec<Pending>,
    pool_size: usize,
    shutdown_timeout: Duration,
    handle_signals: bool,
    restart: RestartPolicy,
    timeouts: Timeouts,
    retention_period: Duration,
    status_period: Duration,
    /// The broker `build()` makes, for the handlers with context.
    pub(super) cell: BrokerCell,
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
    ///   invalid (see [`ConsumerOptions`](crate::ConsumerOptions)).
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
