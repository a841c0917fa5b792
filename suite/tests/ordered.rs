//! Ordered consumption by key: entries of one key run one at a time, in
//! publish order, while keys run side by side; partitions are shared out
//! among the group's live consumers and handed over without two consumers
//! running one key at once; after a crash the new owner runs the
//! partition's pending entries first; `skip` and `fail_rest`; the partition
//! count is recorded and checked; partitions spread over a cluster.

mod support;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Commands;
use rillkit::prelude::*;
use rillkit::{
    BatchEntry, BatchOptions, BatchOutcome, OnKeyFailure, RetryBackoff, Topology, partition_of,
};
use serde::{Deserialize, Serialize};
use support::{RedisServer, Worker, eventually, eventually_blocking, order};

const WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Event {
    key: String,
    seq: u64,
    #[serde(default)]
    fail: bool,
}

/// What the handlers saw, shared by every consumer of a test.
#[derive(Default)]
struct Seen {
    /// Keys whose handler runs now.
    running: HashSet<String>,
    /// A key found running when one of its entries started.
    overlaps: Vec<String>,
    /// Every run, in the order they started: (key, seq).
    starts: Vec<(String, u64)>,
    /// Runs that succeeded, per (key, seq).
    done: HashMap<(String, u64), usize>,
    /// The most handlers that ran at once.
    most: usize,
    /// Batches running now, and the most that ran at once.
    batches: usize,
    most_batches: usize,
}

type Shared = Arc<Mutex<Seen>>;

impl Seen {
    /// A run of `e` starts.
    fn started(&mut self, e: &Event) {
        if !self.running.insert(e.key.clone()) {
            self.overlaps.push(e.key.clone());
        }
        self.starts.push((e.key.clone(), e.seq));
        self.most = self.most.max(self.running.len());
    }

    /// A run of `e` ends: it fails when marked `fail`.
    fn ended(&mut self, e: Event) -> HandlerResult {
        self.running.remove(&e.key);
        if e.fail {
            return Err(HandlerError::retry(format!("{} {} fails", e.key, e.seq)));
        }
        *self.done.entry((e.key, e.seq)).or_default() += 1;
        Ok(())
    }

    /// The entries of `key` that succeeded, by seq.
    fn done_of(&self, key: &str) -> BTreeSet<u64> {
        self.done
            .keys()
            .filter(|(k, _)| k == key)
            .map(|(_, q)| *q)
            .collect()
    }

    /// No key ran two entries at once, and each key's first runs came in
    /// publish order.
    fn assert_each_key_in_order(&self) {
        assert!(
            self.overlaps.is_empty(),
            "a key ran twice at once: {:?}",
            self.overlaps
        );
        let broken = out_of_order(self);
        assert!(broken.is_empty(), "keys out of publish order: {broken:?}");
    }

    /// Every run of `key`'s entries, by seq, in the order they started.
    fn starts_of(&self, key: &str) -> Vec<u64> {
        self.starts
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, q)| *q)
            .collect()
    }
}

/// A handler that records each run, fails the entries marked `fail`, and
/// takes `ms` to run.
fn handler(
    seen: Shared,
    ms: u64,
) -> impl Fn(Event) -> std::pin::Pin<Box<dyn std::future::Future<Output = HandlerResult>>>
+ Send
+ Sync
+ Clone
+ 'static {
    move |e: Event| {
        let seen = seen.clone();
        Box::pin(async move {
            seen.lock().unwrap().started(&e);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            seen.lock().unwrap().ended(e)
        })
    }
}

/// [`handler`] as a batch handler: each entry of a batch recorded as a run
/// (two entries of one key in a batch count as an overlap), each with its
/// own result; also counts the batches running at once.
fn batch_handler(
    seen: Shared,
    ms: u64,
) -> impl Fn(
    Vec<BatchEntry<Event>>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = BatchOutcome>>>
+ Send
+ Sync
+ 'static {
    move |batch: Vec<BatchEntry<Event>>| {
        let seen = seen.clone();
        Box::pin(async move {
            {
                let mut s = seen.lock().unwrap();
                for e in &batch {
                    s.started(e.value());
                }
                s.batches += 1;
                s.most_batches = s.most_batches.max(s.batches);
            }
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let mut s = seen.lock().unwrap();
            s.batches -= 1;
            let results: Vec<HandlerResult> =
                batch.into_iter().map(|e| s.ended(e.into_value())).collect();
            BatchOutcome::each(results)
        })
    }
}

