//! Redis Cluster: hash slots, where a slot lives, and the two kinds of
//! connection a broker holds to a cluster.
//!
//! * The shared connection is redis-rs's cluster connection: it keeps the
//!   slot map, routes each command by its key's slot, pipelines a batch per
//!   node, and follows `MOVED`, `ASK` (with `ASKING`) and `TRYAGAIN` itself
//!   (a few tries; rillkit's own backoff takes over after that).
//!   A pipeline carries `ASKING` before each command (see `pool.rs`):
//!   redis-rs sends one `ASKING` before a redirected pipeline, which would
//!   serve only its first command.
//! * A consumer's blocking read runs on a dedicated connection to the master
//!   that owns its stream's slot, found with `CLUSTER SLOTS` (asked of the
//!   seed nodes and of every node learned since, in turn), or straight from
//!   the address of the last `MOVED` for that slot. While the slot migrates,
//!   a command the owner answers `ASK` is sent again, after `ASKING`, on a
//!   second connection to the node named ([`Cluster::connect_node`]; see
//!   `delivery::reader`), and the owner stays the owner. When the slot has
//!   moved, the read answers `UNBLOCKED` (its key left the node) or `MOVED`;
//!   the consumer drops the connection and opens one to the new owner.
//!
//! A multi-key script runs only when all its keys share a slot, so a stream
//! and its dead-letter stream must: see `keys::dlq_slot_error`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{Client, RedisConnectionInfo, TlsMode, Value};

use super::topology::Kind;
use super::{Timeouts, TlsSetup, connect_to, node_client, open, parse_addr, settings};
use crate::error::{ConfigError, Error};
use crate::keys::key_slot;

/// How many times the cluster connection follows a redirection or waits out
/// `TRYAGAIN` for one command before answering the error.
const CLUSTER_RETRIES: u32 = 6;

pub(crate) struct Cluster {
    client: ClusterClient,
    /// Seed nodes first, then nodes learned from `CLUSTER SLOTS`.
    nodes: Mutex<Vec<(String, u16)>>,
    /// Credentials for every node.
    settings: RedisConnectionInfo,
    tls: Option<TlsSetup>,
    /// Where the last `MOVED` said a slot went, tried first on the next
    /// connect for that slot.
    moved: Mutex<HashMap<u16, (String, u16)>>,
    timeouts: Timeouts,
}

fn invalid(reason: String) -> ConfigError {
    ConfigError::Invalid {
        kind: None,
        key: String::new(),
        option: "cluster",
        reason,
    }
}

impl Cluster {
    pub(crate) fn new(
        kind: &Kind,
        tls: Option<TlsSetup>,
        timeouts: Timeouts,
    ) -> Result<Self, ConfigError> {
        let Kind::Cluster { nodes, auth } = kind else {
            unreachable!("Cluster::new is called for the cluster topology only");
        };
        if nodes.is_empty() {
            return Err(invalid("no seed node given".into()));
        }
        let mut seeds = Vec::with_capacity(nodes.len());
        for addr in nodes {
            seeds.push(
                parse_addr(addr).ok_or_else(|| invalid(format!("{addr:?} is not host:port")))?,
            );
        }
        let settings = settings(auth);
        let mut builder = ClusterClientBuilder::new(
            seeds
                .iter()
                .map(|(h, p)| format!("redis://{h}:{p}"))
                .collect::<Vec<_>>(),
        )
        .connection_timeout(timeouts.connect)
        .response_timeout(timeouts.response)
        .retries(CLUSTER_RETRIES)
        .min_retry_wait(50)
        .max_retry_wait(1_000);
        if let Some(u) = &auth.username {
            builder = builder.username(u);
        }
        if let Some(p) = &auth.password {
            builder = builder.password(p);
        }
        if let Some(t) = &tls {
            builder = builder.tls(if t.insecure {
                TlsMode::Insecure
            } else {
                TlsMode::Secure
            });
            if let Some(certs) = &t.certs {
                builder = builder.certs(certs.clone());
            }
        }
        let client = builder
            .build()
            .map_err(|e| invalid(format!("{nodes:?}: {e}")))?;
        Ok(Cluster {
            client,
            nodes: Mutex::new(seeds),
            settings,
            tls,
            moved: Mutex::default(),
            timeouts,
        })
    }

    /// The shared connection, routed by slot, one attempt.
    pub(crate) async fn shared(&self) -> Result<ClusterConnection, Error> {
        self.client
            .get_async_connection()
            .await
            .map_err(Error::Connect)
    }

    /// A dedicated connection to the master that owns `key`'s slot, with the
    /// given response timeout, and that master's `host:port`.
    pub(crate) async fn connect_for(
        &self,
        key: &str,
        response_timeout: Duration,
    ) -> Result<(MultiplexedConnection, String), Error> {
        let (client, node) = self.client_for(key).await?;
        let conn = connect_to(&client, self.timeouts.connect, response_timeout).await?;
        Ok((conn, node))
    }

