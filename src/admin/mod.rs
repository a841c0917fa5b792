//! Operations on streams, groups and dead letters, for operators and tools:
//! what is there ([`Admin::streams`], [`Admin::groups`],
//! [`Admin::consumers`], [`Admin::pending`], [`Admin::newest`]) and repairs
//! of dead letters ([`Admin::dead_letters`], [`Admin::redrive`],
//! [`Admin::purge`]). The `rillkit` command-line tool (the package
//! `rillkit-cli`) is built on this module alone.
//!
//! [`Admin`] is a plain async handle: no actix `System` and no [`Broker`]
//! needed, any tokio runtime will do.
//!
//! ```no_run
//! use rillkit::admin::{Admin, DeadLetterFilter};
//!
//! # async fn demo() -> Result<(), rillkit::Error> {
//! let admin = Admin::connect("redis://127.0.0.1:6379").await?;
//! for g in admin.groups("orders").await? {
//!     println!("{}: {} pending, lag {:?}", g.name, g.pending, g.lag);
//! }
//! let dlq = admin.dlq_of("orders"); // orders-dlq ({orders}-dlq under a cluster)
//! for dl in admin.dead_letters(&dlq, &DeadLetterFilter::new().with_count(10)).await? {
//!     let origin = dl.origin.as_ref().expect("written by rillkit");
//!     println!("{} failed: {}", origin.id, origin.error);
//! }
//! let report = admin
//!     .redrive(&dlq, &DeadLetterFilter::new().with_error_contains("timed out"))
//!     .await?;
//! println!("{} back on their stream", report.count());
//! # Ok(()) }
//! ```
//!
//! [`Broker`]: crate::Broker

mod commands;
pub(crate) mod dead_letters;
mod fleet;
mod lists;
mod metrics;
mod ordered;
mod pending;
mod preview;
mod schedule;

pub use dead_letters::{
    DeadLetter, DeadLetterAttempt, DeadLetterFilter, DeadLetterOrigin, RedriveReport, Redriven,
    Skipped,
};
pub use lists::{ListConsumer, ListDeadLetter, ListRedriveReport, ListStatus};
pub use pending::PendingFilter;

pub use crate::fleet::{
    FleetAutoscale, FleetControl, FleetProcess, FleetSubscription, MAX_CONCURRENCY,
};

use std::collections::BTreeSet;
use std::fmt;

use redis::Value;

use crate::connection::{Connector, Shared, Timeouts};
use crate::error::Error;
use crate::keys::dead_letter_name;
use crate::redis::info as reply;
pub use crate::redis::info::{ConsumerInfo, GroupInfo, PendingEntry};
use crate::stream::EntryId;
use crate::{Tls, Topology};
pub use metrics::{Collected, GroupMetrics, MetricsSnapshot, ServerMetrics};

/// Keys asked for per `SCAN` call.
const SCAN_COUNT: usize = 1000;

/// The longest `BLOCK` [`Admin::read_after`] sends: well under the 10 s a
/// reply may take.
const MAX_BLOCK: std::time::Duration = std::time::Duration::from_secs(5);

