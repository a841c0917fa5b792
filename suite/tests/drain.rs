//! Stop without waiting for `block`, the drain deadline and
//! exit codes, hand-back of unstarted entries, signals, supervision limits.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rillkit::RestartPolicy;
use rillkit::prelude::*;
use support::{RedisServer, Worker, eventually, eventually_blocking, pending_count, xadd};

const WAIT: Duration = Duration::from_secs(30);

use support::worker_env as env;

#[test]
fn sigterm_stops_an_idle_worker_without_waiting_for_block() {
    let redis = RedisServer::start();
    let mut w = Worker::spawn(&redis.url(), &env("w1", &[("RILLKIT_BLOCK_MS", "5000")]));
    eventually_blocking("worker blocked in XREADGROUP", WAIT, || {
        redis.blocked_clients() == 1
    });
    let t0 = Instant::now();
    w.signal("TERM");
    assert_eq!(w.wait_exit(WAIT), Some(0));
    // A generous bound: the latency itself is measured by the benchmark.
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "stop took {:?} with a 5 s block",
        t0.elapsed()
    );
}

/// A worker with a drain deadline of `shutdown_ms`, busy in a handler that
/// sleeps `sleep_ms`.
fn busy_worker(redis: &RedisServer, shutdown_ms: &str, sleep_ms: u64) -> Worker {
    let w = Worker::spawn(
        &redis.url(),
        &env(
            "w1",
            &[
                ("RILLKIT_BLOCK_MS", "100"),
                ("RILLKIT_SHUTDOWN_TIMEOUT_MS", shutdown_ms),
            ],
        ),
    );
    let mut c = redis.conn();
    xadd(
        &mut c,
        "tasks",
        &format!(r#"{{"id":1,"sleep_ms":{sleep_ms}}}"#),
    );
    eventually_blocking("handler running", WAIT, || {
        pending_count(&mut c, "tasks", "workers") == 1
    });
    w
}

#[test]
fn sigterm_during_a_handler_within_the_drain_deadline_acks_and_exits_0() {
    let redis = RedisServer::start();
    let mut w = busy_worker(&redis, "10000", 2000);
    w.signal("TERM");
    assert_eq!(w.wait_exit(WAIT), Some(0));
    assert_eq!(w.handled(), [(1, 1)]);
    let pending = pending_count(&mut redis.conn(), "tasks", "workers");
    assert_eq!(pending, 0, "acked before exit");
}

#[test]
fn a_long_drain_says_every_few_seconds_what_it_waits_for() {
    let redis = RedisServer::start();
    let mut w = busy_worker(&redis, "30000", 7000);
    w.signal("TERM");
    assert_eq!(w.wait_exit(WAIT), Some(0));
    assert_eq!(w.handled(), [(1, 1)]);
    let log = w.log();
    let progress: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("draining: handlers still running"))
        .collect();
    assert!(
        !progress.is_empty()
            && progress.iter().all(|l| l.contains("name=tasks")
                && l.contains("handlers=1")
                && l.contains("left_ms=")),
        "a line naming the stream, the running handler and the time left, every 5 s:\n{}",
        log.join("\n")
    );
}

#[test]
fn a_drain_past_its_deadline_exits_3_and_leaves_the_entry_pending() {
    let redis = RedisServer::start();
    let mut w = busy_worker(&redis, "200", 2000);
    w.signal("TERM");
    assert_eq!(w.wait_exit(WAIT), Some(3));
    assert!(w.handled().is_empty(), "the handler was abandoned");
    let pending = pending_count(&mut redis.conn(), "tasks", "workers");
    assert_eq!(pending, 1, "stays pending for redelivery");
}

#[test]
fn a_second_signal_exits_1_at_once() {
    let redis = RedisServer::start();
    let mut w = busy_worker(&redis, "60000", 60_000);
    w.signal("TERM");
    eventually_blocking("draining", WAIT, || {
        w.log().iter().any(|l| l.contains("draining"))
    });
    w.signal("TERM");
    assert_eq!(w.wait_exit(Duration::from_secs(10)), Some(1));
}

