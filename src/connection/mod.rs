//! Connections and topologies: where Redis is ([`Topology`], [`Tls`]), how a
//! connection to the master of the moment is opened ([`Connector`]), the
//! shared reconnecting pool ([`Pool`]), Sentinel's failover announcements,
//! and the one classification of server answers ([`classify`]) every path
//! uses.
//!
//! Nothing here does I/O until the broker starts: [`Connector::new`] only
//! parses and checks the configuration.

mod cluster;
mod pool;
mod sentinel;
mod topology;

pub(crate) use cluster::parse_slots;
pub(crate) use pool::{Pool, Shared};
pub(crate) use sentinel::Watcher;
pub use topology::{Tls, Topology};

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, Client, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo, Value,
};
use tokio::sync::watch;

use crate::error::{Class, ConfigError, Error, classify};
use crate::util::Retry;
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

/// How TLS applies to a connection, once the configuration is checked.
#[derive(Clone)]
struct TlsSetup {
    certs: Option<redis::TlsCertificates>,
    insecure: bool,
}

impl TlsSetup {
    fn new(tls: &Tls) -> Self {
        let certs =
            (tls.ca_pem.is_some() || tls.client.is_some()).then(|| redis::TlsCertificates {
                client_tls: tls
                    .client
                    .as_ref()
                    .map(|(cert, key)| redis::ClientTlsConfig {
                        client_cert: cert.clone(),
                        client_key: key.clone(),
                    }),
                root_cert: tls.ca_pem.clone(),
            });
        TlsSetup {
            certs,
            insecure: tls.insecure,
        }
    }

    /// A client for `info`, whose address is made TLS.
    fn client(&self, mut info: redis::ConnectionInfo) -> redis::RedisResult<Client> {
        let addr = match info.addr().clone() {
            ConnectionAddr::Tcp(host, port) => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: self.insecure,
                tls_params: None,
            },
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                tls_params,
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: insecure || self.insecure,
                tls_params,
            },
            other => other,
        };
        info = info.set_addr(addr);
        match &self.certs {
            Some(certs) => Client::build_with_tls(info, certs.clone()),
            None => Client::open(info),
        }
    }
}

/// Installs ring's rustls crypto provider when the process has none yet.
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may win the race; either provider works.
        let _ = rustls::crypto::ring::default_provider().install_default();
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

/// One connection to `client`'s server, one attempt, checked to be a master.
pub(crate) async fn connect_to(
    client: &Client,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<MultiplexedConnection, Error> {
    let mut conn = open(client, connect_timeout, response_timeout).await?;
    check_role(&mut conn, client).await?;
    Ok(conn)
}

/// A name for `CLIENT SETNAME`: `rillkit:` then the parts joined by `:`,
/// with anything `CLIENT SETNAME` refuses (spaces, newlines, other control
/// characters) replaced by `_`.
pub(crate) fn client_name(parts: &[&str]) -> String {
    let mut name = String::from("rillkit");
    for p in parts {
        name.push(':');
        name.extend(p.chars().map(|c| {
            if c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c
            }
        }));
    }
    name
}

/// The name of this process's shared connections:
/// `rillkit:<hostname>-<pid>:shared`.
fn shared_name() -> String {
    let host = gethostname::gethostname();
    client_name(&[
        &format!("{}-{}", host.to_string_lossy(), std::process::id()),
        "shared",
    ])
}

/// Names a connection (`CLIENT SETNAME`) so an operator can tell rillkit's
/// connections in `CLIENT LIST`. A refusal (ACL) costs nothing but the name.
async fn name_connection(conn: &mut MultiplexedConnection, name: &str) {
    let r: redis::RedisResult<()> = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(name)
        .query_async(conn)
        .await;
    if let Err(e) = r {
        tracing::debug!(name, error = %e, "CLIENT SETNAME refused; the connection stays unnamed");
    }
}

/// One connection to a sentinel, one attempt.
async fn connect_to_sentinel(
    client: &Client,
    connect_timeout: Duration,
) -> Result<MultiplexedConnection, Error> {
    open(client, connect_timeout, connect_timeout).await
}

/// One connection to `client`'s server, one attempt.
///
/// A failure that a wrong address or scheme causes says so: a server that
/// answers with something other than the Redis protocol is
/// [`Error::NotRedis`]; over TLS, a server without TLS is [`Error::NotTls`]
/// (found early: a TLS handshake not done after [`PLAIN_PROBE_AFTER`] is
/// raced by a plain `PING`), and a handshake that timed out names TLS.
async fn open(
    client: &Client,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<MultiplexedConnection, Error> {
    let cfg = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(Some(response_timeout));
    let connect = client.get_multiplexed_async_connection_with_config(&cfg);
    let (host, port, tls) = match client.get_connection_info().addr() {
        ConnectionAddr::Tcp(host, port) => (host.as_str(), *port, false),
        ConnectionAddr::TcpTls { host, port, .. } => (host.as_str(), *port, true),
        _ => return connect.await.map_err(Error::Connect),
    };
    let addr = host_port(host, port);
    let result = if tls {
        tokio::pin!(connect);
        tokio::select! {
            r = &mut connect => r,
            () = tokio::time::sleep(PLAIN_PROBE_AFTER) => tokio::select! {
                r = &mut connect => r,
                plain = first_line(host, port, connect_timeout) => {
                    if plain.as_deref().is_some_and(is_resp) {
                        return Err(Error::NotTls {
                            addr,
                            reason: "the server answers without TLS".into(),
                        });
                    }
                    connect.await
                }
            },
        }
    } else {
        connect.await
    };
    let e = match result {
        Ok(conn) => return Ok(conn),
        Err(e) => e,
    };
    if e.kind() == redis::ErrorKind::Parse {
        // Over TLS the probe would need a handshake of its own: no line.
        let sent = if tls {
            None
        } else {
            first_line(host, port, connect_timeout).await
        };
        return Err(Error::NotRedis {
            addr,
            sent: sent.map(|l| shown(&l)),
        });
    }
    if tls && is_not_tls(&e) {
        return Err(Error::NotTls {
            addr,
            reason: e.to_string(),
        });
    }
    if tls && e.is_timeout() {
        return Err(Error::Connect(redis::RedisError::from(
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "connecting to {addr} over TLS timed out after {} ms: is the server TLS-enabled? use redis:// (and no TLS options) for a plain server",
                    connect_timeout.as_millis()
                ),
            ),
        )));
    }
    Err(Error::Connect(e))
}

