//! `RedisActor`: the one owner of the shared connections.
//!
//! Every Redis command except a consumer's blocking XREADGROUP goes through
//! here: XADD for publishes, XACK, the dead-letter move (a Lua script), XGROUP
//! CREATE, CLIENT UNBLOCK, PING, XPENDING, XCLAIM. The actor holds the shared
//! [`Pool`] (multiplexed connections to the master of the moment that
//! reconnect with capped backoff) and answers each message with a future
//! spawned on its arbiter, so a slow command never holds up the mailbox and
//! concurrent commands are pipelined on the wire. Each command is sent once;
//! while the pool reconnects it waits up to 5 s (a publish: the broker's
//! `publish_timeout`), then answers the error, and the caller decides.
//!
//! After [`Close`] the pool is closed and every message answers
//! [`Error::ShutDown`].

pub(crate) mod chunked;
pub(crate) mod commands;
mod dead_letter;
pub(crate) mod idempotent;
pub(crate) mod info;
pub(crate) mod reply;

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use redis::Value;

use crate::connection::{Pool, Watcher};
use crate::error::Error;
use crate::error::{Class, classify};
use crate::stream::EntryId;

pub(crate) use dead_letter::{DeadLetter, DeadLetterEntry, DeadLetterOrder, MoveAnswer};

/// How long a command other than a publish waits for the shared connections
/// to come back when they are reconnecting. Its caller (the consumer loop)
/// retries with backoff after that.
const COMMAND_WAIT: Duration = Duration::from_secs(5);

/// Messages queued for the actor before senders wait (each answer is a
/// spawned future, so the mailbox drains fast).
const MAILBOX_CAPACITY: usize = 4096;

/// The shared-connection owner. See the module docs.
pub(crate) struct RedisActor {
    pool: Pool,
    /// Sentinel's failover announcements, heard while the actor lives.
    failovers: Option<Watcher>,
    publish_timeout: Duration,
    /// What idempotent publishes learned per stream.
    known: Arc<idempotent::Known>,
}

impl RedisActor {
    pub(crate) fn new(pool: Pool, failovers: Option<Watcher>, publish_timeout: Duration) -> Self {
        RedisActor {
            pool,
            failovers,
            publish_timeout,
            known: Arc::default(),
        }
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
    /// A W3C `traceparent` added to each entry as its own field.
    pub traceparent: Option<crate::TraceParent>,
    /// The key field and key of an entry of a stream ordered by key.
    pub key: Option<(Arc<str>, Vec<u8>)>,
}

impl Publish {
    fn xadd(&self, payload: &[u8]) -> redis::Cmd {
        let mut c = redis::cmd("XADD");
        c.arg(&*self.stream);
        if let Some(n) = self.max_len {
            c.arg("MAXLEN").arg("~").arg(n);
        }
        c.arg("*").arg(&*self.field).arg(payload);
        if let Some((field, key)) = &self.key {
            c.arg(&**field).arg(key.as_slice());
        }
        if let Some(tp) = &self.traceparent {
            c.arg(crate::traceparent::TRACEPARENT_FIELD)
                .arg(tp.as_str());
        }
        c
    }
}

impl Handler<Publish> for RedisActor {
    type Result = ResponseFuture<Result<Vec<EntryId>, Error>>;

    fn handle(&mut self, msg: Publish, _: &mut Self::Context) -> Self::Result {
        let pool = self.pool.clone();
        let wait = self.publish_timeout;
        Box::pin(async move {
            // Sent once: a publish whose reply is lost may have been applied,
            // so it is never retried here (the caller decides). But one
            // entry answered a redirection (see `ROUTING_RETRIES`) was not
            // added: it is sent again.
            let mut tries = 0;
            loop {
                let m = &msg;
                let sent: Result<Vec<String>, Error> = pool
                    .run("xadd", wait, |mut conn| async move {
                        if let [one] = m.payloads.as_slice() {
                            let id: String = m.xadd(one).query_async(&mut conn).await?;
                            Ok(vec![id])
                        } else {
                            let mut pipe = redis::pipe();
                            for p in &m.payloads {
                                pipe.add_command(m.xadd(p));
                            }
                            pipe.query_async(&mut conn).await
                        }
                    })
                    .await;
                match sent {
                    Err(e)
                        if e.class() == Class::Routing
                            && msg.payloads.len() == 1
                            && tries < ROUTING_RETRIES =>
                    {
                        tries += 1;
                        tokio::time::sleep(ROUTING_WAIT).await;
                    }
                    sent => return Ok(sent?.into_iter().map(EntryId).collect()),
                }
            }
        })
    }
}

/// One idempotent `XADD` (see [`idempotent`]). Sent once, as a publish,
/// but a resend is harmless: that is its point.
#[derive(Message)]
#[rtype(result = "Result<EntryId, Error>")]
pub(crate) struct PublishOnce {
    pub stream: Arc<str>,
    pub key: crate::stream::MessageKey,
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    pub max_len: Option<usize>,
    pub window: Duration,
}

impl Handler<PublishOnce> for RedisActor {
    type Result = ResponseFuture<Result<EntryId, Error>>;

