//! Reads on the dedicated read connection. [`Reading`] owns what reading
//! needs across turns of the loop: the connection, where the next read
//! starts ([`Cursor`]), the read in flight, its backoff, the failovers
//! announced, `CLIENT UNBLOCK` while a blocked read is cut short, and what
//! a dropped connection taught (entries read one at a time, or in
//! pieces). The loop decides when a read may start and how many entries
//! it asks for, and what a failed read means (reconnect, find the slot's
//! owner again, recreate the group, or end).

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

use actix::Addr;
use futures::future::LocalBoxFuture;
use tokio::sync::watch;

use super::pel::{PelRead, Read, ReadDone, perform};
use super::{Loop, Subscription};
use crate::connection::Connector;
use crate::delivery::reader::{ReadConn, Reader, UNBLOCK_EVERY};
use crate::error::{Class, Error};
use crate::redis::commands::ServerCommands;
use crate::redis::reply::Delivered;
use crate::redis::{CreateGroup, RedisActor};
use crate::stream::EntryId;
use crate::util::{Retry, log_wait};

/// Where the next read starts: our own pending entries from an `XPENDING`
/// start (`-`, `(<id>`, `<id>`), or new entries (`>`).
#[derive(Clone)]
pub(super) enum Cursor {
    Pending(String),
    New,
}

/// What [`Reading::next`] saw. (Moved once per read: boxing the read's
/// result would cost an allocation per read instead.)
#[allow(clippy::large_enum_variant)]
pub(super) enum ReadEvent {
    Done(ReadDone),
    Failover,
}

/// Resolves when `epoch` changes (a failover was announced), with it; never
/// when its sender is gone.
fn failover_of(mut epoch: watch::Receiver<u64>) -> LocalBoxFuture<'static, watch::Receiver<u64>> {
    Box::pin(async move {
        if epoch.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
        epoch
    })
}

pub(super) struct Reading {
    reader: Reader,
    /// Where Redis is: a failed read may say the stream's slot moved.
    connector: Connector,
    /// Resolves when a failover is announced (the read connection moves),
    /// with the receiver to watch for the next one.
    failover: LocalBoxFuture<'static, watch::Receiver<u64>>,
    /// The read in flight.
    in_flight: Option<LocalBoxFuture<'static, ReadDone>>,
    /// `true` while a read is on the wire (not connecting, not backing off).
    on_wire: Rc<Cell<bool>>,
    cursor: Cursor,
    /// Failed reads in a row, with their backoff.
    retry: Retry,
    /// How long the next read waits first (after a failed one).
    delay: Option<Duration>,
    /// When to send (again) CLIENT UNBLOCK to the blocked read.
    unblock_at: Option<tokio::time::Instant>,
    /// Until its first re-read of its own PEL is done.
    fresh: bool,
    /// The server dropped the read connection in the middle of a read: the
    /// re-read of its own PEL takes one entry at a time, so an entry the
    /// server cannot send is found.
    careful: bool,
    /// Entries whose one-entry fetch lost the read connection, and how many
    /// times; at `max_failed_sends` an entry is dead-lettered by id.
    failed_sends: HashMap<EntryId, u32>,
    /// The newest entry id a read brought this loop (new entries, or a
    /// page of its own PEL): a partition's fenced read checks that the PEL
    /// holds nothing newer it never received.
    newest: Option<EntryId>,
}

impl Reading {
    pub(super) fn new(reader: Reader, connector: Connector) -> Self {
        Reading {
            reader,
            failover: failover_of(connector.epoch()),
            connector,
            in_flight: None,
            on_wire: Rc::new(Cell::new(false)),
            cursor: Cursor::Pending("-".into()),
            retry: Retry::default(),
            delay: None,
            unblock_at: None,
            fresh: true,
            careful: false,
            failed_sends: HashMap::new(),
            newest: None,
        }
    }

    /// The newer commands the read connection's server has (none before
    /// the first connection).
    pub(super) fn server(&self) -> ServerCommands {
        self.reader.commands()
    }