/// How long a TLS connection may go without finishing before a plain `PING`
/// asks the same address whether its server has TLS at all. A server
/// without TLS may wait for the rest of what it takes for a command and
/// answer the handshake nothing.
const PLAIN_PROBE_AFTER: Duration = Duration::from_millis(500);

/// `host:port`, an IPv6 host in brackets.
fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Connects to `host:port` without TLS, sends `PING` (and an empty line, so
/// that a line-based server such as an HTTP one takes the request as
/// complete), and answers the first line the server sends within
/// [`PROBE_LISTEN`], without its line end.
async fn first_line(host: &str, port: u16, connect_timeout: Duration) -> Option<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::time::timeout(
        connect_timeout,
        tokio::net::TcpStream::connect((host, port)),
    )
    .await
    .ok()?
    .ok()?;
    tcp.write_all(b"PING\r\n\r\n").await.ok()?;
    let mut buf = [0u8; 128];
    let n = tokio::time::timeout(PROBE_LISTEN, tcp.read(&mut buf))
        .await
        .ok()?
        .ok()?;
    let line = buf[..n].split(|&b| b == b'\n').next()?;
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    (!line.is_empty()).then(|| line.to_vec())
}

/// Whether `line` is a Redis reply to `PING`: `+PONG`, or an error
/// (`-NOAUTH …`, `-DENIED …`).
fn is_resp(line: &[u8]) -> bool {
    matches!(line.first(), Some(b'+' | b'-'))
}

/// The longest part of a server's line [`Error::NotRedis`] shows, in
/// characters.
const SHOWN_MAX: usize = 40;

/// `line` as one short line of text: UTF-8 (lossy), control characters
/// escaped, backquotes as `'`, cut at [`SHOWN_MAX`] characters (`…`).
fn shown(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == SHOWN_MAX {
            out.push('…');
            break;
        }
        match c {
            '`' => out.push('\''),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

/// Whether the TLS library failed on what the server sent because it is not
/// TLS at all (a server without TLS answers the handshake with a Redis
/// error line: a record of no TLS content type).
fn is_not_tls(e: &redis::RedisError) -> bool {
    use std::error::Error as _;
    type Shared = Arc<dyn std::error::Error + Send + Sync>;
    // redis-rs keeps an I/O error as an `Arc` of it; the TLS library's
    // error is inside.
    let source = e.source();
    let io = source
        .and_then(|s| s.downcast_ref::<Shared>())
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .or_else(|| source.and_then(|s| s.downcast_ref::<std::io::Error>()));
    let rustls_error = io
        .and_then(|io| io.get_ref())
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    matches!(
        rustls_error,
        Some(rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. })
    )
}

/// `ROLE` must say `master`: a server demoted in a failover accepts the
/// connection but refuses every write. A server that refuses `ROLE` (ACL,
/// renamed command) is taken at its word.
async fn check_role(conn: &mut MultiplexedConnection, client: &Client) -> Result<(), Error> {
    let role: redis::RedisResult<Value> = redis::cmd("ROLE").query_async(conn).await;
    match role {
        Ok(Value::Array(items)) => match items.first() {
            Some(Value::BulkString(b)) if b.as_slice() != b"master" => Err(Error::NotMaster {
                addr: client.get_connection_info().addr().to_string(),
            }),
            _ => Ok(()),
        },
        Ok(_) => Ok(()),
        Err(e) => match classify(&e) {
            Class::Permission | Class::Fatal => Ok(()),
            _ => Err(Error::from_redis(e)),
        },
    }
}

/// Commands a connection sends before the one a step is about (redis-rs's
/// cluster connection asks `CLUSTER SLOTS`; a reader asks `ROLE`).
const CONNECT_COMMANDS: [&str; 3] = ["cluster|slots", "role", "asking"];

/// The command a `NOPERM` answer names (`… to run the 'cluster|slots'
/// command`), when it is one a connection sends by itself.
fn refused_command(e: &Error) -> Option<&'static str> {
    let text = e.to_string();
    CONNECT_COMMANDS
        .into_iter()
        .find(|c| text.contains(&format!("'{c}'")))
}

/// How long a probe listens for a full server's greeting.
const PROBE_LISTEN: Duration = Duration::from_millis(500);

/// Connects to `host:port`, sends nothing, and answers whether the server
/// says within [`PROBE_LISTEN`] that it has no free connection slot.
async fn full_by_probe(host: &str, port: u16, connect_timeout: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let Ok(Ok(mut tcp)) = tokio::time::timeout(
        connect_timeout,
        tokio::net::TcpStream::connect((host, port)),
    )
    .await
    else {
        return false;
    };
    let mut greeting = [0u8; 64];
    match tokio::time::timeout(PROBE_LISTEN, tcp.read(&mut greeting)).await {
        Ok(Ok(n)) => String::from_utf8_lossy(&greeting[..n]).contains("max number of clients"),
        _ => false,
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
