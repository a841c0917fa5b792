//! `RedisActor`: the one owner of the shared connections.
//!
//! Every Redis command except a consumer's blocking XREADGROUP goes through
//! here: XADD for publishes, XACK, the dead-letter move (a Lua script), XGROUP
//! CREATE, CLIENT UNBLOCK, PING. The actor holds a small pool of
//! [`ConnectionManager`]s (multiplexed connections that reconnect with backoff
//! from 100 ms up to 10 s) and answers each message with a future spawned on its
//! arbiter, so a slow command never holds up the mailbox and concurrent
//! commands are pipelined on the wire.
//!
//! After [`Close`] the pool is dropped and every message answers
//! [`Error::ShutDown`].

pub(crate) mod reply;

use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use actix::prelude::*;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, Value};

use crate::error::Error;
use crate::stream::EntryId;

/// How long a connection attempt may take before it counts as failed.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Response timeout of the shared connections.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// A blocking read's connection waits this much longer than its `block`.
pub(crate) const READ_TIMEOUT_MARGIN: Duration = Duration::from_secs(5);

/// Opens one connection and sends PING. Fails at once when Redis is
/// unreachable (no retry): that is the startup check of the lifecycle.
pub(crate) async fn ping_once(client: &Client) -> Result<(), Error> {
    let mut conn = connect_one(client, CONNECT_TIMEOUT).await?;
    let _: String = redis::cmd("PING")
        .query_async(&mut conn)
        .await
        .map_err(Error::Connect)?;
    Ok(())
}

/// One connection, one attempt (no retry), with the given response timeout.
async fn connect_one(
    client: &Client,
    response_timeout: Duration,
) -> Result<MultiplexedConnection, Error> {
    let cfg = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(response_timeout));
    client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await
        .map_err(Error::Connect)
}

/// Opens the shared pool: `size` connection managers.
pub(crate) async fn connect_pool(
    client: &Client,
    size: usize,
) -> Result<Vec<ConnectionManager>, Error> {
    let cfg = ConnectionManagerConfig::new()
        .set_min_delay(Duration::from_millis(100))
        .set_max_delay(Duration::from_secs(10))
        .set_exponent_base(2.0)
        .set_number_of_retries(8)
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT));
    let mut pool = Vec::with_capacity(size);
    for _ in 0..size {
        let m = ConnectionManager::new_with_config(client.clone(), cfg.clone())
            .await
            .map_err(Error::Connect)?;
        pool.push(m);
    }
    Ok(pool)
}

/// Opens a consumer's dedicated read connection, whose response timeout is
/// `block` plus a margin, and returns it with its `CLIENT ID` (for CLIENT
/// UNBLOCK).
pub(crate) async fn connect_reader(
    client: &Client,
    block: Duration,
) -> Result<(MultiplexedConnection, i64), Error> {
    let mut conn = connect_one(client, block + READ_TIMEOUT_MARGIN).await?;
    let id: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query_async(&mut conn)
        .await
        .map_err(Error::from_redis)?;
    Ok((conn, id))
}

/// Messages queued for the actor before senders wait (each answer is a
/// spawned future, so the mailbox drains fast).
const MAILBOX_CAPACITY: usize = 4096;

/// The shared-connection owner. See the module docs.
pub(crate) struct RedisActor {
    pool: Vec<ConnectionManager>,
    next: usize,
}

impl RedisActor {
    pub(crate) fn new(pool: Vec<ConnectionManager>) -> Self {
        RedisActor { pool, next: 0 }
    }

    fn conn(&mut self) -> Result<ConnectionManager, Error> {
        if self.pool.is_empty() {
            return Err(Error::ShutDown);
        }
        self.next = (self.next + 1) % self.pool.len();
        Ok(self.pool[self.next].clone())
    }
}

impl Actor for RedisActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Publishes come from every part of the application; actix's default
        // mailbox bound (16) would turn into back-pressure far too early.
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
    }
}

/// XADD one or more encoded values (pipelined: one round trip).
#[derive(Message)]
#[rtype(result = "Result<Vec<EntryId>, Error>")]
pub(crate) struct Publish {
    pub stream: Arc<str>,
    pub field: Arc<str>,
    pub max_len: Option<usize>,
    pub payloads: Vec<Vec<u8>>,
}

