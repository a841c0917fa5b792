//! The command line: options, commands and their help (clap).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use rillkit::admin::DeadLetterFilter;

const LONG_ABOUT: &str = "\
Look at and repair rillkit's streams, consumer groups and dead letters.

Connects to --url (or $REDIS_URL, default redis://127.0.0.1:6379), or to the
master named in --sentinel, or to the cluster of --cluster. A stream's
dead-letter stream is <stream>-dlq, or {<stream>}-dlq under --cluster; --dlq
names another.

Names read from the server are shown with control, bidi and invisible
characters escaped (\\n, \\u{1b}, \\u{202e}); table cells are cut at 48
columns (…) unless --wide.

Exit codes:
  0   done (tail --follow, metrics --listen: ended by Ctrl-C)
  1   Redis error (unreachable, refused, wrong type, no such stream or group),
      or what is asked for does not exist (a dead letter, the stream publish
      writes to without --create, a redrive's origin stream or its group),
      or a redrive that redrove nothing (every selected dead letter skipped;
      the message says why)
  2   usage error: bad arguments (clap's), a publish whose JSON does not
      parse, a purge, redrive, claim or ack not confirmed (no --yes and no
      terminal to ask on, or not answered y)
  78  bad configuration: malformed URL, --sentinel or --cluster address,
      unreadable --tls-ca file, TLS options with a redis:// URL, a
      metrics --listen address in use (or not allowed)
  130 a redrive interrupted by Ctrl-C (after the dead letter in hand; the
      count so far is printed)
  141 the output's reader went away (`| head`): the rest is not printed";

/// Help heading of the options that say where Redis is.
const CONNECTION: &str = "Connection";
/// Help heading of the options that say how to print.
const OUTPUT: &str = "Output";

#[derive(Parser)]
#[command(name = "rillkit", version, about = "Look at and repair rillkit's streams, groups and dead letters", long_about = LONG_ABOUT)]
pub struct Cli {
    /// Redis server URL.
    ///
    /// redis://[user:password@]host:port[/db], rediss:// for TLS. Ignored
    /// with --sentinel or --cluster.
    #[arg(
        long,
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379",
        global = true,
        help_heading = CONNECTION
    )]
    pub url: String,

    /// A master found through Sentinel: NAME@HOST:PORT[,HOST:PORT…].
    #[arg(long, value_name = "MASTER@HOST:PORT,…", global = true, help_heading = CONNECTION)]
    pub sentinel: Option<String>,

    /// A Redis Cluster through its seed nodes: HOST:PORT[,HOST:PORT…].
    #[arg(
        long,
        value_name = "HOST:PORT,…",
        global = true,
        conflicts_with = "sentinel",
        help_heading = CONNECTION
    )]
    pub cluster: Option<String>,

    /// Username for --sentinel or --cluster (with --url: in the URL).
    ///
    /// With --password, for the master (--sentinel) or every node
    /// (--cluster); with --url, write credentials in the URL.
    #[arg(
        long,
        env = "REDIS_USER",
        hide_env_values = true,
        global = true,
        help_heading = CONNECTION
    )]
    pub user: Option<String>,

    /// Password for --sentinel or --cluster (with --url: in the URL).
    ///
    /// For the master (--sentinel) or every node (--cluster); with --url,
    /// write credentials in the URL.
    #[arg(
        long,
        env = "REDIS_PASSWORD",
        hide_env_values = true,
        global = true,
        help_heading = CONNECTION
    )]
    pub password: Option<String>,

    /// Trust this CA (PEM file) for TLS.
    ///
    /// With --url the URL must be rediss://; with --sentinel or --cluster
    /// every connection uses TLS.
    #[arg(long, value_name = "PEM FILE", global = true, help_heading = CONNECTION)]
    pub tls_ca: Option<PathBuf>,

    /// TLS with the system's trust store (--sentinel, --cluster).
    ///
    /// With --url, rediss:// alone does it.
    #[arg(long, global = true, help_heading = CONNECTION)]
    pub tls: bool,

    /// Print one JSON document instead of text.
    ///
    /// tail --follow: one JSON line per entry.
    #[arg(long, global = true, help_heading = OUTPUT)]
    pub json: bool,

    /// Print table cells whole (by default a cell is cut at 48 columns).
    #[arg(long, global = true, help_heading = OUTPUT)]
    pub wide: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Streams and their groups: length, consumers, pending, lag, oldest
    /// pending entry, dead letters.
    ///
    /// Streams discovered with SCAN, or the one named. Of each group's oldest
    /// pending entry: its age (OLDEST-AGE, since it was added, from its id)
    /// and the time since its last delivery (SINCE-DELIVERY, XPENDING idle).
    Status {
        /// A stream name, or a glob pattern (default: every stream).
        stream: Option<String>,
    },
    /// Which newer stream commands each master has, and so which paths
    /// rillkit takes there.
    ///
    /// Asked with COMMAND DOCS of each master (every master of CLUSTER
    /// SLOTS under a cluster): XACKDEL and XTRIM ACKED (Redis 8.2) for
    /// streams kept with retain-acked, XREADGROUP CLAIM (8.4), XADD IDMP
    /// (8.6) for idempotent publishes, XNACK (8.8), XREADGROUP MAXCOUNT
    /// (8.10). rillkit takes each but MAXCOUNT where a master has it, and
    /// the commands and scripts every server has where it has not.
    Server,
    /// The oldest pending entries of a group; `claim` and `ack` repair stuck
    /// ones.
    ///
    /// XPENDING: for each entry its consumer, age (since it was added), time
    /// since its last delivery and delivery count.
    Pending(PendingCommand),
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
        prune_idle: Option<Duration>,
    },
    /// Dead letters: list, show, redrive, purge.
    #[command(subcommand)]
    Dlq(Dlq),
    /// Add an entry with one field data=JSON (XADD), as rillkit publishes.
    ///
    /// The stream must exist (a misspelt name is not created) unless --create.
    /// With --key-field, the stream is ordered by key: each document goes to
    /// the partition of its key (<stream>:p<crc32(key) mod partitions>),
    /// with the key as a field of its own beside data, pipelined.
    Publish {
        /// Stream key (for an ordered stream, its name without :p<i>).
        stream: String,
        /// The JSON document (checked to parse; stored as given); `-`: one
        /// document a line from stdin (all checked before any is added).
        #[arg(value_name = "JSON")]
        document: String,
        /// Create the stream if there is none.
        #[arg(long)]
        create: bool,
        /// Publish into an ordered stream: the member of each JSON object
        /// that holds its key (a string, number or boolean).
        #[arg(long, value_name = "FIELD")]
        key_field: Option<String>,
        /// With --key-field: the stream's partition count, recorded if none
        /// is (else checked); without it, the recorded count is used.
        #[arg(long, value_name = "N", requires = "key_field")]
        partitions: Option<u16>,
        /// Publish each document once: the member of each JSON object
        /// that holds its message id (a string, number or boolean). A
        /// document whose id was published by the same --producer within
        /// --window is not added again (its first entry's id is printed):
        /// publishing the same file twice adds each document once.
        /// XADD … IDMP on Redis 8.6 and later (which also keeps only each
        /// producer's newest 10,000 ids), a script with a marker key
        /// elsewhere.
        #[arg(long, value_name = "FIELD", conflicts_with = "key_field")]
        idempotency_key_field: Option<String>,
        /// With --idempotency-key-field: the producer id the message ids
        /// belong to; keep it the same across runs.
        #[arg(
            long,
            value_name = "ID",
            default_value = "rillkit-cli",
            requires = "idempotency_key_field"
        )]
        producer: String,
        /// With --idempotency-key-field: how long a message id is
        /// recognised (1s to 24h).
        #[arg(
            long,
            value_name = "DURATION",
            default_value = "1h",
            value_parser = humantime::parse_duration,
            requires = "idempotency_key_field"
        )]
        window: std::time::Duration,
        /// Schedule each document to be added this long from now (the
        /// server's clock), e.g. 3s, 15min; printed are the schedule ids
        /// (rillkit cancel-scheduled takes them). A process consuming the
        /// stream adds it when due.
        #[arg(
            long,
            value_name = "DURATION",
            value_parser = humantime::parse_duration,
            conflicts_with_all = ["key_field", "idempotency_key_field", "at"]
        )]
        delay: Option<std::time::Duration>,
        /// Schedule each document to be added at this time (RFC 3339,
        /// e.g. 2026-12-24T18:00:00Z), as --delay.
        #[arg(
            long,
            value_name = "TIME",
            value_parser = humantime::parse_rfc3339_weak,
            conflicts_with_all = ["key_field", "idempotency_key_field"]
        )]
        at: Option<std::time::SystemTime>,
    },
    /// Cancel entries scheduled with publish --delay or --at (or
    /// Broker::publish_after): each id printed as cancelled, or as already
    /// added or unknown (exit 1 when none was cancelled).
    CancelScheduled {
        /// Stream key.
        stream: String,
        /// Schedule ids, as publish --delay printed them.
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
    },
    /// Every stream's and group's gauges in the Prometheus text format.
    ///
    /// Lag, pending entries, oldest pending age, consumers and dead letters
    /// of every consumer group found (SCAN, XINFO GROUPS, XPENDING, XLEN),
    /// with the metric names and HELP text the library exports: for
    /// node_exporter's textfile collector (write to a temporary file, then
    /// rename it) or a cron job. With --listen, served at /metrics instead.
    Metrics {
        /// The most groups written (label cardinality), in the order of
        /// their stream's name; the rest are counted in
        /// rillkit_server_metrics_groups_skipped.
        #[arg(long, value_name = "N", default_value_t = 200)]
        max_groups: usize,
        /// Serve the gauges at http://HOST:PORT/metrics, read afresh for
        /// each scrape, until Ctrl-C (exit 0).
        ///
        /// The address is bound before Redis is asked anything: one in use
        /// (or not allowed) exits 78, naming it.
        #[arg(long, value_name = "HOST:PORT")]
        listen: Option<std::net::SocketAddr>,
    },
    /// The newest entries of a stream; with --follow, then each new one.
    ///
    /// XREVRANGE, printed oldest first; --follow then reads with XREAD BLOCK
    /// until Ctrl-C. Each entry is a line: its id, the time it was added
    /// (from its id: RFC 3339, UTC, milliseconds) and its fields; with
    /// --json, the time is `time`.
    Tail {
        /// Stream key.
        stream: String,
        /// How many entries.
        #[arg(long, default_value_t = 10)]
        count: usize,
        /// Keep printing new entries as they arrive (XREAD BLOCK) until
        /// Ctrl-C (exit 0).
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// Pause a consumer group (or a list) in every rillkit process.
    ///
    /// Kept in Redis (HSET <control> paused_at_ms): every process stops
    /// reading within a second, what it holds still runs and is acked, and
    /// a process started later starts paused, until `rillkit resume`.
    Pause {
        /// The stream (with --group) or the list.
        key: String,
        /// The stream's consumer group.
        #[arg(long)]
        group: Option<String>,
    },
    /// Resume a consumer group (or a list) in every rillkit process.
    Resume {
        /// The stream (with --group) or the list.
        key: String,
        /// The stream's consumer group.
        #[arg(long)]
        group: Option<String>,
    },
    /// Set the concurrency of every rillkit process of a group (or a list).
    ///
    /// Kept in Redis (HSET <control> concurrency): every process follows it
    /// within a second, without a restart. Batch and ordered subscriptions
    /// keep theirs. --reset gives each process its own back.
    Scale {
        /// The stream (with --group) or the list.
        key: String,
        /// The stream's consumer group.
        #[arg(long)]
        group: Option<String>,
        /// Handlers each process runs at once (1 to 10000).
        #[arg(
            long,
            value_name = "N",
            required_unless_present = "reset",
            conflicts_with = "reset"
        )]
        concurrency: Option<usize>,
        /// Give each process its own concurrency back.
        #[arg(long)]
        reset: bool,
    },
    /// The live rillkit processes: host, pid, version, and per subscription
    /// its concurrency, handlers in flight and state.
    ///
    /// Each process renews its record every 500 ms; a stopped one leaves at
    /// once, a dead one within 5 s.
    Fleet,
}

