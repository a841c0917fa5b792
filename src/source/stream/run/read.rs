//! Reads: new entries (`XREADGROUP … >`) and pages of this consumer's own
//! PEL, on the dedicated read connection; what a failed read means
//! (reconnect, find the slot's owner again, recreate the group, or end);
//! interrupting a blocked read at a drain (`CLIENT UNBLOCK`) and dropping
//! the connection at a failover.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use super::Loop;
use crate::delivery::reader::{ReadConn, UNBLOCK_EVERY, drops_reader, late};
use crate::error::{Class, Error};
use crate::redis::reply::Delivered;
use crate::redis::{CreateGroup, chunked, reply};
use crate::source::stream::ordered::{Fence, FencedRead};
use crate::stream::EntryId;
use crate::util::log_wait;

/// What one read produced.
pub(super) struct ReadDone {
    pub(super) conn: Option<ReadConn>,
    /// For a re-read of its own PEL: the last pending entry it looked at
    /// (`None`: it is past the last one).
    pub(super) pel: Option<Option<EntryId>>,
    pub(super) result: Result<Vec<Delivered>, Error>,
    /// The reply came much later than `block` allows: the server stalled.
    pub(super) late: bool,
    /// The one pending entry (and the delivery count of its run) whose
    /// fetch was on the wire when the read failed.
    pub(super) fetching: Option<(EntryId, u64)>,
    /// A fenced read found entries in this consumer's PEL that the loop
    /// does not know of (see [`FencedRead::Strays`]).
    pub(super) strays: bool,
}

/// The read to send: new entries, or a page of this consumer's own PEL.
pub(super) enum Read {
    New(redis::Cmd),
    /// New entries of a partition, fenced by its lease: the fence, the
    /// count, the block, the newest entry the loop knows of.
    Fenced(Fence, usize, Duration, Option<EntryId>),
    Pel(PelRead),
}

/// One page of a re-read of this consumer's own pending entries.
pub(super) struct PelRead {
    pub(super) stream: Arc<str>,
    pub(super) group: Arc<str>,
    pub(super) consumer: Arc<str>,
    /// Where the page starts, as `XPENDING` takes it: `-` (the first),
    /// `(<id>` (after an id) or `<id>` (from an id).
    pub(super) start: String,
    pub(super) count: usize,
    /// Entries it holds (awaiting an XACK, a dead-letter move or their
    /// retry): skipped.
    pub(super) held: HashSet<EntryId>,
    /// The first re-read of this consumer loop: every entry found counts a
    /// delivery (its earlier run, in an earlier life, never finished).
    pub(super) fresh: bool,
    /// Fetch one entry per page (after the server dropped a read): an entry
    /// too large for the server to send then fails alone, and is named.
    pub(super) one_at_a_time: bool,
    /// Entries whose send dropped the connection before: read in pieces
    /// (`redis::chunked`) when their turn comes.
    pub(super) in_pieces: HashSet<EntryId>,
    /// In a partition: its lease, which every `XCLAIM` is fenced by.
    pub(super) fence: Option<Fence>,
}

/// Runs `cmd` (an `XCLAIM` to this consumer) on `conn`, fenced when there
/// is a fence.
async fn claim<T: redis::FromRedisValue>(
    conn: &mut ReadConn,
    fence: Option<&Fence>,
    cmd: &redis::Cmd,
) -> Result<T, Error> {
    match fence {
        Some(f) => f.query(conn, cmd).await,
        None => cmd.query_async(conn).await.map_err(Error::from_redis),
    }
}

/// Where the next read starts: our own pending entries from an `XPENDING`
/// start (`-`, `(<id>`, `<id>`), or new entries (`>`).
#[derive(Clone)]
pub(super) enum Cursor {
    Pending(String),
    New,
}

