//! Connections and topologies: where Redis is ([`Topology`], [`Tls`]), how a
//! connection to the master of the moment is opened ([`Connector`]), the
//! shared reconnecting pool ([`Pool`]), Sentinel's failover announcements,
//! and the one classification of server answers ([`classify`]) every path
//! uses.
//!
//! Nothing here does I/O until the broker starts: [`Connector::new`] only
//! parses and checks the configuration.

mod cluster;
mod open;
mod pool;
mod sentinel;
mod tls;
mod topology;

pub(crate) use cluster::parse_slots;
pub(crate) use open::{client_name, connect_to};
pub(crate) use pool::{Pool, Shared};
pub(crate) use sentinel::Watcher;
pub use topology::{Tls, Topology};

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{Client, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo};
use tokio::sync::watch;

use crate::error::{Class, ConfigError, Error};
use crate::util::Retry;
use open::{
    connect_to_sentinel, full_by_probe, name_connection, open, refused_command, shared_name,
};
use tls::{TlsSetup, ensure_crypto_provider};
use topology::{Credentials, Kind, redact_url};

/// How long a connection attempt may take before it counts as failed, unless
/// configured ([`BrokerBuilder::connect_timeout`](crate::BrokerBuilder::connect_timeout)).
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a shared connection waits for a reply, unless configured
/// ([`BrokerBuilder::response_timeout`](crate::BrokerBuilder::response_timeout)).
pub(crate) const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// The connect and response timeouts every connection uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// A TCP connect plus the TLS and `HELLO`/`AUTH` handshakes.
    pub connect: Duration,
    /// A reply on a shared connection (a blocking read waits `block` plus
    /// [`READ_TIMEOUT_MARGIN`] instead).
    pub response: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: DEFAULT_CONNECT_TIMEOUT,
            response: DEFAULT_RESPONSE_TIMEOUT,
        }
    }
}
/// A blocking read's connection waits this much longer than its `block`.
pub(crate) const READ_TIMEOUT_MARGIN: Duration = Duration::from_secs(5);

/// Opens connections to the master of the moment, for any topology. Cheap to
/// clone; `Send + Sync`.
#[derive(Clone)]
pub(crate) struct Connector {
    inner: Arc<Inner>,
}

struct Inner {
    target: Target,
    /// Bumped when a failover is announced: connections move to the new
    /// master.
    epoch: watch::Sender<u64>,
    /// Where, for logs (no password).
    describe: String,
    timeouts: Timeouts,
}

enum Target {
    Standalone(Client),
    Sentinel(sentinel::Sentinels),
    Cluster(Box<cluster::Cluster>),
}

/// `host:port` (IPv6 hosts in brackets or not) as its parts.
fn parse_addr(addr: &str) -> Option<(String, u16)> {
    addr.rsplit_once(':')
        .and_then(|(h, p)| Some((h.trim_matches(['[', ']']), p.parse::<u16>().ok()?)))
        .filter(|(h, _)| !h.is_empty())
        .map(|(h, p)| (h.to_owned(), p))
}

/// Credentials as redis-rs carries them.
fn settings(auth: &Credentials) -> RedisConnectionInfo {
    let mut s = RedisConnectionInfo::default();
    if let Some(u) = &auth.username {
        s = s.set_username(u);
    }
    if let Some(p) = &auth.password {
        s = s.set_password(p);
    }
    s
}

/// A client for one node (a sentinel, a master, a cluster node), with the
/// given credentials and TLS.
fn node_client(
    host: &str,
    port: u16,
    settings: &RedisConnectionInfo,
    tls: Option<&TlsSetup>,
) -> redis::RedisResult<Client> {
    let info = (host, port)
        .into_connection_info()?
        .set_redis_settings(settings.clone());
    match tls {
        Some(t) => t.client(info),
        None => Client::open(info),
    }
}