    fn handle(&mut self, msg: PublishOnce, _: &mut Self::Context) -> Self::Result {
        let (pool, known, wait) = (self.pool.clone(), self.known.clone(), self.publish_timeout);
        Box::pin(async move {
            let fields: Vec<(&[u8], &[u8])> = msg
                .fields
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
                .collect();
            let add = idempotent::AddOnce {
                stream: &msg.stream,
                producer: msg.key.producer(),
                message_id: msg.key.id(),
                fields: &fields,
                max_len: msg.max_len,
                window: msg.window,
                create: true,
            };
            let (add, known) = (&add, &known);
            let mut tries = 0;
            loop {
                let added = pool
                    .run("xadd", wait, |mut conn| async move {
                        idempotent::add(&mut conn, known, add).await
                    })
                    .await;
                match added {
                    // A resend is harmless here: the first add's id comes back.
                    Err(e) if e.is_retryable() && tries < ROUTING_RETRIES => {
                        tries += 1;
                        tokio::time::sleep(ROUTING_WAIT).await;
                    }
                    added => return added?.ok_or(Error::ShutDown),
                }
            }
        })
    }
}

/// XACK a batch of entry ids of one stream and group. The ids come back
/// either way: acked, or with the error, to retry.
///
/// With `delete` (a stream kept with `retain_acked`, on a server that has
/// it) the batch is `XACKDEL <stream> <group> ACKED IDS <n> <id>…`: each
/// entry is acked and, when no other group still needs it, deleted in the
/// same command. Refused there (a node of another version answered, an
/// ACL), the same ids are sent as a plain `XACK` at once, and `XACKDEL` is
/// withdrawn from `delete` until its server is asked again; the retention
/// sweep trims what that leaves.
#[derive(Message, Clone)]
#[rtype(result = "Result<(), Error>")]
pub(crate) struct Ack {
    pub stream: Arc<str>,
    pub group: Arc<str>,
    pub ids: Arc<[EntryId]>,
    pub delete: Option<commands::Detected>,
}

impl Ack {
    fn xack(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("XACK");
        cmd.arg(&*self.stream).arg(&*self.group).arg(&*self.ids);
        cmd
    }

    fn xackdel(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("XACKDEL");
        cmd.arg(&*self.stream)
            .arg(&*self.group)
            .arg("ACKED")
            .arg("IDS")
            .arg(self.ids.len())
            .arg(&*self.ids);
        cmd
    }
}

impl Handler<Ack> for RedisActor {
    type Result = ResponseFuture<Result<(), Error>>;

