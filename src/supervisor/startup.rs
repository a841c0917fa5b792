//! The startup I/O the lifecycle driver asks for before any consumer runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::FutureExt;
use redis::Value;

use crate::connection::{Connector, Pool, wait_until_ready};
use crate::error::{Class, Error};
use crate::redis::{Close, CreateGroup, Query, RedisActor};
use crate::source::stream::Subscription;

/// How the shared connections are opened at start.
pub(crate) struct Shared {
    /// Connections in the shared pool.
    pub pool_size: usize,
    /// How long a publish may wait for the pool to come back.
    pub publish_timeout: Duration,
}

/// The startup I/O, in order: PING, the shared pool and `RedisActor` (handed
/// to `opened` at once, so an abandoned start can close it), the consumer
/// groups with an ACL probe each, then the consumer names' leases. Each step
/// waits for a server that is starting (until `deadline`) and fails at once
/// on anything else, with a log line that names the cause.
pub(crate) async fn connect(
    connector: &Connector,
    shared: Shared,
    deadline: Instant,
    subs: &[Arc<Subscription>],
    opened: impl FnOnce(Addr<RedisActor>),
) -> Result<Addr<RedisActor>, Error> {
    let fail = |e: Error| {
        let server = connector.describe();
        match e.class() {
            _ if matches!(e, Error::NotRedis { .. }) => {
                tracing::error!(server, error = %e, "the server does not speak the Redis protocol; start failed")
            }
            _ if matches!(e, Error::NotTls { .. }) => {
                tracing::error!(server, error = %e, "the server has no TLS; start failed")
            }
            // The server answered, with an error, while the connection was
            // set up (a database number it does not have, say).
            Class::Connection if e.code().is_some() => {
                tracing::error!(server, error = %e, "redis refused the connection's setup; start failed")
            }
            Class::Connection => {
                tracing::error!(server, error = %e, "redis is unreachable; start failed")
            }
            Class::Credentials => {
                tracing::error!(server, error = %e, "redis refused the credentials; start failed")
            }
            Class::Tls => {
                tracing::error!(server, error = %e, "the TLS handshake failed (check the CA, the client certificate and the server name); start failed")
            }
            Class::Permission => {
                tracing::error!(server, error = %e, "the redis ACL user lacks a permission; start failed")
            }
            _ => tracing::error!(server, error = %e, "start failed"),
        }
        e
    };
    let pool = wait_until_ready(connector, "PING", "ping", deadline, || async {
        // Every master of a cluster answers (redis-rs sends PING to each).
        for mut c in connector.shared(1, connector.timeouts().connect).await? {
            redis::cmd("PING")
                .query_async::<redis::Value>(&mut c)
                .await
                .map_err(Error::from_redis)?;
        }
        Pool::connect(connector.clone(), shared.pool_size).await
    })
    .await
    .map_err(fail)?;
    let redis = RedisActor::new(pool, connector.watch_failovers(), shared.publish_timeout).start();
    opened(redis.clone());
    // An ordered stream's partition count: recorded the first time, else
    // checked against the one recorded.
    for sub in subs {
        let Some(ordered) = sub.ordered() else {
            continue;
        };
        let checked = wait_until_ready(connector, "SET", "set", deadline, || {
            crate::source::stream::ordered::check_partitions(&redis, &sub.names.name, ordered)
        })
        .await;
        if let Err(e) = checked {
            let _ = redis.send(Close).await;
            return Err(fail(e));
        }
    }
    // Consumer groups, and an ACL probe of XREADGROUP: a user that may
    // not read the stream fails here, naming XREADGROUP, rather than retrying
    // its reads forever once started. An ordered stream's on each partition.
    for sub in subs.iter().flat_map(Subscription::readers) {
        let sub = &sub;
        let created = wait_until_ready(
            connector,
            "XGROUP CREATE",
            "xgroup|create",
            deadline,
            || {
                redis
                    .send(CreateGroup {
                        stream: sub.names.name.clone(),
                        group: sub.names.group.clone(),
                        start_id: sub.opts.start_id.as_str().into(),
                    })
                    .map(|r| r.unwrap_or(Err(Error::ShutDown)))
            },
        )
        .await;
        let created = match created {
            Ok(()) => {
                wait_until_ready(connector, "XREADGROUP", "xreadgroup", deadline, || {
                    redis.send(Query("xreadgroup", acl_probe(sub))).map(|r| {
                        match r.unwrap_or(Err(Error::ShutDown)) {
                            // The answer a permitted probe gets.
                            Err(e) if e.class() == Class::Fatal => Ok(()),
                            other => other.map(drop),
                        }
                    })
                })
                .await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = created {
            let _ = redis.send(Close).await;
            return Err(fail(e));
        }
    }
    // The consumer names' leases: a name held by another live process is
    // waited for, up to the same deadline.
    for sub in subs {
        let Some(lease) = &sub.lease else { continue };
        let taken = wait_until_ready(
            connector,
            "the consumer name's lease",
            "evalsha",
            deadline,
            || lease.acquire(&redis, Some(deadline), None, &sub.board),
        )
        .await;
        if let Err(e) = taken {
            let _ = redis.send(Close).await;
            return Err(fail(e));
        }
    }
    warn_if_evicting(&redis, subs.iter().any(|s| s.lease.is_some())).await;
    Ok(redis)
}

/// Reads the eviction policy (`INFO memory`) and warns once when the server
/// may evict keys rillkit needs. Under `allkeys-*` any key may go: streams,
/// lists, dead-letter streams and rillkit's bookkeeping. Under `volatile-*`
/// only keys with a TTL: of rillkit's, the stream consumer names' leases
/// (`rillkit:lease:*`), whose loss lets a second process take a name in use
/// and a prune remove a live consumer that holds nothing (`leases`: some
/// stream consumer here has one); a list consumer's heartbeat record has no
/// TTL, and one missing for any reason is not taken for a death. A refused
/// `INFO` (a minimal ACL) is logged at DEBUG.
async fn warn_if_evicting(redis: &Addr<RedisActor>, leases: bool) {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("memory");
    let info = match redis.send(Query("info", cmd)).await {
        // A cluster connection answers every master's, by address.
        Ok(Ok(Value::Map(nodes))) => nodes.first().and_then(|(_, v)| crate::redis::info::text(v)),
        Ok(Ok(v)) => crate::redis::info::text(&v),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "could not read the eviction policy (INFO memory)");
            return;
        }
        Err(_) => return,
    };
    let Some((maxmemory, policy)) = info.as_deref().and_then(crate::redis::info::eviction) else {
        return;
    };
    if maxmemory == 0 || policy == "noeviction" {
        return;
    }
    if policy.starts_with("allkeys-") {
        tracing::warn!(
            maxmemory, policy = %policy,
            "the server may evict any key when it is full: streams, lists, dead-letter streams and rillkit's bookkeeping; entries and items would be lost. Set maxmemory-policy noeviction (writes then fail with OOM, which rillkit waits out)"
        );
    } else if leases && policy.starts_with("volatile-") {
        tracing::warn!(
            maxmemory, policy = %policy,
            "the server may evict keys with a TTL when it is full: of rillkit's, the stream consumer names' leases (rillkit:lease:*), which keep a second process off a consumer name in use. Set maxmemory-policy noeviction, or give every consumer a name of its own"
        );
    }
}

/// `XREADGROUP … STREAMS <stream> $`: Redis checks the ACL (command and key)
/// before it runs a command, so a user that may not read the stream gets
/// `NOPERM`, and one that may gets `ERR The $ ID is meaningless in the context
/// of XREADGROUP`, with nothing read, delivered or created. (An id past every
/// entry would not do: Redis serves it like `>` and delivers a new entry.)
fn acl_probe(sub: &Subscription) -> redis::Cmd {
    let mut cmd = redis::cmd("XREADGROUP");
    cmd.arg("GROUP")
        .arg(&*sub.names.group)
        .arg(&*sub.consumer)
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg(&*sub.names.name)
        .arg("$");
    cmd
}