#[test]
fn entries_not_started_at_stop_go_to_another_worker_long_before_claim_idle() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let opts = [
        ("RILLKIT_CLAIM_IDLE_MS", "60000"),
        ("RILLKIT_BLOCK_MS", "100"),
        ("RILLKIT_COUNT", "10"),
    ];
    let mut w1 = Worker::spawn(&redis.url(), &env("w1", &opts));
    // All five in one MULTI/EXEC, so all are there when w1 reads.
    let mut add = redis::pipe();
    add.atomic();
    for id in 0..5 {
        add.cmd("XADD")
            .arg("tasks")
            .arg("*")
            .arg("data")
            .arg(format!(r#"{{"id":{id},"sleep_ms":300}}"#));
    }
    let _: () = add.query(&mut c).unwrap();
    eventually_blocking("w1 is on the first entry", WAIT, || {
        pending_count(&mut c, "tasks", "workers") == 1
    });
    // Concurrency 1: w1 fetched only what it could start, despite count 10.
    assert_eq!(pending_count(&mut c, "tasks", "workers"), 1, "no hoarding");
    w1.signal("TERM");
    assert_eq!(w1.wait_exit(WAIT), Some(0));
    let done = w1.handled().len();
    assert!(done < 5, "the stop came mid-stream");
    let t0 = Instant::now();
    let w2 = Worker::spawn(&redis.url(), &env("w2", &opts));
    eventually_blocking("w2 handled the rest", WAIT, || {
        w2.handled().len() == 5 - done
    });
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "well before claim_idle (60 s)"
    );
    assert!(
        w2.handled().iter().all(|(_, n)| *n == 1),
        "{:?}",
        w2.handled()
    );
    eventually_blocking("PEL empty", WAIT, || {
        pending_count(&mut c, "tasks", "workers") == 0
    });
}