/// A connection for operations on streams, groups and dead letters. See the
/// [module docs](self).
///
/// It holds one multiplexed connection (for a cluster: one connection
/// routed by slot, to every master), opened by [`connect`](Self::connect)
/// or [`connect_topology`](Self::connect_topology), with the broker's
/// defaults: 5 s to connect, 10 s for each reply. Clones share it, and
/// commands from several tasks are pipelined on it. It is not reopened: after
/// an error for which [`Error::is_connection`] holds, connect again.
///
/// Every method sends its commands once; none retries.
///
/// ```no_run
/// use rillkit::admin::{Admin, DeadLetterFilter};
///
/// # async fn f() -> Result<(), rillkit::Error> {
/// let admin = Admin::connect("redis://127.0.0.1:6379").await?;
/// // Each group of `orders`: consumers, pending entries, lag (XINFO GROUPS).
/// for g in admin.groups("orders").await? {
///     println!("{}: {} pending, lag {:?}", g.name, g.pending, g.lag);
/// }
/// // The dead letters whose error mentions a timeout, put back on their
/// // origin stream as new entries (one script per dead letter).
/// let dlq = admin.dlq_of("orders");
/// let timeouts = DeadLetterFilter::new().with_error_contains("timeout");
/// for dl in admin.dead_letters(&dlq, &timeouts).await? {
///     if let Some(origin) = &dl.origin {
///         println!("{} failed {} times: {}", origin.id, origin.delivery_count, origin.error);
///     }
/// }
/// let report = admin.redrive(&dlq, &timeouts).await?;
/// println!("{} redriven, {} skipped", report.count(), report.skipped.len());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Admin {
    conn: Shared,
    cluster: bool,
    describe: String,
    /// What idempotent adds learned per stream.
    known: std::sync::Arc<crate::redis::idempotent::Known>,
}

impl fmt::Debug for Admin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admin")
            .field("redis", &self.describe)
            .finish_non_exhaustive()
    }
}

/// One entry of a stream: its id and field/value pairs, verbatim and in
/// order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamEntry {
    /// The entry's id.
    pub id: EntryId,
    /// Its field/value pairs.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
}

impl StreamEntry {
    /// The value of the first field named `name`, if any.
    pub fn field(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(k, _)| k.as_slice() == name.as_bytes())
            .map(|(_, v)| v.as_slice())
    }
}

impl Admin {
    /// Connects to the server at `url` (`redis://[user:password@]host:port[/db]`,
    /// `rediss://` for TLS with the system's trust store). One attempt, up
    /// to 5 s; the server must be a master (`ROLE`).
    ///
    /// # Errors
    /// [`Error::Config`] for a malformed URL (exit code 78); a connection
    /// error ([`Error::is_connection`]) when the server does not answer;
    /// [`Error::NotMaster`] for a replica.
    pub async fn connect(url: &str) -> Result<Admin, Error> {
        Self::connect_topology(&Topology::standalone(url), None).await
    }

    /// Connects to the master of `topology` (standalone, Sentinel or
    /// Cluster), with `tls` as a broker would (see [`Tls`]). One attempt:
    /// under Sentinel, the sentinels are asked once for the master of the
    /// moment; under a cluster, the slot map is read once.
    ///
    /// # Errors
    /// [`Error::Config`] for a configuration that cannot work (a malformed
    /// URL or seed node, TLS options with a `redis://` URL; exit code 78); a
    /// connection error when nothing answers; [`Error::NoMaster`] when no
    /// sentinel knows the master; [`Error::NotMaster`] when a replica
    /// answered.
    pub async fn connect_topology(topology: &Topology, tls: Option<&Tls>) -> Result<Admin, Error> {
        let connector = Connector::new(topology, tls, Timeouts::default())?;
        Self::with_connector(&connector).await
    }

    /// Connects to the master `broker` uses, with its topology, credentials,
    /// TLS and timeouts: a connection of its own (the broker need not be
    /// started). One attempt, as [`connect_topology`](Self::connect_topology).
    ///
    /// # Errors
    /// As [`connect_topology`](Self::connect_topology), except configuration
    /// errors, which `build()` already reported.
    pub async fn for_broker(broker: &crate::Broker) -> Result<Admin, Error> {
        Self::with_connector(broker.connector()).await
    }

    async fn with_connector(connector: &Connector) -> Result<Admin, Error> {
        let response = connector.timeouts().response;
        let conn = connector
            .shared(1, response)
            .await?
            .pop()
            .expect("one connection was asked for");
        Ok(Admin {
            conn,
            cluster: connector.is_cluster(),
            describe: connector.describe().to_owned(),
            known: Default::default(),
        })
    }

