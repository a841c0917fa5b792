//! Taking over idle entries (crashed consumers, retries), the whole
//! PEL reached, long handlers never run twice, self-healing after FLUSHALL and
//! a server restart.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rillkit::prelude::*;
use serde::{Deserialize, Serialize};
use support::{RedisServer, eventually, pending_count};

const WAIT: Duration = Duration::from_secs(20);

#[derive(Debug, Serialize, Deserialize)]
struct Job {
    id: u64,
}

type Seen = Arc<Mutex<HashMap<u64, usize>>>;

fn counting_broker(url: &str, s: &Stream, opts: ConsumerOptions, seen: &Seen) -> Broker {
    let seen = seen.clone();
    Broker::builder(url)
        .subscribe(s, opts, move |job: Job| {
            let seen = seen.clone();
            async move {
                *seen.lock().unwrap().entry(job.id).or_default() += 1;
                HandlerResult::Ok(())
            }
        })
        .build()
        .unwrap()
}

/// Entries read by a consumer named `dead` that never acks them.
fn strand(redis: &RedisServer, stream: &str, group: &str, ids: std::ops::Range<u64>) {
    support::strand(redis, stream, group, "dead", ids);
}

#[actix_rt::test]
async fn entries_of_a_dead_consumer_are_taken_over_after_claim_idle() {
    support::init_tracing();
    let redis = RedisServer::start();
    strand(&redis, "jobs", "g", 0..10);
    let seen: Seen = Arc::default();
    let s = Stream::new("jobs", "g");
    let broker = counting_broker(
        &redis.url(),
        &s,
        ConsumerOptions::default()
            .with_consumer("alive")
            .with_block(Duration::from_millis(50))
            .with_claim_idle(Duration::from_millis(200)),
        &seen,
    );
    broker.start().await.unwrap();
    eventually("10 handled", WAIT, || seen.lock().unwrap().len() == 10).await;
    let mut c = redis.conn();
    eventually("PEL empty", WAIT, || {
        pending_count(&mut c, "jobs", "g") == 0
    })
    .await;
    assert!(broker.stop().await.unwrap().is_clean());
    assert!(seen.lock().unwrap().values().all(|n| *n == 1));
}

