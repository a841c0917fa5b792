//! `rillkit`: look at and repair rillkit's streams, groups and dead letters
//! without redis-cli. Built on the public `rillkit::admin` API only (feature
//! `cli`). `rillkit --help` lists the commands and exit codes.
#![forbid(unsafe_code)]

#[path = "rillkit/output.rs"]
mod output;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use rillkit::admin::{Admin, DeadLetterFilter};
use rillkit::{Tls, Topology};
use serde_json::json;

use output::{
    cut, dead_letter_json, duration, entry_json, fields_line, now_ms, print_json, table, text,
};

const LONG_ABOUT: &str = "\
Look at and repair rillkit's streams, consumer groups and dead letters.

Connects to --url (or $REDIS_URL, default redis://127.0.0.1:6379), or to the
master named in --sentinel, or to the cluster of --cluster. A stream's
dead-letter stream is <stream>-dlq, or {<stream>}-dlq under --cluster; --dlq
names another.

Exit codes:
  0   done
  1   Redis error (unreachable, refused, wrong type, no such stream or group),
      or the dead letter asked for does not exist
  2   usage error: bad arguments (clap's), a publish whose JSON does not
      parse, a purge without --yes
  78  bad configuration: malformed URL, --sentinel or --cluster address,
      unreadable --tls-ca file, TLS options with a redis:// URL";

/// The tool's exit code for a usage error (clap's own).
const EXIT_USAGE: u8 = 2;
/// The tool's exit code for a bad configuration (`EX_CONFIG`).
const EXIT_CONFIG: u8 = 78;

#[derive(Parser)]
#[command(name = "rillkit", version, about = "Look at and repair rillkit's streams, groups and dead letters", long_about = LONG_ABOUT)]
struct Cli {
    /// Redis server URL: redis://[user:password@]host:port[/db], rediss:// for TLS.
    /// Ignored with --sentinel or --cluster.
    #[arg(
        long,
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379",
        global = true
    )]
    url: String,

    /// A master found through Sentinel: NAME@HOST:PORT[,HOST:PORT…].
    #[arg(long, value_name = "MASTER@HOST:PORT,…", global = true)]
    sentinel: Option<String>,

    /// A Redis Cluster through its seed nodes: HOST:PORT[,HOST:PORT…].
    #[arg(
        long,
        value_name = "HOST:PORT,…",
        global = true,
        conflicts_with = "sentinel"
    )]
    cluster: Option<String>,

    /// Username (with --password) for the master (--sentinel) or every node
    /// (--cluster); with --url, write credentials in the URL.
    #[arg(long, env = "REDIS_USER", global = true)]
    user: Option<String>,

    /// Password for the master (--sentinel) or every node (--cluster); with
    /// --url, write credentials in the URL.
    #[arg(long, env = "REDIS_PASSWORD", hide_env_values = true, global = true)]
    password: Option<String>,

    /// Trust this CA (PEM file) for TLS; with --url the URL must be rediss://,
    /// with --sentinel or --cluster every connection uses TLS.
    #[arg(long, value_name = "PEM FILE", global = true)]
    tls_ca: Option<PathBuf>,

    /// TLS with the system's trust store (for --sentinel or --cluster; with
    /// --url, rediss:// alone does it).
    #[arg(long, global = true)]
    tls: bool,

    /// Print one JSON document instead of text.
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Streams (discovered with SCAN, or the one named) and their groups:
    /// length, consumers, pending, lag, oldest pending entry's idle time,
    /// dead letters.
    Status {
        /// A stream name, or a glob pattern (default: every stream).
        stream: Option<String>,
    },
    /// The oldest pending entries of a group (XPENDING): consumer, idle
    /// time, delivery count.
    Pending {
        /// Stream key.
        stream: String,
        /// Consumer group.
        group: String,
        /// At most this many entries.
        #[arg(long, default_value_t = 20)]
        count: usize,
    },
    /// The consumers of a group (XINFO CONSUMERS): pending entries, idle time.
    Consumers {
        /// Stream key.
        stream: String,
        /// Consumer group.
        group: String,
        /// First delete the consumers that hold no pending entry and have
        /// been idle longer than this (`90s`, `10m`, `1h`), in one script
        /// (XGROUP DELCONSUMER); a consumer holding entries is never deleted.
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
        prune_idle: Option<std::time::Duration>,
    },
    /// Dead letters: list, show, redrive, purge.
    #[command(subcommand)]
    Dlq(Dlq),
    /// Add an entry with one field data=JSON (XADD), as rillkit publishes.
    Publish {
        /// Stream key.
        stream: String,
        /// The JSON document (checked to parse; stored as given).
        #[arg(value_name = "JSON")]
        document: String,
    },
    /// The newest entries of a stream (XREVRANGE), oldest of them first.
    Tail {
        /// Stream key.
        stream: String,
        /// How many entries.
        #[arg(long, default_value_t = 10)]
        count: usize,
    },
}