/// `XREADGROUP … >`: new entries, each on its first delivery.
pub(super) async fn read_new(
    conn: &mut ReadConn,
    cmd: redis::Cmd,
) -> Result<Vec<Delivered>, Error> {
    let v: Value = cmd.query_async(conn).await.map_err(Error::from_redis)?;
    let entries = reply::read_reply(v).map_err(|m| Error::unparsable("XREADGROUP reply", m))?;
    Ok(entries
        .into_iter()
        .map(|raw| Delivered {
            raw,
            delivery_count: 1,
        })
        .collect())
}

/// One page of this consumer's own pending entries, taken back with the
/// delivery count of the run they are about to have. Answers them and the
/// last pending entry looked at.
///
/// `XPENDING … <consumer>` lists them with their counts (changing nothing);
/// `XCLAIM <self> 0 <ids> RETRYCOUNT <n>` returns their bodies, resets their
/// idle time and sets the count to `n` exactly. An entry that never ran here
/// (the reply of the read that delivered it was lost with its connection)
/// keeps its count: a dropped connection charges no delivery. Any entry on a
/// fresh start (an earlier life of the consumer did not finish it) counts one
/// more. (Entries whose handler failed here are held while they wait for
/// their retry, so the re-read skips them.) Entries deleted meanwhile
/// are dropped from the PEL by XCLAIM and not returned.
///
/// With `one_at_a_time`, the page is the first entry it does not hold, and
/// `fetching` names it while its `XCLAIM` is on the wire: a server that
/// cannot send that entry (it outgrows the client's output buffer) drops
/// the connection, and the caller knows which entry did it.
pub(super) async fn reread_pel(
    conn: &mut ReadConn,
    p: PelRead,
    fetching: &mut Option<(EntryId, u64)>,
) -> Result<(Vec<Delivered>, Option<EntryId>), Error> {
    let mut rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(&*p.stream)
        .arg(&*p.group)
        .arg(&p.start)
        .arg("+")
        .arg(p.count)
        .arg(&*p.consumer)
        .query_async(conn)
        .await
        .map_err(Error::from_redis)?;
    if p.one_at_a_time
        && let Some(first) = rows
            .iter()
            .position(|r| !p.held.contains(&EntryId(r.0.clone())))
    {
        rows.truncate(first + 1);
    }
    let last = rows.last().map(|r| EntryId(r.0.clone()));
    let mut by_count: std::collections::BTreeMap<u64, Vec<String>> = Default::default();
    for (id, _, _, count) in rows {
        let key = EntryId(id);
        if p.held.contains(&key) {
            continue;
        }
        let run = if p.fresh { count + 1 } else { count.max(1) };
        by_count.entry(run).or_default().push(key.0);
    }
    let mut out = Vec::new();
    for (run, ids) in by_count {
        if p.one_at_a_time {
            *fetching = ids.first().map(|id| (EntryId(id.clone()), run));
        }
        if let Some((id, _)) = fetching.as_ref().filter(|(id, _)| p.in_pieces.contains(id)) {
            // Too large to be sent whole: claim it without its body, then
            // read it in pieces.
            let mut cmd = redis::cmd("XCLAIM");
            cmd.arg(&*p.stream)
                .arg(&*p.group)
                .arg(&*p.consumer)
                .arg(0)
                .arg(id)
                .arg("RETRYCOUNT")
                .arg(run)
                .arg("JUSTID");
            let claimed: Vec<String> = claim(conn, p.fence.as_ref(), &cmd).await?;
            if !claimed.is_empty() {
                let fields = chunked::fetch_entry(conn, &p.stream, id.as_str()).await?;
                out.push(Delivered {
                    raw: reply::RawEntry {
                        id: id.clone(),
                        fields,
                    },
                    delivery_count: run,
                });
            }
            *fetching = None;
            continue;
        }
        let mut cmd = redis::cmd("XCLAIM");
        cmd.arg(&*p.stream)
            .arg(&*p.group)
            .arg(&*p.consumer)
            .arg(0)
            .arg(&ids)
            .arg("RETRYCOUNT")
            .arg(run);
        let v: Value = claim(conn, p.fence.as_ref(), &cmd).await?;
        *fetching = None;
        let entries = reply::entries(v).map_err(|m| Error::unparsable("XCLAIM reply", m))?;
        out.extend(entries.into_iter().map(|raw| Delivered {
            raw,
            delivery_count: run,
        }));
    }
    // In stream order, whatever their counts.
    out.sort_by_key(|d| d.raw.id.parts().unwrap_or_default());
    Ok((out, last))
}

