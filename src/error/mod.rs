//! The crate's error types.

mod class;

use crate::kind::SourceKind;
use crate::lifecycle::SupervisorOutcome;
pub(crate) use class::{Class, classify};
use std::fmt;

/// A boxed error from user code (hooks, handlers, codecs).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in rillkit outside a handler.
///
/// Decide on the variant or the classifier methods ([`Error::is_connection`],
/// [`Error::is_retryable`]), never on the message text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Redis could not be reached or a connection broke (startup PING, a dropped
    /// socket, a response timeout).
    #[error("redis connection failed: {0}")]
    Connect(#[source] redis::RedisError),
    /// `XGROUP CREATE` failed with something other than `BUSYGROUP`.
    #[error("creating consumer group {group:?} on stream {stream:?} failed: {source}")]
    GroupCreate {
        /// Stream key.
        stream: String,
        /// Consumer group name.
        group: String,
        /// What Redis answered.
        #[source]
        source: redis::RedisError,
    },
    /// The configuration is invalid (from
    /// [`BrokerBuilder::build`](crate::BrokerBuilder::build), so `build()?`
    /// works in a function returning `Result<_, rillkit::Error>`). Its exit
    /// code is 78 (`EX_CONFIG`).
    ///
    /// ```no_run
    /// use rillkit::{Broker, Error};
    ///
    /// #[actix::main]
    /// async fn main() -> Result<(), Error> {
    ///     let broker = Broker::builder("redis://127.0.0.1:6379").build()?;
    ///     broker.start().await?;
    ///     Ok(())
    /// }
    /// ```
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A Redis command failed (the server answered with an error).
    #[error("redis command failed: {0}")]
    Redis(#[source] redis::RedisError),
    /// A lifecycle hook failed. Startup stops at the first failing hook; every
    /// `after_shutdown` hook runs and all their failures are reported together.
    #[error("{0}")]
    Hook(HookFailures),
    /// A value could not be encoded for publishing.
    #[error("encoding a value for {} {key:?} failed: {source}", noun(*kind))]
    Encode {
        /// What it was published to: [`SourceKind::Stream`],
        /// [`SourceKind::List`] (for any list) or [`SourceKind::Channel`].
        kind: SourceKind,
        /// The stream or list key, or the channel.
        key: String,
        /// The codec's error.
        #[source]
        source: BoxError,
    },
    /// The broker has been stopped (or is closing its connections): it is
    /// finished and does no more Redis I/O.
    #[error("the broker is shut down")]
    ShutDown,
    /// The broker has not been started yet (`start()` or `run()`).
    #[error("the broker is not started")]
    NotStarted,
    /// A stop was requested (a signal under [`run`](crate::Broker::run), or
    /// [`request_stop`](crate::Broker::request_stop)) before `start()`
    /// finished: the start was abandoned after the hook or command in
    /// progress, what had started was shut down (`after_shutdown` hooks ran),
    /// and the broker is stopped. Its exit code is 0: the operator asked to
    /// stop. [`run`](crate::Broker::run) returns the (clean) outcome instead.
    #[error("a stop was requested during startup; the start was abandoned")]
    StartAborted,
    /// `start()` was called on a broker that was already started.
    #[error("the broker was already started")]
    AlreadyStarted,
    /// Redis refused the credentials (`WRONGPASS`, `NOAUTH`, a failed `AUTH`).
    /// Check the username and password: in the URL
    /// (`redis://user:password@host`) or in
    /// [`Topology::master_credentials`](crate::Topology::master_credentials).
    #[error("redis refused the credentials (check the username and password): {}", .0.redis_text())]
    Credentials(#[source] Box<Error>),
    /// The ACL user may not run `command` (`NOPERM`). Allow it with
    /// `ACL SETUSER <user> +<command>`; the guide (Production Redis) lists
    /// the minimal ACL of a worker.
    #[error(
        "the redis ACL user may not run {command} (allow it: ACL SETUSER <user> +{command}): {source}"
    )]
    Permission {
        /// The command that was refused, as the ACL names it.
        command: &'static str,
        /// What Redis answered.
        #[source]
        source: Box<Error>,
    },
    /// The server kept answering that it is starting (`LOADING`, `BUSY`,
    /// `MASTERDOWN`, `READONLY`) until the startup deadline
    /// ([`BrokerBuilder::startup_timeout`](crate::BrokerBuilder::startup_timeout)).
    #[error("redis was not ready after waiting {} ms: {last}", waited.as_millis())]
    StartupTimeout {
        /// How long `start()` waited.
        waited: std::time::Duration,
        /// The last answer.
        #[source]
        last: Box<Error>,
    },
    /// Another live process holds this consumer name's lease:
    /// two processes must not run one consumer's pending entries at once.
    /// At startup, `start()` waited `waited` for the lease to lapse (up to
    /// [`BrokerBuilder::startup_timeout`](crate::BrokerBuilder::startup_timeout))
    /// before answering this; a running consumer whose renewal finds the
    /// lease taken ends with it (`waited` 0) and is restarted, and then waits
    /// for the lease again. Give each process its own consumer name
    /// ([`ConsumerOptions::with_consumer`](crate::ConsumerOptions::with_consumer)), or
    /// stop the other one. The lease is the key
    /// `rillkit:lease:<stream>:<group>:<consumer>`; `holder` is its value
    /// (`<hostname>-<pid>-<random>`). A list consumer (`kind`
    /// [`SourceKind::List`], no group) ends with it when its heartbeat key
    /// (see [`ListOptions::with_heartbeat_ttl`](crate::ListOptions::with_heartbeat_ttl))
    /// holds another process's token.
    #[error(
        "consumer {consumer:?} {} is in use by another live process ({holder}){}",
        source_of(*kind, key, group),
        if waited.is_zero() { String::from(", which took its lease") } else { format!("; waited {} ms for its lease to lapse", waited.as_millis()) }
    )]
    ConsumerNameInUse {
        /// What the consumer reads: [`SourceKind::Stream`] or
        /// [`SourceKind::List`].
        kind: SourceKind,
        /// The stream or list key.
        key: String,
        /// Consumer group name (empty for a list).
        group: String,
        /// The consumer name.
        consumer: String,
        /// The lease holder's token: `<hostname>-<pid>-<random>`.
        holder: String,
        /// How long it waited for the lease.
        waited: std::time::Duration,
    },
    /// The ACL user may not read or write the consumer name's lease key
    /// (`NOPERM` from the lease script). Allow it (`ACL SETUSER <user>
    /// %RW~rillkit:lease:* +get +set +pttl +del +evalsha`), or run without
    /// the lease
    /// ([`ConsumerOptions::without_lease`](crate::ConsumerOptions::without_lease)).
    #[error(
        "the redis ACL user may not read and write the lease key {key:?} (allow it: ACL SETUSER <user> %RW~rillkit:lease:* +get +set +pttl +del +evalsha; or use ConsumerOptions::without_lease()): {source}"
    )]
    LeaseDenied {
        /// The lease key.
        key: String,
        /// What Redis answered.
        #[source]
        source: Box<Error>,
    },
    /// A connection reached a server that is not a master (a replica, or a
    /// master being demoted in a failover).
    #[error("{addr} is not a master (a failover may be under way)")]
    NotMaster {
        /// The server's address.
        addr: String,
    },
    /// A TLS connection (a `rediss://` URL, or [`Tls`](crate::Tls) options)
    /// reached a server without TLS: the server answered the handshake with
    /// something that is not TLS, or it answered a plain `PING` on the same
    /// address while the handshake waited. Connect to such a server with
    /// `redis://` and no TLS options. [`Error::is_retryable`] is `false`:
    /// `start()` fails at once; while running, the reconnect goes on and logs
    /// it at ERROR.
    #[error(
        "TLS handshake with {addr} failed ({reason}): is the server TLS-enabled? use redis:// (and no TLS options) for a plain server"
    )]
    NotTls {
        /// The server's `host:port`.
        addr: String,
        /// What gave it away: `the server answers without TLS`, or the TLS
        /// library's error.
        reason: String,
    },
    /// The server at `addr` answered something that is not the Redis
    /// protocol (an HTTP server, another service): the address names the
    /// wrong port. `sent` is the first line it sent to a probe (`PING`), cut
    /// short, with control characters escaped, when it sent one. A
    /// connection error ([`Error::is_connection`]): while running, the
    /// reconnect goes on.
    #[error(
        "{addr} did not answer as a Redis server{}: is the port a Redis port?",
        sent.as_ref().map(|s| format!(" (it sent `{s}`)")).unwrap_or_default()
    )]
    NotRedis {
        /// The server's `host:port`.
        addr: String,
        /// The first line it sent, when it sent one.
        sent: Option<String>,
    },
    /// No sentinel that answered knows the master by this name.
    #[error("sentinel {sentinel} does not know a master named {master:?}")]
    NoMaster {
        /// The master name asked for.
        master: String,
        /// The last sentinel asked.
        sentinel: String,
    },
    /// The shared connections are reconnecting and did not come back in time
    /// (for a publish: within
    /// [`BrokerBuilder::publish_timeout`](crate::BrokerBuilder::publish_timeout)).
    #[error("redis is unavailable (reconnecting for {} ms; last error: {last_error})", down_for.as_millis())]
    Unavailable {
        /// How long the connections have been down.
        down_for: std::time::Duration,
        /// The last reconnect error.
        last_error: String,
    },
    /// `stop()` was called from one of the broker's own hooks or handlers. It
    /// cannot wait there (the stop waits for that very hook or handler), so
    /// the stop was requested and this returned at once. Use
    /// [`Broker::request_stop`](crate::Broker::request_stop) there instead.
    #[error(
        "stop() called from the broker's own hook or handler; the stop is requested, use request_stop() there"
    )]
    StopFromWithin,
    /// [`Broker::pause_local`](crate::Broker::pause_local) or
    /// [`resume`](crate::Broker::resume_local) named a subscription the broker
    /// does not have (removed, or never added).
    #[error(
        "the broker has no subscription with consumer {consumer:?} {}",
        source_of(*kind, key, group)
    )]
    NoSuchSubscription {
        /// What the named subscription reads.
        kind: SourceKind,
        /// Stream or list key, or channel.
        key: String,
        /// Consumer group (empty for a list or a channel).
        group: String,
        /// Consumer name.
        consumer: String,
    },
    /// A Pub/Sub subscription cannot be paused: the server keeps no
    /// message for a subscriber that does not read, so a pause would lose
    /// every message published meanwhile. Remove it
    /// ([`SubscriptionHandle::remove`](crate::SubscriptionHandle::remove))
    /// and subscribe again instead.
    #[error(
        "{} {key:?} cannot be paused: Pub/Sub keeps no message for a subscriber that does not read (remove the subscription instead)",
        noun(*kind)
    )]
    NotPausable {
        /// What the subscription reads ([`SourceKind::Channel`]).
        kind: SourceKind,
        /// The channel or pattern.
        key: String,
    },
}