#[derive(Subcommand)]
enum Dlq {
    /// The dead letters of a stream, oldest first: origin, deliveries, age,
    /// error.
    List {
        #[command(flatten)]
        select: Select,
    },
    /// One dead letter in full: original fields, and what the move appended.
    Show {
        /// The stream whose dead letters to read.
        stream: String,
        /// The dead letter's id (in the dead-letter stream).
        id: String,
        /// The dead-letter stream key (default <stream>-dlq, {<stream>}-dlq under --cluster).
        #[arg(long)]
        dlq: Option<String>,
    },
    /// Put dead letters back on their origin stream as new entries with their
    /// original fields plus redriven_from=<origin id>, deleting them from the
    /// dead-letter stream (one script each).
    Redrive {
        #[command(flatten)]
        select: Select,
    },
    /// Delete dead letters (XDEL). Without --yes, only says how many it would
    /// delete, and exits 2.
    Purge {
        #[command(flatten)]
        select: Select,
        /// Really delete them.
        #[arg(long)]
        yes: bool,
    },
}

/// Which dead letters a `dlq` command acts on.
#[derive(Args)]
struct Select {
    /// The stream whose dead letters to act on.
    stream: String,
    /// The dead-letter stream key (default <stream>-dlq, {<stream>}-dlq under --cluster).
    #[arg(long)]
    dlq: Option<String>,
    /// Only dead letters whose error contains this text.
    #[arg(long, value_name = "SUBSTR")]
    error: Option<String>,
    /// At most this many (the oldest that match); `list` shows 100 unless told.
    #[arg(long)]
    count: Option<usize>,
    /// The first dead-letter id (inclusive; default: the oldest).
    #[arg(long, value_name = "ID")]
    start: Option<String>,
    /// The last dead-letter id (inclusive; default: the newest when the command starts).
    #[arg(long, value_name = "ID")]
    end: Option<String>,
}

impl Select {
    fn filter(&self, default_count: Option<usize>) -> DeadLetterFilter {
        let mut f = DeadLetterFilter::new();
        if let Some(s) = &self.start {
            f = f.with_start(s.clone());
        }
        if let Some(e) = &self.end {
            f = f.with_end(e.clone());
        }
        if let Some(e) = &self.error {
            f = f.with_error_contains(e.clone());
        }
        if let Some(n) = self.count.or(default_count) {
            f = f.with_count(n);
        }
        f
    }
}

/// Whether `key` holds a stream: a non-empty one (`XLEN`), or an empty one
/// (`XINFO GROUPS` answers for it; for a missing key it fails).
async fn stream_exists(admin: &Admin, key: &str) -> Result<bool, Failure> {
    Ok(admin.stream_len(key).await? > 0 || admin.groups(key).await.is_ok())
}

/// Fails with "not found" when `stream` is not there, so a misspelt name is
/// not mistaken for an empty stream.
async fn existing(admin: &Admin, stream: &str) -> Result<(), Failure> {
    if stream_exists(admin, stream).await? {
        return Ok(());
    }
    Err(Failure::NotFound(format!("no stream {stream:?}")))
}

