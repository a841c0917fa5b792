//! Batch handlers: up to `max_entries` decoded entries at once, each with
//! its id and its own delivery count; all-success, all-failure, per-entry
//! results (the entries that succeeded never run again), undecodable
//! entries dead-lettered before any batch, a drain that waits for the
//! running batch; for streams and lists.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rillkit::prelude::*;
use rillkit::{BatchEntry, BatchOptions, BatchOutcome, RetryBackoff};
use support::{RedisServer, eventually, pending_count, stream_len};

const WAIT: Duration = Duration::from_secs(30);

/// Every batch the handler got: (id value, delivery count) per entry.
type Batches = Arc<Mutex<Vec<Vec<(u64, u64)>>>>;

fn record(batches: &Batches, batch: &[BatchEntry<u64>]) {
    batches.lock().unwrap().push(
        batch
            .iter()
            .map(|e| (*e.value(), e.delivery_count()))
            .collect(),
    );
}

/// Runs per value over all batches.
fn runs(batches: &Batches) -> HashMap<u64, usize> {
    let mut runs = HashMap::new();
    for b in batches.lock().unwrap().iter() {
        for (v, _) in b {
            *runs.entry(*v).or_default() += 1;
        }
    }
    runs
}

fn opts() -> ConsumerOptions {
    ConsumerOptions::default()
        .with_consumer("c1")
        .with_block(Duration::from_millis(50))
        .with_max_retries(1)
        .with_retry_backoff(RetryBackoff::fixed(Duration::from_millis(20)))
}

fn batch(max: usize) -> BatchOptions {
    BatchOptions::new()
        .with_max_entries(max)
        .with_max_wait(Duration::from_millis(100))
}

