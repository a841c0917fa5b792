//! `rillkit`: look at and repair rillkit's streams, groups and dead letters
//! without redis-cli. Built on the public `rillkit::admin` API only (the
//! package `rillkit-cli`). `rillkit --help` lists the commands and exit codes.
//!
//! `cli.rs` is the command line; `queues.rs` status, pending entries and
//! consumers; `dlq.rs` dead letters; `entries.rs` publish and tail;
//! `metrics.rs` the Prometheus text of every group's gauges;
//! `operator.rs` the confirmation and Ctrl-C; `output.rs` how it prints.
#![forbid(unsafe_code)]

/// `println!` for stdout that ends the program quietly (exit 141, as a
/// SIGPIPE would) when its reader went away (`rillkit … | head`), where
/// `println!` panics.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// [`say!`] without the newline.
macro_rules! say_inline {
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!($($arg)*))
    };
}

mod cli;
mod dlq;
mod entries;
mod fleet;
mod list_dlq;
mod metrics;
mod operator;
mod output;
mod queues;
mod redrive;

use std::process::ExitCode;

use clap::Parser;
use rillkit::admin::Admin;
use rillkit::{Tls, Topology};

use cli::{Cli, Command};
use output::{CELL_CAP, text};

/// The tool's exit code for a usage error (clap's own).
const EXIT_USAGE: u8 = 2;
/// The tool's exit code for a bad configuration (`EX_CONFIG`).
const EXIT_CONFIG: u8 = 78;
/// The tool's exit code after Ctrl-C stopped a change (128 + SIGINT).
const EXIT_INTERRUPTED: u8 = 130;

/// What every command works with: the connection and how to print.
pub struct Ctx {
    pub admin: Admin,
    /// `--json`.
    pub json: bool,
    /// The widest a table cell may be, in columns (`None` with `--wide`).
    pub cap: Option<usize>,
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

/// Why the tool stops early, and with which exit code.
pub enum Failure {
    /// A bad configuration: 78.
    Config(String),
    /// A usage error found after parsing, or a change not confirmed: 2.
    Usage(String),
    /// What is asked for is not there: 1.
    NotFound(String),
    /// Ctrl-C stopped a change: 130 (what was done is in the message).
    Interrupted(String),
    /// A change that changed nothing: every selected item was skipped, for
    /// the reasons in the message: 1.
    NothingDone(String),
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
            Failure::NotFound(_) | Failure::NothingDone(_) => 1,
            Failure::Interrupted(_) => EXIT_INTERRUPTED,
            Failure::Rillkit(e) => u8::try_from(e.exit_code()).unwrap_or(1),
        }
    }

    fn message(&self) -> String {
        match self {
            Failure::Config(m)
            | Failure::Usage(m)
            | Failure::NotFound(m)
            | Failure::Interrupted(m)
            | Failure::NothingDone(m) => m.clone(),
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
        if document != "-" {
            serde_json::from_str::<serde_json::Value>(document)
                .map_err(|e| Failure::Usage(format!("publish: the JSON does not parse: {e}")))?;
        }
    }
    // A --listen address that cannot be listened on is said before Redis
    // is asked anything.
    let listener = match &cli.command {
        Command::Metrics {
            listen: Some(addr), ..
        } => Some(metrics::bind(*addr).await?),
        _ => None,
    };
    let ctx = Ctx {
        admin: Admin::connect_topology(&topology, tls.as_ref()).await?,
        json: cli.json,
        cap: (!cli.wide).then_some(CELL_CAP),
    };
    match &cli.command {
        Command::Status { stream } => queues::status(&ctx, stream.as_deref()).await,
        Command::Server => queues::server(&ctx).await,
        Command::Pending(p) => queues::pending(&ctx, p).await,
        Command::Consumers {
            stream,
            group,
            prune_idle,
        } => queues::consumers(&ctx, stream, group, *prune_idle).await,
        Command::Dlq(d) => dlq::dlq(&ctx, d).await,
        Command::Publish {
            stream,
            document,
            create,
            key_field,
            partitions,
            idempotency_key_field,
            producer,
            window,
            delay,
            at,
        } => {
            let documents = entries::documents(document)?;
            let when = match (delay, at) {
                (Some(d), _) => Some(entries::When::After(*d)),
                (None, Some(t)) => Some(entries::When::At(*t)),
                (None, None) => None,
            };
            if let Some(when) = when {
                return entries::publish_later(&ctx, stream, &documents, when, *create).await;
            }
            match (key_field, idempotency_key_field) {
                (Some(field), _) => {
                    entries::publish_keyed(&ctx, stream, &documents, field, *partitions).await
                }
                (None, Some(field)) => {
                    let once = entries::Once {
                        field,
                        producer,
                        window: *window,
                    };
                    entries::publish_once(&ctx, stream, &documents, &once, *create).await
                }
                (None, None) => entries::publish(&ctx, stream, &documents, *create).await,
            }
        }
        Command::CancelScheduled { stream, ids } => {
            entries::cancel_scheduled(&ctx, stream, ids).await
        }
        Command::Tail {
            stream,
            count,
            follow,
        } => entries::tail(&ctx, stream, *count, *follow).await,
        Command::Pause { key, group } => fleet::pause(&ctx, key, group.as_deref(), true).await,
        Command::Resume { key, group } => fleet::pause(&ctx, key, group.as_deref(), false).await,
        Command::Scale {
            key,
            group,
            concurrency,
            ..
        } => fleet::scale(&ctx, key, group.as_deref(), *concurrency).await,
        Command::Fleet => fleet::fleet(&ctx).await,
        Command::Metrics { max_groups, .. } => {
            metrics::metrics(&ctx, *max_groups, listener, (topology, tls)).await
        }
    }
}