    /// Whether a read is in flight (connecting, backing off or on the wire).
    pub(super) fn is_reading(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Whether a read is on the wire: a stop must wait for its reply.
    pub(super) fn on_wire(&self) -> bool {
        self.in_flight.is_some() && self.on_wire.get()
    }

    pub(super) fn cursor(&self) -> &Cursor {
        &self.cursor
    }

    /// The next read re-reads this consumer's PEL from the start.
    pub(super) fn rewind(&mut self) {
        self.cursor = Cursor::Pending("-".into());
    }

    /// Idle entries were claimed for this consumer, the first of them
    /// `first`: the next read fetches them as a re-read of its own PEL from
    /// there, or from the start if a re-read is under way (it may be past
    /// them).
    pub(super) fn claimed(&mut self, first: &EntryId) {
        self.cursor = match self.cursor {
            Cursor::New => Cursor::Pending(first.to_string()),
            Cursor::Pending(_) => Cursor::Pending("-".into()),
        };
    }

    /// When to send `CLIENT UNBLOCK` again, while a blocked read is cut
    /// short.
    pub(super) fn unblock_at(&self) -> Option<tokio::time::Instant> {
        self.unblock_at
    }

    /// Whether a blocked read is being cut short.
    pub(super) fn unblocking(&self) -> bool {
        self.unblock_at.is_some()
    }

    /// Starts `read`; it gives its connection back when it ends.
    fn start(&mut self, read: Read, sub: &Subscription) {
        let conn = self.reader.lend();
        let who = (
            sub.names.group.clone(),
            sub.consumer.clone(),
            sub.opts.block,
        );
        let delay = self.delay.take();
        let on_wire = self.on_wire.clone();
        self.in_flight = Some(Box::pin(perform(conn, read, delay, on_wire, who)));
    }

    /// Polls the read once, now: answers it if it is already done. Its
    /// command is handed to the connection this way before the loop runs
    /// queued handlers.
    pub(super) async fn poll_now(&mut self) -> Option<ReadDone> {
        let read = self.in_flight.as_mut()?;
        let std::task::Poll::Ready(done) = futures::poll!(read.as_mut()) else {
            return None;
        };
        self.in_flight = None;
        Some(done)
    }

    /// The read's result once it is done, or a failover announced (only
    /// with `failovers`). Pending while neither is. Cancel-safe.
    pub(super) async fn next(&mut self, failovers: bool) -> ReadEvent {
        std::future::poll_fn(|cx| {
            if let Some(read) = self.in_flight.as_mut()
                && let Poll::Ready(done) = read.as_mut().poll(cx)
            {
                self.in_flight = None;
                return Poll::Ready(ReadEvent::Done(done));
            }
            if failovers && let Poll::Ready(epoch) = self.failover.as_mut().poll(cx) {
                self.failover = failover_of(epoch);
                return Poll::Ready(ReadEvent::Failover);
            }
            Poll::Pending
        })
        .await
    }

    /// Stops the read: one on the wire is cut short (`CLIENT UNBLOCK`,
    /// again every 50 ms while it lasts), one not yet on the wire
    /// (connecting, backing off) is dropped. Answers the `CLIENT UNBLOCK`
    /// to await beside the loop.
    pub(super) fn stop(&mut self, redis: &Addr<RedisActor>) -> Option<LocalBoxFuture<'static, ()>> {
        self.in_flight.as_ref()?;
        if self.on_wire.get() {
            return self.unblock(redis);
        }
        self.in_flight = None;
        None
    }

