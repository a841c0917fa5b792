//! `rillkit metrics`: every stream's and consumer group's gauges in the
//! Prometheus text format, printed once (for node_exporter's textfile
//! collector or a cron job) or served at `/metrics` (`--listen`), through
//! the library's `ServerMetrics::snapshot` and
//! `MetricsSnapshot::to_prometheus`.

use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::time::Duration;

use rillkit::admin::{Admin, MetricsSnapshot, ServerMetrics};
use rillkit::{Tls, Topology};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

use crate::output::{print_json, text};
use crate::{Ctx, Failure};

/// The longest request head `--listen` reads, in bytes.
const MAX_HEAD: usize = 8192;
/// How long a scrape may take, from its connection to the last byte sent.
const SCRAPE_WITHIN: Duration = Duration::from_secs(30);

/// The listener of `--listen ADDR`, bound before anything connects to
/// Redis. An address it cannot listen on is a bad configuration (exit 78),
/// said on one line that names it: in use (another process listens there),
/// or the error.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Failure> {
    TcpListener::bind(addr).await.map_err(|e| {
        Failure::Config(match e.kind() {
            std::io::ErrorKind::AddrInUse => format!(
                "--listen {addr}: address in use (another process listens on it): choose another port"
            ),
            _ => format!("--listen {addr}: cannot listen there: {e}"),
        })
    })
}

/// `rillkit metrics [--max-groups N] [--listen ADDR]`: with `listener`
/// (bound by [`bind`]), served there.
pub async fn metrics(
    ctx: &Ctx,
    max_groups: usize,
    listener: Option<TcpListener>,
    (topology, tls): (Topology, Option<Tls>),
) -> Result<(), Failure> {
    let collector = ServerMetrics::new().with_max_groups(max_groups);
    if let Some(listener) = listener {
        return serve(ctx.admin.clone(), collector, listener, topology, tls).await;
    }
    let snap = collector.snapshot(&ctx.admin).await?;
    if snap.collected.skipped > 0 {
        eprintln!(
            "rillkit: {} groups left out by --max-groups {max_groups} (rillkit_server_metrics_groups_skipped)",
            snap.collected.skipped
        );
    }
    if ctx.json {
        print_json(&as_json(&snap));
        return Ok(());
    }
    let out = snap.to_prometheus();
    if std::io::stdout().is_terminal() {
        // Names as the format writes them, but nothing raw on a terminal.
        for line in out.lines() {
            say!("{}", text(line.as_bytes()));
        }
    } else {
        say_inline!("{out}");
    }
    Ok(())
}

fn as_json(snap: &MetricsSnapshot) -> serde_json::Value {
    let groups: Vec<serde_json::Value> = snap
        .groups
        .iter()
        .map(|g| {
            json!({
                "stream": g.stream,
                "group": g.group,
                "lag": g.lag,
                "pending": g.pending,
                "oldest_pending_age_ms": g.oldest_pending_age.map(|d| d.as_millis() as u64),
                "consumers": g.consumers,
                "dead_letters": g.dead_letters,
            })
        })
        .collect();
    let c = &snap.collected;
    json!({
        "streams": c.streams,
        "groups": groups,
        "skipped": c.skipped,
    })
}

/// The connection scrapes share, opened again after a connection error.
struct Conn {
    admin: Mutex<Option<Admin>>,
    topology: Topology,
    tls: Option<Tls>,
}

impl Conn {
    async fn snapshot(&self, collector: &ServerMetrics) -> Result<MetricsSnapshot, rillkit::Error> {
        let admin = {
            let mut slot = self.admin.lock().await;
            match slot.as_ref() {
                Some(a) => a.clone(),
                None => {
                    let a = Admin::connect_topology(&self.topology, self.tls.as_ref()).await?;
                    *slot = Some(a.clone());
                    a
                }
            }
        };
        let snap = collector.snapshot(&admin).await;
        if let Err(e) = &snap
            && e.is_connection()
        {
            *self.admin.lock().await = None;
        }
        snap
    }
}

/// Serves `GET /metrics` on `listener` until Ctrl-C (exit 0), each scrape a
/// fresh pass.
async fn serve(
    admin: Admin,
    collector: ServerMetrics,
    listener: TcpListener,
    topology: Topology,
    tls: Option<Tls>,
) -> Result<(), Failure> {
    match listener.local_addr() {
        Ok(bound) => eprintln!("rillkit: serving http://{bound}/metrics (Ctrl-C ends)"),
        Err(_) => eprintln!("rillkit: serving /metrics (Ctrl-C ends)"),
    }
    let conn = std::sync::Arc::new(Conn {
        admin: Mutex::new(Some(admin)),
        topology,
        tls,
    });
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            accepted = listener.accept() => {
                let Ok((socket, _)) = accepted else { continue };
                let (conn, collector) = (conn.clone(), collector.clone());
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(SCRAPE_WITHIN, answer(socket, &conn, &collector)).await;
                });
            }
        }
    }
}

/// Reads one request head and answers it: `GET` or `HEAD /metrics` with
/// the gauges (503 with the error when Redis failed), 404 for another
/// path, 405 for another method; then closes the connection.
async fn answer(
    mut socket: TcpStream,
    conn: &Conn,
    collector: &ServerMetrics,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
        if head.len() > MAX_HEAD {
            return reply(
                &mut socket,
                "431 Request Header Fields Too Large",
                "",
                false,
            )
            .await;
        }
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let body = !method.eq("HEAD");
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => match conn.snapshot(collector).await {
            Ok(snap) => reply(&mut socket, "200 OK", &snap.to_prometheus(), body).await,
            Err(e) => {
                let text = format!("reading the server's figures failed: {e}\n");
                reply(&mut socket, "503 Service Unavailable", &text, body).await
            }
        },
        ("GET" | "HEAD", _) => reply(&mut socket, "404 Not Found", "see /metrics\n", body).await,
        _ => reply(&mut socket, "405 Method Not Allowed", "", body).await,
    }
}

async fn reply(
    socket: &mut TcpStream,
    status: &str,
    text: &str,
    body: bool,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        text.len()
    );
    socket.write_all(head.as_bytes()).await?;
    if body {
        socket.write_all(text.as_bytes()).await?;
    }
    socket.shutdown().await
}