impl Error {
    /// `true` when the error comes from the network or the server being
    /// unreachable (as opposed to a bad command or a user error).
    pub fn is_connection(&self) -> bool {
        self.class() == Class::Connection
    }

    /// `true` when trying the same operation again later may succeed: every
    /// transient answer of the guide's error table (connection lost or timed
    /// out, `LOADING`, `BUSY`, `MASTERDOWN`, `READONLY`, `TRYAGAIN`,
    /// `CLUSTERDOWN`, `NOREPLICAS`, `MISCONF`, max clients reached, `OOM`, a
    /// failover under way, the connections reconnecting). A web handler that
    /// publishes should answer 503 for these, not 500.
    pub fn is_retryable(&self) -> bool {
        self.class().is_retryable()
    }

    /// What Redis (or the network) said, without rillkit's wrapping words.
    fn redis_text(&self) -> String {
        match self {
            Error::Connect(e) | Error::Redis(e) | Error::GroupCreate { source: e, .. } => {
                e.to_string()
            }
            other => other.to_string(),
        }
    }

    /// Where this error falls in the classification of server answers.
    pub(crate) fn class(&self) -> Class {
        match self {
            Error::Connect(e) => match classify(e) {
                Class::Fatal => Class::Connection,
                c => c,
            },
            Error::Redis(e) | Error::GroupCreate { source: e, .. } => classify(e),
            Error::Credentials(_) => Class::Credentials,
            Error::Permission { .. } | Error::LeaseDenied { .. } => Class::Permission,
            Error::StartupTimeout { last, .. } => last.class(),
            Error::NotMaster { .. } => Class::RoleChange,
            Error::NotTls { .. } => Class::Tls,
            Error::NotRedis { .. } => Class::Connection,
            Error::NoMaster { .. } => Class::Busy,
            Error::Unavailable { .. } => Class::Connection,
            _ => Class::Fatal,
        }
    }