    /// Interrupts the blocked read (CLIENT UNBLOCK on a shared connection)
    /// and schedules another try, in case the read reached the server only
    /// after this one.
    ///
    /// `CLIENT UNBLOCK` is `@admin`, and some managed services refuse it:
    /// then (one WARN) the read is left to end by itself within `block`.
    pub(super) fn unblock(
        &mut self,
        redis: &Addr<RedisActor>,
    ) -> Option<LocalBoxFuture<'static, ()>> {
        if self.reader.unblock_refused() {
            self.unblock_at = None;
            return None;
        }
        self.unblock_at = Some(tokio::time::Instant::now() + UNBLOCK_EVERY);
        self.reader.unblock(redis)
    }

    /// Drops the read in flight, whatever its state (the drain deadline
    /// passed).
    pub(super) fn cancel(&mut self) {
        self.in_flight = None;
    }

    /// Redis answered again (after an outage): a read waiting out its
    /// backoff, or not started for it, starts over now without the delay.
    /// A read on the wire is left alone.
    pub(super) fn retry_now(&mut self) {
        self.delay = None;
        self.retry.succeeded();
        if self.in_flight.is_some() && !self.on_wire.get() {
            self.in_flight = None;
        }
    }

    /// A read ended: takes its connection back (or forgets it, when the
    /// read broke it). Answers whether a connection was lost.
    fn ended(&mut self, conn: Option<ReadConn>) -> bool {
        self.unblock_at = None;
        match conn {
            Some(conn) => self.reader.give_back(Some(conn)),
            None => self.forget(),
        }
    }

    /// Forgets the read connection: the next read opens a new one (to the
    /// master of the moment) and first re-reads this consumer's own pending
    /// entries, which a failover or a restart from a snapshot may have put
    /// back in its PEL. Answers whether one was open.
    pub(super) fn forget(&mut self) -> bool {
        self.cursor = Cursor::Pending("-".into());
        self.reader.forget()
    }

    /// A failover was announced: a read in flight is dropped (whatever it
    /// had fetched is in this consumer's PEL and is re-read first), and the
    /// next read goes to the new master at once. Answers whether a
    /// connection was lost.
    fn on_failover(&mut self) -> bool {
        if self.in_flight.is_some() {
            self.in_flight = None;
            self.on_wire.set(false);
            self.unblock_at = None;
        }
        self.delay = None;
        self.forget()
    }

    /// A read succeeded with `entries` (for a re-read of its own PEL,
    /// `pel`: the last pending entry it looked at, `None` past the last):
    /// the cursor moves on, and the newest id seen is kept.
    fn advanced(&mut self, entries: &[Delivered], pel: Option<Option<EntryId>>) {
        self.retry.succeeded();
        let newest = entries.iter().map(|d| &d.raw.id);
        let newest = match &pel {
            Some(Some(last)) => newest
                .chain(std::iter::once(last))
                .max_by_key(|id| id.parts()),
            _ => newest.max_by_key(|id| id.parts()),
        };
        if let Some(id) = newest
            && self.newest.as_ref().is_none_or(|n| n.parts() < id.parts())
        {
            self.newest = Some(id.clone());
        }
        match pel {
            Some(Some(last)) => self.cursor = Cursor::Pending(format!("({last}")),
            Some(None) => {
                self.cursor = Cursor::New;
                self.fresh = false;
                self.careful = false;
            }
            None => {}
        }
        if !self.failed_sends.is_empty() {
            for d in entries {
                self.failed_sends.remove(&d.raw.id);
            }
        }
    }

    /// The server dropped the read connection in the middle of a read:
    /// re-read its own PEL one entry at a time from now on; if one entry
    /// was alone on the wire (`fetching`), count it. Answers it and how
    /// many times it failed so, once that reaches `max`, forgetting it.
    fn failed_send(
        &mut self,
        fetching: Option<(EntryId, u64)>,
        max: u32,
    ) -> Option<(EntryId, u64, u32)> {
        self.careful = true;
        let (id, run) = fetching?;
        let times = self.failed_sends.entry(id.clone()).or_default();
        *times += 1;
        let times = *times;
        if times >= max {
            self.failed_sends.remove(&id);
        }
        Some((id, run, times))
    }

    /// The closing `QUIT`, bounded to 1 s.
    pub(super) async fn quit(&mut self) {
        self.reader.quit().await;
    }
}

