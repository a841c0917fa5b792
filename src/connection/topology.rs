//! The public configuration of where Redis is: [`Topology`] and [`Tls`].
//! Configuration only: nothing here opens a connection.

use std::fmt;

/// Where the Redis server is and how to find its master. Configuration only:
/// no I/O happens until [`Broker::start`](crate::Broker::start).
///
/// * [`Topology::standalone`]: one server at a URL
///   (`redis://[user:password@]host:port[/db]`, `rediss://` for TLS).
///   [`Broker::builder(url)`](crate::Broker::builder) is its shorthand.
/// * [`Topology::sentinel`]: a master found through Redis Sentinel by its
///   name. Every connection asks a sentinel (`SENTINEL
///   get-master-addr-by-name`) when it (re)connects, and checks with `ROLE`
///   that it reached a master. A failover is noticed when a sentinel
///   announces it (`+switch-master`) or when a connection meets `READONLY`
///   or `UNBLOCKED … master -> replica`: every connection then moves to the
///   new master, and the process stays up.
/// * [`Topology::cluster`]: a Redis Cluster found through seed nodes. Each
///   stream lives on the node that owns its key's hash slot; rillkit reads
///   there and routes every other command by slot, following `MOVED`, `ASK`
///   and `TRYAGAIN` through slot migrations and failovers. The dead-letter
///   stream must share its stream's slot: under a cluster the default
///   dead-letter name is hash-tagged, `{orders}-dlq` (see
///   [`Stream::dlq_for`](crate::Stream::dlq_for)).
///
/// ```
/// use rillkit::{Broker, Topology};
///
/// let topology = Topology::sentinel("mymaster", ["10.0.0.1:26379", "10.0.0.2:26379"])
///     .master_credentials(Some("worker"), "s3cret")
///     .sentinel_credentials(None, "sentinel-pass");
/// let builder = Broker::with_topology(topology);
/// # let _ = builder;
/// ```
#[derive(Clone)]
pub struct Topology {
    pub(crate) kind: Kind,
}

#[derive(Clone)]
pub(crate) enum Kind {
    Standalone {
        url: String,
    },
    Sentinel {
        master: String,
        sentinels: Vec<String>,
        master_auth: Credentials,
        sentinel_auth: Credentials,
        db: i64,
    },
    Cluster {
        nodes: Vec<String>,
        auth: Credentials,
    },
    /// The application's own client (standalone; its TLS and credentials).
    Client(Box<redis::Client>),
}

/// A username (optional: `default`) and a password.
#[derive(Clone, Default)]
pub(crate) struct Credentials {
    pub username: Option<String>,
    pub password: Option<String>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Topology {
    /// One server reached through the application's own `redis::Client`
    /// (its address, credentials, database and TLS). rillkit opens every
    /// connection it uses from it — the shared ones and one per
    /// subscription — and closes only those at its stop; the client and any
    /// connection the application opened from it are left alone.
    /// [`BrokerBuilder::tls`](crate::BrokerBuilder::tls) does not apply:
    /// the client carries its TLS settings.
    pub fn client(client: redis::Client) -> Self {
        Topology {
            kind: Kind::Client(Box::new(client)),
        }
    }

    /// One server at `url`: `redis://[user:password@]host:port[/db]`, or
    /// `rediss://` for TLS (see [`Tls`] for a private CA or a client
    /// certificate).
    pub fn standalone(url: impl Into<String>) -> Self {
        Topology {
            kind: Kind::Standalone { url: url.into() },
        }
    }

    /// The master named `master_name` (as in `sentinel monitor <name> …`),
    /// found through the sentinels at `sentinels` (`host:port` each). The
    /// sentinels are asked in order; the first that knows the master answers.
    pub fn sentinel<I, S>(master_name: impl Into<String>, sentinels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Topology {
            kind: Kind::Sentinel {
                master: master_name.into(),
                sentinels: sentinels.into_iter().map(Into::into).collect(),
                master_auth: Credentials::default(),
                sentinel_auth: Credentials::default(),
                db: 0,
            },
        }
    }

    /// A Redis Cluster reached through `seed_nodes` (`host:port` each; one
    /// reachable node is enough, more survive one being down). The slot map
    /// is read from the cluster (`CLUSTER SLOTS`) when the broker starts and
    /// again whenever a slot moves.
    ///
    /// ```
    /// use rillkit::{Broker, Topology};
    ///
    /// let topology = Topology::cluster(["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"])
    ///     .master_credentials(Some("worker"), "s3cret");
    /// let builder = Broker::with_topology(topology);
    /// # let _ = builder;
    /// ```
    pub fn cluster<I, S>(seed_nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Topology {
            kind: Kind::Cluster {
                nodes: seed_nodes.into_iter().map(Into::into).collect(),
                auth: Credentials::default(),
            },
        }
    }

    /// Credentials for the master (`AUTH [username] password`); for a
    /// cluster, for every node. For a standalone server, put them in the URL
    /// instead; this does nothing there.
    pub fn master_credentials(mut self, username: Option<&str>, password: &str) -> Self {
        let creds = Credentials {
            username: username.map(str::to_owned),
            password: Some(password.to_owned()),
        };
        match &mut self.kind {
            Kind::Sentinel { master_auth, .. } => *master_auth = creds,
            Kind::Cluster { auth, .. } => *auth = creds,
            Kind::Standalone { .. } | Kind::Client(_) => {}
        }
        self
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.kind, Kind::Cluster { .. })
    }

