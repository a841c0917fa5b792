//! List subscriptions: reliable pops onto a processing
//! list with `LREM` after success, retries then the dead-letter list, crash
//! recovery from a dead consumer's processing list, at most once with
//! `BRPOP`, and a subscription removed at run time during a blocked pop.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rillkit::prelude::*;
use rillkit::{RetryBackoff, SourceKind};
use serde::{Deserialize, Serialize};
use support::{RedisServer, Worker, eventually, eventually_blocking};

const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Serialize, Deserialize)]
struct Job {
    id: u64,
    #[serde(default)]
    fail: bool,
}

fn llen(c: &mut redis::Connection, key: &str) -> usize {
    redis::cmd("LLEN").arg(key).query(c).unwrap()
}

fn processing(list: &str, consumer: &str) -> String {
    format!("{{{list}}}:rillkit:processing:{consumer}")
}

#[actix::test]
async fn reliable_items_are_handled_once_removed_after_success_and_poison_goes_to_the_dlq() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let jobs = List::new("jobs");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let runs_of_poison = Arc::new(AtomicUsize::new(0));
    let (s, p) = (seen.clone(), runs_of_poison.clone());
    let broker = Broker::builder(redis.url())
        .subscribe_list(
            &jobs,
            ListOptions::default()
                .with_consumer("c1")
                .with_concurrency(4)
                .with_max_retries(2)
                .with_retry_backoff(RetryBackoff::fixed(Duration::from_millis(20))),
            move |job: Job| {
                let (s, p) = (s.clone(), p.clone());
                async move {
                    if job.fail {
                        p.fetch_add(1, Ordering::SeqCst);
                        return Err(HandlerError::retry(format!("job {} is poison", job.id)));
                    }
                    s.lock().unwrap().push(job.id);
                    Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let len = broker
        .publish_list_batch(&jobs, (1..=200).map(|id| Job { id, fail: false }))
        .await
        .unwrap();
    assert!(len <= 200);
    broker
        .publish_list(
            &jobs,
            &Job {
                id: 999,
                fail: true,
            },
        )
        .await
        .unwrap();
    // Anything an LPUSH producer writes that is not a job: dead-lettered
    // at once, the handler never called.
    let _: () = redis::cmd("LPUSH")
        .arg("jobs")
        .arg("not json")
        .query(&mut c)
        .unwrap();
    eventually("200 handled and 2 dead letters", WAIT, || {
        seen.lock().unwrap().len() == 200 && llen(&mut c, "jobs-dlq") == 2
    })
    .await;
    let mut ids = seen.lock().unwrap().clone();
    ids.sort_unstable();
    assert_eq!(ids, (1..=200).collect::<Vec<_>>(), "each item once");
    assert_eq!(
        runs_of_poison.load(Ordering::SeqCst),
        3,
        "1 run + 2 retries"
    );
    assert_eq!(llen(&mut c, "jobs"), 0);
    eventually("processing list empty", WAIT, || {
        llen(&mut c, &processing("jobs", "c1")) == 0
    })
    .await;
    let letters: Vec<String> = redis::cmd("LRANGE")
        .arg("jobs-dlq")
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    let letters: Vec<serde_json::Value> = letters
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let poison = letters
        .iter()
        .find(|l| l["item"].as_str().is_some_and(|i| i.contains("999")))
        .expect("the poison item's dead letter");
    assert_eq!(poison["attempts"], 3);
    assert_eq!(poison["list"], "jobs");
    assert_eq!(poison["consumer"], "c1");
    assert!(poison["error"].as_str().unwrap().contains("poison"));
    let garbage = letters
        .iter()
        .find(|l| l["item"] == "not json")
        .expect("the undecodable item's dead letter");
    assert!(
        garbage["error"]
            .as_str()
            .unwrap()
            .contains("does not decode")
    );
    let attempts: usize = redis::cmd("HLEN")
        .arg("{jobs}:rillkit:attempts")
        .query(&mut c)
        .unwrap();
    assert_eq!(attempts, 0, "counts go with their items");
    let status = broker.status();
    let sub = &status.subscriptions[0];
    assert_eq!(sub.kind, SourceKind::List);
    assert_eq!((sub.handled, sub.dead_lettered), (200, 2));
    let outcome = broker.stop().await.unwrap();
    assert!(outcome.is_clean(), "{outcome:?}");
    assert!(outcome.closed_connections >= 1, "{outcome:?}");
    let registered: Vec<String> = redis::cmd("SMEMBERS")
        .arg("{jobs}:rillkit:consumers")
        .query(&mut c)
        .unwrap();
    assert!(
        registered.is_empty(),
        "a clean stop unregisters: {registered:?}"
    );
}

#[actix::test]
async fn at_most_once_pops_with_brpop_and_keeps_no_processing_list() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let jobs = List::new("fire");
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_list(
            &jobs,
            ListOptions::default()
                .with_consumer("c1")
                .with_at_most_once(true),
            move |job: Job| {
                let s = s.clone();
                async move {
                    s.fetch_add(1, Ordering::SeqCst);
                    if job.fail {
                        return Err(HandlerError::retry("failed"));
                    }
                    Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker
        .publish_list_batch(&jobs, (1..=20).map(|id| Job { id, fail: id == 7 }))
        .await
        .unwrap();
    eventually("20 runs", WAIT, || seen.load(Ordering::SeqCst) == 20).await;
    eventually("the failed one recorded", WAIT, || {
        llen(&mut c, "fire-dlq") == 1
    })
    .await;
    assert_eq!(seen.load(Ordering::SeqCst), 20, "no retry at most once");
    assert!(redis.command_calls("brpop") >= 20);
    assert_eq!(redis.command_calls("blmove"), 0);
    let keys: Vec<String> = redis::cmd("KEYS").arg("{fire}*").query(&mut c).unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    assert!(broker.stop().await.unwrap().is_clean());
}

#[actix::test]
async fn removing_a_list_subscription_cuts_its_blocked_pop_short_and_leaves_the_next_item() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let broker = Broker::builder(redis.url()).build().unwrap();
    broker.start().await.unwrap();
    let jobs = List::new("rt");
    let seen = Arc::new(AtomicUsize::new(0));
    let s = seen.clone();
    let handle = broker
        .subscribe_list(
            &jobs,
            ListOptions::default()
                .with_consumer("c1")
                .with_block(Duration::from_secs(20)),
            move |_: Job| {
                let s = s.clone();
                async move {
                    s.fetch_add(1, Ordering::SeqCst);
                    HandlerResult::Ok(())
                }
            },
        )
        .await
        .unwrap();
    broker
        .publish_list(&jobs, &Job { id: 1, fail: false })
        .await
        .unwrap();
    eventually("first item handled", WAIT, || {
        seen.load(Ordering::SeqCst) == 1
    })
    .await;
    eventually("blocked in BLMOVE", WAIT, || redis.blocked_clients() == 1).await;
    let asked = Instant::now();
    let removed = handle.remove().await.unwrap();
    let took = asked.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "remove waited for the 20 s block: {took:?}"
    );
    assert!(removed.outcome.is_clean());
    assert_eq!(removed.handled, 1);
    assert_eq!(redis.blocked_clients(), 0);
    assert_eq!(
        redis.command_calls("quit"),
        1,
        "its connection ends with QUIT"
    );
    broker
        .publish_list(&jobs, &Job { id: 2, fail: false })
        .await
        .unwrap();
    assert_eq!(
        llen(&mut c, "rt"),
        1,
        "nobody pops for a removed subscription"
    );
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    assert!(broker.status().subscriptions.is_empty());
    // The broker runs on with no subscription at all.
    assert_eq!(broker.phase(), Phase::Running);
    broker.ping().await.unwrap();
    assert!(broker.stop().await.unwrap().is_clean());
    assert_eq!(llen(&mut c, "rt"), 1);
}

/// Two workers share 10 000 items; one is killed with SIGKILL mid-run. The
/// survivor moves the dead one's processing list back once its heartbeat
/// lapsed: every item is handled, and items handled twice are at most what
/// the dead consumer held at the kill.
#[test]
fn a_killed_consumers_processing_list_is_recovered_by_a_survivor() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let items: Vec<String> = (1..=10_000)
        .map(|id| format!(r#"{{"id":{id},"sleep_ms":1}}"#))
        .collect();
    for chunk in items.chunks(1000) {
        let _: () = redis::cmd("LPUSH")
            .arg("work")
            .arg(chunk)
            .query(&mut c)
            .unwrap();
    }
    let env = |name: &'static str| {
        vec![
            ("RILLKIT_SOURCE", "list"),
            ("RILLKIT_STREAM", "work"),
            ("RILLKIT_CONSUMER", name),
            ("RILLKIT_CONCURRENCY", "8"),
            ("RILLKIT_HEARTBEAT_TTL_MS", "1000"),
            ("RILLKIT_BLOCK_MS", "500"),
        ]
    };
    let victim = Worker::spawn(&redis.url(), &env("victim"));
    let mut survivor = Worker::spawn(&redis.url(), &env("survivor"));
    eventually_blocking("the victim is busy", WAIT, || {
        victim.handled().len() >= 1000
    });
    victim.signal("KILL");
    let held_at_kill = llen(&mut c, &processing("work", "victim"));
    let mut victim = victim;
    victim.wait_exit(WAIT);
    eventually_blocking("every item handled", Duration::from_secs(120), || {
        let ids: HashSet<u64> = victim
            .handled()
            .into_iter()
            .chain(survivor.handled())
            .map(|(id, _)| id)
            .collect();
        ids.len() == 10_000
    });
    let all: Vec<u64> = victim
        .handled()
        .into_iter()
        .chain(survivor.handled())
        .map(|(id, _)| id)
        .collect();
    let unique: HashSet<u64> = all.iter().copied().collect();
    let repeats = all.len() - unique.len();
    assert!(
        repeats <= held_at_kill,
        "{repeats} repeats, but the victim held only {held_at_kill} at the kill"
    );
    assert!(unique.iter().all(|id| (1..=10_000).contains(id)));
    assert_eq!(llen(&mut c, "work"), 0);
    assert_eq!(llen(&mut c, &processing("work", "victim")), 0);
    let registered: Vec<String> = redis::cmd("SMEMBERS")
        .arg("{work}:rillkit:consumers")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        registered,
        vec!["survivor".to_string()],
        "the dead one is unregistered"
    );
    assert!(
        survivor
            .log()
            .iter()
            .any(|l| l.contains("heartbeat lapsed")),
        "the survivor says what it recovered"
    );
    survivor.signal("TERM");
    assert_eq!(survivor.wait_exit(WAIT), Some(0));
}

/// A `BLMOVE` whose reply is lost (the connection breaks after Redis moved
/// the item) leaves an item on the processing list that no handler runs.
/// Stand-in: an item put there by hand, then the read connection killed.
/// After the reconnect the consumer puts it back onto the list and runs it.
#[actix::test]
async fn an_item_a_lost_pop_reply_left_on_the_processing_list_is_put_back_and_run() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let jobs = List::new("lost");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_list(
            &jobs,
            ListOptions::default()
                .with_consumer("c1")
                .with_block(Duration::from_secs(20)),
            move |job: Job| {
                let s = s.clone();
                async move {
                    s.lock().unwrap().push(job.id);
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    eventually("blocked in BLMOVE", WAIT, || redis.blocked_clients() == 1).await;
    let _: () = redis::cmd("LPUSH")
        .arg(processing("lost", "c1"))
        .arg(r#"{"id":42}"#)
        .query(&mut c)
        .unwrap();
    let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut c).unwrap();
    let reader = clients
        .lines()
        .find(|l| l.contains("name=rillkit:lost:c1:list"))
        .and_then(|l| l.split_whitespace().find_map(|f| f.strip_prefix("id=")))
        .expect("the list reader's connection, named")
        .to_owned();
    let killed: u64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(&reader)
        .query(&mut c)
        .unwrap();
    assert_eq!(killed, 1);
    eventually("the stranded item ran", WAIT, || {
        seen.lock().unwrap().contains(&42)
    })
    .await;
    eventually("processing list empty", WAIT, || {
        llen(&mut c, &processing("lost", "c1")) == 0
    })
    .await;
    assert_eq!(seen.lock().unwrap().as_slice(), &[42]);
    assert!(broker.stop().await.unwrap().is_clean());
}

/// Two live processes under one list consumer name (a StatefulSet pod
/// during a rollout): the second waits for the first's heartbeat (the
/// name's lease) instead of taking its processing list, so the first's item
/// runs once; once the first stops, the second takes over.
#[actix::test]
async fn a_second_process_under_a_live_list_consumer_name_waits_for_it() {
    let redis = RedisServer::start();
    let jobs = List::new("shared");
    let runs = Arc::new(Mutex::new(Vec::new()));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let broker = |runs: Arc<Mutex<Vec<u64>>>, gate: Arc<tokio::sync::Semaphore>| {
        Broker::builder(redis.url())
            .subscribe_list(
                &jobs,
                ListOptions::default()
                    .with_consumer("same")
                    .with_heartbeat_ttl(Duration::from_millis(600))
                    .with_block(Duration::from_millis(200)),
                move |job: Job| {
                    let (runs, gate) = (runs.clone(), gate.clone());
                    async move {
                        runs.lock().unwrap().push(job.id);
                        gate.acquire().await.unwrap().forget();
                        HandlerResult::Ok(())
                    }
                },
            )
            .build()
            .unwrap()
    };
    let first = broker(runs.clone(), gate.clone());
    first.start().await.unwrap();
    first
        .publish_list(&jobs, &Job { id: 1, fail: false })
        .await
        .unwrap();
    eventually("the first runs item 1", WAIT, || {
        runs.lock().unwrap().len() == 1
    })
    .await;
    let second = broker(runs.clone(), gate.clone());
    second.start().await.unwrap();
    eventually("the second waits for the name", WAIT, || {
        matches!(
            second.status().subscriptions[0].state,
            rillkit::SubscriptionState::WaitingForLease { .. }
        )
    })
    .await;
    // Several heartbeats later, item 1 is still the first one's alone.
    let mut c = redis.conn();
    let t = Instant::now();
    eventually("three heartbeat periods", WAIT, || {
        t.elapsed() > Duration::from_secs(2)
    })
    .await;
    assert_eq!(runs.lock().unwrap().as_slice(), &[1]);
    assert_eq!(llen(&mut c, &processing("shared", "same")), 1);
    gate.add_permits(1);
    let stopped = first.stop().await.unwrap();
    assert!(stopped.is_clean());
    eventually("the second takes over", WAIT, || {
        second.status().subscriptions[0].state == rillkit::SubscriptionState::Running
    })
    .await;
    second
        .publish_list(&jobs, &Job { id: 2, fail: false })
        .await
        .unwrap();
    gate.add_permits(1);
    eventually("item 2 ran", WAIT, || runs.lock().unwrap().len() == 2).await;
    assert_eq!(runs.lock().unwrap().as_slice(), &[1, 2], "item 1 ran once");
    assert!(second.stop().await.unwrap().is_clean());
}

/// A list handler with context sees which run of the item this is (from
/// the attempts hash), and may publish onward through its broker.
#[actix::test]
async fn a_list_handler_with_context_sees_the_run_and_publishes_onward() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let jobs = List::new("ctx");
    let done = List::new("ctx-done");
    let runs = Arc::new(Mutex::new(Vec::new()));
    let r = runs.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_list_with_context(
            &jobs,
            ListOptions::default()
                .with_consumer("c1")
                .with_retry_backoff(RetryBackoff::fixed(Duration::from_millis(10))),
            move |job: Job, d: rillkit::ItemDelivery| {
                let (r, done) = (r.clone(), done.clone());
                async move {
                    r.lock()
                        .unwrap()
                        .push((d.source().to_string(), d.attempt()));
                    if d.attempt() < 2 {
                        return Err(HandlerError::retry("first run fails"));
                    }
                    d.broker().publish_list(&done, &job.id).await?;
                    Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker
        .publish_list(&jobs, &Job { id: 9, fail: false })
        .await
        .unwrap();
    eventually("published onward", WAIT, || llen(&mut c, "ctx-done") == 1).await;
    assert_eq!(
        runs.lock().unwrap().as_slice(),
        &[("ctx".to_owned(), 1), ("ctx".to_owned(), 2)]
    );
    assert!(broker.stop().await.unwrap().is_clean());
}

#[actix::test]
async fn a_dead_letter_redis_refuses_keeps_the_item_until_its_move_is_accepted() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let jobs = List::new("refused");
    // The dead-letter list's key holds a string: Redis answers WRONGTYPE to
    // every push onto it, after the script's check that the item is held.
    let _: () = redis::cmd("SET")
        .arg("refused-dlq")
        .arg("not a list")
        .query(&mut c)
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_list(
            &jobs,
            ListOptions::default().with_consumer("c1"),
            move |job: Job| {
                let r = r.clone();
                async move {
                    r.fetch_add(1, Ordering::SeqCst);
                    Err::<(), _>(HandlerError::reject(format!("job {} is rejected", job.id)))
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker
        .publish_list(&jobs, &Job { id: 5, fail: true })
        .await
        .unwrap();
    // Refused, and sent again: the item has not left the processing list.
    eventually("the dead-letter push refused twice", WAIT, || {
        redis.command_failed_calls("lpush") >= 2
    })
    .await;
    assert_eq!(
        llen(&mut c, &processing("refused", "c1")),
        1,
        "a refused move takes nothing away"
    );
    // The operator frees the key: the next send moves the item, once.
    let _: () = redis::cmd("DEL").arg("refused-dlq").query(&mut c).unwrap();
    eventually("the dead letter moved", WAIT, || {
        llen(&mut c, "refused-dlq") == 1 && llen(&mut c, &processing("refused", "c1")) == 0
    })
    .await;
    let letters: Vec<String> = redis::cmd("LRANGE")
        .arg("refused-dlq")
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    let letter: serde_json::Value = serde_json::from_str(&letters[0]).unwrap();
    assert!(
        letter["error"]
            .as_str()
            .unwrap()
            .contains("job 5 is rejected")
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
    assert_eq!(llen(&mut c, "refused"), 0);
    let outcome = broker.stop().await.unwrap();
    assert!(outcome.is_clean(), "{outcome:?}");
}

/// A retry that comes due while a pop blocks on an empty list cuts the pop
/// short (`CLIENT UNBLOCK`): it does not wait out the pop's `block`.
#[actix::test]
async fn a_retry_due_while_a_pop_blocks_runs_without_waiting_for_the_pop() {
    let redis = RedisServer::start();
    let jobs = List::new("prompt");
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_list(
            &jobs,
            ListOptions::default()
                .with_consumer("c1")
                // A slot stays free while the job runs: the next pop blocks.
                .with_concurrency(2)
                // Longer than the wait below: a retry that waited for the
                // pop would miss it.
                .with_block(Duration::from_secs(120))
                .with_retry_backoff(RetryBackoff::fixed(Duration::from_millis(20))),
            move |_job: Job| {
                let r = r.clone();
                async move {
                    if r.fetch_add(1, Ordering::SeqCst) == 0 {
                        return Err(HandlerError::retry("first run fails"));
                    }
                    Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker
        .publish_list(&jobs, &Job { id: 1, fail: false })
        .await
        .unwrap();
    eventually("the job ran again after its backoff", WAIT, || {
        runs.load(Ordering::SeqCst) == 2
    })
    .await;
    let outcome = broker.stop().await.unwrap();
    assert!(outcome.is_clean(), "{outcome:?}");
}
