//! The shared pool: a few multiplexed connections to the master of the moment
//! for every non-blocking command (publish, ack, claim, dead-letter move,
//! group creation, CLIENT UNBLOCK).
//!
//! The pool is up (a generation of connections) or down (reconnecting). A
//! command that meets a broken connection or a role change (`READONLY`, a
//! replica) takes the whole generation down; one task then reconnects with the
//! capped backoff every wait uses (100 ms doubling to 10 s, with jitter, never
//! giving up), logging at each doubling, and through the [`Connector`], so
//! under Sentinel it reaches the new master. A failover announced by Sentinel
//! takes the generation down too. Commands sent meanwhile wait for the next
//! generation, up to the wait their caller allows.
//!
//! For a cluster the pool holds one [`Shared::Cluster`] connection: redis-rs's
//! cluster connection, which holds a connection to every master, routes
//! each command by slot and follows `MOVED`, `ASK` and `TRYAGAIN`; a
//! pipeline goes with `ASKING` before each command, so that an `ASK`
//! answered to it is followed for all its commands (see `asking_each`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisFuture, Value};
use tokio::sync::watch;

use super::{Connector, parse_addr};
use crate::error::{Class, Error};
use crate::util::{Retry, log_wait};

/// A shared connection: to one server, or to a whole cluster (routed by
/// slot).
#[derive(Clone)]
pub(crate) enum Shared {
    Node(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Shared {
    /// Sends `cmd` to the node at `node` (`host:port`) of a cluster, or to
    /// the one server. Per-node commands (`CLIENT UNBLOCK <id>`: client ids
    /// are per node) go this way.
    pub(crate) async fn on_node(
        &mut self,
        cmd: &Cmd,
        node: Option<&str>,
    ) -> redis::RedisResult<Value> {
        match (self, node.and_then(parse_addr)) {
            (Shared::Cluster(c), Some((host, port))) => {
                c.route_command(
                    cmd.clone(),
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port }),
                )
                .await
            }
            (conn, _) => cmd.query_async(conn).await,
        }
    }

    /// Sends `cmd` to the master that owns `key`'s slot in a cluster, or to
    /// the one server: for a command that names no key but asks about the
    /// server a key lives on (`COMMAND DOCS`).
    pub(crate) async fn on_key(&mut self, cmd: &Cmd, key: &[u8]) -> redis::RedisResult<Value> {
        match self {
            Shared::Cluster(c) => {
                let route = Route::new(crate::keys::key_slot(key), SlotAddr::Master);
                c.route_command(
                    cmd.clone(),
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                )
                .await
            }
            conn => cmd.query_async(conn).await,
        }
    }
}

impl ConnectionLike for Shared {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Shared::Node(c) => c.req_packed_command(cmd),
            Shared::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Shared::Node(c) => c.req_packed_commands(pipeline, offset, count),
            Shared::Cluster(c) => {
                if pipeline.is_transaction() {
                    return c.req_packed_commands(pipeline, offset, count);
                }
                Box::pin(async move {
                    let asking = asking_each(pipeline);
                    let replies = c
                        .req_packed_commands(&asking, 2 * offset, 2 * count)
                        .await?;
                    // Each command's reply, without those of the `ASKING`s
                    // (a refused `ASKING` costs nothing outside a migration).
                    Ok(replies.into_iter().skip(1).step_by(2).collect())
                })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Shared::Node(c) => c.get_db(),
            Shared::Cluster(c) => c.get_db(),
        }
    }
}

/// `pipeline` with `ASKING` before each command, for a cluster.
///
/// redis-rs follows an `ASK` answered to a pipeline by sending `ASKING`
/// once, then the whole pipeline again, to the node named: without an
/// `ASKING` of its own, every command after the first is answered `MOVED`
/// back to the slot's owner, which answers `ASK` again, until the retries
/// run out, and each round writes the first command once more (a batch
/// published during a slot migration failed and left duplicates). With one
/// before each, the node serves them all; a node not importing the slot
/// ignores `ASKING`.
fn asking_each(pipeline: &Pipeline) -> Pipeline {
    let mut out = redis::pipe();
    for cmd in pipeline.cmd_iter() {
        out.cmd("ASKING").add_command(cmd.clone());
    }
    out
}

#[derive(Clone)]
pub(crate) struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    connector: Connector,
    size: usize,
    state: watch::Sender<State>,
    next: AtomicUsize,
    /// Listens for announced failovers; stopped at close.
    failovers: Mutex<Option<actix_rt::task::JoinHandle<()>>>,
}

#[derive(Clone)]
enum State {
    Up {
        generation: u64,
        conns: Arc<[Shared]>,
    },
    Down {
        since: Instant,
        last_error: Arc<str>,
    },
    Closed,
}

/// A connection lent for one command, with its generation (to report it).
pub(crate) struct Lease {
    generation: u64,
    pub(crate) conn: Shared,
}

async fn open_all(connector: &Connector, size: usize) -> Result<Arc<[Shared]>, Error> {
    let response = connector.timeouts().response;
    Ok(connector.shared(size, response).await?.into())
}