    /// Whether the server accepted a connection and then dropped it (see
    /// `class::closed_after_accept`).
    pub(crate) fn closed_after_accept(&self) -> bool {
        match self {
            Error::Connect(e) | Error::Redis(e) => class::closed_after_accept(e),
            _ => false,
        }
    }

    /// The server's error code (`MOVED`, `UNBLOCKED`…), when the server
    /// answered one.
    pub(crate) fn code(&self) -> Option<&str> {
        match self {
            Error::Redis(e) | Error::Connect(e) => e.code(),
            _ => None,
        }
    }

    /// The process exit status this error maps to: a failed start or stop is 1,
    /// unless the shutdown outcome carried by a [`Error::Hook`] ranks higher;
    /// an invalid configuration is 78 (`EX_CONFIG`).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Config(e) => e.exit_code(),
            Error::StartAborted => 0,
            Error::Hook(f) => f.outcome.map_or(1, |o| o.exit_code().max(1)),
            _ => 1,
        }
    }

    /// A reply rillkit could not make sense of (`what`: which reply).
    pub(crate) fn unparsable(what: &'static str, detail: String) -> Self {
        Error::Redis((redis::ErrorKind::Parse, what, detail).into())
    }

    pub(crate) fn from_redis(e: redis::RedisError) -> Self {
        if classify(&e) == Class::Connection {
            Error::Connect(e)
        } else {
            Error::Redis(e)
        }
    }
}

