//! Opening one connection: the attempt within the connect timeout, its
//! name, the master check (`ROLE`), and what the failure was when it fails:
//! a server without TLS reached over TLS, a port that answers but not as
//! Redis, a server refusing clients because it is full.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, Value};

use crate::error::{Class, Error, classify};

/// One connection to `client`'s server, one attempt, checked to be a master.
pub(crate) async fn connect_to(
    client: &Client,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<MultiplexedConnection, Error> {
    let mut conn = open(client, connect_timeout, response_timeout).await?;
    check_role(&mut conn, client).await?;
    Ok(conn)
}

/// A name for `CLIENT SETNAME`: `rillkit:` then the parts joined by `:`,
/// with anything `CLIENT SETNAME` refuses (spaces, newlines, other control
/// characters) replaced by `_`.
pub(crate) fn client_name(parts: &[&str]) -> String {
    let mut name = String::from("rillkit");
    for p in parts {
        name.push(':');
        name.extend(p.chars().map(|c| {
            if c.is_whitespace() || c.is_control() {
                '_'
            } else {
                c
            }
        }));
    }
    name
}

/// The name of this process's shared connections:
/// `rillkit:<hostname>-<pid>:shared`.
pub(super) fn shared_name() -> String {
    let host = gethostname::gethostname();
    client_name(&[
        &format!("{}-{}", host.to_string_lossy(), std::process::id()),
        "shared",
    ])
}

/// Names a connection (`CLIENT SETNAME`) so an operator can tell rillkit's
/// connections in `CLIENT LIST`. A refusal (ACL) costs nothing but the name.
pub(super) async fn name_connection(conn: &mut MultiplexedConnection, name: &str) {
    let r: redis::RedisResult<()> = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(name)
        .query_async(conn)
        .await;
    if let Err(e) = r {
        tracing::debug!(name, error = %e, "CLIENT SETNAME refused; the connection stays unnamed");
    }
}

/// One connection to a sentinel, one attempt.
pub(super) async fn connect_to_sentinel(
    client: &Client,
    connect_timeout: Duration,
) -> Result<MultiplexedConnection, Error> {
    open(client, connect_timeout, connect_timeout).await
}

/// One connection to `client`'s server, one attempt.
///
/// A failure that a wrong address or scheme causes says so: a server that
/// answers with something other than the Redis protocol is
/// [`Error::NotRedis`]; over TLS, a server without TLS is [`Error::NotTls`]
/// (found early: a TLS handshake not done after [`PLAIN_PROBE_AFTER`] is
/// raced by a plain `PING`), and a handshake that timed out names TLS.
pub(super) async fn open(
    client: &Client,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<MultiplexedConnection, Error> {
    let cfg = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(Some(response_timeout));
    let connect = client.get_multiplexed_async_connection_with_config(&cfg);
    let (host, port, tls) = match client.get_connection_info().addr() {
        ConnectionAddr::Tcp(host, port) => (host.as_str(), *port, false),
        ConnectionAddr::TcpTls { host, port, .. } => (host.as_str(), *port, true),
        _ => return connect.await.map_err(Error::Connect),
    };
    let addr = host_port(host, port);
    let result = if tls {
        tokio::pin!(connect);
        tokio::select! {
            r = &mut connect => r,
            () = tokio::time::sleep(PLAIN_PROBE_AFTER) => tokio::select! {
                r = &mut connect => r,
                plain = first_line(host, port, connect_timeout) => {
                    if plain.as_deref().is_some_and(is_resp) {
                        return Err(Error::NotTls {
                            addr,
                            reason: "the server answers without TLS".into(),
                        });
                    }
                    connect.await
                }
            },
        }
    } else {
        connect.await
    };
    let e = match result {
        Ok(conn) => return Ok(conn),
        Err(e) => e,
    };
    if e.kind() == redis::ErrorKind::Parse {
        // Over TLS the probe would need a handshake of its own: no line.
        let sent = if tls {
            None
        } else {
            first_line(host, port, connect_timeout).await
        };
        return Err(Error::NotRedis {
            addr,
            sent: sent.map(|l| shown(&l)),
        });
    }
    if tls && is_not_tls(&e) {
        return Err(Error::NotTls {
            addr,
            reason: e.to_string(),
        });
    }
    if tls && e.is_timeout() {
        return Err(Error::Connect(redis::RedisError::from(
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "connecting to {addr} over TLS timed out after {} ms: is the server TLS-enabled? use redis:// (and no TLS options) for a plain server",
                    connect_timeout.as_millis()
                ),
            ),
        )));
    }
    Err(Error::Connect(e))
}

/// How long a TLS connection may go without finishing before a plain `PING`
/// asks the same address whether its server has TLS at all. A server
/// without TLS may wait for the rest of what it takes for a command and
/// answer the handshake nothing.
pub(super) const PLAIN_PROBE_AFTER: Duration = Duration::from_millis(500);