impl Connector {
    /// Checks the configuration; no I/O.
    pub(crate) fn new(
        topology: &Topology,
        tls: Option<&Tls>,
        timeouts: Timeouts,
    ) -> Result<Self, ConfigError> {
        let (target, describe) = match &topology.kind {
            Kind::Standalone { url } => {
                topology::check_url(url)
                    .map_err(|reason| ConfigError::Url(format!("{}: {reason}", redact_url(url))))?;
                let info = url
                    .as_str()
                    .into_connection_info()
                    .map_err(|e| ConfigError::Url(format!("{}: {e}", redact_url(url))))?;
                let is_tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
                if is_tls {
                    ensure_crypto_provider();
                }
                let client = match tls {
                    Some(_) if !is_tls => {
                        return Err(ConfigError::Invalid {
                            kind: None,
                            key: String::new(),
                            option: "tls",
                            reason: format!(
                                "TLS options need a rediss:// URL, not {}",
                                redact_url(url)
                            ),
                        });
                    }
                    Some(t) => TlsSetup::new(t).client(info),
                    None => Client::open(info),
                }
                .map_err(|e| ConfigError::Url(format!("{}: {e}", redact_url(url))))?;
                (Target::Standalone(client), redact_url(url))
            }
            Kind::Client(client) => {
                if tls.is_some() {
                    return Err(ConfigError::Invalid {
                        kind: None,
                        key: String::new(),
                        option: "tls",
                        reason: "a broker built on an application's redis::Client uses that client's TLS settings".into(),
                    });
                }
                let info = client.get_connection_info();
                if matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
                    ensure_crypto_provider();
                }
                let describe = format!("{} (the application's client)", info.addr());
                (Target::Standalone((**client).clone()), describe)
            }
            Kind::Sentinel { master, .. } => {
                let tls = tls.map(TlsSetup::new);
                if tls.is_some() {
                    ensure_crypto_provider();
                }
                let s = sentinel::Sentinels::new(&topology.kind, tls, timeouts)?;
                (
                    Target::Sentinel(s),
                    format!("master {master:?} via Sentinel"),
                )
            }
            Kind::Cluster { nodes, .. } => {
                let tls = tls.map(TlsSetup::new);
                if tls.is_some() {
                    ensure_crypto_provider();
                }
                let c = cluster::Cluster::new(&topology.kind, tls, timeouts)?;
                (
                    Target::Cluster(Box::new(c)),
                    format!("cluster via {}", nodes.join(",")),
                )
            }
        };
        Ok(Connector {
            inner: Arc::new(Inner {
                target,
                epoch: watch::channel(0).0,
                describe,
                timeouts,
            }),
        })
    }

    /// Where connections go, for logs.
    pub(crate) fn describe(&self) -> &str {
        &self.inner.describe
    }

    /// The connect and response timeouts.
    pub(crate) fn timeouts(&self) -> Timeouts {
        self.inner.timeouts
    }

    /// Whether the topology is a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.inner.target, Target::Cluster(_))
    }

    /// Whether the rest of the topology answers now: in a cluster some node
    /// answers `PING`, under Sentinel some sentinel names the master. A master
    /// that refuses or drops connections while they answer is failing over or
    /// restarting, and a start waits for it; a standalone server has no rest
    /// (`false`).
    pub(crate) async fn others_answer(&self) -> bool {
        match &self.inner.target {
            Target::Standalone(_) => false,
            Target::Sentinel(s) => s.master_client().await.is_ok(),
            Target::Cluster(c) => c.some_node_answers().await,
        }
    }

    /// Whether a server that dropped a connection right after accepting it
    /// has no free connection slot. On a plain TCP connection such a server
    /// says so (`-ERR max number of clients reached`) before the client
    /// sends anything, and a probe that only listens reads it; a server
    /// that says nothing (a TLS-only port a plain client reached) is not
    /// full. Over TLS (or a Unix socket) it cannot be told apart before the
    /// handshake, so a drop there counts as full.
    pub(crate) async fn says_full(&self) -> bool {
        let addrs: Vec<(String, u16)> = match &self.inner.target {
            Target::Standalone(c) => match c.get_connection_info().addr() {
                ConnectionAddr::Tcp(host, port) => vec![(host.clone(), *port)],
                _ => return true,
            },
            Target::Sentinel(s) => match s.master_client().await {
                Ok(c) => match c.get_connection_info().addr() {
                    ConnectionAddr::Tcp(host, port) => vec![(host.clone(), *port)],
                    _ => return true,
                },
                Err(_) => return false,
            },
            Target::Cluster(c) => match c.plain_nodes() {
                Some(nodes) => nodes,
                None => return true,
            },
        };
        for (host, port) in addrs {
            if full_by_probe(&host, port, self.inner.timeouts.connect).await {
                return true;
            }
        }
        false
    }

    /// A client for the master of the moment (asks Sentinel). `None` for a
    /// cluster, which has no one master.
    async fn client(&self) -> Result<Option<Client>, Error> {
        match &self.inner.target {
            Target::Standalone(c) => Ok(Some(c.clone())),
            Target::Sentinel(s) => s.master_client().await.map(Some),
            Target::Cluster(_) => Ok(None),
        }
    }

    /// `count` shared connections, one attempt: to the master of the moment
    /// (asked once), each with the given response timeout and checked with
    /// `ROLE`; for a cluster, one connection routed by slot (it holds a
    /// connection to every master).
    pub(crate) async fn shared(
        &self,
        count: usize,
        response_timeout: Duration,
    ) -> Result<Vec<Shared>, Error> {
        if let Target::Cluster(c) = &self.inner.target {
            return Ok(vec![Shared::Cluster(c.shared().await?)]);
        }
        let client = self.client().await?.expect("not a cluster");
        let mut conns = Vec::with_capacity(count);
        for _ in 0..count {
            let mut conn =
                connect_to(&client, self.inner.timeouts.connect, response_timeout).await?;
            name_connection(&mut conn, &shared_name()).await;
            conns.push(Shared::Node(conn));
        }
        Ok(conns)
    }

    /// A dedicated connection for blocking reads of `key`, one attempt, with
    /// the given response timeout: to the master of the moment, or for a
    /// cluster to the master that owns the key's slot (then also its
    /// `host:port`, where `CLIENT UNBLOCK` must go).
    ///
    /// The connection is named `name` (`CLIENT SETNAME`) for `CLIENT LIST`.
    pub(crate) async fn connect_reader(
        &self,
        key: &str,
        response_timeout: Duration,
        name: &str,
    ) -> Result<(MultiplexedConnection, Option<String>), Error> {
        let (mut conn, node) = match &self.inner.target {
            Target::Cluster(c) => {
                let (conn, node) = c.connect_for(key, response_timeout).await?;
                (conn, Some(node))
            }
            _ => {
                let client = self.client().await?.expect("not a cluster");
                let connect = self.inner.timeouts.connect;
                (connect_to(&client, connect, response_timeout).await?, None)
            }
        };
        name_connection(&mut conn, name).await;
        Ok((conn, node))
    }

    /// A dedicated connection to the cluster node at `node` (`host:port`,
    /// as an `ASK` names it), one attempt, checked with `ROLE`, with the
    /// given response timeout, named `name`. A topology that is not a
    /// cluster has no other node to go to: an error.
    pub(crate) async fn connect_node(
        &self,
        node: &str,
        response_timeout: Duration,
        name: &str,
    ) -> Result<MultiplexedConnection, Error> {
        let Target::Cluster(c) = &self.inner.target else {
            return Err(Error::Connect(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "a redirection outside a cluster",
                node.to_owned(),
            ))));
        };
        let mut conn = c.connect_node(node, response_timeout).await?;
        name_connection(&mut conn, name).await;
        Ok(conn)
    }

    /// A Pub/Sub connection for `channel`, one attempt: to the master of
    /// the moment, or in a cluster to the master of the channel name's slot
    /// (a cluster forwards every `PUBLISH` to every node). Pub/Sub
    /// connections carry no `CLIENT SETNAME` name.
    pub(crate) async fn pubsub(&self, channel: &str) -> Result<redis::aio::PubSub, Error> {
        let client = match &self.inner.target {
            Target::Cluster(c) => c.client_for(channel).await?.0,
            _ => self.client().await?.expect("not a cluster"),
        };
        match tokio::time::timeout(self.inner.timeouts.connect, client.get_async_pubsub()).await {
            Ok(r) => r.map_err(Error::Connect),
            Err(_) => Err(Error::Connect(redis::RedisError::from(
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connecting for Pub/Sub timed out",
                ),
            ))),
        }
    }

    /// A read answered `MOVED`: the next reader connection for that slot
    /// goes where it said.
    pub(crate) fn redirected(&self, e: &Error) {
        if let (Target::Cluster(c), Error::Redis(e)) = (&self.inner.target, e) {
            c.moved(e);
        }
    }

    /// Changes whenever a failover is announced.
    pub(crate) fn epoch(&self) -> watch::Receiver<u64> {
        self.inner.epoch.subscribe()
    }

    /// A failover happened (announced, or seen on a connection): every
    /// connection moves to the master of the moment.
    pub(crate) fn failover_seen(&self) {
        self.inner.epoch.send_modify(|e| *e += 1);
    }

    /// For Sentinel: starts listening for `+switch-master` on every sentinel.
    /// The returned guard stops it when dropped.
    pub(crate) fn watch_failovers(&self) -> Option<sentinel::Watcher> {
        match &self.inner.target {
            Target::Standalone(_) | Target::Cluster(_) => None,
            Target::Sentinel(s) => Some(s.watch(self.clone())),
        }
    }
}

