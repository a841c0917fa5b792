//! What the server says and what rillkit does about it. A demoted
//! server, a server still loading, refused acks and dead-letter moves, a
//! restart from a snapshot: none of them kills a consumer, re-runs a succeeded
//! entry or copies a dead letter twice.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rillkit::prelude::*;
use rillkit::{Error, Phase};
use serde::{Deserialize, Serialize};
use support::{RedisServer, eventually, pending_count, stream_len};

const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Serialize, Deserialize)]
struct Job {
    id: u64,
}

/// Runs per entry id, filled by [`recording`] handlers.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<HashMap<u64, u32>>>);

impl Runs {
    fn of(&self, id: u64) -> u32 {
        self.0.lock().unwrap().get(&id).copied().unwrap_or(0)
    }
    fn ids(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn reruns(&self) -> Vec<(u64, u32)> {
        let mut v: Vec<(u64, u32)> = self
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(id, n)| (*id, *n))
            .collect();
        v.sort_unstable();
        v
    }
}

/// A handler that records each run and succeeds; entry `hold` waits until
/// `release` is set before it succeeds.
fn recording(
    runs: &Runs,
    hold: Option<(u64, Arc<AtomicBool>)>,
) -> impl Fn(Job) -> std::pin::Pin<Box<dyn std::future::Future<Output = HandlerResult>>>
+ Send
+ Sync
+ 'static {
    let runs = runs.clone();
    move |job: Job| {
        *runs.0.lock().unwrap().entry(job.id).or_default() += 1;
        let hold = hold.clone();
        Box::pin(async move {
            if let Some((id, release)) = hold {
                while id == job.id && !release.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            Ok(())
        })
    }
}

/// Publishes, trying again while the error is retryable (as a web handler's
/// client would after a 503).
async fn publish_until_accepted(broker: &Broker, s: &Stream, id: u64) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        match broker.publish(s, &Job { id }).await {
            Ok(_) => return,
            Err(e) if e.is_retryable() && std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("publish {id} failed: {e}"),
        }
    }
}

#[actix_rt::test]
async fn a_demoted_server_neither_kills_the_consumer_nor_reruns_a_succeeded_entry() {
    support::init_tracing();
    let a = RedisServer::start();
    let b = RedisServer::start_replica_of(&a);
    let s = Stream::new("orders", "billing");
    let runs = Runs::default();
    let release = Arc::new(AtomicBool::new(false));
    let broker = Broker::builder(a.url())
        .publish_timeout(Duration::from_millis(500))
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(Duration::from_millis(200))
                .with_claim_idle(Duration::from_millis(500)),
            recording(&runs, Some((1, release.clone()))),
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish(&s, &Job { id: 1 }).await.unwrap();
    eventually("entry 1 running", WAIT, || runs.of(1) == 1).await;

    // A failover demotes the worker's server: B is master, A its replica.
    b.replicaof(None);
    a.replicaof(Some(&b));
    eventually("A replicates B", WAIT, || {
        a.role() == "slave" && a.master_link_up()
    })
    .await;
    // The handler succeeds now; its XACK meets READONLY.
    let readonly_before = a.error_count("READONLY");
    release.store(true, Ordering::SeqCst);
    eventually("the XACK was refused with READONLY", WAIT, || {
        a.error_count("READONLY") > readonly_before
    })
    .await;
    // A publish meanwhile fails, and says it may be tried again (HTTP 503).
    let e = broker.publish(&s, &Job { id: 99 }).await.unwrap_err();
    assert!(e.is_retryable(), "a publish to a demoted server: {e}");

    // The old master is promoted back.
    a.replicaof(None);
    b.replicaof(Some(&a));
    for id in 2..=20 {
        publish_until_accepted(&broker, &s, id).await;
    }
    let mut c = a.conn();
    eventually("every entry handled and acked", WAIT, || {
        (1..=20).all(|id| runs.of(id) >= 1) && pending_count(&mut c, "orders", "billing") == 0
    })
    .await;
    assert_eq!(runs.reruns(), vec![], "no succeeded entry runs again");
    assert_eq!(stream_len(&mut c, "orders-dlq"), 0, "nothing dead-lettered");
    assert_eq!(broker.phase(), Phase::Running, "the consumer is still up");
    let outcome = broker.stop().await.unwrap();
    assert_eq!(outcome.exit_code(), 0, "{outcome:?}");
}