#[actix_rt::test]
async fn every_entry_runs_once_in_batches_of_at_most_max_entries() {
    support::init_tracing();
    let redis = RedisServer::start();
    let s = Stream::new("jobs", "g");
    let batches: Batches = Default::default();
    let b = batches.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_batch(
            &s,
            opts(),
            batch(100),
            move |batch: Vec<BatchEntry<u64>>| {
                record(&b, &batch);
                async { HandlerResult::Ok(()) }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish_batch(&s, 0..250u64).await.unwrap();
    eventually("250 handled", WAIT, || runs(&batches).len() == 250).await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    let runs = runs(&batches);
    assert!(runs.values().all(|n| *n == 1), "each once: {runs:?}");
    let sizes: Vec<usize> = batches.lock().unwrap().iter().map(Vec::len).collect();
    assert!(sizes.iter().all(|n| *n <= 100), "{sizes:?}");
    assert!(
        sizes.iter().any(|n| *n > 1),
        "entries arrive together: {sizes:?}"
    );
    assert!(sizes.len() < 250, "fewer batches than entries: {sizes:?}");
    assert_eq!(pending_count(&mut redis.conn(), "jobs", "g"), 0);
}

#[actix_rt::test]
async fn a_failed_batch_retries_each_entry_by_its_own_count_then_dead_letters_it() {
    support::init_tracing();
    let redis = RedisServer::start();
    let s = Stream::new("jobs", "g");
    let batches: Batches = Default::default();
    let b = batches.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_batch(&s, opts(), batch(10), move |batch: Vec<BatchEntry<u64>>| {
            record(&b, &batch);
            async { Err::<(), _>(anyhow::anyhow!("the database is down")) }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish_batch(&s, 0..5u64).await.unwrap();
    let mut conn = redis.conn();
    eventually("five dead letters", WAIT, || {
        stream_len(&mut conn, "jobs-dlq") == 5
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    let runs = runs(&batches);
    assert_eq!(runs.len(), 5);
    assert!(
        runs.values().all(|n| *n == 2),
        "1 run + max_retries 1: {runs:?}"
    );
    let counts: Vec<u64> = batches
        .lock()
        .unwrap()
        .iter()
        .flatten()
        .map(|(_, c)| *c)
        .collect();
    assert_eq!(counts.iter().filter(|c| **c == 1).count(), 5);
    assert_eq!(counts.iter().filter(|c| **c == 2).count(), 5);
    let errors: Vec<(String, HashMap<String, String>)> = redis::cmd("XRANGE")
        .arg("jobs-dlq")
        .arg("-")
        .arg("+")
        .query(&mut conn)
        .unwrap();
    assert!(
        errors
            .iter()
            .all(|(_, f)| f["error"] == "the database is down"),
        "{errors:?}"
    );
    assert_eq!(pending_count(&mut conn, "jobs", "g"), 0);
}

#[actix_rt::test]
async fn per_entry_results_ack_the_successes_and_retry_only_the_failures() {
    support::init_tracing();
    let redis = RedisServer::start();
    let s = Stream::new("jobs", "g");
    let batches: Batches = Default::default();
    let b = batches.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_batch(&s, opts(), batch(20), move |batch: Vec<BatchEntry<u64>>| {
            record(&b, &batch);
            // Odd values fail on their first delivery.
            let results: Vec<Result<(), HandlerError>> = batch
                .iter()
                .map(|e| {
                    if e.value() % 2 == 1 && e.delivery_count() == 1 {
                        Err(HandlerError::retry("odd, first time"))
                    } else {
                        Ok(())
                    }
                })
                .collect();
            async move { BatchOutcome::each(results) }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    // Not JSON: dead-lettered before any batch, never reaches the handler.
    let mut conn = redis.conn();
    let _: String = redis::cmd("XADD")
        .arg("jobs")
        .arg("*")
        .arg("data")
        .arg("not json")
        .query(&mut conn)
        .unwrap();
    broker.publish_batch(&s, 0..10u64).await.unwrap();
    eventually("every value handled, the odd ones twice", WAIT, || {
        let runs = runs(&batches);
        runs.len() == 10 && (0..10u64).all(|v| runs[&v] == if v % 2 == 1 { 2 } else { 1 })
    })
    .await;
    eventually("acked", WAIT, || pending_count(&mut conn, "jobs", "g") == 0).await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    let runs = runs(&batches);
    for v in (0..10u64).step_by(2) {
        assert_eq!(runs[&v], 1, "{v} succeeded and never ran again");
    }
    let second: Vec<(u64, u64)> = batches
        .lock()
        .unwrap()
        .iter()
        .flatten()
        .filter(|(v, _)| v % 2 == 1)
        .copied()
        .collect();
    let mut counts: Vec<u64> = second.iter().map(|(_, c)| *c).collect();
    counts.sort_unstable();
    assert_eq!(
        counts,
        [1, 1, 1, 1, 1, 2, 2, 2, 2, 2],
        "each retried entry has its own delivery count: {second:?}"
    );
    assert_eq!(
        stream_len(&mut conn, "jobs-dlq"),
        1,
        "the undecodable entry"
    );
}

#[actix_rt::test]
async fn a_drain_waits_for_the_running_batch() {
    support::init_tracing();
    let redis = RedisServer::start();
    let s = Stream::new("jobs", "g");
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let started: Batches = Default::default();
    let (g, st) = (gate.clone(), started.clone());
    let broker = Broker::builder(redis.url())
        .subscribe_batch(&s, opts(), batch(10), move |batch: Vec<BatchEntry<u64>>| {
            record(&st, &batch);
            let g = g.clone();
            async move {
                g.acquire().await.unwrap().forget();
                HandlerResult::Ok(())
            }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish_batch(&s, 0..3u64).await.unwrap();
    eventually("the batch runs", WAIT, || {
        !started.lock().unwrap().is_empty()
    })
    .await;
    let b = broker.clone();
    let stopping = actix_rt::spawn(async move { b.stop_with_timeout(WAIT).await });
    eventually("draining", WAIT, || broker.phase() == Phase::Draining).await;
    assert_eq!(
        pending_count(&mut redis.conn(), "jobs", "g"),
        3,
        "the running batch is not acked yet"
    );
    gate.add_permits(1);
    let outcome = stopping.await.unwrap().unwrap();
    assert!(outcome.is_clean() && !outcome.timed_out, "{outcome:?}");
    assert_eq!(pending_count(&mut redis.conn(), "jobs", "g"), 0, "acked");
}

#[actix_rt::test]
async fn a_list_batch_acks_its_successes_and_retries_its_failures() {
    support::init_tracing();
    let redis = RedisServer::start();
    let jobs = List::new("jobs");
    let batches: Batches = Default::default();
    let b = batches.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_list_batch(
            &jobs,
            ListOptions::default()
                .with_max_retries(1)
                .with_retry_backoff(RetryBackoff::fixed(Duration::from_millis(20))),
            batch(5),
            move |batch: Vec<BatchEntry<u64>>| {
                record(&b, &batch);
                let results: Vec<Result<(), String>> = batch
                    .iter()
                    .map(|e| {
                        if *e.value() == 3 && e.delivery_count() == 1 {
                            Err("three, first time".to_owned())
                        } else {
                            Ok(())
                        }
                    })
                    .collect();
                async move { BatchOutcome::each(results) }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish_list_batch(&jobs, 0..8u64).await.unwrap();
    eventually("every item handled, 3 twice", WAIT, || {
        let runs = runs(&batches);
        runs.len() == 8 && (0..8u64).all(|v| runs[&v] == if v == 3 { 2 } else { 1 })
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    let sizes: Vec<usize> = batches.lock().unwrap().iter().map(Vec::len).collect();
    assert!(sizes.iter().all(|n| *n <= 5), "{sizes:?}");
}

/// The worker example with `RILLKIT_BATCH`: `batch <size>` once per batch,
/// then a `handled` line per entry; a failing task retries alone.
#[test]
fn the_worker_example_runs_a_batch_handler() {
    let redis = RedisServer::start();
    let w = support::Worker::spawn(
        &redis.url(),
        &[
            ("RILLKIT_BATCH", "10"),
            ("RILLKIT_BLOCK_MS", "100"),
            ("RILLKIT_STREAM", "tasks"),
        ],
    );
    let mut conn = redis.conn();
    for id in 0..25u64 {
        let data = if id == 7 {
            format!(r#"{{"id":{id},"fail":true}}"#)
        } else {
            format!(r#"{{"id":{id}}}"#)
        };
        let _: String = redis::cmd("XADD")
            .arg("tasks")
            .arg("*")
            .arg("data")
            .arg(data)
            .query(&mut conn)
            .unwrap();
    }
    support::eventually_blocking("24 handled", WAIT, || w.handled().len() == 24);
    let sizes: Vec<usize> = w
        .lines()
        .iter()
        .filter_map(|l| l.strip_prefix("batch ")?.parse().ok())
        .collect();
    assert!(
        !sizes.is_empty() && sizes.iter().all(|n| *n <= 10),
        "{sizes:?}"
    );
    let mut ids: Vec<u64> = w.handled().iter().map(|(id, _)| *id).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        (0..25).filter(|id| *id != 7).collect::<Vec<_>>(),
        "each once"
    );
    assert!(
        w.lines()
            .iter()
            .all(|l| !l.starts_with("handled ") || l.contains(" at ")),
        "every handled line says when"
    );
    w.signal("TERM");
    let mut w = w;
    assert_eq!(w.wait_exit(WAIT), Some(0), "{:?}", w.log());
}

/// A list's `concurrency` counts batches: two run at once, one more batch is
/// popped ahead, and the rest stays on the list; a stop puts what was popped
/// ahead back unrun (its runs uncounted) and waits for the running batches.
#[actix_rt::test]
async fn a_list_batch_runs_concurrency_batches_and_a_stop_puts_back_what_waits() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let jobs = List::new("held");
    let batches: Batches = Default::default();
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    // Each batch ends once the test hands it a permit.
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let (b, r, m, rel) = (
        batches.clone(),
        running.clone(),
        most.clone(),
        release.clone(),
    );
    let broker = Broker::builder(redis.url())
        .subscribe_list_batch(
            &jobs,
            ListOptions::default()
                .with_consumer("c1")
                .with_concurrency(2),
            // Batches start only when full: four at a time.
            BatchOptions::new()
                .with_max_entries(4)
                .with_max_wait(Duration::from_secs(60)),
            move |batch: Vec<BatchEntry<u64>>| {
                record(&b, &batch);
                let (r, m, rel) = (r.clone(), m.clone(), rel.clone());
                async move {
                    let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                    m.fetch_max(now, Ordering::SeqCst);
                    rel.acquire().await.unwrap().forget();
                    r.fetch_sub(1, Ordering::SeqCst);
                    Ok::<(), String>(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish_list_batch(&jobs, 0..20u64).await.unwrap();
    let processing = "{held}:rillkit:processing:c1";
    eventually("two batches running, one more popped", WAIT, || {
        running.load(Ordering::SeqCst) == 2 && llen(&mut c, processing) == 12
    })
    .await;
    assert_eq!(llen(&mut c, "held"), 8, "the rest stays on the list");
    assert_eq!(broker.status().subscriptions[0].concurrency, 2);
    let stopping = {
        let broker = broker.clone();
        actix_rt::spawn(async move { broker.stop().await })
    };
    eventually("the batch popped ahead put back", WAIT, || {
        llen(&mut c, "held") == 12 && llen(&mut c, processing) == 8
    })
    .await;
    release.add_permits(2);
    let outcome = stopping.await.unwrap().unwrap();
    assert!(outcome.is_clean(), "{outcome:?}");
    let sizes: Vec<usize> = batches.lock().unwrap().iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![4, 4], "only the two running batches ran");
    assert_eq!(most.load(Ordering::SeqCst), 2);
    assert_eq!(llen(&mut c, processing), 0);
    let counts: usize = redis::cmd("HLEN")
        .arg("{held}:rillkit:attempts")
        .query(&mut c)
        .unwrap();
    assert_eq!(counts, 0, "the put-back items' runs were taken back");
}

fn llen(c: &mut redis::Connection, key: &str) -> usize {
    redis::cmd("LLEN").arg(key).query(c).unwrap()
}

/// A stream's `concurrency` counts batches where it shows, as where it
/// acts: two batches run at once, the status says 2 of 2, and
/// `Broker::status`'s `in_flight` counts the running batches.
#[actix_rt::test]
async fn a_stream_batchs_concurrency_counts_batches_in_its_status() {
    let redis = RedisServer::start();
    let s = Stream::new("shown", "g");
    let running = Arc::new(AtomicUsize::new(0));
    let handled = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let (r, h, rel) = (running.clone(), handled.clone(), release.clone());
    let broker = Broker::builder(redis.url())
        .subscribe_batch(
            &s,
            opts().with_concurrency(2),
            BatchOptions::new()
                .with_max_entries(4)
                .with_max_wait(Duration::from_secs(60)),
            move |batch: Vec<BatchEntry<u64>>| {
                let (r, h, rel) = (r.clone(), h.clone(), rel.clone());
                async move {
                    r.fetch_add(1, Ordering::SeqCst);
                    rel.acquire().await.unwrap().forget();
                    h.fetch_add(batch.len(), Ordering::SeqCst);
                    r.fetch_sub(1, Ordering::SeqCst);
                    Ok::<(), String>(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish_batch(&s, 0..12u64).await.unwrap();
    eventually("two batches running, shown", WAIT, || {
        let status = broker.status();
        let sub = &status.subscriptions[0];
        running.load(Ordering::SeqCst) == 2 && sub.in_flight == 2
    })
    .await;
    assert_eq!(broker.status().subscriptions[0].concurrency, 2);
    // The third batch starts as one of the two ends.
    release.add_permits(3);
    eventually("every entry handled and acked", WAIT, || {
        handled.load(Ordering::SeqCst) == 12 && pending_count(&mut redis.conn(), "shown", "g") == 0
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

/// A list batch's handled items leave the processing list together: one
/// script with every item of the batch, not one per item.
#[actix_rt::test]
async fn a_list_batchs_handled_items_are_removed_in_one_script() {
    let redis = RedisServer::start();
    let monitor = support::monitor::Monitor::start(&redis.url());
    let mut c = redis.conn();
    let jobs = List::new("together");
    let b: Batches = Default::default();
    let batches = b.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_list_batch(
            &jobs,
            ListOptions::default().with_consumer("c1"),
            // Batches start only when full: four at a time.
            BatchOptions::new()
                .with_max_entries(4)
                .with_max_wait(Duration::from_secs(60)),
            move |batch: Vec<BatchEntry<u64>>| {
                record(&b, &batch);
                async { Ok::<(), String>(()) }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish_list_batch(&jobs, 0..8u64).await.unwrap();
    let processing = "{together}:rillkit:processing:c1";
    eventually("two batches handled and removed", WAIT, || {
        runs(&batches).len() == 8 && llen(&mut c, processing) == 0
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    // The removals: scripts on the processing list and the counts, by how
    // many items each carried.
    let removals: Vec<usize> = monitor
        .calls("EVALSHA")
        .into_iter()
        .chain(monitor.calls("EVAL"))
        .filter(|args| {
            args.len() > 4 && args[3] == processing && args[4] == "{together}:rillkit:attempts"
        })
        .map(|args| args.len() - 5)
        .collect();
    // (A script's first call may show twice: refused `NOSCRIPT`, then sent
    // again once loaded.)
    assert!(
        !removals.is_empty() && removals.iter().all(|n| *n == 4),
        "one script per batch, with its four items: {removals:?}"
    );
}