impl Loop {
    /// Starts a read of up to `count` entries: new ones, or a page of this
    /// consumer's own PEL.
    pub(super) fn start_read(&mut self, count: usize) {
        let s = &self.sub;
        let r = &self.reading;
        let read = match r.cursor() {
            Cursor::New if self.fence.is_some() => {
                let fence = self.fence.clone().expect("checked");
                Read::Fenced(fence, count, s.opts.block, r.newest.clone())
            }
            Cursor::New => {
                let mut cmd = redis::cmd("XREADGROUP");
                cmd.arg("GROUP")
                    .arg(&*s.names.group)
                    .arg(&*s.consumer)
                    .arg("COUNT")
                    .arg(count);
                if !self.handlers.pace().probes() {
                    cmd.arg("BLOCK").arg(s.opts.block.as_millis() as u64);
                }
                // The group's idle pending entries first, in the same read
                // (`XREADGROUP … CLAIM`).
                if self.claim_with_read() {
                    cmd.arg("CLAIM").arg(s.opts.claim_idle.as_millis() as u64);
                    self.reclaim.room_made();
                }
                cmd.arg("STREAMS").arg(&*s.names.name).arg(">");
                Read::New(cmd)
            }
            Cursor::Pending(start) => Read::Pel(PelRead {
                stream: s.names.name.clone(),
                group: s.names.group.clone(),
                consumer: s.consumer.clone(),
                start: start.clone(),
                count,
                // Skip what it holds (entries waiting for their retry
                // included); on a fresh start count a run for everything (a
                // crash in an earlier life).
                held: self.held.clone(),
                fresh: r.fresh,
                one_at_a_time: r.careful,
                in_pieces: r.failed_sends.keys().cloned().collect::<HashSet<_>>(),
                fence: self.fence.clone(),
            }),
        };
        self.reading.start(read, &self.sub);
    }

    pub(super) fn on_read(&mut self, done: ReadDone) {
        if done.late {
            self.stall.trouble();
        } else if done.result.is_ok() {
            self.stall.answered();
        }
        if self.reading.ended(done.conn) {
            self.metrics.reconnects.increment(1);
        }
        let entries = match done.result {
            Ok(e) => e,
            Err(e) => {
                self.handlers.pace().read_ended(None, done.pel.is_none());
                if e.closed_after_accept() {
                    self.on_failed_send(done.fetching);
                }
                return self.on_read_error(e);
            }
        };
        self.sub.board.read_ok();
        let entries = if done.late && done.pel.is_none() && self.claims_in_read() {
            self.give_back_late_claims(entries)
        } else {
            entries
        };
        self.handlers
            .pace()
            .read_ended(Some(entries.len()), done.pel.is_none());
        let claimed = entries.iter().filter(|d| d.delivery_count > 1).count();
        if claimed > 0 && done.pel.is_none() {
            tracing::info!(
                stream = %self.sub.names.name, consumer = %self.sub.consumer, entries = claimed,
                "claimed idle pending entries with the read"
            );
        }
        if done.strays {
            tracing::warn!(stream = %self.sub.names.name, consumer = %self.sub.consumer, "this consumer's pending entries hold entries it never received (a read of this process that reached Redis late); re-reading them first");
            self.reading.rewind();
        }
        self.reading.advanced(&entries, done.pel);
        self.enqueue(entries);
        if self.drain.is_some() {
            self.hand_back();
        }
    }

