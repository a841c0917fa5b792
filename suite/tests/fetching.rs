//! Fetching ahead and batching acks (the consumer loop) around a
//! slow entry: the acks of entries that finished before it are not held
//! while it runs, and a consumer stalled on it fetches nothing more ahead,
//! so another consumer of the group takes the new entries. Over a backlog,
//! a second read goes out behind the one in flight: its entries are handled
//! after the first's, and a stop with both in flight loses nothing.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rillkit::EntryId;
use rillkit::prelude::*;
use support::monitor::Monitor;
use support::{RedisServer, eventually, pending_count};

const WAIT: Duration = Duration::from_secs(30);
const SLOW: u64 = 1_000_051;

/// The ids of the entries `consumer` holds in the PEL, as their `id` field.
fn pending_ids(c: &mut redis::Connection, stream: &str, consumer: &str) -> HashSet<String> {
    let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(stream)
        .arg("g")
        .arg("-")
        .arg("+")
        .arg(10_000)
        .arg(consumer)
        .query(c)
        .unwrap();
    rows.into_iter().map(|(id, ..)| id).collect()
}

struct Slow {
    broker: Broker,
    handled: Arc<Mutex<Vec<(u64, EntryId)>>>,
    slow_started: Arc<AtomicBool>,
    gate: Arc<tokio::sync::Semaphore>,
}