    fn handle(&mut self, msg: Ack, _: &mut Self::Context) -> Self::Result {
        let pool = self.pool.clone();
        Box::pin(async move {
            let deleting = msg.delete.as_ref().filter(|d| d.get().ack_and_delete());
            let cmd = match deleting {
                Some(_) => msg.xackdel(),
                None => msg.xack(),
            };
            let run = |cmd: redis::Cmd| {
                pool.run("xack", COMMAND_WAIT, |mut conn| async move {
                    cmd.query_async::<Value>(&mut conn).await
                })
            };
            let mut result = run(cmd).await;
            if let (Some(detected), Err(e)) = (deleting, &result)
                && !e.is_retryable()
                && e.class() != Class::GroupGone
            {
                tracing::warn!(stream = %msg.stream, error = %e, "XACKDEL refused; acking with XACK (the retention sweep trims what every group acked)");
                detected.withdraw_ack_and_delete();
                result = run(msg.xack()).await;
            }
            result.map(|_| ())
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
        let pool = self.pool.clone();
        Box::pin(async move {
            let mut cmd = redis::cmd("XGROUP");
            cmd.arg("CREATE")
                .arg(&*msg.stream)
                .arg(&*msg.group)
                .arg(&*msg.start_id)
                .arg("MKSTREAM");
            let r: Result<Value, Error> = pool
                .run("xgroup|create", COMMAND_WAIT, |mut conn| async move {
                    cmd.query_async(&mut conn).await
                })
                .await;
            match r {
                Ok(_) => Ok(()),
                Err(Error::Redis(e)) if e.code() == Some("BUSYGROUP") => Ok(()),
                Err(Error::Redis(e)) if classify(&e) == Class::Fatal => Err(Error::GroupCreate {
                    stream: msg.stream.to_string(),
                    group: msg.group.to_string(),
                    source: e,
                }),
                Err(e) => Err(e),
            }
        })
    }
}

/// `CLIENT UNBLOCK <client-id>`: wakes a consumer's blocked XREADGROUP as if
/// its block had run out. Answers whether a client was unblocked. In a
/// cluster, client ids are per node: it goes to the node (`host:port`) that
/// holds the read.
#[derive(Message, Clone)]
#[rtype(result = "Result<bool, Error>")]
pub(crate) struct Unblock {
    pub id: i64,
    pub node: Option<String>,
}

impl Handler<Unblock> for RedisActor {
    type Result = ResponseFuture<Result<bool, Error>>;

    fn handle(&mut self, msg: Unblock, _: &mut Self::Context) -> Self::Result {
        let pool = self.pool.clone();
        Box::pin(async move {
            let mut cmd = redis::cmd("CLIENT");
            cmd.arg("UNBLOCK").arg(msg.id);
            let n = pool
                .run("client|unblock", COMMAND_WAIT, |mut conn| async move {
                    conn.on_node(&cmd, msg.node.as_deref()).await
                })
                .await?;
            Ok(n == Value::Int(1))
        })
    }
}

/// A Lua script (`EVALSHA`, loaded on `NOSCRIPT`) on a shared connection.
/// Under a cluster every key must share one hash slot.
#[derive(Message, Clone)]
#[rtype(result = "Result<Value, Error>")]
pub(crate) struct Eval {
    pub script: &'static redis::Script,
    pub keys: Vec<Vec<u8>>,
    pub args: Vec<Vec<u8>>,
}

impl Handler<Eval> for RedisActor {
    type Result = ResponseFuture<Result<Value, Error>>;

    fn handle(&mut self, msg: Eval, _: &mut Self::Context) -> Self::Result {
        let pool = self.pool.clone();
        Box::pin(async move {
            let mut call = msg.script.prepare_invoke();
            for k in &msg.keys {
                call.key(k.as_slice());
            }
            for a in &msg.args {
                call.arg(a.as_slice());
            }
            pool.run("evalsha", COMMAND_WAIT, |mut conn| async move {
                call.invoke_async(&mut conn).await
            })
            .await
        })
    }
}

/// How many more times a command answered `MOVED`, `ASK`, `TRYAGAIN` or
/// `CLUSTERDOWN` after the cluster connection's own redirections is sent
/// again, [`ROUTING_WAIT`] apart. Such an answer means the command did not
/// run, so sending it again never runs it twice. While a slot migrates,
/// commands that follow `ASK` at once on one multiplexed connection can take
/// each other's `ASKING` (the one without it is sent back to the owner, which
/// answers `ASK` again): a moment later the redirection goes through.
const ROUTING_RETRIES: u32 = 5;
/// The wait before a command answered a redirection is sent again.
const ROUTING_WAIT: Duration = Duration::from_millis(50);

/// Any other command on a shared connection (PING, XPENDING, XCLAIM…), with
/// its ACL name (`"xclaim"`), which a refusal names. A redirection that
/// outlasts the cluster connection's own is tried again (see
/// [`ROUTING_RETRIES`]).
#[derive(Message, Clone)]
#[rtype(result = "Result<Value, Error>")]
pub(crate) struct Query(pub &'static str, pub redis::Cmd);

impl Handler<Query> for RedisActor {
    type Result = ResponseFuture<Result<Value, Error>>;

    fn handle(&mut self, msg: Query, _: &mut Self::Context) -> Self::Result {
        let pool = self.pool.clone();
        Box::pin(async move {
            let Query(command, cmd) = msg;
            let mut tries = 0;
            loop {
                let cmd = &cmd;
                let answer = pool
                    .run(command, COMMAND_WAIT, |mut conn| async move {
                        cmd.query_async(&mut conn).await
                    })
                    .await;
                match answer {
                    Err(e) if e.class() == Class::Routing && tries < ROUTING_RETRIES => {
                        tries += 1;
                        tracing::debug!(command, error = %e, "redirected again; sending the command once more");
                        tokio::time::sleep(ROUTING_WAIT).await;
                    }
                    answer => return answer,
                }
            }
        })
    }
}

/// The newer stream commands of the master that holds `key` (see
/// [`commands`]): all `false` when the server does not say.
#[derive(Message)]
#[rtype(result = "Result<commands::ServerCommands, Error>")]
pub(crate) struct CommandsOf(pub Arc<str>);

impl Handler<CommandsOf> for RedisActor {
    type Result = ResponseFuture<Result<commands::ServerCommands, Error>>;

    fn handle(&mut self, msg: CommandsOf, _: &mut Self::Context) -> Self::Result {
        let pool = self.pool.clone();
        Box::pin(async move {
            let key = msg.0;
            let asked = pool
                .run("command", COMMAND_WAIT, |mut conn| async move {
                    conn.on_key(&commands::question(), key.as_bytes()).await
                })
                .await;
            match asked {
                Ok(reply) => Ok(commands::parse(&reply)),
                Err(e) if e.is_retryable() => Err(e),
                Err(_) => Ok(commands::ServerCommands::default()),
            }
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
        self.failovers = None;
        let n = self.pool.close();
        ctx.stop();
        n
    }
}