/// For every key, the first runs of its entries in publish order (`seq`):
/// the keys whose order was broken (`support::order`, the runs in the order
/// they started).
fn out_of_order(seen: &Seen) -> Vec<String> {
    let runs: Vec<order::Run> = seen
        .starts
        .iter()
        .enumerate()
        .map(|(i, (key, seq))| order::Run {
            key: key.clone(),
            seq: *seq,
            start: i as u64,
            end: None,
            who: 0,
        })
        .collect();
    order::out_of_order(&runs)
}

/// Appends `events` with a plain client (`XADD` into the partition
/// `partition_of(key)` names, as any producer would), in one pipeline: a
/// backlog where a key's entries sit a few apart in their partition.
fn publish_plain(redis: &RedisServer, stream: &str, partitions: u16, events: &[Event]) {
    let mut pipe = redis::pipe();
    for e in events {
        let p = format!("{stream}:p{}", partition_of(e.key.as_bytes(), partitions));
        pipe.cmd("XADD")
            .arg(p)
            .arg("*")
            .arg("data")
            .arg(serde_json::to_string(e).unwrap())
            .ignore();
    }
    pipe.query::<()>(&mut redis.conn()).unwrap();
}

fn opts(consumer: &str) -> ConsumerOptions {
    ConsumerOptions::default()
        .with_consumer(consumer)
        .with_block(Duration::from_millis(100))
        .with_concurrency(16)
        .with_count(50)
        .with_lease_ttl(Duration::from_millis(900))
        .with_max_retries(1)
        .with_retry_backoff(RetryBackoff::fixed(Duration::from_millis(30)))
}

fn events(keys: usize, per_key: u64) -> Vec<Event> {
    (0..per_key)
        .flat_map(|seq| {
            (0..keys).map(move |k| Event {
                key: format!("key-{k}"),
                seq,
                fail: false,
            })
        })
        .collect()
}

#[actix_rt::test]
async fn one_key_runs_one_at_a_time_in_publish_order_while_keys_run_side_by_side() {
    support::init_tracing();
    let redis = RedisServer::start();
    let s = Stream::new("orders", "g").ordered_by("key", 4);
    let seen: Shared = Default::default();
    // A backlog first: 16 keys, so each key's entries sit about 4 apart in
    // their partition, well within one read and the 16 handler slots.
    let all = events(16, 40);
    publish_plain(&redis, "orders", 4, &all);
    // 4 handlers at once over the 4 partitions it owns, not 4 each.
    let broker = Broker::builder(redis.url())
        .subscribe(&s, opts("c1").with_concurrency(4), handler(seen.clone(), 2))
        .build()
        .unwrap();
    broker.start().await.unwrap();
    // And more while it runs, through the broker.
    for e in &events(16, 41)[640..] {
        broker.publish_keyed(&s, &e.key, e).await.unwrap();
    }
    eventually("656 handled", WAIT, || {
        seen.lock().unwrap().done.len() == 656
    })
    .await;
    let status = broker.status();
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    let seen = seen.lock().unwrap();
    seen.assert_each_key_in_order();
    // Keys ran side by side, never more than the consumer's 4 slots over
    // its 4 partitions.
    assert!(
        seen.most <= 4,
        "{} handlers ran at once, concurrency is 4",
        seen.most
    );
    assert!(seen.most > 1, "keys ran side by side");
    // The partitions are the documented streams, each key in its own.
    let mut c = redis.conn();
    for e in all.iter().take(16) {
        let p = format!("orders:p{}", partition_of(e.key.as_bytes(), 4));
        let ids: Vec<redis::Value> = redis::cmd("XRANGE")
            .arg(&p)
            .arg("-")
            .arg("+")
            .query(&mut c)
            .unwrap();
        assert!(!ids.is_empty(), "{p} holds {}'s entries", e.key);
    }
    let recorded: String = c.get("{orders}:rillkit:partitions").unwrap();
    assert_eq!(recorded, "4");
    let sub = &status.subscriptions[0];
    assert_eq!(sub.partitions.len(), 4);
    assert!(
        sub.partitions.iter().all(|p| p.owned),
        "{:?}",
        sub.partitions
    );
    assert_eq!(sub.handled, 656);
}