/// The dead-letter stream to act on: `explicit` (`--dlq`), or `stream`'s.
/// When neither it nor `stream` exists, the name is taken for a typo and
/// the command fails ("not found"); when `stream` is itself a dead-letter
/// stream, the error says to name its origin instead.
async fn dead_letter_stream(
    admin: &Admin,
    stream: &str,
    explicit: Option<&str>,
) -> Result<String, Failure> {
    let dlq = explicit.map_or_else(|| admin.dlq_of(stream), str::to_owned);
    if stream_exists(admin, &dlq).await? {
        return Ok(dlq);
    }
    if stream_exists(admin, stream).await? {
        if let (None, Some(origin)) = (explicit, stream.strip_suffix("-dlq")) {
            return Err(Failure::NotFound(format!(
                "{stream:?} has no dead-letter stream {dlq:?}; to see its dead letters, name its origin: {origin:?}"
            )));
        }
        return Ok(dlq);
    }
    Err(Failure::NotFound(format!(
        "no stream {stream:?} and no dead-letter stream {dlq:?}"
    )))
}

/// Why the tool stops early, and with which exit code.
enum Failure {
    /// A bad configuration: 78.
    Config(String),
    /// A usage error found after parsing: 2.
    Usage(String),
    /// What is asked for is not there: 1.
    NotFound(String),
    /// An error from rillkit: its exit code (1, or 78 for a configuration
    /// error).
    Rillkit(rillkit::Error),
}

impl From<rillkit::Error> for Failure {
    fn from(e: rillkit::Error) -> Self {
        Failure::Rillkit(e)
    }
}

impl Failure {
    fn exit_code(&self) -> u8 {
        match self {
            Failure::Config(_) => EXIT_CONFIG,
            Failure::Usage(_) => EXIT_USAGE,
            Failure::NotFound(_) => 1,
            Failure::Rillkit(e) => u8::try_from(e.exit_code()).unwrap_or(1),
        }
    }

    fn message(&self) -> String {
        match self {
            Failure::Config(m) | Failure::Usage(m) | Failure::NotFound(m) => m.clone(),
            Failure::Rillkit(e) => e.to_string(),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rillkit: cannot start an async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("rillkit: {}", text(f.message().as_bytes()));
            ExitCode::from(f.exit_code())
        }
    }
}

/// `host:port` list, checked.
fn addrs(list: &str, option: &str) -> Result<Vec<String>, Failure> {
    let addrs: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .collect();
    let bad = addrs.iter().find(|a| {
        a.rsplit_once(':')
            .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
    });
    match (addrs.is_empty(), bad) {
        (true, _) => Err(Failure::Config(format!(
            "--{option} {list:?}: no HOST:PORT given"
        ))),
        (_, Some(a)) => Err(Failure::Config(format!(
            "--{option}: {a:?} is not HOST:PORT"
        ))),
        _ => Ok(addrs),
    }
}

