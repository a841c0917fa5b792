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
//! When `CLIENT ID` or `CLIENT UNBLOCK` is refused (an ACL, a managed
//! service), reads work all the same; one WARN says that a stop then waits
//! for a blocked read to end by itself, within `block`.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use futures::future::LocalBoxFuture;
use redis::aio::MultiplexedConnection;

use crate::connection::{Connector, READ_TIMEOUT_MARGIN, client_name};
use crate::error::{Class, Error};
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
/// the wrong server: broken, demoted, the slot moved elsewhere (`MOVED`,
/// `ASK`), or its key gone (`UNBLOCKED`, which in a cluster is a migration).
pub(crate) fn drops_reader(e: &Error) -> bool {
    matches!(
        e.class(),
        Class::Connection | Class::RoleChange | Class::Routing | Class::GroupGone
    )
}

/// One source's read connection. See the module docs.
pub(crate) struct Reader {
    connector: Connector,
    /// The key whose master (or slot owner) the connection goes to.
    key: Arc<str>,
    /// The connection's `CLIENT SETNAME`.
    name: Arc<str>,
    block: Duration,
    /// The open connection while no read holds it.
    conn: Option<MultiplexedConnection>,
    /// How to cut the open connection's blocked read short, set by the read
    /// that opened it.
    target: Rc<RefCell<Option<Unblock>>>,
    /// `CLIENT ID` or `CLIENT UNBLOCK` was refused: reads are not cut short.
    refused: Rc<Cell<bool>>,
}

/// The connection a read runs on, taken from its [`Reader`]: the open one,
/// or what it takes to open one inside the read's future.
pub(crate) struct Lent {
    conn: Option<MultiplexedConnection>,
    connector: Connector,
    key: Arc<str>,
    name: Arc<str>,
    block: Duration,
    target: Rc<RefCell<Option<Unblock>>>,
    refused: Rc<Cell<bool>>,
}

impl Lent {
    /// The connection: the open one, or a new one (with its `CLIENT ID`
    /// recorded for the drain).
    ///
    /// # Errors
    /// The connection could not be opened (or its `CLIENT ID` failed with
    /// anything but a refusal).
    pub(crate) async fn get(self) -> Result<MultiplexedConnection, Error> {
        if let Some(c) = self.conn {
            return Ok(c);
        }
        let (mut conn, node) = self
            .connector
            .connect_reader(&self.key, self.block + READ_TIMEOUT_MARGIN, &self.name)
            .await?;
        let id: Result<i64, Error> = redis::cmd("CLIENT")
            .arg("ID")
            .query_async(&mut conn)
            .await
            .map_err(Error::from_redis);
        match id {
            Ok(id) => *self.target.borrow_mut() = Some(Unblock { id, node }),
            Err(e) if refuse_unblock(&self.refused, &e, self.block) => {
                *self.target.borrow_mut() = None;
            }
            Err(e) => return Err(e),
        }
        Ok(conn)
    }
}

impl Reader {
    /// A reader for `key`, named `rillkit:<name parts>` on the server; a
    /// blocked read lasts at most `block`.
    pub(crate) fn new(connector: Connector, key: Arc<str>, name: &[&str], block: Duration) -> Self {
        Reader {
            connector,
            key,
            name: client_name(name).into(),
            block,
            conn: None,
            target: Rc::default(),
            refused: Rc::default(),
        }
    }

    /// The connection for one read, to use inside its future and give back
    /// with [`give_back`](Self::give_back).
    pub(crate) fn lend(&mut self) -> Lent {
        Lent {
            conn: self.conn.take(),
            connector: self.connector.clone(),
            key: self.key.clone(),
            name: self.name.clone(),
            block: self.block,
            target: self.target.clone(),
            refused: self.refused.clone(),
        }
    }

    /// A read has ended: its connection, or `None` when it broke (then the
    /// next read opens a new one). Answers whether a connection was lost.
    pub(crate) fn give_back(&mut self, conn: Option<MultiplexedConnection>) -> bool {
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
        let had = self.conn.is_some() || self.target.borrow().is_some();
        self.conn = None;
        *self.target.borrow_mut() = None;
        had
    }

    /// Whether blocked reads cannot be cut short (refused by the server).
    pub(crate) fn unblock_refused(&self) -> bool {
        self.refused.get()
    }

    /// `CLIENT UNBLOCK` for the blocked read, on a shared connection, as a
    /// future that notes a refusal; `None` when there is nothing to send
    /// (no connection known, or refused before).
    pub(crate) fn unblock(&self, redis: &Addr<RedisActor>) -> Option<LocalBoxFuture<'static, ()>> {
        if self.refused.get() {
            return None;
        }
        let target = self.target.borrow().clone()?;
        let req = redis.send(target);
        let (refused, block) = (self.refused.clone(), self.block);
        Some(Box::pin(async move {
            if let Ok(Err(e)) = req.await {
                refuse_unblock(&refused, &e, block);
            }
        }))
    }

    /// Closes the connection with `QUIT` (a broken one is dropped after
    /// 1 s).
    pub(crate) async fn quit(&mut self) {
        *self.target.borrow_mut() = None;
        if let Some(mut conn) = self.conn.take() {
            let quit = redis::cmd("QUIT");
            let _ = tokio::time::timeout(QUIT_WITHIN, quit.query_async::<redis::Value>(&mut conn))
                .await;
        }
    }
}

/// Notes that a blocked read cannot be interrupted (`CLIENT UNBLOCK` or
/// `CLIENT ID` refused: ACL, a managed service) when `e` says so, with one
/// WARN: a stop then waits for the read to end by itself, within `block`.
/// Answers whether it did.
fn refuse_unblock(refused: &Cell<bool>, e: &Error, block: Duration) -> bool {
    if !matches!(e.class(), Class::Permission | Class::Fatal) {
        return false;
    }
    if !refused.replace(true) {
        tracing::warn!(
            error = %e, block_ms = block.as_millis() as u64,
            "blocked reads cannot be interrupted (CLIENT UNBLOCK or CLIENT ID refused); a stop waits for them to end within block"
        );
    }
    true
}