    /// Credentials for the sentinels (`sentinel requirepass` / sentinel ACL
    /// users). Does nothing for a standalone server.
    pub fn sentinel_credentials(mut self, username: Option<&str>, password: &str) -> Self {
        if let Kind::Sentinel { sentinel_auth, .. } = &mut self.kind {
            *sentinel_auth = Credentials {
                username: username.map(str::to_owned),
                password: Some(password.to_owned()),
            };
        }
        self
    }

    /// The database number on the master (`SELECT`, default 0). For a
    /// standalone server it is the URL's path, and a cluster has database 0
    /// only; this does nothing there.
    pub fn db(mut self, db: i64) -> Self {
        if let Kind::Sentinel { db: d, .. } = &mut self.kind {
            *d = db;
        }
        self
    }
}

impl fmt::Debug for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Standalone { url } => f
                .debug_struct("Standalone")
                .field("url", &redact_url(url))
                .finish(),
            Kind::Sentinel {
                master,
                sentinels,
                master_auth,
                sentinel_auth,
                db,
            } => f
                .debug_struct("Sentinel")
                .field("master", master)
                .field("sentinels", sentinels)
                .field("master_auth", master_auth)
                .field("sentinel_auth", sentinel_auth)
                .field("db", db)
                .finish(),
            Kind::Cluster { nodes, auth } => f
                .debug_struct("Cluster")
                .field("nodes", nodes)
                .field("auth", auth)
                .finish(),
            Kind::Client(c) => f
                .debug_struct("Client")
                .field("addr", &c.get_connection_info().addr().to_string())
                .finish(),
        }
    }
}

/// What is wrong with a standalone server's URL, part by part, before
/// redis-rs (whose own error says only that it did not parse) sees it.
pub(crate) fn check_url(url: &str) -> Result<(), String> {
    let parsed = url::Url::parse(url).map_err(|e| match e {
        url::ParseError::RelativeUrlWithoutBase => {
            "no scheme: write redis://host:port (or rediss:// for TLS)".to_owned()
        }
        other => format!("{other}"),
    })?;
    match parsed.scheme() {
        "redis" | "rediss" | "valkey" | "valkeys" => {}
        "unix" | "redis+unix" => return Ok(()),
        other => {
            return Err(format!(
                "the scheme {other:?} is not redis:// or rediss:// (or unix:// for a socket)"
            ));
        }
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("the host is missing".into());
    }
    let path = parsed.path().trim_start_matches('/');
    if !path.is_empty() && path.parse::<i64>().is_err() {
        return Err(format!(
            "the path /{path} is not a database number (redis://host:port/0)"
        ));
    }
    Ok(())
}

/// A URL with its password replaced, for logs.
pub(crate) fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:<redacted>{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// TLS settings beyond the `rediss://` scheme: a private CA, a client
/// certificate (mutual TLS), or, for tests only, no verification.
///
/// With a `rediss://` URL and no `Tls`, the server's certificate is checked
/// against the system's trust store. For Sentinel, setting `Tls` makes every
/// connection (to the sentinels and to the master) use TLS; for a cluster,
/// every connection to every node.
///
/// rillkit uses rustls. When the process has no rustls crypto provider yet,
/// rillkit installs `ring`'s at [`build`](crate::BrokerBuilder::build); an
/// application that installs its own afterwards should call
/// `install_default().ok()` (or install its own first).
///
/// ```
/// use rillkit::Tls;
/// # let (ca, cert, key) = (Vec::new(), Vec::new(), Vec::new());
/// let tls = Tls::new().ca_pem(ca).client_cert_pem(cert, key);
/// # let _ = tls;
/// ```
#[derive(Clone, Default)]
pub struct Tls {
    pub(crate) ca_pem: Option<Vec<u8>>,
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
    pub(crate) insecure: bool,
}

impl Tls {
    /// TLS with the system's trust store.
    pub fn new() -> Self {
        Tls::default()
    }

    /// Trusts this CA (PEM, one or more certificates) instead of the system's
    /// trust store.
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Presents this client certificate and private key (PEM each) for mutual
    /// TLS (`tls-auth-clients yes` on the server).
    pub fn client_cert_pem(mut self, cert: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Self {
        self.client = Some((cert.into(), key.into()));
        self
    }

    /// Accepts any server certificate, unchecked. **For tests only**: it
    /// leaves the connection open to anyone in the middle.
    pub fn danger_accept_invalid_certs(mut self) -> Self {
        self.insecure = true;
        self
    }
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("ca_pem", &self.ca_pem.is_some())
            .field("client_cert", &self.client.is_some())
            .field("insecure", &self.insecure)
            .finish()
    }
}

#[cfg(test)]
mod tests;