#[actix_rt::test]
async fn a_consumer_that_keeps_failing_is_restarted_then_failed_and_run_returns_1() {
    support::init_tracing();
    let redis = RedisServer::start();
    let s = Stream::new("tasks", "g");
    let broker = Broker::builder(redis.url())
        .handle_signals(false)
        .restart_policy(
            RestartPolicy::default()
                .with_max_restarts(3)
                .with_window(Duration::from_secs(60))
                .with_min_backoff(Duration::from_millis(10))
                .with_max_backoff(Duration::from_millis(50)),
        )
        .subscribe(
            &s,
            ConsumerOptions::default().with_block(Duration::from_millis(50)),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap();
    let runner = broker.clone();
    let run = actix_rt::spawn(async move { runner.run().await });
    let mut c = redis.conn();
    eventually("running", WAIT, || {
        broker.phase() == rillkit::Phase::Running
    })
    .await;
    // Replace the stream with a string: every XREADGROUP now fails with
    // WRONGTYPE, which no reconnect or group creation can fix.
    let _: () = redis::pipe()
        .cmd("DEL")
        .arg("tasks")
        .cmd("SET")
        .arg("tasks")
        .arg("oops")
        .query(&mut c)
        .unwrap();
    let outcome = tokio::time::timeout(WAIT, run)
        .await
        .expect("run() returns")
        .unwrap()
        .unwrap();
    assert_eq!(outcome.errors, 1);
    assert_eq!(outcome.panics, 0);
    assert_eq!(outcome.exit_code(), 1);
}

#[actix_rt::test]
async fn an_unrecoverable_read_error_stops_reading_while_handlers_finish() {
    let redis = RedisServer::start();
    let s = Stream::new("tasks", "g");
    let started = Arc::new(AtomicUsize::new(0));
    let st = started.clone();
    let broker = Broker::builder(redis.url())
        .handle_signals(false)
        .shutdown_timeout(Duration::from_secs(5))
        .restart_policy(
            RestartPolicy::default()
                .with_max_restarts(1)
                .with_window(Duration::from_secs(60))
                .with_min_backoff(Duration::from_millis(10))
                .with_max_backoff(Duration::from_millis(10)),
        )
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_concurrency(2)
                .with_block(Duration::from_millis(50)),
            move |_: u64| {
                st.fetch_add(1, Ordering::SeqCst);
                async {
                    tokio::time::sleep(Duration::from_millis(700)).await;
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    let runner = broker.clone();
    let run = actix_rt::spawn(async move { runner.run().await });
    eventually("running", WAIT, || {
        broker.phase() == rillkit::Phase::Running
    })
    .await;
    broker.publish(&s, &1).await.unwrap();
    eventually("handler running", WAIT, || {
        started.load(Ordering::SeqCst) == 1
    })
    .await;
    let before = redis.command_calls("xreadgroup");
    let _: () = redis::pipe()
        .cmd("DEL")
        .arg("tasks")
        .cmd("SET")
        .arg("tasks")
        .arg("oops")
        .query(&mut redis.conn())
        .unwrap();
    let outcome = tokio::time::timeout(WAIT, run)
        .await
        .expect("run() returns")
        .unwrap()
        .unwrap();
    assert_eq!(outcome.exit_code(), 1);
    assert!(
        !outcome.timed_out,
        "the handler finished within the drain; a failed XACK is not retried forever"
    );
    let reads = redis.command_calls("xreadgroup") - before;
    assert!(
        reads < 50,
        "{reads} XREADGROUP calls while failing: reading must stop at the first unrecoverable error"
    );
}

#[actix_rt::test]
async fn run_until_a_trigger_and_outcomes_combine() {
    let redis = RedisServer::start();
    let handled = Arc::new(AtomicUsize::new(0));
    let h = handled.clone();
    let s = Stream::new("tasks", "g");
    let broker = Broker::builder(redis.url())
        .handle_signals(false)
        .subscribe(
            &s,
            ConsumerOptions::default().with_block(Duration::from_secs(5)),
            move |_: u64| {
                h.fetch_add(1, Ordering::SeqCst);
                async { HandlerResult::Ok(()) }
            },
        )
        .build()
        .unwrap();
    let token = tokio_util::sync::CancellationToken::new();
    let trigger = token.clone();
    let b = broker.clone();
    let run = actix_rt::spawn(async move { b.run_until(trigger.cancelled_owned()).await });
    eventually("running", WAIT, || {
        broker.phase() == rillkit::Phase::Running
    })
    .await;
    broker.publish(&s, &1).await.unwrap();
    eventually("handled", WAIT, || handled.load(Ordering::SeqCst) == 1).await;
    token.cancel();
    let outcome = tokio::time::timeout(WAIT, run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(outcome.is_clean());
    let mut failed = SupervisorOutcome::default();
    failed.errors = 1;
    assert_eq!(outcome.merge(failed).exit_code(), 1);
}

#[test]
fn a_handler_still_running_in_a_long_drain_is_not_taken_over() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let opts = [
        ("RILLKIT_BLOCK_MS", "100"),
        ("RILLKIT_CLAIM_IDLE_MS", "300"),
        ("RILLKIT_SHUTDOWN_TIMEOUT_MS", "10000"),
    ];
    let mut w1 = Worker::spawn(&redis.url(), &env("w1", &opts));
    xadd(&mut c, "tasks", r#"{"id":1,"sleep_ms":1500}"#);
    eventually_blocking("w1 holds the entry", WAIT, || {
        pending_count(&mut c, "tasks", "workers") == 1
    });
    let w2 = Worker::spawn(&redis.url(), &env("w2", &opts));
    // The drain lasts 5× claim_idle: w1 must keep the entry fresh meanwhile.
    w1.signal("TERM");
    assert_eq!(w1.wait_exit(WAIT), Some(0));
    assert_eq!(w1.handled(), [(1, 1)]);
    eventually_blocking("PEL empty", WAIT, || {
        pending_count(&mut c, "tasks", "workers") == 0
    });
    // A claim by w2 would have happened (and been logged) a second before w1
    // finished; XACK by w1 would then hide it from the PEL.
    assert!(
        !w2.log()
            .iter()
            .any(|l| l.contains("claimed idle pending entries")),
        "w2 took over an entry w1 was still handling:\n{}",
        w2.log().join("\n")
    );
    assert!(
        w2.handled().is_empty(),
        "w2 ran the entry too: {:?}",
        w2.handled()
    );
}
