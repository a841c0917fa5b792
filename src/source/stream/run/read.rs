//! Reads on the dedicated read connection. [`Reading`] owns what reading
//! needs across turns of the loop: the connection, where the next read
//! starts ([`Cursor`]), the reads in flight, their backoff, the failovers
//! announced, `CLIENT UNBLOCK` while a blocked read is cut short, and what
//! a dropped connection taught (entries read one at a time, or in
//! pieces). The loop decides when a read may start and how many entries
//! it asks for, and what a failed read means (reconnect, find the slot's
//! owner again, recreate the group, or end).
//! Over a backlog a second read goes out behind the one in flight (see
//! [`InFlight`]).

use std::cell::Cell;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

use actix::Addr;
use futures::future::LocalBoxFuture;
use tokio::sync::watch;

use super::in_flight::InFlight;
use super::oversize::Oversize;
use super::pel::{PelRead, Read, ReadDone, perform};
use super::{Loop, Subscription};
use crate::connection::Connector;
use crate::delivery::reader::{Reader, UNBLOCK_EVERY, drops_reader};
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
    /// The reads in flight (at most two), in the order sent, and what a
    /// read sent behind another needs.
    in_flight: InFlight,
    /// `true` while the first read is on the wire (not connecting, not
    /// backing off).
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
    /// What reads that lost the connection taught: entries too large to
    /// send whole.
    oversize: Oversize,
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
            in_flight: InFlight::default(),
            on_wire: Rc::new(Cell::new(false)),
            cursor: Cursor::Pending("-".into()),
            retry: Retry::default(),
            delay: None,
            unblock_at: None,
            fresh: true,
            oversize: Oversize::default(),
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
        !self.in_flight.is_empty()
    }

    /// Whether a read is on the wire: a stop must wait for its reply. (A
    /// read sent behind another is on the wire once sent.)
    pub(super) fn on_wire(&self) -> bool {
        self.in_flight
            .first_behind()
            .is_some_and(|behind| behind || self.on_wire.get())
    }

    /// Whether the first read in flight may be blocked on the server (one
    /// sent behind another never blocks).
    pub(super) fn blocking(&self) -> bool {
        self.in_flight.first_behind() == Some(false) && self.on_wire.get()
    }

    /// How many entries the reads in flight asked for.
    pub(super) fn asked(&self) -> usize {
        self.in_flight.asked()
    }

    /// Whether a read of new entries may be sent behind the one in flight
    /// now: that one is a read of new entries on the wire, the last read
    /// came back full, none is failing, the server never dropped the
    /// connection in the middle of a read, and the connection is open and
    /// follows no `ASK`.
    pub(super) fn may_send_behind(&self) -> bool {
        self.in_flight.may_send_behind()
            && self.delay.is_none()
            && self.retry.failures() == 0
            && !self.oversize.dropped()
            && matches!(self.cursor, Cursor::New)
            && self.on_wire()
            && self.unblock_at.is_none()
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

    /// Starts `read` of up to `asked` entries; it gives its connection
    /// back when it ends.
    fn start(&mut self, read: Read, asked: usize, sub: &Subscription) {
        self.in_flight.connection(self.reader.pipe());
        let conn = self.reader.lend();
        let who = (
            sub.names.group.clone(),
            sub.consumer.clone(),
            sub.opts.block,
        );
        let delay = self.delay.take();
        let on_wire = self.on_wire.clone();
        let read = Box::pin(perform(conn, read, delay, on_wire, who));
        self.in_flight.push(read, asked, false);
    }

    /// Sends `cmd`, a read of up to `asked` new entries without `BLOCK`,
    /// behind the read in flight (see [`may_send_behind`](Self::may_send_behind)).
    fn start_behind(&mut self, cmd: redis::Cmd, asked: usize, block: Duration) {
        self.in_flight.send_behind(cmd, asked, block);
    }

    /// Polls the reads once, now: answers the first if it is already done.
    /// A read's command is handed to the connection this way before the
    /// loop runs queued handlers.
    pub(super) async fn poll_now(&mut self) -> Option<ReadDone> {
        std::future::poll_fn(|cx| {
            Poll::Ready(match self.in_flight.poll(cx) {
                Poll::Ready(done) => Some(done),
                Poll::Pending => None,
            })
        })
        .await
    }

    /// A read's result once it is done, in the order the reads were sent,
    /// or a failover announced (only with `failovers`). Pending while
    /// neither is. Cancel-safe.
    pub(super) async fn next(&mut self, failovers: bool) -> ReadEvent {
        std::future::poll_fn(|cx| {
            if let Poll::Ready(done) = self.in_flight.poll(cx) {
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

    /// Stops the reads: one that may be blocked is cut short (`CLIENT
    /// UNBLOCK`, again every 50 ms while it lasts; one sent behind it then
    /// answers at once), one not yet on the wire (connecting, backing off)
    /// is dropped, and one sent behind another is left to answer. Answers
    /// the `CLIENT UNBLOCK` to await beside the loop.
    pub(super) fn stop(&mut self, redis: &Addr<RedisActor>) -> Option<LocalBoxFuture<'static, ()>> {
        if self.blocking() {
            return self.unblock(redis);
        }
        if !self.on_wire() {
            self.in_flight.clear();
        }
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

    /// Drops the reads in flight, whatever their state (the drain deadline
    /// passed).
    pub(super) fn cancel(&mut self) {
        self.in_flight.clear();
    }

    /// Redis answered again (after an outage): a read waiting out its
    /// backoff, or not started for it, starts over now without the delay.
    /// A read on the wire is left alone.
    pub(super) fn retry_now(&mut self) {
        self.delay = None;
        self.retry.succeeded();
        if !self.on_wire() {
            self.in_flight.clear();
        }
    }

    /// A read ended: takes its connection back (or forgets it, when the
    /// read broke it; a read sent behind another gives none back, and
    /// forgets it only when it broke). Answers whether a connection was
    /// lost.
    fn ended(&mut self, done: &mut ReadDone) -> bool {
        self.unblock_at = None;
        if done.result.is_err() {
            self.in_flight.read_full(false);
        }
        if done.behind {
            let broke = matches!(&done.result, Err(e) if drops_reader(e));
            return broke && self.forget();
        }
        match done.conn.take() {
            Some(conn) => {
                self.reader.give_back(Some(conn));
                self.in_flight.connection(self.reader.pipe());
                false
            }
            None => self.forget(),
        }
    }

    /// Forgets the read connection: the next read opens a new one (to the
    /// master of the moment) and first re-reads this consumer's own pending
    /// entries, which a failover or a restart from a snapshot may have put
    /// back in its PEL. Answers whether one was open.
    pub(super) fn forget(&mut self) -> bool {
        self.cursor = Cursor::Pending("-".into());
        self.in_flight.connection(None);
        self.in_flight.read_full(false);
        self.reader.forget()
    }

    /// A failover was announced: the reads in flight are dropped (what they
    /// had fetched is in this consumer's PEL and is re-read first), and the
    /// next read goes to the new master at once. Answers whether a
    /// connection was lost.
    fn on_failover(&mut self) -> bool {
        if !self.in_flight.is_empty() {
            self.in_flight.clear();
            self.on_wire.set(false);
            self.unblock_at = None;
        }
        self.delay = None;
        self.forget()
    }

    /// A read of up to `asked` entries succeeded with `entries` (for a
    /// re-read of its own PEL, `pel`: the last pending entry it looked at,
    /// `None` past the last): the cursor moves on, and the newest id seen
    /// is kept.
    fn advanced(&mut self, entries: &[Delivered], asked: usize, pel: Option<Option<EntryId>>) {
        self.retry.succeeded();
        if pel.is_none() {
            self.in_flight.read_full(entries.len() >= asked.max(1));
        }
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
                self.oversize.pel_read();
            }
            None => {}
        }
        self.oversize.received(entries);
    }

    /// What reads that lost the connection taught.
    pub(super) fn oversize(&mut self) -> &mut Oversize {
        &mut self.oversize
    }

    /// The closing `QUIT`, bounded to 1 s.
    pub(super) async fn quit(&mut self) {
        self.reader.quit().await;
    }
}

impl Loop {
    /// Whether a second read may ever be sent behind the one in flight: a
    /// plain stream (no partition's fence, no key gate) whose reads nothing
    /// paces.
    pub(super) fn pipelines(&self) -> bool {
        self.fence.is_none() && self.gate.is_none() && self.handlers.unpaced()
    }

    /// Starts a read of up to `count` entries: new ones, or a page of this
    /// consumer's own PEL; with a read in flight, new ones behind it (see
    /// [`Reading::may_send_behind`]).
    pub(super) fn start_read(&mut self, count: usize) {
        let s = &self.sub;
        let r = &self.reading;
        if r.is_reading() {
            let mut cmd = redis::cmd("XREADGROUP");
            cmd.arg("GROUP")
                .arg(&*s.names.group)
                .arg(&*s.consumer)
                .arg("COUNT")
                .arg(count)
                .arg("STREAMS")
                .arg(&*s.names.name)
                .arg(">");
            let block = s.opts.block;
            return self.reading.start_behind(cmd, count, block);
        }
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
                one_at_a_time: r.oversize.one_at_a_time(),
                in_pieces: r.oversize.in_pieces(),
                fence: self.fence.clone(),
            }),
        };
        self.reading.start(read, count, &self.sub);
    }

    pub(super) fn on_read(&mut self, mut done: ReadDone) {
        if done.late {
            self.stall.trouble();
        } else if done.result.is_ok() {
            self.stall.answered();
        }
        if self.reading.ended(&mut done) {
            self.metrics.reconnects.increment(1);
        }
        let entries = match done.result {
            Ok(e) => e,
            Err(e) if done.behind => return self.behind_failed(&e),
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
        if done.behind && self.left_for_reread(&entries) {
            return;
        }
        self.reading.advanced(&entries, done.asked, done.pel);
        self.enqueue(entries);
        if self.drain.is_some() {
            self.hand_back();
        }
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