async fn consumer(redis: &RedisServer, name: &str) -> Slow {
    let handled = Arc::new(Mutex::new(Vec::new()));
    let slow_started = Arc::new(AtomicBool::new(false));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (h, s, g) = (handled.clone(), slow_started.clone(), gate.clone());
    let broker = Broker::builder(redis.url())
        .shutdown_timeout(Duration::from_secs(5))
        .subscribe_with_context(
            &Stream::new("s", "g"),
            ConsumerOptions::default()
                .with_consumer(name)
                .with_count(100),
            move |id: u64, d: Delivery| {
                let (h, s, g) = (h.clone(), s.clone(), g.clone());
                async move {
                    if id == SLOW {
                        s.store(true, Ordering::SeqCst);
                        g.acquire().await.unwrap().forget();
                    }
                    h.lock().unwrap().push((id, d.id().clone()));
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    Slow {
        broker,
        handled,
        slow_started,
        gate,
    }
}

#[actix::test]
async fn a_slow_handler_neither_holds_earlier_acks_nor_has_entries_fetched_behind_it() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let s = Stream::new("s", "g");
    let a = consumer(&redis, "a").await;
    // Warm up: the prefetch is measured on fast handlers.
    a.broker.publish_batch(&s, 0..300u64).await.unwrap();
    eventually("warm-up handled", WAIT, || {
        a.handled.lock().unwrap().len() == 300
    })
    .await;
    // 50 fast entries, then a slow one, then 49 more, in one batch.
    a.broker
        .publish_batch(&s, (1_000_001..=1_000_100u64).collect::<Vec<_>>())
        .await
        .unwrap();
    eventually("the slow entry runs", WAIT, || {
        a.slow_started.load(Ordering::SeqCst)
    })
    .await;
    // 1. The 50 that finished before it are acked while it still runs.
    let before: Vec<String> = a
        .handled
        .lock()
        .unwrap()
        .iter()
        .filter(|(id, _)| (1_000_001..SLOW).contains(id))
        .map(|(_, e)| e.as_str().to_owned())
        .collect();
    assert_eq!(before.len(), 50);
    eventually("the entries before the slow one are acked", WAIT, || {
        let pel = pending_ids(&mut c, "s", "a");
        before.iter().all(|id| !pel.contains(id))
    })
    .await;
    // 2. Another consumer joins; new entries go to it, not into a's queue
    //    behind the slow entry.
    let b = consumer(&redis, "b").await;
    a.broker
        .publish_batch(&s, 2_000_000..2_000_300u64)
        .await
        .unwrap();
    eventually("b handles the new entries", WAIT, || {
        b.handled
            .lock()
            .unwrap()
            .iter()
            .filter(|(id, _)| *id >= 2_000_000)
            .count()
            >= 290
    })
    .await;
    assert!(a.slow_started.load(Ordering::SeqCst));
    a.gate.add_permits(1);
    eventually("a done", WAIT, || {
        a.handled.lock().unwrap().iter().any(|(id, _)| *id == SLOW)
    })
    .await;
    assert!(a.broker.stop().await.unwrap().is_clean());
    assert!(b.broker.stop().await.unwrap().is_clean());
    drop(b.gate);
}

/// Entries `0..n` added to `s` (group `g`, created at its start) before
/// any consumer runs.
fn backlog(c: &mut redis::Connection, n: u64) {
    support::create_group(c, "s", "g", "0");
    support::xadd_values(c, "s", 0..n);
}

/// A consumer of `s`/`g` named `name` that handles one entry at a time and
/// records each in the order handled.
fn recording(redis: &RedisServer, name: &str, handled: Arc<Mutex<Vec<u64>>>) -> Broker {
    Broker::builder(redis.url())
        .shutdown_timeout(Duration::from_secs(10))
        .subscribe(
            &Stream::new("s", "g"),
            ConsumerOptions::default()
                .with_consumer(name)
                .with_count(100)
                .with_block(Duration::from_millis(200)),
            move |n: u64| {
                handled.lock().unwrap().push(n);
                std::future::ready(HandlerResult::Ok(()))
            },
        )
        .build()
        .unwrap()
}

/// The reads of new entries consumer `name` sent without `BLOCK`: those
/// sent behind another read.
fn reads_behind(monitor: &Monitor, name: &str) -> usize {
    monitor
        .calls("XREADGROUP")
        .iter()
        .filter(|r| r.iter().any(|w| w == name) && r.last().is_some_and(|w| w == ">"))
        .filter(|r| !r.iter().any(|w| w.eq_ignore_ascii_case("BLOCK")))
        .count()
}

#[actix::test]
async fn a_backlog_is_read_with_a_second_read_behind_the_first_and_handled_in_order() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    backlog(&mut c, 5_000);
    let monitor = Monitor::start(&redis.url());
    let handled = Arc::new(Mutex::new(Vec::new()));
    let broker = recording(&redis, "c1", handled.clone());
    broker.start().await.unwrap();
    eventually("the backlog handled", WAIT, || {
        handled.lock().unwrap().len() >= 5_000
    })
    .await;
    eventually("every entry acked", WAIT, || {
        pending_count(&mut c, "s", "g") == 0
    })
    .await;
    assert!(broker.stop().await.unwrap().is_clean());
    // One at a time, so in the stream's order: the second read's entries
    // come after the first's, whichever reply the client took first.
    let handled = handled.lock().unwrap().clone();
    assert_eq!(handled, (0..5_000u64).collect::<Vec<_>>());
    let behind = reads_behind(&monitor, "c1");
    assert!(
        behind > 0,
        "no read was sent behind another (every read of new entries blocks)"
    );
}

#[actix::test]
async fn a_stop_with_a_read_behind_another_in_flight_loses_nothing() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    backlog(&mut c, 50_000);
    let monitor = Monitor::start(&redis.url());
    let first = Arc::new(Mutex::new(Vec::new()));
    let broker = recording(&redis, "c1", first.clone());
    broker.start().await.unwrap();
    // Stopped early in the backlog, while reads go out behind others.
    eventually("2,000 handled", WAIT, || {
        first.lock().unwrap().len() >= 2_000
    })
    .await;
    assert!(broker.stop().await.unwrap().is_clean());
    assert!(
        reads_behind(&monitor, "c1") > 0,
        "reads went out behind others before the stop"
    );
    let first = first.lock().unwrap().clone();
    assert!(
        first.len() < 50_000,
        "stopped before the end of the backlog"
    );
    // What it read and did not run is still its own: the same consumer,
    // started again, runs it and the rest.
    let second = Arc::new(Mutex::new(Vec::new()));
    let broker = recording(&redis, "c1", second.clone());
    broker.start().await.unwrap();
    eventually("the rest handled", WAIT, || {
        first.len() + second.lock().unwrap().len() >= 50_000
    })
    .await;
    eventually("every entry acked", WAIT, || {
        pending_count(&mut c, "s", "g") == 0
    })
    .await;
    assert!(broker.stop().await.unwrap().is_clean());
    let mut all = first;
    all.extend(second.lock().unwrap().iter());
    all.sort_unstable();
    assert_eq!(
        all,
        (0..50_000u64).collect::<Vec<_>>(),
        "each entry ran once"
    );
}