#[actix_rt::test]
async fn start_waits_for_a_server_that_is_loading_its_dataset() {
    support::init_tracing();
    let server = RedisServer::start_loading_with(
        |c| {
            let _: () = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg("jobs")
                .arg("g")
                .arg("0")
                .arg("MKSTREAM")
                .query(c)
                .unwrap();
            for id in 1..=10 {
                support::xadd(c, "jobs", &format!(r#"{{"id":{id}}}"#));
            }
        },
        30_000,
        50,
    );
    assert!(server.is_loading(), "the server is still loading");
    let s = Stream::new("jobs", "g");
    let runs = Runs::default();
    let build = |startup: Duration| {
        Broker::builder(server.url())
            .startup_timeout(startup)
            .subscribe(
                &s,
                ConsumerOptions::default().with_block(Duration::from_millis(100)),
                recording(&runs, None),
            )
            .build()
            .unwrap()
    };
    // A deadline shorter than the load: start gives up, saying why.
    let impatient = build(Duration::from_millis(300));
    match impatient.start().await {
        Err(Error::StartupTimeout { .. }) => {}
        other => panic!("expected StartupTimeout, got {other:?}"),
    }
    // The default-sized deadline: start waits, then consumes.
    let broker = build(Duration::from_secs(60));
    broker
        .start()
        .await
        .expect("start waits for LOADING to end");
    assert!(!server.is_loading());
    eventually("the 10 entries handled", WAIT, || runs.ids() == 10).await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

#[actix_rt::test]
async fn refused_acks_never_rerun_or_dead_letter_succeeded_entries() {
    support::init_tracing();
    let server = RedisServer::start();
    let s = Stream::new("jobs", "g");
    let runs = Runs::default();
    let broker = Broker::builder(server.url())
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_concurrency(4)
                .with_block(Duration::from_millis(100))
                .with_claim_idle(Duration::from_millis(300))
                .with_max_retries(1),
            recording(&runs, None),
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let mut c = server.conn();
    for id in 1..=10 {
        broker.publish(&s, &Job { id }).await.unwrap();
    }
    eventually("first 10 acked", WAIT, || {
        runs.ids() == 10 && pending_count(&mut c, "jobs", "g") == 0
    })
    .await;

    // XACK is refused (an ACL change) for longer than claim_idle.
    server.acl_setuser(&["default", "-xack"]);
    let refused_before = server.error_count("NOPERM");
    for id in 11..=30 {
        broker.publish(&s, &Job { id }).await.unwrap();
    }
    eventually(
        "entries ran and their acks were refused for a while",
        WAIT,
        || runs.ids() == 30 && server.error_count("NOPERM") >= refused_before + 5,
    )
    .await;
    server.acl_setuser(&["default", "+xack"]);

    eventually("every entry acked", WAIT, || {
        pending_count(&mut c, "jobs", "g") == 0
    })
    .await;
    assert_eq!(runs.reruns(), vec![], "no succeeded entry runs again");
    assert_eq!(stream_len(&mut c, "jobs-dlq"), 0, "nothing dead-lettered");
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

#[actix_rt::test]
async fn a_dead_letter_move_whose_ack_is_refused_leaves_one_copy() {
    support::init_tracing();
    let server = RedisServer::start();
    let s = Stream::new("jobs", "g");
    let broker = Broker::builder(server.url())
        .subscribe(
            &s,
            ConsumerOptions::default().with_block(Duration::from_millis(100)),
            |_: Job| async { Err(HandlerError::reject("bad job")) },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    server.acl_setuser(&["default", "-xack"]);
    let moves_before = server.command_calls("evalsha");
    broker.publish(&s, &Job { id: 1 }).await.unwrap();
    eventually("the move was tried several times", WAIT, || {
        server.command_calls("evalsha") >= moves_before + 4
    })
    .await;
    let mut c = server.conn();
    assert_eq!(stream_len(&mut c, "jobs-dlq"), 0, "no copy while refused");
    assert_eq!(pending_count(&mut c, "jobs", "g"), 1, "still pending");
    server.acl_setuser(&["default", "+xack"]);
    eventually("moved", WAIT, || pending_count(&mut c, "jobs", "g") == 0).await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    assert_eq!(stream_len(&mut c, "jobs-dlq"), 1, "exactly one copy");
}

#[actix_rt::test]
async fn after_a_restart_from_a_snapshot_own_pending_entries_run_at_once() {
    support::init_tracing();
    let mut server = RedisServer::start_with(&["--dbfilename", "dump.rdb"]);
    let s = Stream::new("jobs", "g");
    let runs = Runs::default();
    let broker = Broker::builder(server.url())
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(Duration::from_millis(100))
                // Far longer than the test: only the re-read can run entry 2.
                .with_claim_idle(Duration::from_secs(300)),
            recording(&runs, None),
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish(&s, &Job { id: 1 }).await.unwrap();
    eventually("entry 1 handled", WAIT, || runs.of(1) == 1).await;

    // The snapshot holds entry 2 delivered to c1 and not acked (added and
    // read in one transaction, so the running consumer does not get it).
    let mut c = server.conn();
    let (id2,): (String,) = redis::pipe()
        .atomic()
        .cmd("XADD")
        .arg("jobs")
        .arg("*")
        .arg("data")
        .arg(r#"{"id":2}"#)
        .cmd("XREADGROUP")
        .arg("GROUP")
        .arg("g")
        .arg("c1")
        .arg("STREAMS")
        .arg("jobs")
        .arg(">")
        .ignore()
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    let _: i64 = redis::cmd("XACK")
        .arg("jobs")
        .arg("g")
        .arg(&id2)
        .query(&mut c)
        .unwrap();
    drop(c);
    // The server restarts from that snapshot: entry 2 is in c1's PEL again.
    server.restart();
    eventually("entry 2 handled after the reconnect", WAIT, || {
        runs.of(2) == 1
    })
    .await;
    let mut c = server.conn();
    eventually("entry 2 acked", WAIT, || {
        pending_count(&mut c, "jobs", "g") == 0
    })
    .await;
    assert_eq!(runs.of(1), 1);
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

#[actix_rt::test]
async fn a_drain_whose_acks_are_refused_times_out_and_leaves_the_entries_pending() {
    support::init_tracing();
    let server = RedisServer::start();
    let s = Stream::new("jobs", "g");
    let runs = Runs::default();
    let broker = Broker::builder(server.url())
        .subscribe(
            &s,
            ConsumerOptions::default().with_block(Duration::from_millis(100)),
            recording(&runs, None),
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    server.acl_setuser(&["default", "-xack"]);
    broker.publish(&s, &Job { id: 1 }).await.unwrap();
    let refused_before = server.error_count("NOPERM");
    eventually("its XACK refused", WAIT, || {
        runs.of(1) == 1 && server.error_count("NOPERM") > refused_before
    })
    .await;
    let outcome = broker
        .stop_with_timeout(Duration::from_millis(500))
        .await
        .unwrap();
    assert!(outcome.timed_out, "the drain did not finish: {outcome:?}");
    assert_eq!(outcome.exit_code(), 3);
    server.acl_setuser(&["default", "+xack"]);
    assert_eq!(
        pending_count(&mut server.conn(), "jobs", "g"),
        1,
        "still pending"
    );
}

/// The `CLIENT ID` of the connection blocked in XREADGROUP, once there is one.
fn blocked_reader(server: &RedisServer) -> Option<i64> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.conn())
        .unwrap();
    list.lines()
        .find(|l| l.contains("cmd=xreadgroup") && l.contains("flags=b"))
        .and_then(|l| {
            l.split_whitespace()
                .next()?
                .strip_prefix("id=")?
                .parse()
                .ok()
        })
}

#[actix_rt::test]
async fn a_read_reply_lost_with_its_connection_charges_no_delivery() {
    support::init_tracing();
    let server = RedisServer::start();
    let s = Stream::new("jobs", "g");
    // (id, delivery count) of every run.
    let seen: Arc<Mutex<Vec<(u64, u64)>>> = Default::default();
    let seen2 = seen.clone();
    let broker = Broker::builder(server.url())
        .subscribe_message(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(Duration::from_secs(5))
                .with_max_retries(0)
                // Far longer than the test: only the re-read brings them.
                .with_claim_idle(Duration::from_secs(300)),
            move |msg: Message| {
                let job: Job = msg.decode(&rillkit::Json).unwrap();
                seen2.lock().unwrap().push((job.id, msg.delivery_count));
                async { HandlerResult::Ok(()) }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let mut c = server.conn();
    for id in 1..=5u64 {
        let mut reader = None;
        eventually("the consumer is blocked in its read", WAIT, || {
            reader = blocked_reader(&server);
            reader.is_some()
        })
        .await;
        // The entry is delivered to the blocked read (it enters c1's PEL), and
        // the connection is killed before the reply leaves the server.
        let _: () = redis::pipe()
            .cmd("XADD")
            .arg("jobs")
            .arg("*")
            .arg("data")
            .arg(format!(r#"{{"id":{id}}}"#))
            .ignore()
            .cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(reader.unwrap())
            .ignore()
            .query(&mut c)
            .unwrap();
        eventually("the entry ran after the reconnect", WAIT, || {
            seen.lock().unwrap().iter().any(|(i, _)| *i == id)
        })
        .await;
    }
    eventually("all acked", WAIT, || {
        pending_count(&mut c, "jobs", "g") == 0
    })
    .await;
    assert_eq!(
        *seen.lock().unwrap(),
        (1..=5).map(|id| (id, 1)).collect::<Vec<_>>(),
        "each ran once, as its first delivery"
    );
    assert_eq!(stream_len(&mut c, "jobs-dlq"), 0, "nothing dead-lettered");
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}
