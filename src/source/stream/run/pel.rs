//! The read commands, on the dedicated read connection: new entries
//! (`XREADGROUP … >`, or a partition's fenced read) and pages of this
//! consumer's own PEL (`XPENDING` + `XCLAIM`, an entry too large to send
//! whole read in pieces). [`perform`] runs one on the read connection and
//! says what it produced; [`behind`] sends a read of new entries behind
//! one in flight, on a clone of that connection.

use std::cell::Cell;
use std::collections::HashSet;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::delivery::reader::{Lent, ReadConn, drops_reader, late};
use crate::error::Error;
use crate::redis::reply::Delivered;
use crate::redis::{chunked, reply};
use crate::source::stream::ordered::{Fence, FencedRead};
use crate::stream::EntryId;

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
    /// It was sent behind another read, on a clone of its connection (see
    /// [`behind`]): it has no connection to give back.
    pub(super) behind: bool,
    /// How many entries it asked for (set when it is taken from the reads
    /// in flight).
    pub(super) asked: usize,
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

/// `XREADGROUP … >`: new entries, each on its first delivery; with
/// `CLAIM`, the group's idle pending entries first, each with the delivery
/// count the reply gives (the count before this delivery, plus one).
pub(super) async fn read_new(
    conn: &mut impl redis::aio::ConnectionLike,
    cmd: redis::Cmd,
) -> Result<Vec<Delivered>, Error> {
    let v: Value = cmd.query_async(conn).await.map_err(Error::from_redis)?;
    let entries =
        reply::read_reply_counted(v).map_err(|m| Error::unparsable("XREADGROUP reply", m))?;
    Ok(entries
        .into_iter()
        .map(|(raw, before)| Delivered {
            raw,
            delivery_count: before.map_or(1, |n| n + 1),
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

/// Runs `read` on the connection `conn` lends (after `delay`, when the
/// last read failed), `in_read` set while the command is on the wire.
pub(super) async fn perform(
    conn: Lent,
    read: Read,
    delay: Option<Duration>,
    in_read: Rc<Cell<bool>>,
    (group, consumer, block): (Arc<str>, Arc<str>, Duration),
) -> ReadDone {
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
                behind: false,
                asked: 0,
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
            let (group, consumer) = (&*group, &*consumer);
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
        behind: false,
        asked: 0,
    }
}

/// A read of new entries (`cmd`, without `BLOCK`) sent on `conn`, a clone
/// of the read connection, behind a read in flight there: Redis serves it
/// the moment it has answered that one, while the client handles that
/// reply, so neither side waits for the other. It waits in the
/// connection's queue while the read before it blocks, so it counts as
/// late only past the same `block`.
///
/// It does not follow `ASK` (a slot migrating in a cluster): that answer
/// counts as finding nothing, and the next read, on the read connection,
/// follows it.
pub(super) async fn behind(
    mut conn: redis::aio::MultiplexedConnection,
    cmd: redis::Cmd,
    block: Duration,
) -> ReadDone {
    let sent = tokio::time::Instant::now();
    let result = match read_new(&mut conn, cmd).await {
        Err(e) if e.code() == Some("ASK") => Ok(Vec::new()),
        result => result,
    };
    ReadDone {
        conn: None,
        pel: None,
        result,
        late: late(sent, block),
        fetching: None,
        strays: false,
        behind: true,
        asked: 0,
    }
}
