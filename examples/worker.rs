//! A long-running worker configured by environment variables, for operators and
//! process-level tests. It stops on SIGINT/SIGTERM (a second signal exits with
//! status 1 at once) and exits with the drain outcome's exit code.
//!
//! | variable | default | sets |
//! |----------|---------|------|
//! | `REDIS_URL` | `redis://127.0.0.1:6379` | server (`rediss://` for TLS) |
//! | `RILLKIT_SENTINEL` | unset | `<master>@<host:port>,<host:port>…`: find the master through Sentinel instead of `REDIS_URL` |
//! | `RILLKIT_CLUSTER` | unset | `<host:port>,<host:port>…`: seed nodes of a Redis Cluster, instead of `REDIS_URL` (the dead-letter stream is then `{<stream>}-dlq`) |
//! | `RILLKIT_TLS_CA` | unset | PEM file of the CA to trust (with `rediss://`, or TLS to Sentinel and master) |
//! | `RILLKIT_STARTUP_TIMEOUT_MS` | 60000 | how long start waits for a server that is loading or not yet master |
//! | `RILLKIT_RETAIN` | unset | `acked`: trim what every group has acked ([`Stream::with_retain_acked`](rillkit::Stream::with_retain_acked)) |
//! | `RILLKIT_DLQ_MAXLEN` | unset | cap of the dead-letter stream, in entries |
//! | `RILLKIT_SOURCE` | `stream` | `stream`, `list` (reliable: `BLMOVE`), `list-at-most-once` (`BRPOP`) or `channel` (Pub/Sub) |
//! | `RILLKIT_STREAM` | `tasks` | the key read: a stream, a list or a channel |
//! | `RILLKIT_PRIORITY_STREAMS` | unset | `<hi>,<lo>,…`: streams read in priority order instead of `RILLKIT_STREAM` ([`BrokerBuilder::subscribe_prioritized`](rillkit::BrokerBuilder::subscribe_prioritized)), each in `RILLKIT_GROUP` |
//! | `RILLKIT_HEARTBEAT_TTL_MS` | 10000 | a reliable list consumer's heartbeat TTL ([`ListOptions::with_heartbeat_ttl`](rillkit::ListOptions::with_heartbeat_ttl)) |
//! | `RILLKIT_GROUP` | `workers` | consumer group |
//! | `RILLKIT_CONSUMER` | `<group>-<hostname>-<pid>` | consumer name |
//! | `RILLKIT_BLOCK_MS` | 5000 | `block` |
//! | `RILLKIT_COUNT` | 10 | `count` |
//! | `RILLKIT_MAX_RETRIES` | 3 | `max_retries` |
//! | `RILLKIT_CLAIM_IDLE_MS` | 30000 | `claim_idle` |
//! | `RILLKIT_SHUTDOWN_TIMEOUT_MS` | 30000 | drain deadline |
//! | `RILLKIT_CONCURRENCY` | 1 | handlers at once |
//! | `RILLKIT_RATE_LIMIT` | unset | `<n>/s` or `<n>/min`: at most that many entries for the whole group ([`ConsumerOptions::with_rate_limit`](rillkit::ConsumerOptions::with_rate_limit)) |
//! | `RILLKIT_AUTOSCALE` | unset | `<min>-<max>`: grow and shrink the handlers between these on the group's backlog ([`ConsumerOptions::with_autoscale`](rillkit::ConsumerOptions::with_autoscale)) |
//! | `RILLKIT_LEASE_TTL_MS` | 10000 | the consumer name's lease ([`ConsumerOptions::with_lease_ttl`](rillkit::ConsumerOptions::with_lease_ttl)) |
//! | `RILLKIT_PRUNE_IDLE_MS` | unset | prune the group's idle empty consumers ([`ConsumerOptions::with_prune_idle`](rillkit::ConsumerOptions::with_prune_idle)) |
//! | `RILLKIT_ORDER_BY` | unset | `<field>`: order by that member of the JSON (or entry field): [`Stream::ordered_by`](rillkit::Stream::ordered_by); publish into partition `<stream>:p<crc32(key) mod P>` |
//! | `RILLKIT_PARTITIONS` | 16 | partitions of an ordered stream |
//! | `RILLKIT_ON_KEY_FAILURE` | `skip` | `skip` or `fail_rest` ([`ConsumerOptions::with_on_key_failure`](rillkit::ConsumerOptions::with_on_key_failure)) |
//! | `RILLKIT_BATCH` | unset | `<n>`: a batch handler of up to n entries (streams and lists; [`BrokerBuilder::subscribe_batch`](rillkit::BrokerBuilder::subscribe_batch)), printing `batch <size>` once per batch |
//! | `RILLKIT_PRINT_RUNS` | unset | `1`: also print `start <id> delivery <n> at <ms>` when a run starts and `end <id> delivery <n> at <ms> <ok\|failed\|dropped>` when it ends (`dropped`: its future was dropped before it ended) |
//!
//! Entries hold JSON objects `{"id": <u64>, "sleep_ms": <u64>?, "fail": <bool>?,
//! "panic": <bool>?, "exit": <bool>?}`: the handler sleeps `sleep_ms`; `fail`
//! returns an error (retry), `panic` panics, `exit` ends the process with
//! status 9 in the middle of handling (a crash). On success it prints
//! `handled <id> delivery <n> at <ms since the Unix epoch>` on stdout (`n`
//! is 0 for lists and channels, which have no server delivery count, except
//! in a list's batch, where it is the item's run). Logs go to stderr. List items and
//! channel messages are the same JSON objects.
//!
//! ```sh
//! RILLKIT_STREAM=s cargo run --example worker &
//! redis-cli XADD s '*' data '{"id":1}'
//! kill -TERM %1
//! ```