    /// Whether the connection is to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// Every stream on the server ([`streams`](Self::streams)`("*")`) that
    /// is not another one's default dead-letter stream ([`dlq_of`](Self::dlq_of)),
    /// in name order.
    ///
    /// # Errors
    /// As [`streams`](Self::streams).
    pub async fn origin_streams(&self) -> Result<Vec<String>, Error> {
        let found = self.streams("*").await?;
        let dlqs: std::collections::HashSet<String> =
            found.iter().map(|n| self.dlq_of(n)).collect();
        Ok(found.into_iter().filter(|n| !dlqs.contains(n)).collect())
    }

    /// The default dead-letter stream of the stream `name` on this
    /// connection's topology: `<name>-dlq`, or under a cluster
    /// `{<name>}-dlq` (`<name>-dlq` when the name already holds a hash tag),
    /// as [`Stream::dlq_for`](crate::Stream::dlq_for) answers for a stream
    /// without [`with_dlq_name`](crate::Stream::with_dlq_name).
    pub fn dlq_of(&self, name: &str) -> String {
        dead_letter_name(name, self.cluster)
    }

    /// Sends `cmd` on the connection, once.
    async fn query(&self, cmd: &redis::Cmd) -> Result<Value, Error> {
        let mut conn = self.conn.clone();
        cmd.query_async(&mut conn).await.map_err(Error::from_redis)
    }

    /// The stream keys whose names match the glob-style `pattern` (`*` for
    /// all, `orders:*`…), sorted, each once. `SCAN 0 MATCH <pattern> COUNT
    /// 1000 TYPE stream` until the cursor comes back to 0; under a cluster,
    /// on every master of `CLUSTER SLOTS` in turn. Dead-letter streams are
    /// streams too and are listed. Key names that are not UTF-8 are listed
    /// lossily (such a name cannot be used with the other methods).
    ///
    /// A `SCAN` walks the whole keyspace, a page at a time: cheap per call,
    /// but in total proportional to the number of keys. A key added or
    /// removed during the walk may or may not be listed. Under a cluster, a
    /// master that appears or a slot that migrates during the walk may make
    /// the list miss or repeat keys (repeats are removed).
    ///
    /// # Errors
    /// A connection error; [`Error::Redis`] when the server refuses `SCAN`
    /// (ACL) or, under a cluster, `CLUSTER SLOTS`.
    pub async fn streams(&self, pattern: &str) -> Result<Vec<String>, Error> {
        self.scan(pattern, "stream").await
    }

    /// Every master's `host:port` of `CLUSTER SLOTS` under a cluster; one
    /// `None`, the one server, otherwise.
    pub(crate) async fn masters(&self) -> Result<Vec<Option<String>>, Error> {
        if !self.cluster {
            return Ok(vec![None]);
        }
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        Ok(reply::cluster_masters(self.query(&cmd).await?)
            .map_err(|m| Error::unparsable("CLUSTER SLOTS reply", m))?
            .into_iter()
            .map(Some)
            .collect())
    }