/// `pending STREAM GROUP [filters]`, or `pending claim|ack …`.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct PendingCommand {
    #[command(subcommand)]
    pub action: Option<PendingAction>,
    #[command(flatten)]
    pub select: Option<PendingSelect>,
}

#[derive(Subcommand)]
pub enum PendingAction {
    /// Hand the selected pending entries to another consumer.
    ///
    /// XCLAIM … JUSTID: their delivery count stays. With --min-idle, an entry
    /// delivered again meanwhile is left alone. Asks first, unless --yes.
    Claim {
        #[command(flatten)]
        select: PendingSelect,
        /// The consumer to hand them to (created in the group if needed).
        #[arg(long, value_name = "CONSUMER")]
        to: String,
        /// Do it without asking.
        #[arg(long)]
        yes: bool,
    },
    /// Acknowledge the selected pending entries without running them.
    ///
    /// XACK: they leave the pending list, and stay in the stream. Asks
    /// first, unless --yes.
    Ack {
        #[command(flatten)]
        select: PendingSelect,
        /// Do it without asking.
        #[arg(long)]
        yes: bool,
    },
}

/// Which pending entries a `pending` command shows or acts on.
#[derive(Args)]
pub struct PendingSelect {
    /// Stream key.
    pub stream: String,
    /// Consumer group.
    pub group: String,
    /// At most this many entries (the oldest that match).
    #[arg(long, default_value_t = 20)]
    pub count: usize,
    /// Only the entries this consumer holds.
    #[arg(long, value_name = "NAME")]
    pub consumer: Option<String>,
    /// Only entries not delivered for at least this long (`30s`, `10m`).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub min_idle: Option<Duration>,
}