use std::io::Write;
use std::time::Duration;

use rillkit::prelude::*;
use rillkit::{Tls, Topology};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Task {
    id: u64,
    #[serde(default)]
    sleep_ms: u64,
    #[serde(default)]
    fail: bool,
    #[serde(default)]
    panic: bool,
    #[serde(default)]
    exit: bool,
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// With `RILLKIT_PRINT_RUNS`, prints a run's `start` line when made and its
/// `end` line when it ends: `ok`/`failed` as [`Run::ended`] says, else
/// `dropped` (the future was dropped) or `panicked`.
struct Run {
    id: u64,
    delivery: u64,
    ended: Option<&'static str>,
}

impl Run {
    fn start(id: u64, delivery: u64) -> Option<Run> {
        std::env::var_os("RILLKIT_PRINT_RUNS")?;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "start {id} delivery {delivery} at {}", now_ms());
        let _ = out.flush();
        Some(Run {
            id,
            delivery,
            ended: None,
        })
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let how = match self.ended {
            Some(how) => how,
            None if std::thread::panicking() => "panicked",
            None => "dropped",
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "end {} delivery {} at {} {how}",
            self.id,
            self.delivery,
            now_ms()
        );
        let _ = out.flush();
    }
}

/// Runs one task as its fields ask.
async fn handle(task: Task, delivery: u64) -> HandlerResult {
    let mut run = Run::start(task.id, delivery);
    let result = run_task(task, delivery).await;
    if let Some(run) = &mut run {
        run.ended = Some(if result.is_ok() { "ok" } else { "failed" });
    }
    result
}

async fn run_task(task: Task, delivery: u64) -> HandlerResult {
    if task.sleep_ms > 0 {
        tokio::time::sleep(Duration::from_millis(task.sleep_ms)).await;
    }
    if task.exit {
        eprintln!("task {} asks the worker to crash", task.id);
        std::process::exit(9);
    }
    if task.panic {
        panic!("task {} asked for a panic", task.id);
    }
    if task.fail {
        return Err(HandlerError::retry(format!(
            "task {} asked to fail",
            task.id
        )));
    }
    let mut out = std::io::stdout().lock();
    let at = now_ms();
    let _ = writeln!(out, "handled {} delivery {delivery} at {at}", task.id);
    let _ = out.flush();
    Ok(())
}

