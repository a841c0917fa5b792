//! Throughput and cost of rillkit beside a hand-written redis-rs loop, in one
//! run, against a redis-server of its own.
//!
//! ```sh
//! cargo bench --bench throughput                 # N = 200 000 entries
//! RILLKIT_BENCH_N=20000 cargo bench --bench throughput
//! RILLKIT_BENCH_ONLY=cpu cargo bench --bench throughput  # section 6 alone
//! RILLKIT_BENCH_ONLY=consume cargo bench --bench throughput  # rows 1 and 2 alone
//! RILLKIT_BENCH_ONLY=list cargo bench --bench throughput  # row 10 alone
//! RILLKIT_BENCH_ONLY=ordered cargo bench --bench throughput  # row 11 alone
//! RILLKIT_BENCH_ONLY=when cargo bench --bench throughput  # row 13 alone
//! RILLKIT_BENCH_ONLY=dashboard cargo bench --features dashboard --bench throughput
//! ```
//!
//! Section 6 measures the client's CPU time per entry (`getrusage`) with and
//! without metrics-exporter-prometheus's recorder; section 8 runs on a
//! 3-master Redis Cluster of its own; section 9 (with `--features
//! dashboard`) times the dashboard's overview of 50 streams over HTTP.
//!
//! Rows 1 and 2 also print client CPU time (getrusage) and Redis's command
//! time (INFO commandstats) per entry; rows 4 print each concurrency's bare
//! ceiling (that many sleeps, no Redis); rows 4b and 4c fan one process out
//! over several streams and several consumers of one group.
//!
//! Row 11 (`RILLKIT_BENCH_ONLY=ordered` alone) runs 16 handlers of 1 ms
//! over entries of 64 keys, ordered by key in 4 partitions against a plain
//! stream; `concurrency` is the consumer's total over its partitions, so
//! both run at most 16 at once.
//!
//! Prints a table and, last, `batch_consume_ratio=` (a batch handler of
//! 100), `consume_ratio=<rillkit entries/s ÷ raw entries/s>` and
//! `ordered_ratio=<ordered entries/s ÷ unordered entries/s>` (row 11).

#[path = "../tests/support/mod.rs"]
mod support;
#[path = "rows/when.rs"]
mod when;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use rillkit::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Entry {
    id: u64,
    value: u64,
    /// µs since the Unix epoch when published (latency runs only).
    #[serde(default)]
    sent_us: u64,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

async fn connect(url: &str) -> MultiplexedConnection {
    let cfg =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(30)));
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection_with_config(&cfg)
        .await
        .unwrap()
}

/// `n` entries into `stream`, pipelined 1 000 at a time.
async fn prefill(conn: &mut MultiplexedConnection, stream: &str, n: u64) {
    let mut id = 0;
    while id < n {
        let mut pipe = redis::pipe();
        for _ in 0..1000.min(n - id) {
            let data = serde_json::to_vec(&Entry {
                id,
                value: id % 7,
                sent_us: 0,
            })
            .unwrap();
            pipe.cmd("XADD")
                .arg(stream)
                .arg("*")
                .arg("data")
                .arg(data)
                .ignore();
            id += 1;
        }
        let () = pipe.query_async(conn).await.unwrap();
    }
}

async fn create_group(conn: &mut MultiplexedConnection, stream: &str, group: &str) {
    let () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(group)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(conn)
        .await
        .unwrap();
}

/// The loop a user would write by hand: XREADGROUP COUNT 100, decode, one
/// XACK per batch.
async fn raw_consume(url: &str, stream: &str, group: &str, n: u64) -> f64 {
    let mut conn = connect(url).await;
    create_group(&mut conn, stream, group).await;
    let t0 = Instant::now();
    let mut done = 0u64;
    let mut sum = 0u64;
    while done < n {
        let reply: redis::streams::StreamReadReply = conn
            .xread_options(
                &[stream],
                &[">"],
                &redis::streams::StreamReadOptions::default()
                    .group(group, "raw")
                    .count(100)
                    .block(100),
            )
            .await
            .unwrap();
        let mut ids = Vec::with_capacity(100);
        for key in reply.keys {
            for e in key.ids {
                if let Some(redis::Value::BulkString(b)) = e.map.get("data") {
                    let v: Entry = serde_json::from_slice(b).unwrap();
                    sum += v.value;
                }
                ids.push(e.id);
            }
        }
        if !ids.is_empty() {
            let _: usize = conn.xack(stream, group, &ids).await.unwrap();
            done += ids.len() as u64;
        }
    }
    std::hint::black_box(sum);
    n as f64 / t0.elapsed().as_secs_f64()
}

async fn wait_for(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "bench: timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn pending(conn: &mut MultiplexedConnection, stream: &str, group: &str) -> u64 {
    let v: redis::Value = redis::cmd("XPENDING")
        .arg(stream)
        .arg(group)
        .query_async(conn)
        .await
        .unwrap();
    match v {
        redis::Value::Array(items) => match items.first() {
            Some(redis::Value::Int(n)) => *n as u64,
            _ => 0,
        },
        _ => 0,
    }
}

/// rillkit consuming `n` prefilled entries with a handler that decodes and
/// sums a field (`count` 100 like the raw loop, default `concurrency` 1);
/// timed from `start()` until every entry is acked.
async fn rillkit_consume(url: &str, stream: &str, group: &str, n: u64) -> f64 {
    consume_stream(url, Stream::new(stream, group), n).await
}