#[derive(Subcommand)]
pub enum Dlq {
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
    /// Put dead letters back on their origin stream.
    ///
    /// Each goes back as a new entry with its original fields plus
    /// redriven_from=<origin id>, and is deleted from the dead-letter stream
    /// (one script each), oldest first. For a stream ordered by key, name a
    /// partition (<name>:p<i>) or the base name for every partition's dead
    /// letters, each back to its partition; a fail_rest dead letter's key
    /// mark is deleted with it, so the key's entries run again. It runs again
    /// in its own group (origin_group) only: other groups of the stream never
    /// run it (select one group's with --group). Refuses when
    /// an origin stream is gone or has no consumer group (nothing would read
    /// them) unless --create-group. Asks first, unless --yes; Ctrl-C stops
    /// after the dead letter in hand and prints the count (exit 130). Exits
    /// 1 when every selected dead letter was skipped.
    Redrive {
        #[command(flatten)]
        select: Select,
        /// Only print what would be redriven; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Where an origin stream is gone or has no group, create this group
        /// on it first, so the redriven entries are read.
        ///
        /// XGROUP CREATE <origin> <GROUP> $ MKSTREAM: at $, the group reads what
        /// the redrive adds after it.
        #[arg(long, value_name = "GROUP")]
        create_group: Option<String>,
        /// Do it without asking.
        #[arg(long)]
        yes: bool,
    },
    /// Delete dead letters (XDEL).
    ///
    /// Asks first, unless --yes; with no terminal to ask on, only says how
    /// many it would delete, and exits 2.
    Purge {
        #[command(flatten)]
        select: Select,
        /// Really delete them, without asking.
        #[arg(long)]
        yes: bool,
    },
}