/// A batch: `batch <size>`, then each task in turn as [`handle`] runs it,
/// each with its own result.
async fn handle_batch(batch: Vec<rillkit::BatchEntry<Task>>) -> rillkit::BatchOutcome {
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "batch {}", batch.len());
        let _ = out.flush();
    }
    let mut results = Vec::with_capacity(batch.len());
    for entry in batch {
        let delivery = entry.delivery_count();
        results.push(handle(entry.into_value(), delivery).await);
    }
    rillkit::BatchOutcome::each(results)
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a valid value")),
        Err(_) => default,
    }
}

#[actix::main]
async fn main() {
    tracing_subscriber::fmt()
        // No colour codes when the log goes to a file or a pipe.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "rillkit=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let topology = match (
        std::env::var("RILLKIT_CLUSTER"),
        std::env::var("RILLKIT_SENTINEL"),
    ) {
        (Ok(seeds), _) => Topology::cluster(seeds.split(',')),
        (_, Ok(spec)) => {
            let (master, addrs) = spec.split_once('@').unwrap_or_else(|| {
                panic!("RILLKIT_SENTINEL={spec:?} is not <master>@<host:port>,<host:port>…")
            });
            Topology::sentinel(master, addrs.split(','))
        }
        _ => Topology::standalone(
            std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into()),
        ),
    };
    let mut stream = Stream::new(
        env_or("RILLKIT_STREAM", "tasks".to_string()),
        env_or("RILLKIT_GROUP", "workers".to_string()),
    );
    match std::env::var("RILLKIT_RETAIN").as_deref() {
        Ok("acked") => stream = stream.with_retain_acked(true),
        Ok(other) => panic!("RILLKIT_RETAIN={other:?}: the one policy is `acked`"),
        Err(_) => {}
    }
    if let Ok(cap) = std::env::var("RILLKIT_DLQ_MAXLEN") {
        stream = stream.with_dlq_max_len(
            cap.parse()
                .expect("RILLKIT_DLQ_MAXLEN is a number of entries"),
        );
    }
    if let Ok(field) = std::env::var("RILLKIT_ORDER_BY") {
        stream = stream.ordered_by(field, env_or("RILLKIT_PARTITIONS", 16));
    }
    let mut opts = ConsumerOptions::default()
        .with_block(Duration::from_millis(env_or("RILLKIT_BLOCK_MS", 5000)))
        .with_count(env_or("RILLKIT_COUNT", 10))
        .with_max_retries(env_or("RILLKIT_MAX_RETRIES", 3))
        .with_claim_idle(Duration::from_millis(env_or(
            "RILLKIT_CLAIM_IDLE_MS",
            30_000,
        )))
        .with_concurrency(env_or("RILLKIT_CONCURRENCY", 1))
        .with_lease_ttl(Duration::from_millis(env_or(
            "RILLKIT_LEASE_TTL_MS",
            10_000,
        )));
    if let Ok(ms) = std::env::var("RILLKIT_PRUNE_IDLE_MS") {
        let ms = ms.parse().expect("RILLKIT_PRUNE_IDLE_MS is a number of ms");
        opts = opts.with_prune_idle(Duration::from_millis(ms));
    }
    if let Ok(name) = std::env::var("RILLKIT_CONSUMER") {
        opts = opts.with_consumer(name);
    }
    if let Ok(range) = std::env::var("RILLKIT_AUTOSCALE") {
        let bounds = range
            .split_once('-')
            .and_then(|(min, max)| Some((min.parse().ok()?, max.parse().ok()?)));
        let Some((min, max)) = bounds else {
            panic!("RILLKIT_AUTOSCALE is <min>-<max> handlers, e.g. 1-32, not {range:?}");
        };
        opts = opts.with_autoscale(min..=max);
    }
    if let Ok(limit) = std::env::var("RILLKIT_RATE_LIMIT") {
        let limit: rillkit::RateLimit = limit
            .parse()
            .unwrap_or_else(|e| panic!("RILLKIT_RATE_LIMIT: {e}"));
        opts = opts.with_rate_limit(limit);
    }
    match std::env::var("RILLKIT_ON_KEY_FAILURE").as_deref() {
        Ok("fail_rest") => opts = opts.with_on_key_failure(rillkit::OnKeyFailure::FailRest),
        Ok("skip") | Err(_) => {}
        Ok(other) => panic!("RILLKIT_ON_KEY_FAILURE={other:?}: use skip or fail_rest"),
    }
    let shutdown = Duration::from_millis(env_or("RILLKIT_SHUTDOWN_TIMEOUT_MS", 30_000));

    let mut builder = Broker::with_topology(topology)
        .shutdown_timeout(shutdown)
        .startup_timeout(Duration::from_millis(env_or(
            "RILLKIT_STARTUP_TIMEOUT_MS",
            60_000,
        )));
    if let Ok(path) = std::env::var("RILLKIT_TLS_CA") {
        let pem = std::fs::read(&path).unwrap_or_else(|e| panic!("RILLKIT_TLS_CA={path:?}: {e}"));
        builder = builder.tls(Tls::new().ca_pem(pem));
    }
    let key = stream.name().to_owned();
    let batch = std::env::var("RILLKIT_BATCH").ok().map(|n| {
        let n: usize = n.parse().expect("RILLKIT_BATCH is a number of entries");
        rillkit::BatchOptions::new().with_max_entries(n)
    });
    let prioritized: Option<Vec<Stream>> =
        std::env::var("RILLKIT_PRIORITY_STREAMS").ok().map(|names| {
            names
                .split(',')
                .map(|name| Stream::new(name.trim(), stream.group()))
                .collect()
        });
    let builder = match std::env::var("RILLKIT_SOURCE").as_deref() {
        Err(_) | Ok("stream") if prioritized.is_some() => {
            let streams = prioritized.expect("checked");
            let streams: Vec<&Stream> = streams.iter().collect();
            builder.subscribe_prioritized_with_context(
                &streams,
                opts,
                |task: Task, d: rillkit::Delivery| async move {
                    handle(task, d.delivery_count()).await
                },
            )
        }
        Err(_) | Ok("stream") if batch.is_some() => {
            let batch = batch.expect("checked");
            builder.subscribe_batch(&stream, opts, batch, handle_batch)
        }
        Err(_) | Ok("stream") => {
            builder.subscribe_message(&stream, opts, |msg: Message| async move {
                let task: Task = msg
                    .decode(&rillkit::Json)
                    .map_err(|e| HandlerError::reject(format!("not a task: {e}")))?;
                handle(task, msg.delivery_count).await
            })
        }
        Ok(kind @ ("list" | "list-at-most-once")) => {
            let mut list_opts = ListOptions::default()
                .with_max_retries(env_or("RILLKIT_MAX_RETRIES", 3))
                .with_concurrency(env_or("RILLKIT_CONCURRENCY", 1))
                .with_block(Duration::from_millis(env_or("RILLKIT_BLOCK_MS", 5000)))
                .with_heartbeat_ttl(Duration::from_millis(env_or(
                    "RILLKIT_HEARTBEAT_TTL_MS",
                    10_000,
                )));
            if let Ok(name) = std::env::var("RILLKIT_CONSUMER") {
                list_opts = list_opts.with_consumer(name);
            }
            if kind == "list-at-most-once" {
                list_opts = list_opts.with_at_most_once(true);
            }
            match batch {
                Some(batch) => {
                    builder.subscribe_list_batch(&List::new(key), list_opts, batch, handle_batch)
                }
                None => {
                    builder.subscribe_list(&List::new(key), list_opts, |task: Task| handle(task, 0))
                }
            }
        }
        Ok("channel") => builder.subscribe_channel(
            &Channel::new(key),
            ChannelOptions::default().with_concurrency(env_or("RILLKIT_CONCURRENCY", 1)),
            |task: Task| handle(task, 0),
        ),
        Ok(other) => {
            eprintln!("RILLKIT_SOURCE={other:?}: use stream, list, list-at-most-once or channel");
            std::process::exit(1);
        }
    };
    let broker = builder.build().unwrap_or_else(|e| {
        eprintln!("invalid configuration: {e}");
        std::process::exit(e.exit_code());
    });

    let code = match broker.run().await {
        Ok(outcome) => {
            tracing::info!(?outcome, exit_code = outcome.exit_code(), "worker stopped");
            outcome.exit_code()
        }
        Err(e) => {
            tracing::error!(error = %e, "worker failed");
            e.exit_code()
        }
    };
    std::process::exit(code);
}