/// As [`rillkit_consume`], of the stream `s` describes.
async fn consume_stream(url: &str, s: Stream, n: u64) -> f64 {
    let (stream, group) = (s.name().to_owned(), s.group().to_owned());
    let handled = Arc::new(AtomicUsize::new(0));
    let sum = Arc::new(AtomicU64::new(0));
    let (h, sm) = (handled.clone(), sum.clone());
    let broker = Broker::builder(url)
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_count(100)
                .with_block(Duration::from_millis(100)),
            move |e: Entry| {
                sm.fetch_add(e.value, Ordering::Relaxed);
                h.fetch_add(1, Ordering::Relaxed);
                std::future::ready(HandlerResult::Ok(()))
            },
        )
        .build()
        .unwrap();
    timed_run(url, &broker, &stream, &group, n, &handled).await
}

/// As [`rillkit_consume`], the stream kept with `retain_acked`: on a server
/// with `XACKDEL` each ack deletes its entry, elsewhere a plain `XACK` (and
/// the script's sweep every 5 s). Answers entries/s and the stream's length
/// left.
async fn retained_consume(url: &str, stream: &str, n: u64) -> (f64, u64) {
    let s = Stream::new(stream, "retained").with_retain_acked(true);
    let rate = consume_stream(url, s, n).await;
    let mut conn = connect(url).await;
    let left: u64 = redis::cmd("XLEN")
        .arg(stream)
        .query_async(&mut conn)
        .await
        .unwrap();
    (rate, left)
}

/// One publish at a time, `n` each: plain, then idempotent (a new message
/// id each). Answers both rates (medians of 3 rounds).
async fn idempotent_publish_rates(url: &str, n: u64) -> (f64, f64) {
    let broker = Broker::builder(url).build().unwrap();
    broker.start().await.unwrap();
    let s = Stream::new("bench-idempotent", "unused");
    let (mut plain, mut once) = (vec![], vec![]);
    for round in 0..3u64 {
        let t0 = Instant::now();
        for id in 0..n {
            broker.publish(&s, &entry(id)).await.unwrap();
        }
        plain.push(n as f64 / t0.elapsed().as_secs_f64());
        let t0 = Instant::now();
        for id in 0..n {
            let key = rillkit::MessageKey::new("bench", format!("{round}-{id}"));
            broker
                .publish_idempotent(&s, &key, &entry(id))
                .await
                .unwrap();
        }
        once.push(n as f64 / t0.elapsed().as_secs_f64());
    }
    assert!(broker.stop().await.unwrap().is_clean());
    (median(plain), median(once))
}

/// Row 12: the paths Redis 8 gives (`XACKDEL` retention, `XADD … IDMP`)
/// against the plain ones on the same server; the server's paths named.
async fn redis8_rows(url: &str, n: u64, row: &impl Fn(&str, String)) {
    let admin = rillkit::admin::Admin::connect(url).await.unwrap();
    let found = admin.server_commands().await.unwrap()[0].1;
    let m = (n / 4).max(1_000);
    let mut conn = connect(url).await;
    prefill(&mut conn, "bench-plain8", m).await;
    create_group(&mut conn, "bench-plain8", "plain").await;
    let plain = rillkit_consume(url, "bench-plain8", "plain", m).await;
    prefill(&mut conn, "bench-retained", m).await;
    create_group(&mut conn, "bench-retained", "retained").await;
    let (retained, left) = retained_consume(url, "bench-retained", m).await;
    row(
        &format!(
            "12. consume, retain_acked ({}; {m} entries)",
            if found.ack_and_delete() {
                "XACKDEL"
            } else {
                "XACK + sweep"
            }
        ),
        format!("{retained:.0} e/s"),
    );
    row(
        "   the same without retention (XACK)",
        format!("{plain:.0} e/s"),
    );
    row(
        "   ratio; entries left in the stream",
        format!("{:.2}x; {left}", retained / plain),
    );
    let p = (n / 20).max(500);
    let (plain, once) = idempotent_publish_rates(url, p).await;
    row(
        &format!(
            "   publish one at a time, idempotent ({}; {p} each)",
            if found.idempotent_add() {
                "XADD IDMP"
            } else {
                "marker script"
            }
        ),
        format!("{once:.0} / {plain:.0} e/s"),
    );
    row("   idempotent / plain", format!("{:.2}x", once / plain));
}

/// Starts `broker` and times it until `handled` reaches `n` and the group
/// has nothing pending; stops it. Answers entries/s.
async fn timed_run(
    url: &str,
    broker: &Broker,
    stream: &str,
    group: &str,
    n: u64,
    handled: &AtomicUsize,
) -> f64 {
    let mut conn = connect(url).await;
    let t0 = Instant::now();
    broker.start().await.unwrap();
    wait_for("rillkit handled all", Duration::from_secs(600), || {
        handled.load(Ordering::Relaxed) as u64 >= n
    })
    .await;
    while pending(&mut conn, stream, group).await > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rate = n as f64 / t0.elapsed().as_secs_f64();
    assert!(broker.stop().await.unwrap().is_clean());
    rate
}

/// As [`rillkit_consume`], with a batch handler of up to 100 entries.
async fn rillkit_batch_consume(url: &str, stream: &str, group: &str, n: u64) -> f64 {
    let s = Stream::new(stream, group);
    let handled = Arc::new(AtomicUsize::new(0));
    let sum = Arc::new(AtomicU64::new(0));
    let (h, sm) = (handled.clone(), sum.clone());
    let broker = Broker::builder(url)
        .subscribe_batch(
            &s,
            ConsumerOptions::default()
                .with_count(100)
                .with_block(Duration::from_millis(100)),
            rillkit::BatchOptions::new()
                .with_max_entries(100)
                .with_max_wait(Duration::from_millis(5)),
            move |batch: Vec<rillkit::BatchEntry<Entry>>| {
                for e in &batch {
                    sm.fetch_add(e.value().value, Ordering::Relaxed);
                }
                h.fetch_add(batch.len(), Ordering::Relaxed);
                std::future::ready(HandlerResult::Ok(()))
            },
        )
        .build()
        .unwrap();
    timed_run(url, &broker, stream, group, n, &handled).await
}