/// Which dead letters a `dlq` command acts on.
#[derive(Args)]
pub struct Select {
    /// The stream whose dead letters to act on.
    pub stream: String,
    /// The dead-letter stream key (default <stream>-dlq, {<stream>}-dlq under --cluster).
    #[arg(long)]
    pub dlq: Option<String>,
    /// Only dead letters whose error contains this text.
    #[arg(long, value_name = "SUBSTR")]
    pub error: Option<String>,
    /// Only dead letters of this consumer group (their origin_group). A
    /// redrive always sends a dead letter back to its own group only.
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// At most this many (the oldest that match); `list` shows 100 unless told.
    #[arg(long)]
    pub count: Option<usize>,
    /// The first dead-letter id (inclusive; default: the oldest).
    #[arg(long, value_name = "ID")]
    pub start: Option<String>,
    /// The last dead-letter id (inclusive; default: the newest when the command starts).
    #[arg(long, value_name = "ID")]
    pub end: Option<String>,
}

impl Select {
    pub fn filter(&self, default_count: Option<usize>) -> DeadLetterFilter {
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
        if let Some(g) = &self.group {
            f = f.with_group(g.clone());
        }
        if let Some(n) = self.count.or(default_count) {
            f = f.with_count(n);
        }
        f
    }
}

#[cfg(test)]
mod tests;
