//! The list consumer's pops, on its own read connection: `BLMOVE` with the
//! run counted (`POP_COUNTED`, or `BLMOVE` then `HINCRBY`), `BRPOP` at most
//! once, an item too large to send whole read in pieces; what a failed pop
//! means (reconnect, find the key's owner again, or end).

use std::time::Duration;

use redis::Value;

use super::{Loop, ReadDone};
use crate::delivery::reader::{ReadConn, drops_reader, late};
use crate::error::{Class, Error};
use crate::redis::chunked::{self, CHUNK_BYTES};
use crate::source::list::ListSub;
use crate::source::list::scripts::{ITEM_PIECE, POP_COUNTED};
use crate::util::{Alarm, Retry};

impl Loop {
    pub(super) fn start_read(&mut self) {
        let sub = self.sub.clone();
        // As many as the free handler slots, or the room for batches (a
        // blocking pop brings one).
        let room = self.pop_room();
        let conn = self.reader.lend();
        // While a failed item waits, a pop waits no longer than until it is
        // due (a blocking pop's timeout of 0 would wait forever).
        let block = match self.waiting.next_due() {
            Some(due) => due
                .saturating_duration_since(tokio::time::Instant::now())
                .clamp(Duration::from_millis(10), sub.opts.block),
            None => sub.opts.block,
        };
        self.read = Some(Box::pin(async move {
            let mut conn = match conn.get().await {
                Ok(c) => c,
                Err(e) => return (None, Err(e), false),
            };
            let sent = tokio::time::Instant::now();
            let item = if sub.opts.at_most_once {
                redis::cmd("BRPOP")
                    .arg(&*sub.keys.list)
                    .arg(block.as_secs_f64())
                    .query_async::<Option<(Vec<u8>, Vec<u8>)>>(&mut conn)
                    .await
                    .map(|popped| {
                        popped
                            .map(|(_, item)| (item, Some(1)))
                            .into_iter()
                            .collect()
                    })
                    .map_err(Error::from_redis)
            } else {
                pop_counted(&mut conn, &sub, block, room).await
            };
            (Some(conn), item, late(sent, block))
        }));
    }

    pub(super) fn on_read(&mut self, (conn, r, late): ReadDone) {
        self.reader.give_back(conn);
        if late {
            self.liveness.stall().trouble();
        } else if r.is_ok() {
            self.liveness.stall().answered();
        }
        match r {
            Ok(item) => {
                self.backoff.down = false;
                if self.backoff.retry.succeeded() > 0 {
                    tracing::info!(list = %self.sub.keys.list, "list reads work again");
                }
                self.sub.board.read_ok();
                for (item, counted) in item {
                    self.take(item, 0, counted);
                }
            }
            Err(e) => self.on_read_error(e),
        }
    }

    pub(super) fn on_read_error(&mut self, e: Error) {
        let class = e.class();
        if class == Class::Fatal {
            tracing::error!(list = %self.sub.keys.list, error = %e, "the list cannot be read; the consumer ends");
            self.fatal = Some(e);
            return;
        }
        if drops_reader(&e) {
            self.reader.forget();
            self.reconcile.due = self.reliable();
            self.backoff.down = true;
            if class == Class::Routing {
                self.connector.redirected(&e);
            }
        }
        self.liveness.stall().trouble();
        self.sub.board.read_failed(&e.to_string());
        let (delay, log) = self.backoff.retry.failed();
        if log {
            if class.is_configuration() {
                tracing::error!(list = %self.sub.keys.list, error = %e, retry_in_ms = delay.as_millis() as u64, failures = self.backoff.retry.failures(), "list read refused; retrying");
            } else {
                tracing::warn!(list = %self.sub.keys.list, error = %e, retry_in_ms = delay.as_millis() as u64, failures = self.backoff.retry.failures(), "list read failed; retrying");
            }
        }
        self.backoff.at = Some(tokio::time::Instant::now() + delay);
    }
}

/// The pop's backoff: after a failed pop (or put-back), the next one waits
/// until `at`.
pub(super) struct Backoff {
    pub(super) retry: Retry,
    pub(super) at: Option<tokio::time::Instant>,
    pub(super) alarm: Alarm,
    /// The last pop failed on the connection (an outage): a confirmed
    /// heartbeat ends the wait early.
    pub(super) down: bool,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            retry: Retry::default(),
            at: None,
            alarm: Alarm::new(),
            down: false,
        }
    }
}

/// One reliable pop: `POP_COUNTED` (up to `room` items moved and counted
/// in one script) while the list has items; on an empty list, `BLMOVE` for
/// up to `block`, then the count (`HINCRBY`) on the same connection. A count
/// that fails is left to the run (`None`).
async fn pop_counted(
    conn: &mut ReadConn,
    sub: &ListSub,
    block: Duration,
    room: usize,
) -> Result<Vec<(Vec<u8>, Option<u64>)>, Error> {
    let k = &sub.keys;
    let ready: Vec<Value> = POP_COUNTED
        .key(&*k.list)
        .key(&k.processing)
        .key(&k.attempts)
        .arg(room.max(1))
        .arg(CHUNK_BYTES)
        .invoke_async(conn)
        .await
        .map_err(Error::from_redis)?;
    if !ready.is_empty() {
        let mut items = Vec::with_capacity(ready.len() / 2);
        let mut it = ready.into_iter();
        while let (Some(item), Some(n)) = (it.next(), it.next()) {
            let item: Vec<u8> = match item {
                // Too large to be sent whole: at the head of the
                // processing list, read in pieces.
                Value::Array(len) => {
                    let len: Vec<usize> = redis::from_redis_value(Value::Array(len))
                        .map_err(|e| Error::unparsable("a list pop", e.to_string()))?;
                    read_in_pieces(conn, &k.processing, len.first().copied().unwrap_or(0)).await?
                }
                item => redis::from_redis_value(item)
                    .map_err(|e| Error::unparsable("a list pop", e.to_string()))?,
            };
            items.push((item, redis::from_redis_value::<u64>(n).ok()));
        }
        return Ok(items);
    }
    let item: Option<Vec<u8>> = redis::cmd("BLMOVE")
        .arg(&*k.list)
        .arg(&k.processing)
        .arg("RIGHT")
        .arg("LEFT")
        .arg(block.as_secs_f64())
        .query_async(conn)
        .await
        .map_err(Error::from_redis)?;
    let Some(item) = item else {
        return Ok(Vec::new());
    };
    let n: Option<u64> = redis::cmd("HINCRBY")
        .arg(&k.attempts)
        .arg(item.as_slice())
        .arg(1)
        .query_async(conn)
        .await
        .ok();
    Ok(vec![(item, n)])
}

/// The item at the head of `processing` (`len` bytes), read in pieces.
///
/// # Errors
/// What the server answered, or an item that is gone or changed meanwhile
/// (only this loop pushes onto its processing list, so neither happens
/// unless someone else touches it).
async fn read_in_pieces(
    conn: &mut ReadConn,
    processing: &str,
    len: usize,
) -> Result<Vec<u8>, Error> {
    let what = format!("the item at the head of {processing} ({len} bytes)");
    match chunked::read_in_pieces(conn, &ITEM_PIECE, processing, "0", &what).await? {
        Some((lens, item)) if lens == [len] => Ok(item),
        _ => Err(Error::unparsable(
            "a list item piece",
            format!("{what} changed or went while it was read"),
        )),
    }
}