/// The failures of one or more lifecycle hooks. Cloning shares them: every
/// `stop()` caller gets the same failures.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HookFailures {
    /// Each failure, in the order the hooks ran.
    pub failures: std::sync::Arc<[HookError]>,
    /// The shutdown outcome, when the failures happened during `stop()`.
    pub outcome: Option<SupervisorOutcome>,
}

impl fmt::Display for HookFailures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} lifecycle hook(s) failed", self.failures.len())?;
        for e in self.failures.iter() {
            write!(f, "; {e}")?;
        }
        Ok(())
    }
}

/// One failed lifecycle hook.
#[derive(Debug, thiserror::Error)]
#[error("{stage} hook #{index} failed: {source}")]
#[non_exhaustive]
pub struct HookError {
    /// Which hook list the hook belongs to.
    pub stage: crate::lifecycle::Stage,
    /// Its position in that list, counting from 0 in registration order.
    pub index: usize,
    /// What the hook returned.
    #[source]
    pub source: BoxError,
}

/// An invalid broker or consumer configuration, found by
/// [`BrokerBuilder::build`](crate::BrokerBuilder::build). Exit with
/// [`exit_code`](Self::exit_code) (78, `EX_CONFIG`), which no drain outcome
/// uses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The Redis URL could not be parsed.
    #[error("invalid redis URL: {0}")]
    Url(String),
    /// An option has a value it cannot take.
    #[error("invalid option {option}{}: {reason}", for_source(*kind, key))]
    Invalid {
        /// What the option's subscription or value reads or describes
        /// (`None` for broker-wide options).
        kind: Option<SourceKind>,
        /// The stream or list key, or the channel, the option belongs to
        /// (empty for broker-wide options).
        key: String,
        /// The option's name.
        option: &'static str,
        /// Why the value is rejected.
        reason: String,
    },
    /// Two subscriptions would read as the same consumer of the same group
    /// (of a stream), or of the same list.
    #[error(
        "two subscriptions use consumer {consumer:?} {}",
        source_of(*kind, key, group)
    )]
    DuplicateConsumer {
        /// What both subscriptions read: [`SourceKind::Stream`] or
        /// [`SourceKind::List`].
        kind: SourceKind,
        /// Stream or list key.
        key: String,
        /// Consumer group (empty for a list).
        group: String,
        /// Consumer name.
        consumer: String,
    },
}

/// "stream", "list" or "channel".
fn noun(kind: SourceKind) -> &'static str {
    match kind {
        SourceKind::Stream => "stream",
        SourceKind::List | SourceKind::ListAtMostOnce => "list",
        SourceKind::Channel => "channel",
    }
}

/// " for stream \"S\"" (or list, or channel), or nothing for a broker-wide
/// option.
fn for_source(kind: Option<SourceKind>, key: &str) -> String {
    match kind {
        Some(k) => format!(" for {} {key:?}", noun(k)),
        None => String::new(),
    }
}

/// "of group G on stream S", or "on list L" (a list or a channel has no
/// group).
fn source_of(kind: SourceKind, key: &str, group: &str) -> String {
    if group.is_empty() {
        format!("on {} {key:?}", noun(kind))
    } else {
        format!("of group {group:?} on {} {key:?}", noun(kind))
    }
}

impl ConfigError {
    /// `EX_CONFIG` from BSD's `sysexits.h`: the configuration is wrong, and
    /// restarting the process will not help.
    pub const EXIT_CODE: i32 = 78;

    /// The process exit status for an invalid configuration: 78
    /// ([`EXIT_CODE`](Self::EXIT_CODE)).
    pub fn exit_code(&self) -> i32 {
        Self::EXIT_CODE
    }
}

#[cfg(test)]
mod tests;
