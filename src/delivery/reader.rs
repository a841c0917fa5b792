//! A source's dedicated read connection: the one a blocking read
//! (`XREADGROUP … BLOCK`, `BLMOVE`, `BRPOP`) waits on, so nothing blocking
//! ever runs on a shared connection.
//!
//! Its life is the same for every source: opened on demand to the master of
//! the moment (in a cluster, to the master that owns the source's key), with
//! a response timeout of `block` plus a margin; its `CLIENT ID` taken at
//! once, so a drain can cut a blocked read short with `CLIENT UNBLOCK` on a
//! shared connection, sent again every [`UNBLOCK_EVERY`] while the read
//! lasts; dropped when a read fails in a way that leaves it broken or on the
//! wrong server ([`drops_reader`]); closed with `QUIT` (bounded to 1 s) when
//! the loop ends.
//!
//! In a cluster, while the key's slot migrates, its owner answers `ASK` for
//! a key that has already moved: a [`ReadConn`] then sends that one command
//! again to the node the `ASK` named, after `ASKING`, on a second
//! connection it keeps to that node (with its own `CLIENT ID`, so a drain
//! cuts a read blocked there short too), at once and without giving up the
//! owner: the next command goes to the owner again, as `ASK` is a one-off
//! redirection until the migration ends and the owner answers `MOVED`
//! (then the read connection is dropped and opened to the new owner). The
//! importing node serves a blocking read after `ASKING` like any other, and
//! a write there wakes it. Every command a source sends on its read
//! connection (reads, PEL re-reads, pops, scripts, reads in pieces) goes
//! through it. A command over several keys (a reliable list's pop) is
//! served by neither node while its keys are not all on one of them (one
//! that does not exist counts as elsewhere): Redis answers `TRYAGAIN`, a
//! busy answer waited out with backoff until the migration ends.
//!
//! When `CLIENT ID` or `CLIENT UNBLOCK` is refused (an ACL, a managed
//! service), reads work all the same; one WARN says that a stop then waits
//! for a blocked read to end by itself, within `block`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::Addr;
use futures::future::LocalBoxFuture;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::connection::{Connector, READ_TIMEOUT_MARGIN, client_name};
use crate::error::{Class, Error};
use crate::redis::commands::{self, Detected, ServerCommands};
use crate::redis::{RedisActor, Unblock};

/// How often a drain sends `CLIENT UNBLOCK` again while a blocked read
/// lasts (the first may reach the server before the read does).
pub(crate) const UNBLOCK_EVERY: Duration = Duration::from_millis(50);

/// How much later than its `block` a blocking read may answer before it
/// counts as a stall of the server (see `delivery::liveness`).
const LATE_BY: Duration = Duration::from_secs(1);

/// Whether a blocking read sent at `sent` with `block` answered so late that
/// the server must have stalled meanwhile (a long script, a pause).
pub(crate) fn late(sent: tokio::time::Instant, block: Duration) -> bool {
    sent.elapsed() > block + LATE_BY
}

/// How long the closing `QUIT` may take before the connection is dropped.
const QUIT_WITHIN: Duration = Duration::from_secs(1);

/// Whether a read that failed with `e` leaves its connection unusable or on
/// the wrong server: broken, demoted, the slot moved elsewhere (`MOVED`, or
/// an `ASK` the [`ReadConn`] could not follow), or its key gone
/// (`UNBLOCKED`, which in a cluster is a migration).
pub(crate) fn drops_reader(e: &Error) -> bool {
    matches!(
        e.class(),
        Class::Connection | Class::RoleChange | Class::Routing | Class::GroupGone
    )
}

/// One source's read connection. See the module docs.
pub(crate) struct Reader {
    opener: Opener,
    /// The open connection while no read holds it.
    conn: Option<ReadConn>,
}

/// What it takes to open a source's read connections, and what they share
/// with the [`Reader`]. Cheap to clone.
#[derive(Clone)]
struct Opener {
    connector: Connector,
    /// The key whose master (or slot owner) the connection goes to.
    key: Arc<str>,
    /// The connections' `CLIENT SETNAME`.
    name: Arc<str>,
    block: Duration,
    /// How to cut the read on the wire short: on the owner's connection, or
    /// on the one an `ASK` sent it to while it is there.
    target: Arc<Mutex<Option<Unblock>>>,
    /// `CLIENT ID` or `CLIENT UNBLOCK` was refused: reads are not cut short.
    refused: Arc<AtomicBool>,
    /// The newer commands the connection's server has, asked again on each
    /// new connection (a failover or a reshard may change the server), for
    /// a source that picks its paths by them (`None`: not asked).
    detected: Option<Detected>,
}

/// The connection a read runs on, taken from its [`Reader`]: the open one,
/// or what it takes to open one inside the read's future.
pub(crate) struct Lent {
    conn: Option<ReadConn>,
    opener: Opener,
}