    /// The keys of type `kind` whose names match `pattern`, sorted, each
    /// once: `SCAN … MATCH <pattern> TYPE <kind>` on every master (see
    /// [`streams`](Self::streams)).
    pub(crate) async fn scan(&self, pattern: &str, kind: &str) -> Result<Vec<String>, Error> {
        let mut found = BTreeSet::new();
        for node in self.masters().await? {
            let mut cursor = 0u64;
            loop {
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(SCAN_COUNT)
                    .arg("TYPE")
                    .arg(kind);
                let mut conn = self.conn.clone();
                let v = conn
                    .on_node(&cmd, node.as_deref())
                    .await
                    .map_err(Error::from_redis)?;
                let (next, keys) =
                    reply::scan(v).map_err(|m| Error::unparsable("SCAN reply", m))?;
                found.extend(keys);
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(found.into_iter().collect())
    }

    /// The number of entries in `stream` (`XLEN`); 0 when the key does not
    /// exist.
    ///
    /// # Errors
    /// [`Error::Redis`] when the key holds another type; a connection error.
    pub async fn stream_len(&self, stream: &str) -> Result<u64, Error> {
        let mut cmd = redis::cmd("XLEN");
        cmd.arg(stream);
        redis::from_redis_value(self.query(&cmd).await?)
            .map_err(|e| Error::unparsable("XLEN reply", e.to_string()))
    }

    /// The consumer groups of `stream` (`XINFO GROUPS`), in the server's
    /// order.
    ///
    /// # Errors
    /// [`Error::Redis`] when the key does not exist (`no such key`) or is
    /// not a stream; a connection error.
    pub async fn groups(&self, stream: &str) -> Result<Vec<GroupInfo>, Error> {
        let mut cmd = redis::cmd("XINFO");
        cmd.arg("GROUPS").arg(stream);
        reply::groups(self.query(&cmd).await?)
            .map_err(|m| Error::unparsable("XINFO GROUPS reply", m))
    }

    /// The consumers of `group` on `stream` (`XINFO CONSUMERS`).
    ///
    /// # Errors
    /// [`Error::Redis`] when the key does not exist, is not a stream, or has
    /// no such group (`NOGROUP`); a connection error.
    pub async fn consumers(&self, stream: &str, group: &str) -> Result<Vec<ConsumerInfo>, Error> {
        let mut cmd = redis::cmd("XINFO");
        cmd.arg("CONSUMERS").arg(stream).arg(group);
        reply::consumers(self.query(&cmd).await?)
            .map_err(|m| Error::unparsable("XINFO CONSUMERS reply", m))
    }

    /// Deletes the consumers of `group` that hold no pending entry and whose
    /// idle time (`XINFO CONSUMERS` `idle`: since their last read or claim)
    /// is above `idle`, and whose consumer name's lease no live process
    /// holds (before Redis 7.2 `idle` keeps growing while a live consumer
    /// waits on a quiet stream), and answers their names. Checked and deleted in one
    /// Lua script (`XGROUP DELCONSUMER`), so a consumer that holds entries
    /// is never deleted, and one that reads meanwhile is not idle. A live
    /// consumer deleted anyway (an `idle` shorter than its `block`) is
    /// recreated by its next read. The same script a subscription runs with
    /// [`ConsumerOptions::with_prune_idle`](crate::ConsumerOptions::with_prune_idle).
    ///
    /// # Errors
    /// [`Error::Redis`] when the key does not exist, is not a stream, or has
    /// no such group (`NOGROUP`); [`Error::Permission`]-class errors when the
    /// ACL user may not run `XGROUP DELCONSUMER`; a connection error.
    pub async fn prune_idle_consumers(
        &self,
        stream: &str,
        group: &str,
        idle: std::time::Duration,
    ) -> Result<Vec<String>, Error> {
        let query = |_, cmd: redis::Cmd| async move { self.query(&cmd).await };
        let spare = crate::source::stream::hygiene::spared(stream, group, "", query).await?;
        let mut call = crate::source::stream::hygiene::PRUNE_IDLE.key(stream);
        call.arg(group).arg(idle.as_millis() as u64).arg(spare);
        let mut conn = self.conn.clone();
        let answer: Value = call
            .invoke_async(&mut conn)
            .await
            .map_err(Error::from_redis)?;
        crate::source::stream::hygiene::pruned_names(answer)
    }

    /// The oldest `count` entries of `group`'s pending entries list
    /// (`XPENDING <stream> <group> - + <count>`), oldest id first: who holds
    /// each, for how long (ms), delivered how many times.
    ///
    /// # Errors
    /// [`Error::Redis`] when the key does not exist, is not a stream, or has
    /// no such group (`NOGROUP`); a connection error.
    pub async fn pending(
        &self,
        stream: &str,
        group: &str,
        count: usize,
    ) -> Result<Vec<PendingEntry>, Error> {
        let mut cmd = redis::cmd("XPENDING");
        cmd.arg(stream).arg(group).arg("-").arg("+").arg(count);
        reply::pending(self.query(&cmd).await?).map_err(|m| Error::unparsable("XPENDING reply", m))
    }

    /// The pending entries of `group` with ids from `start` to `end`
    /// (`XPENDING <stream> <group> <start> <end> <count> [<consumer>]`),
    /// oldest id first, at most `count`, only those `consumer` holds when
    /// given. `start` and `end` are ids, `-` and `+`, or `(<id>` for an
    /// exclusive bound (Redis 6.2+): a page after the last id shown starts
    /// at `(<last id>`; one entry's row is `start` = `end` = its id.
    ///
    /// # Errors
    /// [`Error::Redis`] when the key does not exist, is not a stream, has
    /// no such group (`NOGROUP`) or a bound is malformed; a connection error.
    pub async fn pending_range(
        &self,
        stream: &str,
        group: &str,
        (start, end): (&str, &str),
        count: usize,
        consumer: Option<&str>,
    ) -> Result<Vec<PendingEntry>, Error> {
        let mut cmd = redis::cmd("XPENDING");
        cmd.arg(stream).arg(group).arg(start).arg(end).arg(count);
        if let Some(c) = consumer {
            cmd.arg(c);
        }
        reply::pending(self.query(&cmd).await?).map_err(|m| Error::unparsable("XPENDING reply", m))
    }

    /// The entry of `stream` with this id, whole (`XRANGE <stream> <id>
    /// <id>`); `None` when there is none (deleted, trimmed, or no such key).
    ///
    /// # Errors
    /// [`Error::Redis`] when the key is not a stream or `id` is malformed; a
    /// connection error.
    pub async fn entry(&self, stream: &str, id: &str) -> Result<Option<StreamEntry>, Error> {
        let mut cmd = redis::cmd("XRANGE");
        cmd.arg(stream).arg(id).arg(id).arg("COUNT").arg(1);
        Ok(stream_entries(self.query(&cmd).await?, "XRANGE reply")?.pop())
    }

    /// The newest `count` entries of `stream`, newest first (`XREVRANGE
    /// <stream> + - COUNT <count>`); none when the key does not exist.
    ///
    /// # Errors
    /// [`Error::Redis`] when the key is not a stream; a connection error.
    pub async fn newest(&self, stream: &str, count: usize) -> Result<Vec<StreamEntry>, Error> {
        let mut cmd = redis::cmd("XREVRANGE");
        cmd.arg(stream).arg("+").arg("-").arg("COUNT").arg(count);
        stream_entries(self.query(&cmd).await?, "XREVRANGE reply")
    }

    /// Adds an entry with these field/value pairs to `stream` and answers its
    /// id: `XADD <stream> * <field> <value> …`, creating the stream if
    /// needed. To produce for a rillkit consumer, one field `data` holding JSON:
    /// `admin.add("orders", &[("data", r#"{"id":1}"#)])`.
    ///
    /// # Errors
    /// [`Error::Redis`] when `fields` is empty or the key is not a stream; a
    /// connection error (the entry may have been added all the same).
    pub async fn add<K, V>(&self, stream: &str, fields: &[(K, V)]) -> Result<EntryId, Error>
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(stream).arg("*");
        for (k, v) in fields {
            cmd.arg(k.as_ref()).arg(v.as_ref());
        }
        let id: String = redis::from_redis_value(self.query(&cmd).await?)
            .map_err(|e| Error::unparsable("XADD reply", e.to_string()))?;
        Ok(EntryId(id))
    }
}

impl Admin {
    /// Like [`add`](Self::add), but only to a stream that exists: `XADD
    /// <stream> NOMKSTREAM * <field> <value> …`. Answers `None`, and adds
    /// nothing, when there is no key `stream` (a misspelt name does not
    /// create a stream nothing reads). Redis 6.2 or later.
    ///
    /// # Errors
    /// As [`add`](Self::add).
    pub async fn add_to_existing<K, V>(
        &self,
        stream: &str,
        fields: &[(K, V)],
    ) -> Result<Option<EntryId>, Error>
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(stream).arg("NOMKSTREAM").arg("*");
        for (k, v) in fields {
            cmd.arg(k.as_ref()).arg(v.as_ref());
        }
        let id: Option<String> = redis::from_redis_value(self.query(&cmd).await?)
            .map_err(|e| Error::unparsable("XADD reply", e.to_string()))?;
        Ok(id.map(EntryId))
    }