fn xadd(stream: &str, max_len: Option<usize>, field: &str, payload: &[u8]) -> redis::Cmd {
    let mut c = redis::cmd("XADD");
    c.arg(stream);
    if let Some(n) = max_len {
        c.arg("MAXLEN").arg("~").arg(n);
    }
    c.arg("*").arg(field).arg(payload);
    c
}

impl Handler<Publish> for RedisActor {
    type Result = ResponseFuture<Result<Vec<EntryId>, Error>>;

    fn handle(&mut self, msg: Publish, _: &mut Self::Context) -> Self::Result {
        let conn = self.conn();
        Box::pin(async move {
            let mut conn = conn?;
            let ids: Vec<String> = if let [one] = msg.payloads.as_slice() {
                let id: String = xadd(&msg.stream, msg.max_len, &msg.field, one)
                    .query_async(&mut conn)
                    .await
                    .map_err(Error::from_redis)?;
                vec![id]
            } else {
                let mut pipe = redis::pipe();
                for p in &msg.payloads {
                    pipe.add_command(xadd(&msg.stream, msg.max_len, &msg.field, p));
                }
                pipe.query_async(&mut conn)
                    .await
                    .map_err(Error::from_redis)?
            };
            Ok(ids.into_iter().map(EntryId).collect())
        })
    }
}

/// XACK a batch of entry ids of one stream and group. The ids come back
/// either way: acked, or with the error, to retry.
#[derive(Message)]
#[rtype(result = "Result<Vec<EntryId>, AckError>")]
pub(crate) struct Ack {
    pub stream: Arc<str>,
    pub group: Arc<str>,
    pub ids: Vec<EntryId>,
}

/// A failed [`Ack`], with the ids it did not acknowledge.
pub(crate) struct AckError {
    pub error: Error,
    pub ids: Vec<EntryId>,
}

impl Handler<Ack> for RedisActor {
    type Result = ResponseFuture<Result<Vec<EntryId>, AckError>>;

    fn handle(&mut self, msg: Ack, _: &mut Self::Context) -> Self::Result {
        let conn = self.conn();
        Box::pin(async move {
            let result: Result<usize, Error> = match conn {
                Ok(mut conn) => redis::cmd("XACK")
                    .arg(&*msg.stream)
                    .arg(&*msg.group)
                    .arg(&msg.ids)
                    .query_async(&mut conn)
                    .await
                    .map_err(Error::from_redis),
                Err(e) => Err(e),
            };
            match result {
                Ok(_) => Ok(msg.ids),
                Err(error) => Err(AckError {
                    error,
                    ids: msg.ids,
                }),
            }
        })
    }
}

/// One entry on its way to the dead-letter stream.
#[derive(Debug)]
pub(crate) struct DeadLetterEntry {
    pub stream: Arc<str>,
    pub group: Arc<str>,
    pub dlq: Arc<str>,
    pub consumer: Arc<str>,
    pub id: EntryId,
    pub delivery_count: u64,
    pub fields: Arc<[(Vec<u8>, Vec<u8>)]>,
    pub error: String,
}

/// Copy an entry to the dead-letter stream and XACK it, atomically, but only
/// while it is still pending for this consumer (so an entry acked or taken
/// over meanwhile is never copied twice). Answers the dead-letter entry's id,
/// or `None` when the entry was no longer this consumer's.
///
/// The copy keeps every original field verbatim and adds `origin_stream`,
/// `origin_id`, `origin_group`, `origin_consumer`, `delivery_count`, `error`
/// and `failed_at_ms` (ms since the Unix epoch).
///
/// A Lua script rather than MULTI/EXEC: in a transaction a failing XADD (say
/// the dead-letter key holds a string) would not stop the XACK, and the entry
/// would be lost; in the script the failure aborts before anything is acked.
#[derive(Message)]
#[rtype(result = "Result<Option<EntryId>, Error>")]
pub(crate) struct DeadLetter(pub Arc<DeadLetterEntry>);

/// KEYS: stream, dlq. ARGV: group, id, consumer, then XADD's field/value pairs.
const DEAD_LETTER_LUA: &str = r#"
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 or p[1][2] ~= ARGV[3] then return false end
local dlq_id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 4))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return dlq_id
"#;

static DEAD_LETTER: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(DEAD_LETTER_LUA));