    /// The server dropped the read connection in the middle of a read (a
    /// reply that outgrew the client's output buffer, or a close for any
    /// other reason): re-read its own PEL one entry at a time from now on;
    /// if one entry was alone on the wire, count it (its next read is in
    /// pieces), and at `max_failed_sends` move it to the dead-letter stream
    /// by id.
    fn on_failed_send(&mut self, fetching: Option<(EntryId, u64)>) {
        let max = self.sub.opts.max_failed_sends;
        let Some((id, run, times)) = self.reading.failed_send(fetching, max) else {
            return;
        };
        let (stream, consumer) = (&self.sub.names.name, &self.sub.consumer);
        if times < max {
            tracing::warn!(
                %stream, %consumer, %id, times,
                "the server dropped the read connection while sending this entry (larger than it may send one client?); reading it in pieces"
            );
            return;
        }
        tracing::error!(
            %stream, %consumer, %id, times, dlq = %self.sub.names.dlq,
            "the server cannot send this entry (larger than its output buffer for a client allows: client-output-buffer-limit normal, maxmemory-clients); moving it to the dead-letter stream by id"
        );
        let error = format!(
            "the server dropped the read connection {times} times while sending this entry              ({{entry_bytes}} bytes): it is larger than the server lets one reply to a client be              (client-output-buffer-limit normal, maxmemory-clients), also when read in pieces; dead-lettered by id without being read"
        );
        self.dead_letter_by_id(id, run, error);
    }

    pub(super) fn on_read_error(&mut self, e: Error) {
        self.stall.trouble();
        let (delay, log) = self.reading.retry.failed();
        let failures = self.reading.retry.failures();
        let mut class = e.class();
        if class == Class::GroupGone
            && self.reading.connector.is_cluster()
            && e.code() == Some("UNBLOCKED")
        {
            // In a cluster a blocked read is cut short this way when a slot
            // migration takes its key away (MIGRATE deletes it here): find
            // the slot's owner again. A stream really deleted answers
            // NOGROUP there, and its group is created again then.
            class = Class::Routing;
        }
        if class == Class::LeaseLost {
            return self.give_up(&e.to_string());
        }
        if !class.is_transient() {
            tracing::error!(stream = %self.sub.names.name, consumer = %self.sub.consumer, error = %e, "read failed; consumer ends");
            self.report.error = Some(e);
            // Stop reading now; what runs gets the usual drain deadline.
            self.begin_drain(Instant::now() + self.sub.drain_timeout);
            return;
        }
        if self.drain.is_some() {
            return;
        }
        self.sub.board.read_failed(&e.to_string());
        self.reading.delay = Some(delay);
        if class == Class::Routing {
            // The stream's slot moved (a reshard) or is moving: the read
            // connection was dropped; the next one goes to the slot's owner
            // and re-reads this consumer's pending entries first.
            self.reading.connector.redirected(&e);
            if log {
                let (stream, consumer) = (&self.sub.names.name, &self.sub.consumer);
                tracing::info!(
                    %stream, %consumer, answer = %e, failures,
                    retry_in_ms = delay.as_millis() as u64,
                    "the stream's hash slot moved or its master changed; reading from its owner now"
                );
            }
            return;
        }
        if log {
            let (stream, consumer) = (&self.sub.names.name, &self.sub.consumer);
            log_wait!(
                class,
                %stream, %consumer, error = %e, failures,
                retry_in_ms = delay.as_millis() as u64,
                "read failed; retrying"
            );
        }
        if class == Class::GroupGone {
            // The stream or the group is gone (deleted, FLUSHALL, a restart
            // without persistence): create it again from the start.
            let names = &self.sub.names;
            self.redis.do_send(CreateGroup {
                stream: names.name.clone(),
                group: names.group.clone(),
                start_id: "0".into(),
            });
            self.reading.rewind();
        }
    }

    /// Cuts the blocked read short (see [`Reading::unblock`]).
    pub(super) fn unblock(&mut self) {
        if let Some(sent) = self.reading.unblock(&self.redis) {
            self.side.push(sent);
        }
    }

    /// Stops the read at a drain or a pause (see [`Reading::stop`]).
    pub(super) fn stop_read(&mut self) {
        if let Some(sent) = self.reading.stop(&self.redis) {
            self.side.push(sent);
        }
    }

    /// A failover was announced: cut the read short and move to the new
    /// master.
    pub(super) fn on_failover(&mut self) {
        tracing::info!(stream = %self.sub.names.name, consumer = %self.sub.consumer, "failover announced; moving the read connection to the new master");
        if self.reading.on_failover() {
            self.metrics.reconnects.increment(1);
        }
    }
}