/// How a list row consumes: one item per run (at most once, or not), or a
/// batch handler of up to this many items.
#[derive(Clone, Copy)]
enum ListMode {
    Each { at_most_once: bool },
    Batch(usize),
}

/// A list subscription consuming `n` items pushed beforehand (`LPUSH` in
/// batches of 1 000), timed from `start()` until every item is handled and
/// (reliable) its `LREM` done. Answers items/s.
async fn list_consume(url: &str, key: &str, n: u64, concurrency: usize, mode: ListMode) -> f64 {
    let list = rillkit::List::new(key);
    let mut conn = connect(url).await;
    let mut id = 0;
    while id < n {
        let batch: Vec<Vec<u8>> = (id..(id + 1000).min(n))
            .map(|i| serde_json::to_vec(&entry(i)).unwrap())
            .collect();
        id += batch.len() as u64;
        let _: i64 = redis::cmd("LPUSH")
            .arg(key)
            .arg(batch)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let handled = Arc::new(AtomicUsize::new(0));
    let h = handled.clone();
    let mut opts = rillkit::ListOptions::default()
        .with_consumer("bench")
        .with_concurrency(concurrency)
        .with_block(Duration::from_millis(100));
    let builder = Broker::builder(url);
    let builder = match mode {
        ListMode::Each { at_most_once } => {
            if at_most_once {
                opts = opts.with_at_most_once(true);
            }
            builder.subscribe_list(&list, opts, move |_: Entry| {
                h.fetch_add(1, Ordering::Relaxed);
                std::future::ready(HandlerResult::Ok(()))
            })
        }
        ListMode::Batch(max) => builder.subscribe_list_batch(
            &list,
            opts,
            rillkit::BatchOptions::new().with_max_entries(max),
            move |batch: Vec<rillkit::BatchEntry<Entry>>| {
                h.fetch_add(batch.len(), Ordering::Relaxed);
                std::future::ready(HandlerResult::Ok(()))
            },
        ),
    };
    let broker = builder.build().unwrap();
    let t0 = Instant::now();
    broker.start().await.unwrap();
    wait_for("list items handled", Duration::from_secs(600), || {
        handled.load(Ordering::Relaxed) as u64 >= n
    })
    .await;
    let processing = format!("{{{key}}}:rillkit:processing:bench");
    loop {
        let left: u64 = redis::cmd("LLEN")
            .arg(&processing)
            .query_async(&mut conn)
            .await
            .unwrap();
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rate = n as f64 / t0.elapsed().as_secs_f64();
    assert!(broker.stop().await.unwrap().is_clean());
    rate
}

/// On a 3-master cluster: rillkit consuming `n_each` prefilled entries from
/// each of `streams` (one subscription each, `count` 100) in one process;
/// timed from `start()` until every entry is acked. Answers entries/s in all.
async fn cluster_consume(cluster: &support::RedisCluster, streams: &[String], n_each: u64) -> f64 {
    let handled = Arc::new(AtomicUsize::new(0));
    let mut builder = Broker::with_topology(rillkit::Topology::cluster(cluster.seeds()));
    let mut conns = Vec::new();
    for name in streams {
        let owner = cluster.owner_of_slot(cluster.slot_of(name));
        let mut conn = connect(&cluster.nodes()[owner].url()).await;
        prefill(&mut conn, name, n_each).await;
        conns.push((name.clone(), conn));
        let h = handled.clone();
        builder = builder.subscribe(
            &Stream::new(name, "rillkit"),
            ConsumerOptions::default()
                .with_count(100)
                .with_block(Duration::from_millis(100)),
            move |_: Entry| {
                h.fetch_add(1, Ordering::Relaxed);
                std::future::ready(HandlerResult::Ok(()))
            },
        );
    }
    let broker = builder.build().unwrap();
    let total = n_each * streams.len() as u64;
    let t0 = Instant::now();
    broker.start().await.unwrap();
    wait_for("rillkit handled all", Duration::from_secs(600), || {
        handled.load(Ordering::Relaxed) as u64 >= total
    })
    .await;
    for (name, conn) in &mut conns {
        while pending(conn, name, "rillkit").await > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let rate = total as f64 / t0.elapsed().as_secs_f64();
    assert!(broker.stop().await.unwrap().is_clean());
    rate
}

/// How long `stop()` takes on a cluster with a read blocked (`block` 5 s) on
/// each of three masters.
async fn cluster_stop_ms(cluster: &support::RedisCluster, streams: &[String]) -> f64 {
    let mut builder = Broker::with_topology(rillkit::Topology::cluster(cluster.seeds()));
    for name in streams {
        builder = builder.subscribe(
            &Stream::new(name, "idle"),
            ConsumerOptions::default().with_block(Duration::from_secs(5)),
            |_: Entry| std::future::ready(HandlerResult::Ok(())),
        );
    }
    let broker = builder.build().unwrap();
    broker.start().await.unwrap();
    wait_for(
        "a read blocked on every master",
        Duration::from_secs(30),
        || cluster.nodes().iter().all(|n| n.blocked_clients() >= 1),
    )
    .await;
    let t0 = Instant::now();
    assert!(broker.stop().await.unwrap().is_clean());
    t0.elapsed().as_secs_f64() * 1000.0
}

/// Stream names whose slots are on three different masters.
fn streams_on_three_masters(cluster: &support::RedisCluster, prefix: &str) -> Vec<String> {
    let mut by_owner = std::collections::BTreeMap::new();
    for i in 0.. {
        let name = format!("{prefix}-{i}");
        by_owner
            .entry(cluster.owner_of_slot(cluster.slot_of(&name)))
            .or_insert(name);
        if by_owner.len() == 3 {
            return by_owner.into_values().collect();
        }
    }
    unreachable!()
}

/// CPU time this thread has used (user + system), from `getrusage`
/// (`RUSAGE_THREAD`). Everything measured — the consumer loop, its
/// handlers, redis-rs's connection drivers — runs on the bench's one actix
/// thread; threads other sections leave behind (an HTTP server, a broker on
/// a thread of its own) do not count.
fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Client CPU time per entry (µs) for rillkit consuming `n` prefilled
/// entries, with `recorder` as this thread's metrics recorder (or none).
async fn consume_cpu_per_entry(
    url: &str,
    stream: &str,
    n: u64,
    recorder: Option<&metrics_exporter_prometheus::PrometheusRecorder>,
) -> f64 {
    let mut conn = connect(url).await;
    prefill(&mut conn, stream, n).await;
    // Series are registered when the consumer starts: with the recorder set
    // here, they go to it.
    let _guard = recorder.map(|r| metrics::set_default_local_recorder(r));
    let before = cpu_time();
    rillkit_consume(url, stream, "cpu", n).await;
    if let Some(r) = recorder {
        // What an installed exporter's upkeep does every few seconds
        // (draining the histograms' samples into their buckets): part of
        // the recorder's cost.
        r.handle().run_upkeep();
    }
    (cpu_time() - before).as_secs_f64() * 1e6 / n as f64
}

struct PublishRates {
    single: f64,
    raw_single: f64,
    batched: f64,
    raw_batched: f64,
}

fn entry(id: u64) -> Entry {
    Entry {
        id,
        value: 1,
        sent_us: 0,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Publish rates, rillkit and raw alternating over 5 rounds (medians), so a
/// noisy neighbour on the machine hits both sides alike.
async fn publish_rates(url: &str, n: u64) -> PublishRates {
    const ROUNDS: u64 = 5;
    let broker = Broker::builder(url).build().unwrap();
    broker.start().await.unwrap();
    let s = Stream::new("bench-publish", "unused");
    let mut conn = connect(url).await;
    let one = (n / 10).max(1000) / ROUNDS;
    let batched_n = n / ROUNDS;
    let (mut single, mut raw_single, mut batched, mut raw_batched) =
        (vec![], vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        let t0 = Instant::now();
        for id in 0..one {
            broker.publish(&s, &entry(id)).await.unwrap();
        }
        single.push(one as f64 / t0.elapsed().as_secs_f64());

        // One XADD per round trip, by hand.
        let t0 = Instant::now();
        for id in 0..one {
            let data = serde_json::to_vec(&entry(id)).unwrap();
            let _: String = redis::cmd("XADD")
                .arg("bench-publish-raw")
                .arg("*")
                .arg("data")
                .arg(data)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        raw_single.push(one as f64 / t0.elapsed().as_secs_f64());

        let t0 = Instant::now();
        let mut id = 0;
        while id < batched_n {
            let batch: Vec<Entry> = (id..(id + 100).min(batched_n)).map(entry).collect();
            id += batch.len() as u64;
            broker.publish_batch(&s, batch).await.unwrap();
        }
        batched.push(batched_n as f64 / t0.elapsed().as_secs_f64());

        // The same batches with a raw pipelined XADD loop.
        let t0 = Instant::now();
        let mut id = 0;
        while id < batched_n {
            let mut pipe = redis::pipe();
            for id in id..(id + 100).min(batched_n) {
                let data = serde_json::to_vec(&entry(id)).unwrap();
                pipe.cmd("XADD")
                    .arg("bench-publish-raw")
                    .arg("*")
                    .arg("data")
                    .arg(data);
            }
            id = (id + 100).min(batched_n);
            let _: Vec<String> = pipe.query_async(&mut conn).await.unwrap();
        }
        raw_batched.push(batched_n as f64 / t0.elapsed().as_secs_f64());
    }
    assert!(broker.stop().await.unwrap().is_clean());
    PublishRates {
        single: median(single),
        raw_single: median(raw_single),
        batched: median(batched),
        raw_batched: median(raw_batched),
    }
}

async fn slow_handler_rate(url: &str, concurrency: usize, sleep: Duration, n: u64) -> f64 {
    let stream = format!("bench-slow-{concurrency}-{}", sleep.as_millis());
    let mut conn = connect(url).await;
    prefill(&mut conn, &stream, n).await;
    let s = Stream::new(stream.as_str(), "g");
    let handled = Arc::new(AtomicUsize::new(0));
    let h = handled.clone();
    let broker = Broker::builder(url)
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_count(concurrency.max(10))
                .with_concurrency(concurrency)
                .with_block(Duration::from_millis(100)),
            move |_: Entry| {
                let h = h.clone();
                async move {
                    tokio::time::sleep(sleep).await;
                    h.fetch_add(1, Ordering::Relaxed);
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    let t0 = Instant::now();
    broker.start().await.unwrap();
    wait_for("slow handlers", Duration::from_secs(600), || {
        handled.load(Ordering::Relaxed) as u64 >= n
    })
    .await;
    let rate = n as f64 / t0.elapsed().as_secs_f64();
    assert!(broker.stop().await.unwrap().is_clean());
    rate
}

/// Row 11: `n` entries over 64 keys (`key` field) with 16 handlers of
/// 1 ms, in a stream ordered by key over 4 partitions (each entry `XADD`ed
/// into its key's partition, `<name>:p<partition_of(key, 4)>`) or, for
/// `ordered = false`, in a plain stream; entries/s from `start()` until
/// all are handled.
async fn keyed_rate(url: &str, ordered: bool, n: u64) -> f64 {
    const KEYS: u64 = 64;
    const PARTITIONS: u16 = 4;
    let name = if ordered {
        "bench-ordered"
    } else {
        "bench-unordered"
    };
    let mut conn = connect(url).await;
    let mut id = 0;
    while id < n {
        let mut pipe = redis::pipe();
        for id in id..(id + 1000).min(n) {
            let key = format!("k{}", id % KEYS);
            let data = serde_json::to_vec(&entry(id)).unwrap();
            let stream = if ordered {
                let p = rillkit::partition_of(key.as_bytes(), PARTITIONS);
                format!("{name}:p{p}")
            } else {
                name.to_owned()
            };
            pipe.cmd("XADD")
                .arg(stream)
                .arg("*")
                .arg("data")
                .arg(data)
                .arg("key")
                .arg(key)
                .ignore();
        }
        let () = pipe.query_async(&mut conn).await.unwrap();
        id = (id + 1000).min(n);
    }
    let mut s = Stream::new(name, "g");
    if ordered {
        s = s.ordered_by("key", PARTITIONS);
    }
    let handled = Arc::new(AtomicUsize::new(0));
    let h = handled.clone();
    let broker = Broker::builder(url)
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_count(16)
                .with_concurrency(16)
                .with_block(Duration::from_millis(100)),
            move |_: Entry| {
                let h = h.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    h.fetch_add(1, Ordering::Relaxed);
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    let t0 = Instant::now();
    broker.start().await.unwrap();
    wait_for("keyed handlers", Duration::from_secs(600), || {
        handled.load(Ordering::Relaxed) as u64 >= n
    })
    .await;
    let rate = n as f64 / t0.elapsed().as_secs_f64();
    assert!(broker.stop().await.unwrap().is_clean());
    rate
}

/// Row 11's two rates (ordered, unordered), the medians of 3 alternating
/// rounds over `n` entries each.
async fn ordered_rates(url: &str, n: u64) -> (f64, f64) {
    let (mut ordered, mut plain) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        ordered.push(keyed_rate(url, true, n).await);
        plain.push(keyed_rate(url, false, n).await);
    }
    (median(ordered), median(plain))
}

/// The ceiling for `concurrency` handlers sleeping `sleep` each, with no
/// Redis: `n` sleeps, `concurrency` at a time, in one task (as rillkit runs
/// handlers); entries/s.
async fn bare_ceiling(concurrency: usize, sleep: Duration, n: u64) -> f64 {
    use futures::stream::{FuturesUnordered, StreamExt};
    let t0 = Instant::now();
    let mut running = FuturesUnordered::new();
    let (mut started, mut done) = (0u64, 0u64);
    while done < n {
        while running.len() < concurrency && started < n {
            running.push(tokio::time::sleep(sleep));
            started += 1;
        }
        running.next().await;
        done += 1;
    }
    n as f64 / t0.elapsed().as_secs_f64()
}

/// Redis's own command time so far (`INFO commandstats`, the sum of every
/// command's `usec`), in µs.
async fn redis_usec(conn: &mut MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| {
            l.split("usec=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Aggregate entries/s of one process consuming `total` entries: spread
/// over `streams` streams (one subscription each), or, with `streams` 1 and
/// `consumers` > 1, through that many consumers of one group.
async fn fan_rate(url: &str, tag: &str, streams: usize, consumers: usize, total: u64) -> f64 {
    let mut conn = connect(url).await;
    let names: Vec<String> = (0..streams).map(|i| format!("bench-{tag}-{i}")).collect();
    for name in &names {
        prefill(&mut conn, name, total / streams as u64).await;
    }
    let handled = Arc::new(AtomicUsize::new(0));
    let mut builder = Broker::builder(url);
    for name in &names {
        for c in 0..consumers {
            let h = handled.clone();
            builder = builder.subscribe(
                &Stream::new(name.as_str(), "g"),
                ConsumerOptions::default()
                    .with_consumer(format!("c{c}"))
                    .with_count(100)
                    .with_block(Duration::from_millis(100)),
                move |_: Entry| {
                    h.fetch_add(1, Ordering::Relaxed);
                    std::future::ready(HandlerResult::Ok(()))
                },
            );
        }
    }
    let broker = builder.build().unwrap();
    let expected = total / streams as u64 * streams as u64;
    let t0 = Instant::now();
    broker.start().await.unwrap();
    wait_for("all handled", Duration::from_secs(600), || {
        handled.load(Ordering::Relaxed) as u64 >= expected
    })
    .await;
    let rate = expected as f64 / t0.elapsed().as_secs_f64();
    assert!(broker.stop().await.unwrap().is_clean());
    rate
}

/// Publish at a steady `rate` entries/s for `secs`; latency from publish to
/// handler, in µs.
async fn latency(url: &str, rate: u64, secs: u64) -> (u64, u64, usize) {
    let s = Stream::new("bench-latency", "g");
    let samples: Arc<Mutex<Vec<u64>>> =
        Arc::new(Mutex::new(Vec::with_capacity((rate * secs) as usize)));
    let sm = samples.clone();
    let broker = Broker::builder(url)
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_count(100)
                .with_start_id("$")
                .with_block(Duration::from_secs(5)),
            move |e: Entry| {
                sm.lock().unwrap().push(now_us().saturating_sub(e.sent_us));
                std::future::ready(HandlerResult::Ok(()))
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let total = rate * secs;
    let per_tick = rate / 1000; // one batch per ms
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut sent = 0;
    while sent < total {
        tick.tick().await;
        let ts = now_us();
        let batch: Vec<Entry> = (0..per_tick)
            .map(|i| Entry {
                id: sent + i,
                value: 0,
                sent_us: ts,
            })
            .collect();
        sent += per_tick;
        broker.publish_batch(&s, batch).await.unwrap();
    }
    wait_for("latency samples", Duration::from_secs(60), || {
        samples.lock().unwrap().len() as u64 >= total
    })
    .await;
    assert!(broker.stop().await.unwrap().is_clean());
    let mut v = samples.lock().unwrap().clone();
    v.sort_unstable();
    let pct = |p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)];
    (pct(0.50), pct(0.99), v.len())
}

/// Section 9: how long the dashboard takes to serve its overview of 50
/// streams (each with a group, 100 entries and pending ones) over HTTP,
/// against the local redis-server: the median and slowest of 20 requests
/// (ms), after one warm-up request.
#[cfg(feature = "dashboard")]
async fn dashboard_overview_ms(url: &str) -> (f64, f64) {
    use std::io::{Read, Write};
    let mut conn = connect(url).await;
    let names: Vec<String> = (0..50).map(|i| format!("dash-{i}")).collect();
    for name in &names {
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(name)
            .arg("g")
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await
            .unwrap();
        prefill(&mut conn, name, 100).await;
        let _: redis::Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg("g")
            .arg("c")
            .arg("COUNT")
            .arg(10)
            .arg("STREAMS")
            .arg(name)
            .arg(">")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let broker = Broker::builder(url).build().unwrap();
    let dashboard = rillkit_dashboard::Dashboard::new(broker).streams(names);
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new().service(dashboard.scope("/rillkit"))
    })
    .workers(1)
    .bind(("127.0.0.1", 0))
    .unwrap();
    let addr = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    actix_rt::spawn(server);
    let get = move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "GET /rillkit/ HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert!(out.contains("dash-49"));
    };
    let timed = || async move {
        let t0 = Instant::now();
        // The request blocks this thread; the server runs on its own.
        actix_rt::task::spawn_blocking(get).await.unwrap();
        t0.elapsed().as_secs_f64() * 1e3
    };
    timed().await;
    let mut v = Vec::new();
    for _ in 0..20 {
        v.push(timed().await);
    }
    handle.stop(true).await;
    let worst = v.iter().copied().fold(0.0, f64::max);
    (median(v), worst)
}

/// Histogram buckets for rillkit's durations, in seconds (as the
/// `actix_web` example sets them).
const SECONDS_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Section 6: client CPU per entry with and without the Prometheus
/// recorder, alternating rounds (medians). `RILLKIT_BENCH_ONLY=cpu` runs
/// this section alone (for profiling the recorder's cost).
async fn recorder_cost(url: &str, n: u64) {
    let row = |what: &str, v: String| println!("{what:<58} {v:>14}");
    // Enough entries per round (and rounds) that one round's CPU time is
    // far above the scheduler's noise: the cost measured is a few percent.
    const ROUNDS: usize = 9;
    let m = (n / 2).max(2_000);
    // Configured as the guide advises (and the actix_web example does):
    // Prometheus histograms with buckets, not summaries.
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(&SECONDS_BUCKETS)
        .unwrap()
        .build_recorder();
    let (mut bare, mut recorded) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        bare.push(consume_cpu_per_entry(url, &format!("cpu-bare-{round}"), m, None).await);
        recorded.push(
            consume_cpu_per_entry(url, &format!("cpu-prom-{round}"), m, Some(&recorder)).await,
        );
    }
    // Each pair ran back to back, under the same conditions of this VM: the
    // median of the pairs' ratios is steadier than the ratio of medians.
    let ratio = median(bare.iter().zip(&recorded).map(|(b, r)| r / b).collect());
    let (bare, recorded) = (median(bare), median(recorded));
    row(
        &format!("6. client CPU per entry, no metrics recorder ({m} entries)"),
        format!("{bare:.2} µs"),
    );
    row(
        &format!("   with the Prometheus recorder (medians of {ROUNDS} alternating rounds)"),
        format!("{recorded:.2} µs"),
    );
    row(
        "   recorder cost (median of the rounds' pairs)",
        format!("{:+.1} %", (ratio - 1.0) * 100.0),
    );
}

/// Row 10: a list consumed reliably at concurrency 1 and 16, at most once,
/// and by a batch handler of 100.
async fn list_rows(url: &str, n: u64, row: &impl Fn(&str, String)) {
    let items = (n / 10).max(1_000);
    let reliable = ListMode::Each {
        at_most_once: false,
    };
    let one = list_consume(url, "bench-list-1", items, 1, reliable).await;
    let many = list_consume(url, "bench-list-16", items, 16, reliable).await;
    let amo = list_consume(
        url,
        "bench-list-amo",
        items,
        1,
        ListMode::Each { at_most_once: true },
    )
    .await;
    let batch = list_consume(url, "bench-list-batch", items, 1, ListMode::Batch(100)).await;
    row(
        &format!("10. list, reliable, concurrency 1 / 16 ({items} items)"),
        format!("{one:.0} / {many:.0} e/s"),
    );
    row(
        "   list, at most once (BRPOP), concurrency 1",
        format!("{amo:.0} e/s"),
    );
    row(
        "   list, batch handler of 100, concurrency 1",
        format!("{batch:.0} e/s"),
    );
}

fn main() {
    let n: u64 = std::env::var("RILLKIT_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let redis = support::RedisServer::start();
    let url = redis.url();
    actix::System::new().block_on(async move {
        println!(
            "rillkit throughput bench: N = {n} entries, redis-server on port {}",
            redis.port
        );
        println!("{:<58} {:>14}", "measure", "result");
        let row = |what: &str, v: String| println!("{what:<58} {v:>14}");

        if std::env::var("RILLKIT_BENCH_ONLY").as_deref() == Ok("cpu") {
            recorder_cost(&url, n).await;
            return;
        }
        if std::env::var("RILLKIT_BENCH_ONLY").as_deref() == Ok("concurrency") {
            // Row 4 for 64 handlers of 1 ms alone (for profiling).
            let sleep = Duration::from_millis(1);
            let m = (n / 4).max(1000);
            let r = slow_handler_rate(&url, 64, sleep, m).await;
            let ceiling = bare_ceiling(64, sleep, m).await;
            row("4. 1 ms handler, concurrency 64", format!("{r:.0} e/s"));
            row(
                "   of the bare ceiling (that many sleeps, no Redis)",
                format!("{:.2} of {ceiling:.0}", r / ceiling),
            );
            return;
        }
        let keyed_n = (n / 10).max(1_000);
        let ordered_rows = |ordered: f64, plain: f64| {
            row(
                &format!("11. ordered by key: 64 keys, 4 partitions ({keyed_n} entries)"),
                format!("{ordered:.0} e/s"),
            );
            row(
                "   the same unordered (1 ms handlers, concurrency 16)",
                format!("{plain:.0} e/s"),
            );
            row("   ordered ratio", format!("{:.2}x", ordered / plain));
        };
        if std::env::var("RILLKIT_BENCH_ONLY").as_deref() == Ok("redis8") {
            redis8_rows(&url, n, &row).await;
            return;
        }
        if std::env::var("RILLKIT_BENCH_ONLY").as_deref() == Ok("list") {
            list_rows(&url, n, &row).await;
            return;
        }
        if std::env::var("RILLKIT_BENCH_ONLY").as_deref() == Ok("when") {
            when::rows(&url, &row).await;
            return;
        }
        if std::env::var("RILLKIT_BENCH_ONLY").as_deref() == Ok("ordered") {
            let (ordered, plain) = ordered_rates(&url, keyed_n).await;
            ordered_rows(ordered, plain);
            println!("ordered_ratio={:.2}", ordered / plain);
            return;
        }
        #[cfg(feature = "dashboard")]
        if std::env::var("RILLKIT_BENCH_ONLY").as_deref() == Ok("dashboard") {
            let (median, worst) = dashboard_overview_ms(&url).await;
            row(
                "9. dashboard overview of 50 streams, median of 20",
                format!("{median:.1} ms"),
            );
            row("   slowest", format!("{worst:.1} ms"));
            return;
        }
        let mut conn = connect(&url).await;
        prefill(&mut conn, "bench-consume", n).await;
        // Client CPU (getrusage) and Redis's command time per entry.
        let costs = |cpu: Duration, usec: u64, entries: u64| {
            format!(
                "{:.2} / {:.2} µs",
                cpu.as_secs_f64() * 1e6 / entries as f64,
                usec as f64 / entries as f64
            )
        };
        // Rounds alternate between the two loops (each round a group of its
        // own reading all N entries), and each side's median is taken: this
        // VM's speed drifts by ±10 % over seconds, which a single pair of
        // runs turns straight into the ratio.
        const CONSUME_ROUNDS: usize = 3;
        let (mut raws, mut rks) = (Vec::new(), Vec::new());
        let (mut raw_cpu, mut raw_us, mut rk_cpu, mut rk_us) =
            (Duration::ZERO, 0, Duration::ZERO, 0);
        for round in 0..CONSUME_ROUNDS {
            let (cpu0, us0) = (cpu_time(), redis_usec(&mut conn).await);
            raws.push(raw_consume(&url, "bench-consume", &format!("raw-{round}"), n).await);
            let (cpu1, us1) = (cpu_time(), redis_usec(&mut conn).await);
            rks.push(rillkit_consume(&url, "bench-consume", &format!("rillkit-{round}"), n).await);
            let (cpu2, us2) = (cpu_time(), redis_usec(&mut conn).await);
            raw_cpu += cpu1 - cpu0;
            raw_us += us1 - us0;
            rk_cpu += cpu2 - cpu1;
            rk_us += us2 - us1;
        }
        let (raw, rk) = (median(raws), median(rks));
        let entries = n * CONSUME_ROUNDS as u64;
        row(
            "1. raw redis-rs loop (COUNT 100, decode, XACK/batch)",
            format!("{raw:.0} e/s"),
        );
        row(
            "   client CPU / redis time per entry",
            costs(raw_cpu, raw_us, entries),
        );
        row(
            &format!("2. rillkit consume (decode + sum), medians of {CONSUME_ROUNDS} rounds"),
            format!("{rk:.0} e/s"),
        );
        row(
            "   client CPU / redis time per entry",
            costs(rk_cpu, rk_us, entries),
        );
        row("   ratio to raw", format!("{:.2}x", rk / raw));
        let mut batches = Vec::new();
        let (cpu0, us0) = (cpu_time(), redis_usec(&mut conn).await);
        for round in 0..CONSUME_ROUNDS {
            let group = format!("rillkit-batch-{round}");
            batches.push(rillkit_batch_consume(&url, "bench-consume", &group, n).await);
        }
        let (cpu1, us1) = (cpu_time(), redis_usec(&mut conn).await);
        let batched = median(batches);
        row(
            "2b. rillkit batch handler (100 entries), medians",
            format!("{batched:.0} e/s"),
        );
        row(
            "   client CPU / redis time per entry",
            costs(cpu1 - cpu0, us1 - us0, entries),
        );
        row("   ratio to raw", format!("{:.2}x", batched / raw));
        if std::env::var("RILLKIT_BENCH_ONLY").as_deref() == Ok("consume") {
            redis8_rows(&url, n, &row).await;
            println!("batch_consume_ratio={:.2}", batched / raw);
            println!("consume_ratio={:.2}", rk / raw);
            return;
        }
        let rss_after_drain = peak_rss_kib();

        let p = publish_rates(&url, n).await;
        row(
            "3. rillkit publish, one at a time (medians of 5 rounds)",
            format!("{:.0} e/s", p.single),
        );
        row(
            "   raw XADD, one at a time",
            format!("{:.0} e/s", p.raw_single),
        );
        row(
            "   rillkit publish_batch (100 per batch)",
            format!("{:.0} e/s", p.batched),
        );
        row(
            "   raw pipelined XADD (100 per pipeline)",
            format!("{:.0} e/s", p.raw_batched),
        );
        row(
            "   batch publish ratio to raw",
            format!("{:.2}x", p.batched / p.raw_batched),
        );

        let scale = |k: u64| (n * k / 200_000).max(200);
        for (c, ms, k) in [
            (1usize, 1u64, 2_000u64),
            (16, 1, 20_000),
            (64, 1, 60_000),
            (256, 10, 60_000),
        ] {
            let sleep = Duration::from_millis(ms);
            let r = slow_handler_rate(&url, c, sleep, scale(k)).await;
            let ceiling = bare_ceiling(c, sleep, scale(k)).await;
            row(
                &format!("4. {ms} ms handler, concurrency {c}"),
                format!("{r:.0} e/s"),
            );
            row(
                "   of the bare ceiling (that many sleeps, no Redis)",
                format!("{:.2} of {ceiling:.0}", r / ceiling),
            );
        }
        let total = scale(100_000);
        let one = fan_rate(&url, "fan1", 1, 1, total).await;
        for k in [4usize, 16] {
            let r = fan_rate(&url, &format!("fan{k}"), k, 1, total).await;
            row(
                &format!("4b. {k} streams, one subscription each ({total} entries)"),
                format!("{r:.0} e/s, {:.2}x one", r / one),
            );
        }
        row(
            &format!("   1 stream, one subscription ({total} entries)"),
            format!("{one:.0} e/s"),
        );
        for k in [2usize, 4] {
            let r = fan_rate(&url, &format!("grp{k}"), 1, k, total).await;
            row(
                &format!("4c. {k} consumers of one group in one process"),
                format!("{r:.0} e/s, {:.2}x one", r / one),
            );
        }

        let secs = if n >= 100_000 { 5 } else { 1 };
        let (p50, p99, count) = latency(&url, 5_000, secs).await;
        row(
            &format!("5. publish→handler latency at 5000 e/s ({count} entries) p50"),
            format!("{:.2} ms", p50 as f64 / 1000.0),
        );
        row("   p99", format!("{:.2} ms", p99 as f64 / 1000.0));

        recorder_cost(&url, n).await;

        row(
            &format!("7. peak RSS after draining {n} entries"),
            format!("{:.1} MiB", rss_after_drain as f64 / 1024.0),
        );
        row(
            "   peak RSS at the end of the run",
            format!("{:.1} MiB", peak_rss_kib() as f64 / 1024.0),
        );
        let cluster = support::RedisCluster::start();
        let three = streams_on_three_masters(&cluster, "bench-cluster");
        let each = (n / 4).max(1_000);
        let one = cluster_consume(&cluster, &three[..1], each).await;
        row(
            &format!("8. cluster, 1 stream ({each} entries)"),
            format!("{one:.0} e/s"),
        );
        let all = cluster_consume(
            &cluster,
            &streams_on_three_masters(&cluster, "bench-spread"),
            each,
        )
        .await;
        row(
            &format!("   cluster, 3 streams on 3 masters ({each} each)"),
            format!("{all:.0} e/s"),
        );
        row("   ratio to 1 stream", format!("{:.2}x", all / one));
        row(
            "   stop with a read blocked on each master (block 5 s)",
            format!("{:.1} ms", cluster_stop_ms(&cluster, &three).await),
        );
        drop(cluster);
        list_rows(&url, n, &row).await;
        let (ordered, plain) = ordered_rates(&url, keyed_n).await;
        ordered_rows(ordered, plain);
        when::rows(&url, &row).await;
        #[cfg(feature = "dashboard")]
        {
            let (median, worst) = dashboard_overview_ms(&url).await;
            row(
                "9. dashboard overview of 50 streams, median of 20",
                format!("{median:.1} ms"),
            );
            row("   slowest", format!("{worst:.1} ms"));
        }
        println!("batch_consume_ratio={:.2}", batched / raw);
        println!("consume_ratio={:.2}", rk / raw);
        println!("ordered_ratio={:.2}", ordered / plain);
    });
}