impl Loop {
    /// Redis answered again (after an outage): a read waiting out its
    /// backoff, or not started for it, starts over now without the delay.
    /// A read on the wire is left alone.
    pub(super) fn retry_now(&mut self) {
        self.retry_delay = None;
        self.read_retry.succeeded();
        if self.read.is_some() && !self.in_read.get() {
            self.read = None;
        }
    }

    pub(super) fn start_read(&mut self, count: usize) {
        let s = &self.sub;
        let read = match &self.cursor {
            Cursor::New if self.fence.is_some() => {
                let fence = self.fence.clone().expect("checked");
                Read::Fenced(fence, count, s.opts.block, self.newest.clone())
            }
            Cursor::New => {
                let mut cmd = redis::cmd("XREADGROUP");
                cmd.arg("GROUP")
                    .arg(&*s.names.group)
                    .arg(&*s.consumer)
                    .arg("COUNT")
                    .arg(count)
                    .arg("BLOCK")
                    .arg(s.opts.block.as_millis() as u64)
                    .arg("STREAMS")
                    .arg(&*s.names.name)
                    .arg(">");
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
                fresh: self.fresh,
                one_at_a_time: self.careful,
                in_pieces: self.failed_sends.keys().cloned().collect(),
                fence: self.fence.clone(),
            }),
        };