impl Handler<DeadLetter> for RedisActor {
    type Result = ResponseFuture<Result<Option<EntryId>, Error>>;

    fn handle(&mut self, msg: DeadLetter, _: &mut Self::Context) -> Self::Result {
        let conn = self.conn();
        Box::pin(async move {
            let mut conn = conn?;
            let e = &*msg.0;
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let mut call = DEAD_LETTER.key(&*e.stream);
            call.key(&*e.dlq)
                .arg(&*e.group)
                .arg(&e.id)
                .arg(&*e.consumer);
            for (k, v) in e.fields.iter() {
                call.arg(k).arg(v);
            }
            call.arg("origin_stream")
                .arg(&*e.stream)
                .arg("origin_id")
                .arg(&e.id)
                .arg("origin_group")
                .arg(&*e.group)
                .arg("origin_consumer")
                .arg(&*e.consumer)
                .arg("delivery_count")
                .arg(e.delivery_count)
                .arg("error")
                .arg(&e.error)
                .arg("failed_at_ms")
                .arg(now_ms);
            let id: Option<String> = call
                .invoke_async(&mut conn)
                .await
                .map_err(Error::from_redis)?;
            Ok(id.map(EntryId))
        })
    }
}

/// `XGROUP CREATE <stream> <group> <start_id> MKSTREAM`; BUSYGROUP (the group
/// exists) counts as success.
#[derive(Message)]
#[rtype(result = "Result<(), Error>")]
pub(crate) struct CreateGroup {
    pub stream: Arc<str>,
    pub group: Arc<str>,
    pub start_id: Arc<str>,
}

impl Handler<CreateGroup> for RedisActor {
    type Result = ResponseFuture<Result<(), Error>>;

    fn handle(&mut self, msg: CreateGroup, _: &mut Self::Context) -> Self::Result {
        let conn = self.conn();
        Box::pin(async move {
            let mut conn = conn?;
            let r: redis::RedisResult<Value> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&*msg.stream)
                .arg(&*msg.group)
                .arg(&*msg.start_id)
                .arg("MKSTREAM")
                .query_async(&mut conn)
                .await;
            match r {
                Ok(_) => Ok(()),
                Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
                Err(e) => Err(Error::GroupCreate {
                    stream: msg.stream.to_string(),
                    group: msg.group.to_string(),
                    source: e,
                }),
            }
        })
    }
}

/// `CLIENT UNBLOCK <client-id>`: wakes a consumer's blocked XREADGROUP as if
/// its block had run out. Answers whether a client was unblocked.
#[derive(Message)]
#[rtype(result = "Result<bool, Error>")]
pub(crate) struct Unblock(pub i64);

impl Handler<Unblock> for RedisActor {
    type Result = ResponseFuture<Result<bool, Error>>;

    fn handle(&mut self, msg: Unblock, _: &mut Self::Context) -> Self::Result {
        let conn = self.conn();
        Box::pin(async move {
            let mut conn = conn?;
            let n: i64 = redis::cmd("CLIENT")
                .arg("UNBLOCK")
                .arg(msg.0)
                .query_async(&mut conn)
                .await
                .map_err(Error::from_redis)?;
            Ok(n == 1)
        })
    }
}

/// Any other command on a shared connection (PING, XPENDING, XCLAIM…).
#[derive(Message)]
#[rtype(result = "Result<Value, Error>")]
pub(crate) struct Query(pub redis::Cmd);

impl Handler<Query> for RedisActor {
    type Result = ResponseFuture<Result<Value, Error>>;

    fn handle(&mut self, msg: Query, _: &mut Self::Context) -> Self::Result {
        let conn = self.conn();
        Box::pin(async move {
            let mut conn = conn?;
            msg.0
                .query_async(&mut conn)
                .await
                .map_err(Error::from_redis)
        })
    }
}

/// Drops the shared connections; from now on every message answers
/// [`Error::ShutDown`]. Answers how many connections were closed.
#[derive(Message)]
#[rtype(result = "usize")]
pub(crate) struct Close;

impl Handler<Close> for RedisActor {
    type Result = usize;

    fn handle(&mut self, _: Close, ctx: &mut Self::Context) -> usize {
        let n = self.pool.len();
        self.pool.clear();
        ctx.stop();
        n
    }
}