/// Runs `op` until it succeeds, waiting with backoff, until `deadline`,
/// through what passes by itself:
///
/// * a server that is starting or cannot serve now (`LOADING`, `BUSY`,
///   `MASTERDOWN`, `READONLY`, a replica, `OOM`…);
/// * a server with no free connection slot: it answers `ERR max number of
///   clients reached` and closes, and the client may see only the close
///   (broken pipe, reset, end of stream); a connection accepted and then
///   dropped counts as that when [`Connector::says_full`] confirms it;
/// * a topology that changes: `MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, and a
///   master that refuses connections while the rest of its topology answers
///   ([`Connector::others_answer`]: a cluster node or a sentinel).
///
/// Anything else fails at once: an unreachable standalone server (so a
/// process manager restarts the process), refused credentials, a sentinel
/// that does not know the master (a wrong name), a missing ACL permission
/// for `command`, or a reply nothing fixes.
pub(crate) async fn wait_until_ready<T, F, Fut>(
    connector: &Connector,
    what: &str,
    command: &'static str,
    deadline: Instant,
    mut op: F,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let started = Instant::now();
    let mut retry = Retry::default();
    loop {
        let e = match op().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        match e.class() {
            // No sentinel knows the master: a wrong name, not a failover.
            _ if matches!(e, Error::NoMaster { .. }) => return Err(e),
            Class::Busy | Class::RoleChange | Class::Routing => {}
            Class::Connection if e.closed_after_accept() && connector.says_full().await => {}
            Class::Connection if connector.others_answer().await => {}
            Class::Credentials => return Err(Error::Credentials(Box::new(e))),
            Class::Tls => return Err(e),
            Class::Permission
                if matches!(e, Error::Permission { .. } | Error::LeaseDenied { .. }) =>
            {
                return Err(e);
            }
            Class::Permission => {
                return Err(Error::Permission {
                    command: refused_command(&e).unwrap_or(command),
                    source: Box::new(e),
                });
            }
            _ => return Err(e),
        }
        let (delay, log) = retry.failed();
        if Instant::now() + delay > deadline {
            return Err(Error::StartupTimeout {
                waited: started.elapsed(),
                last: Box::new(e),
            });
        }
        if log {
            tracing::warn!(
                waiting_for = what, error = %e, failures = retry.failures(),
                retry_in_ms = delay.as_millis() as u64,
                left_ms = deadline.saturating_duration_since(Instant::now()).as_millis() as u64,
                "redis is not ready yet; waiting"
            );
        }
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests;