impl Pool {
    /// Opens `size` connections, one attempt (the caller decides whether to
    /// wait and try again).
    pub(crate) async fn connect(connector: Connector, size: usize) -> Result<Pool, Error> {
        let conns = open_all(&connector, size).await?;
        let pool = Pool {
            inner: Arc::new(Inner {
                connector,
                size,
                state: watch::channel(State::Up {
                    generation: 0,
                    conns,
                })
                .0,
                next: AtomicUsize::new(0),
                failovers: Mutex::new(None),
            }),
        };
        let mut epoch = pool.inner.connector.epoch();
        let weak = Arc::downgrade(&pool.inner);
        let task = actix_rt::spawn(async move {
            while epoch.changed().await.is_ok() {
                let Some(inner) = weak.upgrade() else { return };
                let p = Pool { inner };
                if let Some(generation) = p.generation() {
                    p.take_down(generation, "a failover was announced");
                }
            }
        });
        *pool.inner.failovers.lock().expect("pool lock") = Some(task);
        Ok(pool)
    }

    fn generation(&self) -> Option<u64> {
        match &*self.inner.state.borrow() {
            State::Up { generation, .. } => Some(*generation),
            _ => None,
        }
    }

    /// Lends a connection, waiting up to `wait` for a reconnect under way.
    ///
    /// # Errors
    /// [`Error::ShutDown`] once closed; [`Error::Unavailable`] when no
    /// connection came back within `wait`.
    pub(crate) async fn get(&self, wait: Duration) -> Result<Lease, Error> {
        // The common case, without subscribing to changes.
        if let State::Up { generation, conns } = &*self.inner.state.borrow() {
            return Ok(self.lend(*generation, conns));
        }
        let mut rx = self.inner.state.subscribe();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let down_since = match &*rx.borrow_and_update() {
                State::Up { generation, conns } => return Ok(self.lend(*generation, conns)),
                State::Closed => return Err(Error::ShutDown),
                State::Down {
                    since, last_error, ..
                } => (*since, last_error.clone()),
            };
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Error::ShutDown),
                Err(_) => {
                    return Err(Error::Unavailable {
                        down_for: down_since.0.elapsed(),
                        last_error: down_since.1.to_string(),
                    });
                }
            }
        }
    }

    /// The next connection of the generation, round robin.
    fn lend(&self, generation: u64, conns: &[Shared]) -> Lease {
        let i = self.inner.next.fetch_add(1, Ordering::Relaxed) % conns.len();
        Lease {
            generation,
            conn: conns[i].clone(),
        }
    }

    /// Runs `command` (its ACL name, for [`Error::Permission`]) on a lent
    /// connection; a broken connection or a role change takes the pool down
    /// for a reconnect. The command is sent once.
    pub(crate) async fn run<T, F, Fut>(
        &self,
        command: &'static str,
        wait: Duration,
        f: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(Shared) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let lease = self.get(wait).await?;
        let generation = lease.generation;
        f(lease.conn).await.map_err(|e| {
            let e = Error::from_redis(e);
            match e.class() {
                class if class.reconnects() => {
                    self.take_down(generation, &e.to_string());
                    e
                }
                Class::Permission => Error::Permission {
                    command,
                    source: Box::new(e),
                },
                _ => e,
            }
        })
    }

    /// Marks generation `generation` broken and starts the reconnect (once per
    /// generation).
    fn take_down(&self, generation: u64, why: &str) {
        let went_down = self.inner.state.send_if_modified(|s| match s {
            State::Up { generation: g, .. } if *g == generation => {
                *s = State::Down {
                    since: Instant::now(),
                    last_error: why.into(),
                };
                true
            }
            _ => false,
        });
        if went_down {
            tracing::warn!(server = %self.inner.connector.describe(), error = %why, "shared connections lost; reconnecting");
            actix_rt::spawn(reconnect(self.clone(), generation));
        }
    }

    /// Drops the connections; every later `get` answers [`Error::ShutDown`].
    /// Answers how many connections were open.
    pub(crate) fn close(&self) -> usize {
        if let Some(t) = self.inner.failovers.lock().expect("pool lock").take() {
            t.abort();
        }
        let old = self.inner.state.send_replace(State::Closed);
        match old {
            State::Up { conns, .. } => conns.len(),
            _ => 0,
        }
    }
}

/// Reconnects until it succeeds or the pool is closed.
///
/// A failover announced while it waits out its backoff ends the wait at once:
/// the announced master is where the next try goes.
async fn reconnect(pool: Pool, generation: u64) {
    let mut retry = Retry::default();
    let mut failovers = pool.inner.connector.epoch();
    loop {
        if matches!(*pool.inner.state.borrow(), State::Closed) {
            return;
        }
        match open_all(&pool.inner.connector, pool.inner.size).await {
            Ok(conns) => {
                let installed = pool.inner.state.send_if_modified(|s| {
                    if matches!(s, State::Closed) {
                        return false;
                    }
                    *s = State::Up {
                        generation: generation + 1,
                        conns: conns.clone(),
                    };
                    true
                });
                if installed {
                    let failures = retry.failures();
                    tracing::info!(server = %pool.inner.connector.describe(), failures, "shared connections are back");
                }
                return;
            }
            Err(e) => {
                let (delay, log) = retry.failed();
                pool.inner.state.send_modify(|s| {
                    if let State::Down { last_error, .. } = s {
                        *last_error = e.to_string().into();
                    }
                });
                if log {
                    log_wait!(
                        e.class(),
                        server = %pool.inner.connector.describe(), error = %e,
                        failures = retry.failures(),
                        retry_in_ms = delay.as_millis() as u64,
                        "reconnecting the shared connections failed"
                    );
                }
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    Ok(()) = failovers.changed() => {
                        tracing::info!(server = %pool.inner.connector.describe(), "a failover was announced; reconnecting to the new master now");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