    /// Creates the consumer group `group` on `stream` at `start` (`$`: only
    /// entries added from now on; `0`: every entry), creating an empty
    /// stream if there is none: `XGROUP CREATE <stream> <group> <start>
    /// MKSTREAM`. Answers `false`, changing nothing, when the group exists
    /// (`BUSYGROUP`).
    ///
    /// # Errors
    /// [`Error::GroupCreate`] when Redis refuses (the key is not a stream,
    /// the ACL, a malformed `start`); a connection error.
    pub async fn create_group(
        &self,
        stream: &str,
        group: &str,
        start: &str,
    ) -> Result<bool, Error> {
        let mut cmd = redis::cmd("XGROUP");
        cmd.arg("CREATE")
            .arg(stream)
            .arg(group)
            .arg(start)
            .arg("MKSTREAM");
        match self.query(&cmd).await {
            Ok(_) => Ok(true),
            Err(Error::Redis(e)) if e.code() == Some("BUSYGROUP") => Ok(false),
            Err(Error::Redis(source)) => Err(Error::GroupCreate {
                stream: stream.to_owned(),
                group: group.to_owned(),
                source,
            }),
            Err(e) => Err(e),
        }
    }

    /// Up to `count` entries of `stream` with ids after `after`, oldest
    /// first, waiting up to `block` (at most 5 s) for one to arrive when
    /// there is none yet: `XREAD COUNT <count> BLOCK <ms> STREAMS <stream>
    /// <after>`. None when the wait ends empty. Not a group read: nothing
    /// becomes pending. To follow a stream, pass the last id seen each time.
    ///
    /// # Errors
    /// [`Error::Redis`] when the key is not a stream or `after` is
    /// malformed; a connection error.
    pub async fn read_after(
        &self,
        stream: &str,
        after: &str,
        count: usize,
        block: std::time::Duration,
    ) -> Result<Vec<StreamEntry>, Error> {
        let mut cmd = redis::cmd("XREAD");
        cmd.arg("COUNT")
            .arg(count)
            .arg("BLOCK")
            .arg(block.min(MAX_BLOCK).as_millis() as u64)
            .arg("STREAMS")
            .arg(stream)
            .arg(after);
        let rows = crate::redis::reply::read_reply(self.query(&cmd).await?)
            .map_err(|m| Error::unparsable("XREAD reply", m))?;
        Ok(rows
            .into_iter()
            .map(|r| StreamEntry {
                id: r.id,
                fields: r.fields.unwrap_or_default(),
            })
            .collect())
    }
}

/// An `XRANGE`-shaped reply (`what` names it in a parse error) as entries;
/// an entry whose body is gone has no fields.
pub(super) fn stream_entries(v: Value, what: &'static str) -> Result<Vec<StreamEntry>, Error> {
    let rows = crate::redis::reply::entries(v).map_err(|m| Error::unparsable(what, m))?;
    Ok(rows
        .into_iter()
        .map(|r| StreamEntry {
            id: r.id,
            fields: r.fields.unwrap_or_default(),
        })
        .collect())
}