/// `host:port`, an IPv6 host in brackets.
pub(super) fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Connects to `host:port` without TLS, sends `PING` (and an empty line, so
/// that a line-based server such as an HTTP one takes the request as
/// complete), and answers the first line the server sends within
/// [`PROBE_LISTEN`], without its line end.
pub(super) async fn first_line(
    host: &str,
    port: u16,
    connect_timeout: Duration,
) -> Option<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::time::timeout(
        connect_timeout,
        tokio::net::TcpStream::connect((host, port)),
    )
    .await
    .ok()?
    .ok()?;
    tcp.write_all(b"PING\r\n\r\n").await.ok()?;
    let mut buf = [0u8; 128];
    let n = tokio::time::timeout(PROBE_LISTEN, tcp.read(&mut buf))
        .await
        .ok()?
        .ok()?;
    let line = buf[..n].split(|&b| b == b'\n').next()?;
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    (!line.is_empty()).then(|| line.to_vec())
}

/// Whether `line` is a Redis reply to `PING`: `+PONG`, or an error
/// (`-NOAUTH …`, `-DENIED …`).
pub(super) fn is_resp(line: &[u8]) -> bool {
    matches!(line.first(), Some(b'+' | b'-'))
}

/// The longest part of a server's line [`Error::NotRedis`] shows, in
/// characters.
pub(super) const SHOWN_MAX: usize = 40;

/// `line` as one short line of text: UTF-8 (lossy), control characters
/// escaped, backquotes as `'`, cut at [`SHOWN_MAX`] characters (`…`).
pub(super) fn shown(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == SHOWN_MAX {
            out.push('…');
            break;
        }
        match c {
            '`' => out.push('\''),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

/// Whether the TLS library failed on what the server sent because it is not
/// TLS at all (a server without TLS answers the handshake with a Redis
/// error line: a record of no TLS content type).
pub(super) fn is_not_tls(e: &redis::RedisError) -> bool {
    use std::error::Error as _;
    type Shared = Arc<dyn std::error::Error + Send + Sync>;
    // redis-rs keeps an I/O error as an `Arc` of it; the TLS library's
    // error is inside.
    let source = e.source();
    let io = source
        .and_then(|s| s.downcast_ref::<Shared>())
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .or_else(|| source.and_then(|s| s.downcast_ref::<std::io::Error>()));
    let rustls_error = io
        .and_then(|io| io.get_ref())
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    matches!(
        rustls_error,
        Some(rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. })
    )
}

/// `ROLE` must say `master`: a server demoted in a failover accepts the
/// connection but refuses every write. A server that refuses `ROLE` (ACL,
/// renamed command) is taken at its word.
pub(super) async fn check_role(
    conn: &mut MultiplexedConnection,
    client: &Client,
) -> Result<(), Error> {
    let role: redis::RedisResult<Value> = redis::cmd("ROLE").query_async(conn).await;
    match role {
        Ok(Value::Array(items)) => match items.first() {
            Some(Value::BulkString(b)) if b.as_slice() != b"master" => Err(Error::NotMaster {
                addr: client.get_connection_info().addr().to_string(),
            }),
            _ => Ok(()),
        },
        Ok(_) => Ok(()),
        Err(e) => match classify(&e) {
            Class::Permission | Class::Fatal => Ok(()),
            _ => Err(Error::from_redis(e)),
        },
    }
}

/// Commands a connection sends before the one a step is about (redis-rs's
/// cluster connection asks `CLUSTER SLOTS`; a reader asks `ROLE`).
pub(super) const CONNECT_COMMANDS: [&str; 3] = ["cluster|slots", "role", "asking"];

/// The command a `NOPERM` answer names (`… to run the 'cluster|slots'
/// command`), when it is one a connection sends by itself.
pub(super) fn refused_command(e: &Error) -> Option<&'static str> {
    let text = e.to_string();
    CONNECT_COMMANDS
        .into_iter()
        .find(|c| text.contains(&format!("'{c}'")))
}

/// How long a probe listens for a full server's greeting.
pub(super) const PROBE_LISTEN: Duration = Duration::from_millis(500);

/// Connects to `host:port`, sends nothing, and answers whether the server
/// says within [`PROBE_LISTEN`] that it has no free connection slot.
pub(super) async fn full_by_probe(host: &str, port: u16, connect_timeout: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let Ok(Ok(mut tcp)) = tokio::time::timeout(
        connect_timeout,
        tokio::net::TcpStream::connect((host, port)),
    )
    .await
    else {
        return false;
    };
    let mut greeting = [0u8; 64];
    match tokio::time::timeout(PROBE_LISTEN, tcp.read(&mut greeting)).await {
        Ok(Ok(n)) => String::from_utf8_lossy(&greeting[..n]).contains("max number of clients"),
        _ => false,
    }
}