#[actix_rt::test]
async fn the_whole_pel_is_reached_past_entries_kept_fresh() {
    let redis = RedisServer::start();
    strand(&redis, "jobs", "g", 0..200);
    // Another live consumer keeps the first 40 entries fresh for a while
    // (as a running handler elsewhere would), then stops doing so.
    let fresh: Vec<String> = {
        let v: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
            .arg("jobs")
            .arg("g")
            .arg("-")
            .arg("+")
            .arg(40)
            .query(&mut redis.conn())
            .unwrap();
        v.into_iter().map(|r| r.0).collect()
    };
    let keep_fresh = Arc::new(AtomicBool::new(true));
    let kf = keep_fresh.clone();
    let mut rc = redis.conn();
    let refresher = std::thread::spawn(move || {
        while kf.load(Ordering::SeqCst) {
            let _: redis::Value = redis::cmd("XCLAIM")
                .arg("jobs")
                .arg("g")
                .arg("elsewhere")
                .arg(0)
                .arg(&fresh)
                .arg("JUSTID")
                .query(&mut rc)
                .unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let seen: Seen = Arc::default();
    let broker = counting_broker(
        &redis.url(),
        &Stream::new("jobs", "g"),
        ConsumerOptions::default()
            .with_count(10)
            .with_block(Duration::from_millis(50))
            .with_claim_idle(Duration::from_millis(150)),
        &seen,
    );
    broker.start().await.unwrap();
    eventually("the 160 idle entries handled", WAIT, || {
        seen.lock().unwrap().len() == 160
    })
    .await;
    assert!(
        (0..40).all(|id| !seen.lock().unwrap().contains_key(&id)),
        "fresh entries are not taken"
    );
    keep_fresh.store(false, Ordering::SeqCst);
    refresher.join().unwrap();
    eventually("all 200 handled", WAIT, || {
        seen.lock().unwrap().len() == 200
    })
    .await;
    let mut c = redis.conn();
    eventually("PEL empty", WAIT, || {
        pending_count(&mut c, "jobs", "g") == 0
    })
    .await;
    assert!(broker.stop().await.unwrap().is_clean());
    assert!(
        seen.lock().unwrap().values().all(|n| *n == 1),
        "no entry handled twice"
    );
}

#[actix_rt::test]
async fn a_handler_running_longer_than_claim_idle_is_not_run_twice() {
    support::init_tracing();
    let redis = RedisServer::start();
    let s = Stream::new("jobs", "g");
    let runs = Arc::new(AtomicUsize::new(0));
    let claim_idle = Duration::from_millis(200);
    let make = |name: &str, count: usize| {
        let runs = runs.clone();
        Broker::builder(redis.url())
            .subscribe(
                &s,
                ConsumerOptions::default()
                    .with_consumer(name)
                    .with_count(count)
                    .with_concurrency(count)
                    .with_block(Duration::from_millis(50))
                    .with_claim_idle(claim_idle),
                move |_: Job| {
                    let runs = runs.clone();
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        // 3× claim_idle.
                        tokio::time::sleep(claim_idle * 3).await;
                        HandlerResult::Ok(())
                    }
                },
            )
            .build()
            .unwrap()
    };
    // w1 runs both entries at once; both must stay fresh while w2's
    // reclaimer looks for idle entries.
    let w1 = make("w1", 2);
    w1.start().await.unwrap();
    w1.publish_batch(&s, [Job { id: 1 }, Job { id: 2 }])
        .await
        .unwrap();
    let mut c = redis.conn();
    eventually("w1 started", WAIT, || runs.load(Ordering::SeqCst) >= 1).await;
    let w2 = make("w2", 1);
    w2.start().await.unwrap();
    eventually("both handled and acked", WAIT, || {
        pending_count(&mut c, "jobs", "g") == 0 && runs.load(Ordering::SeqCst) >= 2
    })
    .await;
    assert!(w1.stop().await.unwrap().is_clean());
    assert!(w2.stop().await.unwrap().is_clean());
    assert_eq!(runs.load(Ordering::SeqCst), 2, "no entry ran twice");
}

#[actix_rt::test]
async fn consumers_recover_after_flushall() {
    let redis = RedisServer::start();
    let s = Stream::new("jobs", "g");
    let seen: Seen = Arc::default();
    let broker = counting_broker(
        &redis.url(),
        &s,
        ConsumerOptions::default().with_block(Duration::from_millis(100)),
        &seen,
    );
    broker.start().await.unwrap();
    broker.publish(&s, &Job { id: 1 }).await.unwrap();
    eventually("first handled", WAIT, || seen.lock().unwrap().len() == 1).await;
    let _: () = redis::cmd("FLUSHALL").query(&mut redis.conn()).unwrap();
    // Publish until the recreated group picks entries up again.
    let mut next = 2;
    eventually("entries after FLUSHALL handled", WAIT, || {
        let mut c = redis.conn();
        let _: String = redis::cmd("XADD")
            .arg("jobs")
            .arg("*")
            .arg("data")
            .arg(format!(r#"{{"id":{next}}}"#))
            .query(&mut c)
            .unwrap();
        next += 1;
        seen.lock().unwrap().len() >= 3
    })
    .await;
    assert!(broker.stop().await.unwrap().is_clean());
}

#[actix_rt::test]
async fn no_published_entry_is_lost_across_a_server_restart() {
    let mut redis = RedisServer::start();
    let s = Stream::new("jobs", "g");
    let seen: Seen = Arc::default();
    let broker = counting_broker(
        &redis.url(),
        &s,
        ConsumerOptions::default()
            .with_block(Duration::from_millis(100))
            .with_count(5),
        &seen,
    );
    broker.start().await.unwrap();
    let mut published = Vec::new();
    for id in 0..50 {
        published.push(id);
        broker.publish(&s, &Job { id }).await.unwrap();
    }
    eventually("first 50 handled", WAIT, || {
        seen.lock().unwrap().len() == 50
    })
    .await;
    redis.restart();
    // Keep publishing: some publishes fail while the connection comes back;
    // every one that succeeded must be handled.
    let mut id = 50;
    let deadline = std::time::Instant::now() + WAIT;
    let mut ok_after = 0;
    while ok_after < 50 {
        assert!(
            std::time::Instant::now() < deadline,
            "publishing never recovered"
        );
        if broker.publish(&s, &Job { id }).await.is_ok() {
            published.push(id);
            ok_after += 1;
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        id += 1;
    }
    eventually("every published entry handled", WAIT, || {
        let seen = seen.lock().unwrap();
        published.iter().all(|id| seen.contains_key(id))
    })
    .await;
    assert!(broker.stop().await.unwrap().is_clean());
}

#[actix_rt::test]
async fn a_consumer_restarted_under_its_name_runs_its_idle_pending_entries_once() {
    let redis = RedisServer::start();
    support::strand(&redis, "jobs", "g", "c1", 0..5);
    let claim_idle = Duration::from_millis(100);
    let mut c = redis.conn();
    // Long enough idle that the reclaimer would take them too.
    eventually("entries idle past claim_idle", WAIT, || {
        let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
            .arg("jobs")
            .arg("g")
            .arg("IDLE")
            .arg(claim_idle.as_millis() as u64 * 2)
            .arg("-")
            .arg("+")
            .arg(10)
            .query(&mut c)
            .unwrap();
        rows.len() == 5
    })
    .await;
    let seen: Seen = Arc::default();
    let broker = counting_broker(
        &redis.url(),
        &Stream::new("jobs", "g"),
        ConsumerOptions::default()
            .with_consumer("c1")
            .with_concurrency(4)
            .with_block(Duration::from_millis(50))
            .with_claim_idle(claim_idle),
        &seen,
    );
    broker.start().await.unwrap();
    eventually("5 handled", WAIT, || seen.lock().unwrap().len() == 5).await;
    eventually("PEL empty", WAIT, || {
        pending_count(&mut c, "jobs", "g") == 0
    })
    .await;
    assert!(broker.stop().await.unwrap().is_clean());
    assert!(
        seen.lock().unwrap().values().all(|n| *n == 1),
        "ran twice: {:?}",
        seen.lock().unwrap()
    );
}

#[actix_rt::test]
async fn deleting_the_stream_under_a_blocked_read_is_healed_without_a_restart() {
    support::init_tracing();
    let redis = RedisServer::start();
    let s = Stream::new("jobs", "g");
    let seen: Seen = Arc::default();
    let sn = seen.clone();
    let broker = Broker::builder(redis.url())
        // Any consumer restart would fail the subscription at once.
        .restart_policy(rillkit::RestartPolicy::default().with_max_restarts(0))
        .subscribe(
            &s,
            ConsumerOptions::default().with_block(Duration::from_secs(5)),
            move |job: Job| {
                let sn = sn.clone();
                async move {
                    *sn.lock().unwrap().entry(job.id).or_default() += 1;
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    eventually("consumer blocked", WAIT, || redis.blocked_clients() == 1).await;
    let _: () = redis::cmd("DEL")
        .arg("jobs")
        .query(&mut redis.conn())
        .unwrap();
    let mut next = 0;
    eventually("entries after the DEL handled", WAIT, || {
        support::xadd(&mut redis.conn(), "jobs", &format!(r#"{{"id":{next}}}"#));
        next += 1;
        !seen.lock().unwrap().is_empty()
    })
    .await;
    let outcome = broker.stop().await.unwrap();
    assert!(
        outcome.is_clean(),
        "healed in place, no restart: {outcome:?}"
    );
}

/// Since Redis 8.8 `XNACK` hands entries back to the group with no holder:
/// `XPENDING` lists them with the consumer `""` and an idle time of `-1`.
/// The reclaimer takes them like any idle entry, and the entries a dead
/// consumer still holds beside them too.
#[actix_rt::test]
async fn entries_handed_back_with_xnack_are_taken_over_with_the_rest() {
    support::init_tracing();
    let redis = RedisServer::start();
    let mut c = redis.conn();
    if !support::server::command_or_skip(
        &mut c,
        "XNACK",
        "Redis 8.8+",
        "entries_handed_back_with_xnack_are_taken_over_with_the_rest",
    ) {
        return;
    }
    strand(&redis, "jobs", "g", 0..6);
    let first: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg("jobs")
        .arg("g")
        .arg("-")
        .arg("+")
        .arg(3)
        .query(&mut c)
        .unwrap();
    let ids: Vec<String> = first.into_iter().map(|r| r.0).collect();
    let nacked: i64 = redis::cmd("XNACK")
        .arg("jobs")
        .arg("g")
        .arg("FAIL")
        .arg("IDS")
        .arg(ids.len())
        .arg(&ids)
        .query(&mut c)
        .unwrap();
    assert_eq!(nacked, 3);
    let owners: Vec<(String, String, i64, u64)> = redis::cmd("XPENDING")
        .arg("jobs")
        .arg("g")
        .arg("-")
        .arg("+")
        .arg(1)
        .query(&mut c)
        .unwrap();
    assert_eq!(
        (owners[0].1.as_str(), owners[0].2),
        ("", -1),
        "an owner-less entry: no consumer, idle -1"
    );
    let seen: Seen = Arc::default();
    let broker = counting_broker(
        &redis.url(),
        &Stream::new("jobs", "g"),
        ConsumerOptions::default()
            .with_consumer("alive")
            .with_block(Duration::from_millis(50))
            .with_claim_idle(Duration::from_millis(200)),
        &seen,
    );
    broker.start().await.unwrap();
    eventually("all 6 handled", WAIT, || seen.lock().unwrap().len() == 6).await;
    eventually("PEL empty", WAIT, || {
        pending_count(&mut c, "jobs", "g") == 0
    })
    .await;
    assert!(broker.stop().await.unwrap().is_clean());
    assert!(seen.lock().unwrap().values().all(|n| *n == 1));
}