/// The topology and TLS settings the options describe.
fn configuration(cli: &Cli) -> Result<(Topology, Option<Tls>), Failure> {
    let mut topology = match (&cli.sentinel, &cli.cluster) {
        (Some(s), _) => {
            let (master, list) = s.split_once('@').ok_or_else(|| {
                Failure::Config(format!(
                    "--sentinel {s:?}: write MASTER@HOST:PORT[,HOST:PORT…]"
                ))
            })?;
            if master.is_empty() {
                return Err(Failure::Config(format!(
                    "--sentinel {s:?}: the master name is missing"
                )));
            }
            Topology::sentinel(master, addrs(list, "sentinel")?)
        }
        (None, Some(c)) => Topology::cluster(addrs(c, "cluster")?),
        (None, None) => Topology::standalone(cli.url.clone()),
    };
    if let Some(p) = &cli.password {
        topology = topology.master_credentials(cli.user.as_deref(), p);
    }
    let mut tls = cli.tls.then(Tls::new);
    if let Some(path) = &cli.tls_ca {
        let pem = std::fs::read(path).map_err(|e| {
            Failure::Config(format!("--tls-ca {}: cannot read it: {e}", path.display()))
        })?;
        tls = Some(Tls::new().ca_pem(pem));
    }
    Ok((topology, tls))
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let (topology, tls) = configuration(&cli)?;
    // A publish whose JSON does not parse is refused before connecting.
    if let Command::Publish { document, .. } = &cli.command {
        serde_json::from_str::<serde_json::Value>(document)
            .map_err(|e| Failure::Usage(format!("publish: the JSON does not parse: {e}")))?;
    }
    let admin = Admin::connect_topology(&topology, tls.as_ref()).await?;
    match &cli.command {
        Command::Status { stream } => status(&admin, stream.as_deref(), cli.json).await,
        Command::Pending {
            stream,
            group,
            count,
        } => pending(&admin, stream, group, *count, cli.json).await,
        Command::Consumers {
            stream,
            group,
            prune_idle,
        } => consumers(&admin, stream, group, *prune_idle, cli.json).await,
        Command::Dlq(d) => dlq(&admin, d, cli.json).await,
        Command::Publish { stream, document } => {
            let id = admin.add(stream, &[("data", document.as_str())]).await?;
            if cli.json {
                print_json(&json!({ "stream": stream, "id": id.as_str() }));
            } else {
                println!("{id}");
            }
            Ok(())
        }
        Command::Tail { stream, count } => {
            existing(&admin, stream).await?;
            let mut entries = admin.newest(stream, *count).await?;
            entries.reverse();
            if cli.json {
                let list: Vec<_> = entries.iter().map(entry_json).collect();
                print_json(&json!({ "stream": stream, "entries": list }));
            } else {
                for e in &entries {
                    println!("{}  {}", e.id, fields_line(&e.fields));
                }
            }
            Ok(())
        }
    }
}