#[actix_rt::test]
async fn a_batch_handler_takes_one_entry_per_key_in_order_and_its_concurrency_counts_batches() {
    support::init_tracing();
    let redis = RedisServer::start();
    let s = Stream::new("orders", "g").ordered_by("key", 4);
    let seen: Shared = Default::default();
    // 6 keys × 30 entries: a read brings several entries of each key, so a
    // batch could take two of one key were it let to. key-0's entry 3
    // fails both its runs (max_retries 1): its later entries wait for it.
    let mut all = events(6, 30);
    for e in &mut all {
        e.fail = e.key == "key-0" && e.seq == 3;
    }
    publish_plain(&redis, "orders", 4, &all);
    let broker = Broker::builder(redis.url())
        .subscribe_batch(
            &s,
            opts("c1").with_concurrency(2),
            BatchOptions::new()
                .with_max_entries(8)
                .with_max_wait(Duration::from_millis(20)),
            batch_handler(seen.clone(), 10),
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let dlq = format!("orders:p{}-dlq", partition_of(b"key-0", 4));
    let mut c = redis.conn();
    eventually(
        "179 handled, one dead-lettered, nothing pending",
        WAIT,
        || {
            let pending: usize = (0..4)
                .map(|p| support::pending_count(&mut c, &format!("orders:p{p}"), "g"))
                .sum();
            seen.lock().unwrap().done.len() == 179
                && support::stream_len(&mut c, &dlq) == 1
                && pending == 0
        },
    )
    .await;
    let status = broker.status();
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    let seen = seen.lock().unwrap();
    // No batch held two entries of one key, no key ran twice at once, and
    // every key's entries first ran in publish order.
    seen.assert_each_key_in_order();
    assert!(seen.done.values().all(|&n| n == 1), "an entry ran twice");
    let mut expected: Vec<u64> = (0..30).collect();
    expected.insert(3, 3);
    assert_eq!(seen.starts_of("key-0"), expected, "its retry held key-0");
    // Two batches at once over the four partitions, not two per partition
    // nor (2 + 1) × 8 entry runs.
    assert_eq!(
        seen.most_batches, 2,
        "the most batches that ran at once, side by side"
    );
    assert_eq!(status.subscriptions[0].concurrency, 2);
}

#[actix_rt::test]
async fn consumers_joining_and_leaving_move_partitions_without_running_a_key_twice_at_once() {
    support::init_tracing();
    let redis = RedisServer::start();
    let s = Stream::new("orders", "g").ordered_by("key", 8);
    let seen: Shared = Default::default();
    let start = |name: &str| {
        Broker::builder(redis.url())
            .shutdown_timeout(Duration::from_secs(10))
            .subscribe(&s, opts(name), handler(seen.clone(), 3))
            .build()
            .unwrap()
    };
    let a = start("a");
    a.start().await.unwrap();
    eventually("a owns all 8", WAIT, || owned(&a) == 8).await;
    // 16 keys, 60 entries each, published in three backlogs.
    let all = events(16, 60);
    let (first, rest) = all.split_at(320);
    publish_plain(&redis, "orders", 8, first);
    // b joins while a works through the backlog.
    let b = start("b");
    b.start().await.unwrap();
    eventually("the partitions shared 4 and 4", WAIT, || {
        owned(&a) == 4 && owned(&b) == 4
    })
    .await;
    publish_plain(&redis, "orders", 8, &rest[..320]);
    // a leaves: b takes everything.
    assert_eq!(a.stop().await.unwrap().exit_code(), 0);
    eventually("b owns all 8", WAIT, || owned(&b) == 8).await;
    publish_plain(&redis, "orders", 8, &rest[320..]);
    eventually("960 handled", WAIT, || {
        seen.lock().unwrap().done.len() == 960
    })
    .await;
    assert_eq!(b.stop().await.unwrap().exit_code(), 0);
    let seen = seen.lock().unwrap();
    seen.assert_each_key_in_order();
}

#[actix_rt::test]
async fn a_share_out_answered_after_the_stop_began_starts_no_partition() {
    support::init_tracing();
    let redis = RedisServer::start();
    // a reaches Redis through a proxy that can hold its commands.
    let proxy = support::proxy::Proxy::start(redis.port);
    let s = Stream::new("orders", "g").ordered_by("key", 8);
    let seen: Shared = Default::default();
    let start = |url: String, name: &str| {
        Broker::builder(url)
            .shutdown_timeout(Duration::from_secs(10))
            .subscribe(&s, opts(name), handler(seen.clone(), 3))
            .build()
            .unwrap()
    };
    let a = start(proxy.url(), "a");
    a.start().await.unwrap();
    let b = start(redis.url(), "b");
    b.start().await.unwrap();
    eventually("the partitions shared 4 and 4", WAIT, || {
        owned(&a) == 4 && owned(&b) == 4
    })
    .await;
    // a's next membership renewal (every third of its 900 ms TTL) is held
    // on its way; b leaves meanwhile, so its answer gives a all 8.
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(b.stop().await.unwrap().exit_code(), 0);
    // a's stop begins before that answer reaches it.
    let stopping = actix_rt::spawn(async move { a.stop().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.restore();
    let outcome = tokio::time::timeout(Duration::from_secs(20), stopping)
        .await
        .expect("a's stop ends: no partition started after it began")
        .unwrap()
        .unwrap();
    assert_eq!(outcome.exit_code(), 0, "{outcome:?}");
}

/// Publishes key `k1` entries 0..6 with entry 1 failing every run, and key
/// `k2` entries 0..6; answers the broker's outcome and what ran. `batches`:
/// through a batch handler of up to 4 entries.
async fn one_entry_fails(on_failure: OnKeyFailure, batches: bool) -> (RedisServer, Shared) {
    let redis = RedisServer::start();
    let s = Stream::new("orders", "g").ordered_by("key", 2);
    let seen: Shared = Default::default();
    let options = opts("c1").with_on_key_failure(on_failure);
    let builder = Broker::builder(redis.url());
    let builder = if batches {
        let batch = BatchOptions::new()
            .with_max_entries(4)
            .with_max_wait(Duration::from_millis(5));
        builder.subscribe_batch(&s, options, batch, batch_handler(seen.clone(), 1))
    } else {
        builder.subscribe(&s, options, handler(seen.clone(), 1))
    };
    let broker = builder.build().unwrap();
    broker.start().await.unwrap();
    for seq in 0..6 {
        for key in ["k1", "k2"] {
            let e = Event {
                key: key.into(),
                seq,
                fail: key == "k1" && seq == 1,
            };
            broker.publish_keyed(&s, key, &e).await.unwrap();
        }
    }
    let dlq = format!("orders:p{}-dlq", partition_of(b"k1", 2));
    let expected_dead = if on_failure == OnKeyFailure::Skip {
        1
    } else {
        5
    };
    let mut c = redis.conn();
    eventually("k2 done and k1's dead letters in", WAIT, || {
        let k2 = (0..6).all(|q| seen.lock().unwrap().done.contains_key(&("k2".into(), q)));
        k2 && support::stream_len(&mut c, &dlq) == expected_dead
    })
    .await;
    eventually("k1 settled", WAIT, || {
        let p = format!("orders:p{}", partition_of(b"k1", 2));
        support::pending_count(&mut c, &p, "g") == 0
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    (redis, seen)
}

fn dead_letters(redis: &RedisServer) -> Vec<HashMap<String, String>> {
    let dlq = format!("orders:p{}-dlq", partition_of(b"k1", 2));
    let entries: redis::streams::StreamRangeReply = redis.conn().xrange_all(&dlq).unwrap();
    entries
        .ids
        .iter()
        .map(|e| {
            e.map
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        redis::from_redis_value::<String>(v.clone()).unwrap(),
                    )
                })
                .collect()
        })
        .collect()
}

#[actix_rt::test]
async fn skip_dead_letters_the_failing_entry_alone_and_its_key_goes_on_after_it() {
    support::init_tracing();
    let (redis, seen) = one_entry_fails(OnKeyFailure::Skip, false).await;
    let seen = seen.lock().unwrap();
    let k1 = seen.done_of("k1");
    assert_eq!(k1, BTreeSet::from([0, 2, 3, 4, 5]));
    // Entry 1 ran twice (max_retries 1) before entry 2 ran at all: the key
    // waited out the retry.
    let k1_starts = seen.starts_of("k1");
    assert_eq!(k1_starts, [0, 1, 1, 2, 3, 4, 5]);
    assert!(seen.overlaps.is_empty());
    let dead = dead_letters(&redis);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["order_key"], "k1");
    assert_eq!(dead[0]["on_key_failure"], "skip");
    assert!(dead[0]["error"].contains("k1 1 fails"), "{:?}", dead[0]);
}

#[actix_rt::test]
async fn fail_rest_dead_letters_the_keys_later_entries_after_the_failing_one() {
    support::init_tracing();
    let (redis, seen) = one_entry_fails(OnKeyFailure::FailRest, false).await;
    assert_failed_rest(&redis, &seen);
}

#[actix_rt::test]
async fn in_batches_fail_rest_dead_letters_the_keys_later_entries_after_the_failing_one() {
    support::init_tracing();
    let (redis, seen) = one_entry_fails(OnKeyFailure::FailRest, true).await;
    assert_failed_rest(&redis, &seen);
    assert!(seen.lock().unwrap().most_batches >= 1);
}

/// `k1`'s entry 1 failed its runs, and with it every later entry of `k1`
/// went to the dead-letter stream, in order, never run; `k2` ran.
fn assert_failed_rest(redis: &RedisServer, seen: &Shared) {
    let seen = seen.lock().unwrap();
    let k1: Vec<u64> = seen.done_of("k1").into_iter().collect();
    assert_eq!(k1, [0], "only the entry before the failure ran to success");
    let k1_starts = seen.starts_of("k1");
    assert_eq!(k1_starts, [0, 1, 1], "later entries never ran");
    let dead = dead_letters(redis);
    assert_eq!(dead.len(), 5);
    let seqs: Vec<u64> = dead
        .iter()
        .map(|d| serde_json::from_str::<Event>(&d["data"]).unwrap().seq)
        .collect();
    assert_eq!(
        seqs,
        [1, 2, 3, 4, 5],
        "dead-lettered in order, the failing one first"
    );
    assert!(
        dead.iter()
            .all(|d| d["on_key_failure"] == "fail_rest" && d["order_key"] == "k1")
    );
    assert!(dead[1]["error"].contains("fail_rest"), "{:?}", dead[1]);
    // The key's mark: the id of the entry that failed first.
    let p = format!("orders:p{}", partition_of(b"k1", 2));
    let mark: Option<String> = redis
        .conn()
        .hget(format!("{{{p}}}:rillkit:failed-keys:g"), "k1")
        .unwrap();
    assert_eq!(mark.as_deref(), Some(dead[0]["origin_id"].as_str()));
    // k2 was not held up.
    let k2 = seen.done_of("k2");
    assert_eq!(k2.len(), 6);
}

#[actix_rt::test]
async fn a_deleted_fail_rest_mark_lets_its_key_run_again() {
    support::init_tracing();
    let redis = RedisServer::start();
    let s = Stream::new("orders", "g").ordered_by("key", 2);
    let seen: Shared = Default::default();
    let broker = Broker::builder(redis.url())
        .subscribe(
            &s,
            opts("c1").with_on_key_failure(OnKeyFailure::FailRest),
            handler(seen.clone(), 1),
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let event = |seq, fail| Event {
        key: "k1".into(),
        seq,
        fail,
    };
    broker
        .publish_keyed(&s, "k1", &event(0, true))
        .await
        .unwrap();
    broker
        .publish_keyed(&s, "k1", &event(1, false))
        .await
        .unwrap();
    let p = format!("orders:p{}", partition_of(b"k1", 2));
    let index = usize::from(partition_of(b"k1", 2));
    let mut c = redis.conn();
    eventually("both dead-lettered", WAIT, || {
        support::stream_len(&mut c, &format!("{p}-dlq")) == 2
    })
    .await;
    let marked = || broker.status().subscriptions[0].partitions[index].failed_keys;
    eventually("the key marked", WAIT, || marked() == 1).await;
    let _: () = c
        .hdel(format!("{{{p}}}:rillkit:failed-keys:g"), "k1")
        .unwrap();
    eventually("the deleted mark read", WAIT, || marked() == 0).await;
    broker
        .publish_keyed(&s, "k1", &event(2, false))
        .await
        .unwrap();
    eventually("k1 runs again", WAIT, || {
        seen.lock().unwrap().done.contains_key(&("k1".into(), 2))
    })
    .await;
    assert_eq!(support::stream_len(&mut c, &format!("{p}-dlq")), 2);
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

#[actix_rt::test]
async fn a_consumer_or_producer_with_another_partition_count_is_refused() {
    support::init_tracing();
    let redis = RedisServer::start();
    let sixteen = Stream::new("orders", "g").ordered_by("key", 16);
    let first = Broker::builder(redis.url())
        .subscribe(&sixteen, opts("c1"), handler(Default::default(), 0))
        .build()
        .unwrap();
    first.start().await.unwrap();
    let eight = Stream::new("orders", "g").ordered_by("key", 8);
    let err = first
        .publish_keyed(
            &eight,
            "k",
            &Event {
                key: "k".into(),
                seq: 0,
                fail: false,
            },
        )
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("16") && text.contains('8'), "{text}");
    assert!(matches!(err, rillkit::Error::Config(_)), "{err:?}");
    let second = Broker::builder(redis.url())
        .subscribe(&eight, opts("c2"), handler(Default::default(), 0))
        .build()
        .unwrap();
    let err = second.start().await.unwrap_err();
    assert!(err.to_string().contains("16 partitions"), "{err}");
    // A plain publish to an ordered stream is refused: it has no key.
    let err = first.publish(&sixteen, &1u64).await.unwrap_err();
    assert!(err.to_string().contains("publish_keyed"), "{err}");
    assert_eq!(first.stop().await.unwrap().exit_code(), 0);
}

#[test]
fn three_workers_with_one_killed_handle_every_entry_and_keep_each_keys_order() {
    support::init_tracing();
    let redis = RedisServer::start();
    let env = |name: &'static str| {
        support::worker_env(
            name,
            &[
                ("RILLKIT_ORDER_BY", "key"),
                ("RILLKIT_PARTITIONS", "16"),
                ("RILLKIT_CONCURRENCY", "8"),
                ("RILLKIT_COUNT", "20"),
                ("RILLKIT_BLOCK_MS", "200"),
                // Long: the dead worker's entries come back through the
                // partition's hand-over, not through the reclaimer.
                ("RILLKIT_CLAIM_IDLE_MS", "20000"),
                // A line when each run starts (support::order reads them).
                ("RILLKIT_PRINT_RUNS", "1"),
            ],
        )
    };
    let mut workers = [
        Worker::spawn(&redis.url(), &env("w1")),
        Worker::spawn(&redis.url(), &env("w2")),
        Worker::spawn(&redis.url(), &env("w3")),
    ];
    // Every worker owns its share before the backlog comes in.
    let mut c = redis.conn();
    eventually_blocking("each worker owns partitions", WAIT, || {
        let owners: HashSet<String> = (0..16)
            .filter_map(|i| {
                let v: Option<String> = c
                    .get(format!("{{tasks:p{i}}}:rillkit:owner:workers"))
                    .unwrap();
                Some(v?.split(' ').next()?.to_owned())
            })
            .collect();
        owners.len() == 3
    });
    // 32 keys × 40 entries, published by a plain client into the
    // documented partitions; job id = seq * 32 + key.
    let total = 32 * 40;
    let mut pipe = redis::pipe();
    for id in 0..total {
        let (seq, key) = (id / 32, id % 32);
        let key = format!("key-{key}");
        let p = format!("tasks:p{}", partition_of(key.as_bytes(), 16));
        // Even entries are slower: run side by side, a key's next entry
        // would end before it.
        let ms = if seq % 2 == 0 { 60 } else { 10 };
        let json = format!(r#"{{"id":{id},"key":"{key}","seq":{seq},"sleep_ms":{ms}}}"#);
        pipe.cmd("XADD")
            .arg(p)
            .arg("*")
            .arg("data")
            .arg(json)
            .ignore();
    }
    pipe.query::<()>(&mut c).unwrap();
    // Killed in the middle of its work: its partitions' pending entries
    // (running when it died) must run before their keys' later entries.
    eventually_blocking("the victim handled 50", WAIT, || {
        workers[1].handled().len() >= 50
    });
    workers[1].signal("KILL");
    let _ = workers[1].wait_exit(Duration::from_secs(10));
    eventually_blocking("every entry handled", Duration::from_secs(120), || {
        let ids: HashSet<u64> = workers
            .iter()
            .flat_map(|w| w.handled())
            .map(|(id, _)| id)
            .collect();
        ids.len() == total as usize
    });
    // First runs per key in publish order (by when each started, ms since
    // the epoch, on one machine).
    let runs: Vec<order::Run> = workers
        .iter()
        .enumerate()
        .flat_map(|(who, w)| {
            order::worker_runs(&w.lines())
                .into_iter()
                .map(move |r| order::Run {
                    key: format!("key-{}", r.id % 32),
                    seq: r.id / 32,
                    start: r.start,
                    end: r.end.map(|(at, _)| at),
                    who,
                })
        })
        .collect();
    let broken = order::out_of_order(&runs);
    assert!(broken.is_empty(), "keys run out of order: {broken:?}");
    for w in workers.iter_mut().step_by(2) {
        w.signal("TERM");
        assert_eq!(w.wait_exit(Duration::from_secs(30)), Some(0));
    }
}

#[actix_rt::test]
async fn partitions_spread_over_every_master_of_a_cluster() {
    support::init_tracing();
    let cluster = support::RedisCluster::start();
    let s = Stream::new("orders", "g").ordered_by("key", 16);
    let masters: BTreeSet<usize> = (0..16)
        .map(|i| cluster.owner_of_slot(cluster.slot_of(&format!("orders:p{i}"))))
        .collect();
    assert_eq!(masters.len(), 3, "16 partitions land on all three masters");
    let seen: Shared = Default::default();
    let broker = Broker::with_topology(Topology::cluster(cluster.seeds()))
        .subscribe(&s, opts("c1"), handler(seen.clone(), 1))
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let all = events(32, 5);
    for e in &all {
        broker.publish_keyed(&s, &e.key, e).await.unwrap();
    }
    eventually("160 handled", WAIT, || {
        seen.lock().unwrap().done.len() == 160
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    let seen = seen.lock().unwrap();
    seen.assert_each_key_in_order();
    // Each partition's entries are on the master of its slot.
    let mut on: BTreeSet<usize> = BTreeSet::new();
    for i in 0..16 {
        let p = format!("orders:p{i}");
        let len: usize = cluster.conn_for_key(&p).xlen(&p).unwrap();
        if len > 0 {
            on.insert(cluster.owner_of_slot(cluster.slot_of(&p)));
        }
    }
    assert_eq!(on.len(), 3, "entries on every master");
}

/// A partition whose previous owner died holding more pending entries than
/// one page of the take-over (500): the new owner takes every one in one
/// step and runs them in id order before anything newer; nothing is left
/// with the dead owner for a reclaim to bring back late.
#[actix_rt::test]
async fn a_new_owner_takes_a_dead_owners_whole_pel_across_pages_and_runs_it_in_order() {
    support::init_tracing();
    let redis = RedisServer::start();
    let s = Stream::new("big", "g").ordered_by("key", 1);
    let mut c = redis.conn();
    support::create_group(&mut c, "big:p0", "g", "0");
    let backlog = events(3, 400);
    publish_plain(&redis, "big", 1, &backlog);
    // A dead owner read them all and never acked.
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("g")
        .arg("ghost")
        .arg("COUNT")
        .arg(2000)
        .arg("STREAMS")
        .arg("big:p0")
        .arg(">")
        .query(&mut c)
        .unwrap();
    assert_eq!(support::pending_count(&mut c, "big:p0", "g"), 1200);
    // And newer entries of the same keys behind them.
    publish_plain(&redis, "big", 1, &events(3, 410)[1200..]);
    let seen: Shared = Default::default();
    let broker = Broker::builder(redis.url())
        .subscribe(
            &s,
            // A short claim_idle: a reclaim, if one ran, would bring the
            // left-behind entries back soon, and out of order.
            opts("c1")
                .with_concurrency(8)
                .with_claim_idle(Duration::from_millis(300)),
            handler(seen.clone(), 0),
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    eventually("1230 handled", WAIT, || {
        seen.lock().unwrap().done.len() == 1230
    })
    .await;
    eventually("nothing pending", WAIT, || {
        support::pending_count(&mut c, "big:p0", "g") == 0
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    let seen = seen.lock().unwrap();
    seen.assert_each_key_in_order();
    for key in ["key-0", "key-1", "key-2"] {
        let starts = seen.starts_of(key);
        assert_eq!(
            starts,
            (0..410).collect::<Vec<_>>(),
            "{key} ran each entry once, in order"
        );
    }
}

/// The partition lease fences the consumer's commands in Redis: once
/// another consumer holds it, a read or claim of the old owner that
/// reaches the server late delivers nothing into the old owner's PEL.
#[actix_rt::test]
async fn a_read_that_reaches_the_server_after_the_lease_moved_delivers_nothing() {
    support::init_tracing();
    let (redis, broker, seen) = one_partition_consumer("fenced").await;
    publish_plain(&redis, "fenced", 1, &events(2, 5));
    eventually("10 handled", WAIT, || seen.lock().unwrap().done.len() == 10).await;
    // Another process takes the lease (as after a lapse here): c1 must give
    // the partition up, and read nothing more into its PEL.
    let mut c = redis.conn();
    let lease = "{fenced:p0}:rillkit:owner:g";
    let _: () = redis::cmd("SET")
        .arg(lease)
        .arg("other token")
        .arg("PX")
        .arg(60_000)
        .query(&mut c)
        .unwrap();
    publish_plain(&redis, "fenced", 1, &events(2, 8)[10..]);
    // c1's renewal finds the lease elsewhere, or its next fenced read
    // answers LEASELOST: either way it reads nothing more.
    eventually("the partition given up", WAIT, || {
        !broker.status().subscriptions[0].partitions[0].owned
    })
    .await;
    let delivered: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg("fenced:p0")
        .arg("g")
        .arg("-")
        .arg("+")
        .arg(100)
        .query(&mut c)
        .unwrap();
    assert!(
        delivered.is_empty(),
        "entries delivered without the lease: {delivered:?}"
    );
    assert_eq!(
        seen.lock().unwrap().done.len(),
        10,
        "nothing ran without the lease"
    );
    // The lease back to nobody: c1 takes the partition again and goes on.
    let _: () = c.del(lease).unwrap();
    eventually("16 handled", WAIT, || seen.lock().unwrap().done.len() == 16).await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    seen.lock().unwrap().assert_each_key_in_order();
}

/// A `fail_rest` key's dead letters redriven while its owner runs (the mark
/// still in the owner's memory, its next re-read a while away): the move
/// that would follow the mark finds it gone in Redis, so the redriven
/// entries run, in their order, and none goes back to the dead-letter
/// stream.
#[actix_rt::test]
async fn a_fail_rest_keys_dead_letters_redriven_while_its_owner_runs_run_in_order() {
    use std::sync::atomic::{AtomicBool, Ordering};
    support::init_tracing();
    let redis = RedisServer::start();
    let s = Stream::new("orders", "g").ordered_by("key", 2);
    let seen: Shared = Default::default();
    let poisoned = Arc::new(AtomicBool::new(true));
    let run = handler(seen.clone(), 1);
    let poison = poisoned.clone();
    let broker = Broker::builder(redis.url())
        .subscribe(
            &s,
            // Marks are read again every third of the lease TTL: 20 s here,
            // far longer than the test.
            opts("c1")
                .with_lease_ttl(Duration::from_secs(60))
                .with_on_key_failure(OnKeyFailure::FailRest),
            move |mut e: Event| {
                e.fail &= poison.load(Ordering::SeqCst);
                run(e)
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    for seq in 0..6 {
        let e = Event {
            key: "k1".into(),
            seq,
            fail: seq == 1,
        };
        broker.publish_keyed(&s, "k1", &e).await.unwrap();
    }
    let p = format!("orders:p{}", partition_of(b"k1", 2));
    let dlq = format!("{p}-dlq");
    let index = usize::from(partition_of(b"k1", 2));
    let mut c = redis.conn();
    eventually("seq 1 to 5 dead-lettered, nothing pending", WAIT, || {
        support::stream_len(&mut c, &dlq) == 5 && support::pending_count(&mut c, &p, "g") == 0
    })
    .await;
    let marked = || broker.status().subscriptions[0].partitions[index].failed_keys;
    assert_eq!(marked(), 1);
    // The poison is fixed; an operator redrives the key's dead letters.
    poisoned.store(false, Ordering::SeqCst);
    let admin = rillkit::admin::Admin::connect(&redis.url()).await.unwrap();
    let report = admin
        .redrive(&dlq, &rillkit::admin::DeadLetterFilter::default())
        .await
        .unwrap();
    assert_eq!(report.count(), 5, "{report:?}");
    eventually("seq 1 to 5 handled", WAIT, || {
        seen.lock().unwrap().done_of("k1").len() == 6
    })
    .await;
    eventually("nothing pending", WAIT, || {
        support::pending_count(&mut c, &p, "g") == 0
    })
    .await;
    assert_eq!(
        support::stream_len(&mut c, &dlq),
        0,
        "nothing dead-lettered again"
    );
    assert_eq!(marked(), 0, "the owner forgot the mark");
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    let seen = seen.lock().unwrap();
    seen.assert_each_key_in_order();
    assert_eq!(seen.starts_of("k1"), [0, 1, 1, 1, 2, 3, 4, 5]);
}

/// A read of this process that reaches Redis late (its connection dropped,
/// its bytes still retransmitted) passes the lease's fence, as the token is
/// this process's, and delivers entries the loop never receives: the next
/// fenced read finds them in the consumer's PEL and they run first, in
/// order, before anything newer of their keys.
#[actix_rt::test]
async fn entries_a_late_read_of_this_process_delivered_run_before_newer_ones() {
    support::init_tracing();
    let (redis, broker, seen) = one_partition_consumer("late").await;
    eventually("the partition owned", WAIT, || {
        broker.status().subscriptions[0].partitions[0].owned
    })
    .await;
    // Appended and read as `c1` in one transaction: the consumer's own
    // loop cannot read them first.
    let mut c = redis.conn();
    let mut tx = redis::pipe();
    tx.atomic();
    for e in &events(2, 3) {
        tx.cmd("XADD")
            .arg("late:p0")
            .arg("*")
            .arg("data")
            .arg(serde_json::to_string(e).unwrap())
            .ignore();
    }
    tx.cmd("XREADGROUP")
        .arg("GROUP")
        .arg("g")
        .arg("c1")
        .arg("COUNT")
        .arg(100)
        .arg("STREAMS")
        .arg("late:p0")
        .arg(">")
        .ignore();
    tx.query::<()>(&mut c).unwrap();
    publish_plain(&redis, "late", 1, &events(2, 10)[6..]);
    eventually("20 handled", WAIT, || seen.lock().unwrap().done.len() == 20).await;
    eventually("nothing pending", WAIT, || {
        support::pending_count(&mut c, "late:p0", "g") == 0
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    seen.lock().unwrap().assert_each_key_in_order();
}

/// A server, and a started broker whose consumer `c1` reads the stream
/// `name` ordered by key in one partition with handlers of 0 ms.
async fn one_partition_consumer(name: &str) -> (RedisServer, Broker, Shared) {
    let redis = RedisServer::start();
    let s = Stream::new(name, "g").ordered_by("key", 1);
    let seen: Shared = Default::default();
    let broker = Broker::builder(redis.url())
        .subscribe(&s, opts("c1"), handler(seen.clone(), 0))
        .build()
        .unwrap();
    broker.start().await.unwrap();
    (redis, broker, seen)
}

/// How many partitions `b`'s one subscription owns now.
fn owned(b: &Broker) -> usize {
    b.status().subscriptions[0]
        .partitions
        .iter()
        .filter(|p| p.owned)
        .count()
}