        let conn = self.reader.lend();
        let (names, consumer) = (s.names.clone(), s.consumer.clone());
        let block = s.opts.block;
        let delay = self.retry_delay.take();
        let in_read = self.in_read.clone();
        self.read = Some(Box::pin(async move {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            let mut conn = match conn.get().await {
                Ok(c) => c,
                Err(e) => {
                    return ReadDone {
                        conn: None,
                        pel: None,
                        result: Err(e),
                        late: false,
                        fetching: None,
                        strays: false,
                    };
                }
            };
            // On the wire from here until the reply is complete: a stop now
            // must wait for it and hand back.
            in_read.set(true);
            let sent = tokio::time::Instant::now();
            let mut fetching = None;
            let mut strays = false;
            let (result, pel) = match read {
                Read::New(cmd) => (read_new(&mut conn, cmd).await, None),
                Read::Fenced(fence, count, block, newest) => {
                    let (group, consumer) = (&*names.group, &*consumer);
                    let newest = newest.as_ref().map(EntryId::as_str);
                    let read = fence.read_new(&mut conn, group, consumer, count, block, newest);
                    match read.await {
                        Ok(FencedRead::Entries(entries)) => (Ok(entries), None),
                        Ok(FencedRead::Strays) => {
                            strays = true;
                            (Ok(Vec::new()), None)
                        }
                        Err(e) => (Err(e), None),
                    }
                }
                Read::Pel(p) => match reread_pel(&mut conn, p, &mut fetching).await {
                    Ok((entries, last)) => (Ok(entries), Some(last)),
                    Err(e) => (Err(e), None),
                },
            };
            in_read.set(false);
            let keep = match &result {
                Err(e) if drops_reader(e) => None,
                _ => Some(conn),
            };
            ReadDone {
                conn: keep,
                pel,
                result,
                late: late(sent, block),
                fetching,
                strays,
            }
        }));
    }

    pub(super) fn on_read(&mut self, done: ReadDone) {
        self.unblock_at = None;
        if done.late {
            self.stall.trouble();
        } else if done.result.is_ok() {
            self.stall.answered();
        }
        match done.conn {
            Some(conn) => {
                self.reader.give_back(Some(conn));
            }
            None => self.drop_connection(),
        }
        let entries = match done.result {
            Ok(e) => e,
            Err(e) => {
                if e.closed_after_accept() {
                    self.on_failed_send(done.fetching);
                }
                return self.on_read_error(e);
            }
        };
        self.read_retry.succeeded();
        self.sub.board.read_ok();
        if done.strays {
            tracing::warn!(stream = %self.sub.names.name, consumer = %self.sub.consumer, "this consumer's pending entries hold entries it never received (a read of this process that reached Redis late); re-reading them first");
            self.cursor = Cursor::Pending("-".into());
        }
        let newest = entries.iter().map(|d| &d.raw.id);
        let newest = match &done.pel {
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
        match done.pel {
            Some(Some(last)) => self.cursor = Cursor::Pending(format!("({last}")),
            Some(None) => {
                self.cursor = Cursor::New;
                self.fresh = false;
                self.careful = false;
            }
            None => {}
        }
        if !self.failed_sends.is_empty() {
            for d in &entries {
                self.failed_sends.remove(&d.raw.id);
            }
        }
        self.enqueue(entries);
        if self.deadline.is_some() {
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
        self.careful = true;
        let Some((id, run)) = fetching else { return };
        let times = self.failed_sends.entry(id.clone()).or_default();
        *times += 1;
        let times = *times;
        let (stream, consumer) = (&self.sub.names.name, &self.sub.consumer);
        if times < self.sub.opts.max_failed_sends {
            tracing::warn!(
                %stream, %consumer, %id, times,
                "the server dropped the read connection while sending this entry (larger than it may send one client?); reading it in pieces"
            );
            return;
        }
        self.failed_sends.remove(&id);
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
        let (delay, log) = self.read_retry.failed();
        let mut class = e.class();
        if class == Class::GroupGone && self.connector.is_cluster() && e.code() == Some("UNBLOCKED")
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
        if self.deadline.is_some() {
            return;
        }
        self.sub.board.read_failed(&e.to_string());
        self.retry_delay = Some(delay);
        if class == Class::Routing {
            // The stream's slot moved (a reshard) or is moving: the read
            // connection was dropped; the next one goes to the slot's owner
            // and re-reads this consumer's pending entries first.
            self.connector.redirected(&e);
            if log {
                let (stream, consumer) = (&self.sub.names.name, &self.sub.consumer);
                tracing::info!(
                    %stream, %consumer, answer = %e, failures = self.read_retry.failures(),
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
                %stream, %consumer, error = %e, failures = self.read_retry.failures(),
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
            self.cursor = Cursor::Pending("-".into());
        }
    }

    /// Interrupts the blocked read (CLIENT UNBLOCK on a shared connection) and
    /// schedules another try, in case the read reached the server only after
    /// this one.
    ///
    /// `CLIENT UNBLOCK` is `@admin`, and some managed services refuse it: then
    /// (one WARN) the read is left to end by itself within `block`.
    pub(super) fn unblock(&mut self) {
        if self.reader.unblock_refused() {
            self.unblock_at = None;
            return;
        }
        if let Some(sent) = self.reader.unblock(&self.redis) {
            self.side.push(sent);
        }
        self.unblock_at = Some(tokio::time::Instant::now() + UNBLOCK_EVERY);
    }

    /// Forgets the read connection: the next read opens a new one (to the
    /// master of the moment) and first re-reads this consumer's own pending
    /// entries, which a failover or a restart from a snapshot may have put
    /// back in its PEL.
    pub(super) fn drop_connection(&mut self) {
        if self.reader.forget() {
            self.metrics.reconnects.increment(1);
        }
        self.cursor = Cursor::Pending("-".into());
    }

    /// A failover was announced: cut the read short and move to the new
    /// master.
    pub(super) fn on_failover(&mut self) {
        tracing::info!(stream = %self.sub.names.name, consumer = %self.sub.consumer, "failover announced; moving the read connection to the new master");
        if self.read.is_some() {
            // Whatever the dropped read had fetched is in this consumer's PEL
            // and is re-read first.
            self.read = None;
            self.in_read.set(false);
            self.unblock_at = None;
        }
        self.retry_delay = None;
        self.drop_connection();
    }
}