/// A read connection: to the master of the moment (in a cluster, the
/// owner of the key's slot), following `ASK` (see the module docs).
pub(crate) struct ReadConn {
    owner: MultiplexedConnection,
    /// `CLIENT UNBLOCK` for a read on `owner` (`None`: refused).
    unblock: Option<Unblock>,
    /// The connection to the node the last `ASK` named.
    asked: Option<Asked>,
    opener: Opener,
}

/// A connection to the node an `ASK` named (a slot's importing node).
struct Asked {
    /// Its `host:port`, as the `ASK` gave it.
    node: String,
    conn: MultiplexedConnection,
    unblock: Option<Unblock>,
}

/// The node (`host:port`) an `ASK` answer names.
fn asked_node(reply: &Value) -> Option<&str> {
    match reply {
        Value::ServerError(e) if e.code() == "ASK" => e.details()?.split_ascii_whitespace().nth(1),
        _ => None,
    }
}

/// A connection to the node an `ASK` named could not be opened: as a
/// dropped connection (the read connection is dropped, the next read
/// starts over at the owner, after a backoff), with what went wrong (a
/// TLS refusal keeps its words, and its class).
fn unreachable_node(node: &str, e: &Error) -> redis::RedisError {
    std::io::Error::other(format!(
        "opening a connection to {node}, where an ASK sent the read, failed: {e}"
    ))
    .into()
}

impl Opener {
    fn target(&self) -> std::sync::MutexGuard<'_, Option<Unblock>> {
        self.target.lock().expect("unblock target lock")
    }

    /// The `CLIENT ID` of a new connection to `node`, for `CLIENT UNBLOCK`;
    /// `None` when refused.
    async fn client_id(
        &self,
        conn: &mut MultiplexedConnection,
        node: Option<String>,
    ) -> Result<Option<Unblock>, Error> {
        let id: Result<i64, Error> = redis::cmd("CLIENT")
            .arg("ID")
            .query_async(conn)
            .await
            .map_err(Error::from_redis);
        match id {
            Ok(id) => Ok(Some(Unblock { id, node })),
            Err(e) if refuse_unblock(&self.refused, &e, self.block) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A connection to the master of the moment or the key's slot's owner,
    /// with its `CLIENT ID` recorded for the drain.
    async fn open(self) -> Result<ReadConn, Error> {
        let (mut owner, node) = self
            .connector
            .connect_reader(&self.key, self.block + READ_TIMEOUT_MARGIN, &self.name)
            .await?;
        let unblock = self.client_id(&mut owner, node).await?;
        if let Some(detected) = &self.detected {
            detected.set(commands::ask(&mut owner).await?);
        }
        *self.target() = unblock.clone();
        Ok(ReadConn {
            owner,
            unblock,
            asked: None,
            opener: self,
        })
    }
}

impl ReadConn {
    /// Sends `cmd` after `ASKING` to `node`, over the connection kept to it
    /// (opened first when there is none to that node). Answers `cmd`'s
    /// reply, or a refused `ASKING`'s.
    async fn ask(&mut self, node: &str, cmd: &Cmd) -> redis::RedisResult<Value> {
        if self.asked.as_ref().is_none_or(|a| a.node != node) {
            self.asked = None;
            let o = &self.opener;
            let opened = async {
                let timeout = o.block + READ_TIMEOUT_MARGIN;
                let mut conn = o.connector.connect_node(node, timeout, &o.name).await?;
                let unblock = o.client_id(&mut conn, Some(node.to_owned())).await?;
                Ok::<_, Error>(Asked {
                    node: node.to_owned(),
                    conn,
                    unblock,
                })
            }
            .await;
            self.asked = Some(opened.map_err(|e| unreachable_node(node, &e))?);
        }
        let asked = self.asked.as_mut().expect("opened above");
        let mut pipe = redis::pipe();
        pipe.cmd("ASKING").add_command(cmd.clone());
        // A read blocked there is cut short there.
        *self.opener.target() = asked.unblock.clone();
        let replies = asked.conn.req_packed_commands(&pipe, 0, 2).await;
        *self.opener.target() = self.unblock.clone();
        let mut replies = replies?;
        let reply = replies.pop().unwrap_or(Value::Nil);
        match replies.pop() {
            Some(refused @ Value::ServerError(_)) => Ok(refused),
            _ => Ok(reply),
        }
    }

    /// Closes both connections with `QUIT`, each bounded to 1 s.
    async fn quit(self) {
        for mut conn in std::iter::once(self.owner).chain(self.asked.map(|a| a.conn)) {
            let quit = redis::cmd("QUIT");
            let _ = tokio::time::timeout(QUIT_WITHIN, quit.query_async::<Value>(&mut conn)).await;
        }
    }
}

impl ConnectionLike for ReadConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let reply = self.owner.req_packed_command(cmd).await?;
            match asked_node(&reply) {
                Some(node) if self.opener.connector.is_cluster() => {
                    let node = node.to_owned();
                    self.ask(&node, cmd).await
                }
                _ => {
                    // The owner serves the key (the migration is over, or
                    // was undone): the other node is no longer needed.
                    self.asked = None;
                    Ok(reply)
                }
            }
        })
    }

    /// A pipeline goes to the owner only: no source sends one on its read
    /// connection.
    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.owner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.owner.get_db()
    }
}