/// Whether a `status` argument is a glob pattern rather than a name.
fn is_pattern(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

async fn status(admin: &Admin, stream: Option<&str>, as_json: bool) -> Result<(), Failure> {
    let names: Vec<String> = match stream {
        Some(name) if !is_pattern(name) => vec![name.to_owned()],
        pattern => {
            let found = admin.streams(pattern.unwrap_or("*")).await?;
            // A stream's default dead-letter stream is shown beside it, not
            // as a stream of its own.
            let all: BTreeSet<&String> = found.iter().collect();
            let dlqs: BTreeSet<String> = found
                .iter()
                .map(|s| admin.dlq_of(s))
                .filter(|d| all.contains(d))
                .collect();
            found.into_iter().filter(|s| !dlqs.contains(s)).collect()
        }
    };
    let mut streams = Vec::new();
    let mut rows = Vec::new();
    for name in &names {
        let length = admin.stream_len(name).await?;
        let groups = match admin.groups(name).await {
            Ok(g) => g,
            // XLEN is 0 for a missing key, and XINFO refuses it.
            Err(_) if length == 0 && stream == Some(name.as_str()) => {
                return Err(Failure::NotFound(format!("no stream named {name:?}")));
            }
            Err(e) => return Err(e.into()),
        };
        let dlq = admin.dlq_of(name);
        let dlq_length = admin.stream_len(&dlq).await?;
        let mut group_docs = Vec::new();
        for g in &groups {
            let oldest_idle = if g.pending > 0 {
                admin
                    .pending(name, &g.name, 1)
                    .await?
                    .first()
                    .map(|p| p.idle_ms)
            } else {
                None
            };
            rows.push(vec![
                name.clone(),
                length.to_string(),
                g.name.clone(),
                g.consumers.to_string(),
                g.pending.to_string(),
                g.lag.map_or("?".into(), |l| l.to_string()),
                oldest_idle.map_or("-".into(), duration),
                dlq_length.to_string(),
            ]);
            group_docs.push(json!({
                "group": g.name,
                "consumers": g.consumers,
                "pending": g.pending,
                "lag": g.lag,
                "last_delivered_id": g.last_delivered_id.as_str(),
                "oldest_pending_idle_ms": oldest_idle,
            }));
        }
        if groups.is_empty() {
            rows.push(vec![
                name.clone(),
                length.to_string(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                dlq_length.to_string(),
            ]);
        }
        streams.push(json!({
            "stream": name,
            "length": length,
            "dlq": dlq,
            "dlq_length": dlq_length,
            "groups": group_docs,
        }));
    }
    if as_json {
        print_json(&json!({ "streams": streams }));
    } else if rows.is_empty() {
        println!("no streams");
    } else {
        print!(
            "{}",
            table(
                &[
                    "STREAM",
                    "LENGTH",
                    "GROUP",
                    "CONSUMERS",
                    "PENDING",
                    "LAG",
                    "OLDEST-PENDING-IDLE",
                    "DLQ",
                ],
                &rows
            )
        );
    }
    Ok(())
}

async fn pending(
    admin: &Admin,
    stream: &str,
    group: &str,
    count: usize,
    as_json: bool,
) -> Result<(), Failure> {
    if count == 0 {
        return Err(Failure::Usage(
            "--count 0 would show nothing; give at least 1".into(),
        ));
    }
    let entries = admin.pending(stream, group, count).await?;
    if as_json {
        let list: Vec<_> = entries
            .iter()
            .map(|p| {
                json!({
                    "id": p.id.as_str(),
                    "consumer": p.consumer,
                    "idle_ms": p.idle_ms,
                    "delivery_count": p.delivery_count,
                })
            })
            .collect();
        print_json(&json!({ "stream": stream, "group": group, "pending": list }));
    } else if entries.is_empty() {
        println!("nothing pending");
    } else {
        let rows: Vec<Vec<String>> = entries
            .iter()
            .map(|p| {
                vec![
                    p.id.to_string(),
                    p.consumer.clone(),
                    duration(p.idle_ms),
                    p.delivery_count.to_string(),
                ]
            })
            .collect();
        print!(
            "{}",
            table(&["ID", "CONSUMER", "IDLE", "DELIVERIES"], &rows)
        );
    }
    Ok(())
}

async fn consumers(
    admin: &Admin,
    stream: &str,
    group: &str,
    prune_idle: Option<std::time::Duration>,
    as_json: bool,
) -> Result<(), Failure> {
    let pruned = match prune_idle {
        Some(idle) => admin.prune_idle_consumers(stream, group, idle).await?,
        None => Vec::new(),
    };
    let list = admin.consumers(stream, group).await?;
    if as_json {
        let docs: Vec<_> = list
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "pending": c.pending,
                    "idle_ms": c.idle_ms,
                    "inactive_ms": c.inactive_ms,
                })
            })
            .collect();
        print_json(
            &json!({ "stream": stream, "group": group, "pruned": pruned, "consumers": docs }),
        );
        return Ok(());
    }
    if prune_idle.is_some() {
        println!(
            "pruned {} idle consumer(s): {}",
            pruned.len(),
            text(pruned.join(", ").as_bytes())
        );
    }
    if list.is_empty() {
        println!("no consumers");
    } else {
        let rows: Vec<Vec<String>> = list
            .iter()
            .map(|c| vec![c.name.clone(), c.pending.to_string(), duration(c.idle_ms)])
            .collect();
        print!("{}", table(&["CONSUMER", "PENDING", "IDLE"], &rows));
    }
    Ok(())
}

/// Dead letters listed when `dlq list` is not given `--count`.
const LIST_COUNT: usize = 100;