    /// A dedicated connection to the node at `node` (`host:port`, as a
    /// redirection names it), with the given response timeout.
    pub(crate) async fn connect_node(
        &self,
        node: &str,
        response_timeout: Duration,
    ) -> Result<MultiplexedConnection, Error> {
        let (host, port) = parse_addr(node).ok_or_else(|| {
            Error::Connect(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "a redirection named no host:port",
                node.to_owned(),
            )))
        })?;
        let client =
            node_client(&host, port, &self.settings, self.tls.as_ref()).map_err(Error::Connect)?;
        connect_to(&client, self.timeouts.connect, response_timeout).await
    }

    /// A client for the master that owns `key`'s slot, and its `host:port`.
    pub(crate) async fn client_for(&self, key: &str) -> Result<(Client, String), Error> {
        let slot = key_slot(key.as_bytes());
        let hinted = self.moved.lock().expect("moved lock").remove(&slot);
        let (host, port) = match hinted {
            Some(addr) => addr,
            None => self.owner(slot).await?,
        };
        let client =
            node_client(&host, port, &self.settings, self.tls.as_ref()).map_err(Error::Connect)?;
        Ok((client, format!("{host}:{port}")))
    }

    /// Remembers where a `MOVED` answer said a slot went.
    pub(crate) fn moved(&self, e: &redis::RedisError) {
        if e.code() != Some("MOVED") {
            return;
        }
        let Some((addr, slot)) = e.redirect_node() else {
            return;
        };
        if let Some(owner) = parse_addr(addr) {
            self.moved.lock().expect("moved lock").insert(slot, owner);
        }
    }

    /// The known nodes' addresses, or `None` when connections to them use
    /// TLS.
    pub(crate) fn plain_nodes(&self) -> Option<Vec<(String, u16)>> {
        if self.tls.is_some() {
            return None;
        }
        Some(self.nodes.lock().expect("nodes lock").clone())
    }

    /// Whether some known node answers `PING` now (asked in turn, each
    /// within the connect timeout).
    pub(crate) async fn some_node_answers(&self) -> bool {
        let nodes = self.nodes.lock().expect("nodes lock").clone();
        for (host, port) in nodes {
            let Ok(client) = node_client(&host, port, &self.settings, self.tls.as_ref()) else {
                continue;
            };
            let t = self.timeouts.connect;
            let Ok(mut conn) = open(&client, t, t).await else {
                continue;
            };
            let pong: redis::RedisResult<Value> = redis::cmd("PING").query_async(&mut conn).await;
            if pong.is_ok() {
                return true;
            }
        }
        false
    }

    /// Asks the known nodes in turn, with `CLUSTER SLOTS`, which master owns
    /// `slot`.
    ///
    /// # Errors
    /// The last node's error when none answered; `CLUSTERDOWN` (busy: wait)
    /// when the slot is not served.
    async fn owner(&self, slot: u16) -> Result<(String, u16), Error> {
        let nodes = self.nodes.lock().expect("nodes lock").clone();
        let mut last = None;
        for (host, port) in nodes {
            let answer: Result<Value, Error> = async {
                let client = node_client(&host, port, &self.settings, self.tls.as_ref())
                    .map_err(Error::Connect)?;
                let t = self.timeouts.connect;
                let mut conn = open(&client, t, t).await?;
                redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query_async(&mut conn)
                    .await
                    .map_err(Error::from_redis)
            }
            .await;
            match answer.and_then(|v| {
                parse_slots(v, &host).map_err(|m| Error::unparsable("CLUSTER SLOTS reply", m))
            }) {
                Ok(ranges) => {
                    self.learn(&ranges);
                    return ranges
                        .into_iter()
                        .find(|r| r.start <= slot && slot <= r.end)
                        .map(|r| r.master)
                        .ok_or_else(|| {
                            Error::from_redis(redis::make_extension_error(
                                "CLUSTERDOWN".into(),
                                Some(format!("hash slot {slot} is not served")),
                            ))
                        });
                }
                Err(e) => {
                    tracing::debug!(node = %format!("{host}:{port}"), error = %e, "cluster node did not answer CLUSTER SLOTS");
                    last = Some(e);
                }
            }
        }
        Err(last.expect("at least one seed node"))
    }

    /// Adds the masters of `ranges` to the nodes asked next time.
    fn learn(&self, ranges: &[SlotRange]) {
        let mut nodes = self.nodes.lock().expect("nodes lock");
        for r in ranges {
            if !nodes.contains(&r.master) {
                nodes.push(r.master.clone());
            }
        }
    }
}

/// One row of `CLUSTER SLOTS`: a range of slots and its master.
#[derive(Debug, PartialEq)]
pub(crate) struct SlotRange {
    pub start: u16,
    pub end: u16,
    /// The master's host and port.
    pub master: (String, u16),
}

/// Parses `CLUSTER SLOTS`: `[[start, end, [host, port, id, …], replicas…], …]`.
/// An empty host (or `?`) means the node that answered: `asked` stands for
/// it (an empty `asked` leaves it empty, for a caller that cannot tell).
/// The one parser of this reply: the connection routing by slot and the
/// admin's scan of every master both use it.
pub(crate) fn parse_slots(v: Value, asked: &str) -> Result<Vec<SlotRange>, String> {
    let Value::Array(rows) = v else {
        return Err(format!("expected an array, got {v:?}"));
    };
    let int = |v: &Value| match v {
        Value::Int(i) => u16::try_from(*i).map_err(|_| format!("{i} is not a slot or port")),
        other => Err(format!("expected an integer, got {other:?}")),
    };
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let Value::Array(row) = row else {
            return Err("a row is not an array".into());
        };
        let (Some(start), Some(end), Some(Value::Array(master))) =
            (row.first(), row.get(1), row.get(2))
        else {
            return Err("a row has no master".into());
        };
        let host = match master.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            other => return Err(format!("expected a host, got {other:?}")),
        };
        let host = if host.is_empty() || host == "?" {
            asked.to_owned()
        } else {
            host
        };
        let port = int(master.get(1).ok_or("a master has no port")?)?;
        out.push(SlotRange {
            start: int(start)?,
            end: int(end)?,
            master: (host, port),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