impl Lent {
    /// The connection: the open one, or a new one (with its `CLIENT ID`
    /// recorded for the drain).
    ///
    /// # Errors
    /// The connection could not be opened (or its `CLIENT ID` failed with
    /// anything but a refusal).
    pub(crate) async fn get(self) -> Result<ReadConn, Error> {
        match self.conn {
            Some(c) => Ok(c),
            None => self.opener.open().await,
        }
    }
}

impl Reader {
    /// A reader for `key`, named `rillkit:<name parts>` on the server; a
    /// blocked read lasts at most `block`.
    pub(crate) fn new(connector: Connector, key: Arc<str>, name: &[&str], block: Duration) -> Self {
        Reader {
            opener: Opener {
                connector,
                key,
                name: client_name(name).into(),
                block,
                target: Arc::default(),
                refused: Arc::default(),
                detected: None,
            },
            conn: None,
        }
    }

    /// Asks each new connection's server which newer commands it has
    /// (`COMMAND DOCS`), for [`detected`](Self::detected).
    #[must_use]
    pub(crate) fn asking_commands(mut self) -> Self {
        self.opener.detected = Some(Detected::default());
        self
    }

    /// The newer commands the server of the read connection has (all
    /// `false` until a connection was opened, or when not
    /// [asked](Self::asking_commands)), shared: it follows the connection
    /// to a new server.
    pub(crate) fn detected(&self) -> Detected {
        self.opener.detected.clone().unwrap_or_default()
    }

    /// What [`detected`](Self::detected) holds now, read in place.
    pub(crate) fn commands(&self) -> ServerCommands {
        self.opener
            .detected
            .as_ref()
            .map(Detected::get)
            .unwrap_or_default()
    }

    /// The connection for one read, to use inside its future and give back
    /// with [`give_back`](Self::give_back).
    pub(crate) fn lend(&mut self) -> Lent {
        Lent {
            conn: self.conn.take(),
            opener: self.opener.clone(),
        }
    }

    /// A clone of the open connection, while it follows no `ASK`: a read
    /// of new entries may be sent on it behind one in flight, as replies
    /// on one connection come in the order the commands were sent. `None`
    /// while a read holds the connection or none is open.
    pub(crate) fn pipe(&self) -> Option<MultiplexedConnection> {
        self.conn
            .as_ref()
            .filter(|c| c.asked.is_none())
            .map(|c| c.owner.clone())
    }

    /// A read has ended: its connection, or `None` when it broke (then the
    /// next read opens a new one). Answers whether a connection was lost.
    pub(crate) fn give_back(&mut self, conn: Option<ReadConn>) -> bool {
        match conn {
            Some(c) => {
                self.conn = Some(c);
                false
            }
            None => self.forget(),
        }
    }

    /// Forgets the connection (a failover moved the master): the next read
    /// opens a new one. Answers whether one was open.
    pub(crate) fn forget(&mut self) -> bool {
        let had = self.conn.is_some() || self.opener.target().is_some();
        self.conn = None;
        *self.opener.target() = None;
        had
    }

    /// Whether blocked reads cannot be cut short (refused by the server).
    pub(crate) fn unblock_refused(&self) -> bool {
        self.opener.refused.load(Ordering::Relaxed)
    }

    /// `CLIENT UNBLOCK` for the blocked read, on a shared connection, as a
    /// future that notes a refusal; `None` when there is nothing to send
    /// (no connection known, or refused before).
    pub(crate) fn unblock(&self, redis: &Addr<RedisActor>) -> Option<LocalBoxFuture<'static, ()>> {
        if self.unblock_refused() {
            return None;
        }
        let target = self.opener.target().clone()?;
        let req = redis.send(target);
        let (refused, block) = (self.opener.refused.clone(), self.opener.block);
        Some(Box::pin(async move {
            if let Ok(Err(e)) = req.await {
                refuse_unblock(&refused, &e, block);
            }
        }))
    }

    /// Closes the connection with `QUIT` (a broken one is dropped after
    /// 1 s).
    pub(crate) async fn quit(&mut self) {
        *self.opener.target() = None;
        if let Some(conn) = self.conn.take() {
            conn.quit().await;
        }
    }
}

/// Notes that a blocked read cannot be interrupted (`CLIENT UNBLOCK` or
/// `CLIENT ID` refused: ACL, a managed service) when `e` says so, with one
/// WARN: a stop then waits for the read to end by itself, within `block`.
/// Answers whether it did.
fn refuse_unblock(refused: &AtomicBool, e: &Error, block: Duration) -> bool {
    if !matches!(e.class(), Class::Permission | Class::Fatal) {
        return false;
    }
    if !refused.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            error = %e, block_ms = block.as_millis() as u64,
            "blocked reads cannot be interrupted (CLIENT UNBLOCK or CLIENT ID refused); a stop waits for them to end within block"
        );
    }
    true
}