async fn dlq(admin: &Admin, cmd: &Dlq, as_json: bool) -> Result<(), Failure> {
    match cmd {
        Dlq::List { select } => {
            let dlq = dead_letter_stream(admin, &select.stream, select.dlq.as_deref()).await?;
            let list = admin
                .dead_letters(&dlq, &select.filter(Some(LIST_COUNT)))
                .await?;
            if as_json {
                let docs: Vec<_> = list.iter().map(dead_letter_json).collect();
                print_json(&json!({ "dlq": dlq, "dead_letters": docs }));
                return Ok(());
            }
            if list.is_empty() {
                println!("no dead letters in {}", text(dlq.as_bytes()));
                return Ok(());
            }
            let now = now_ms();
            let rows: Vec<Vec<String>> = list
                .iter()
                .map(|d| match &d.origin {
                    Some(o) => vec![
                        d.id.to_string(),
                        format!("{} {}", o.stream, o.id),
                        o.group.clone(),
                        o.delivery_count.to_string(),
                        format!("{} ago", duration(now.saturating_sub(o.failed_at_ms))),
                        cut(&text(o.error.as_bytes()), 60),
                    ],
                    None => vec![
                        d.id.to_string(),
                        "-".into(),
                        "-".into(),
                        "-".into(),
                        "-".into(),
                        "(not a rillkit dead letter)".into(),
                    ],
                })
                .collect();
            print!(
                "{}",
                table(
                    &["ID", "ORIGIN", "GROUP", "DELIVERIES", "FAILED", "ERROR"],
                    &rows
                )
            );
            Ok(())
        }
        Dlq::Show { stream, id, dlq } => {
            let dlq = dead_letter_stream(admin, stream, dlq.as_deref()).await?;
            let found = admin
                .dead_letters(&dlq, &DeadLetterFilter::new().with_id(id.clone()))
                .await?;
            let Some(d) = found.first() else {
                return Err(Failure::NotFound(format!("no dead letter {id} in {dlq}")));
            };
            if as_json {
                print_json(&json!({ "dlq": dlq, "dead_letter": dead_letter_json(d) }));
                return Ok(());
            }
            println!("id:               {}", d.id);
            match &d.origin {
                Some(o) => {
                    println!("origin stream:    {}", text(o.stream.as_bytes()));
                    println!("origin id:        {}", o.id);
                    println!("origin group:     {}", text(o.group.as_bytes()));
                    println!("origin consumer:  {}", text(o.consumer.as_bytes()));
                    println!("delivery count:   {}", o.delivery_count);
                    println!(
                        "failed at ms:     {} ({} ago)",
                        o.failed_at_ms,
                        duration(now_ms().saturating_sub(o.failed_at_ms))
                    );
                    println!("error:            {}", text(o.error.as_bytes()));
                }
                None => println!("origin:           (not a rillkit dead letter)"),
            }
            println!("fields:");
            for (k, v) in &d.fields {
                println!("  {} = {}", text(k), text(v));
            }
            Ok(())
        }
        Dlq::Redrive { select } => {
            let dlq = dead_letter_stream(admin, &select.stream, select.dlq.as_deref()).await?;
            let report = admin.redrive(&dlq, &select.filter(None)).await?;
            if as_json {
                let redriven: Vec<_> = report
                    .redriven
                    .iter()
                    .map(|r| {
                        json!({
                            "dead_letter": r.dead_letter.as_str(),
                            "stream": r.stream,
                            "id": r.id.as_str(),
                        })
                    })
                    .collect();
                let skipped: Vec<_> = report
                    .skipped
                    .iter()
                    .map(|s| json!({ "id": s.id.as_str(), "reason": s.reason }))
                    .collect();
                print_json(&json!({
                    "dlq": dlq,
                    "redriven": redriven,
                    "skipped": skipped,
                }));
                return Ok(());
            }
            for r in &report.redriven {
                println!(
                    "{} -> {} {}",
                    r.dead_letter,
                    text(r.stream.as_bytes()),
                    r.id
                );
            }
            for s in &report.skipped {
                println!("{} skipped: {}", s.id, text(s.reason.as_bytes()));
            }
            println!(
                "redrove {} dead letter(s) from {}, skipped {}",
                report.count(),
                text(dlq.as_bytes()),
                report.skipped.len()
            );
            Ok(())
        }
        Dlq::Purge { select, yes } => {
            let dlq = dead_letter_stream(admin, &select.stream, select.dlq.as_deref()).await?;
            let filter = select.filter(None);
            if !yes {
                let would = admin.dead_letters(&dlq, &filter).await?.len();
                return Err(Failure::Usage(format!(
                    "would delete {would} dead letter(s) from {dlq}; add --yes to delete them"
                )));
            }
            let deleted = admin.purge(&dlq, &filter).await?;
            if as_json {
                print_json(&json!({ "dlq": dlq, "deleted": deleted }));
            } else {
                println!(
                    "deleted {deleted} dead letter(s) from {}",
                    text(dlq.as_bytes())
                );
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
