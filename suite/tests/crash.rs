//! Process-level delivery tests with the `worker` example: crashes mid-message,
//! poison entries that crash every run, failing and panicking entries.

mod support;

use std::time::Duration;

use support::{RedisServer, Worker, eventually_blocking, pending_count, stream_len, xadd};

const WAIT: Duration = Duration::from_secs(30);

fn env<'a>(consumer: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut v = support::worker_env(
        consumer,
        &[
            ("RILLKIT_BLOCK_MS", "100"),
            ("RILLKIT_CLAIM_IDLE_MS", "500"),
        ],
    );
    v.extend_from_slice(extra);
    v
}

#[test]
fn a_worker_killed_mid_message_loses_nothing() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let mut w1 = Worker::spawn(&redis.url(), &env("w1", &[]));
    xadd(&mut c, "tasks", r#"{"id":1,"sleep_ms":1500}"#);
    eventually_blocking("w1 holds the entry", WAIT, || {
        pending_count(&mut c, "tasks", "workers") == 1
    });
    w1.signal("KILL");
    assert_eq!(w1.wait_exit(WAIT), None, "killed by SIGKILL");
    assert!(w1.handled().is_empty());

    // A second worker in the group takes the entry over after claim_idle.
    let w2 = Worker::spawn(&redis.url(), &env("w2", &[]));
    eventually_blocking("w2 handled the entry", WAIT, || w2.handled() == [(1, 2)]);
    eventually_blocking("PEL empty", WAIT, || {
        pending_count(&mut c, "tasks", "workers") == 0
    });
}

#[test]
fn an_entry_that_crashed_its_last_allowed_run_is_dead_lettered_without_another_run() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let mut w1 = Worker::spawn(&redis.url(), &env("w1", &[]));
    // A job that crashes the worker mid-message.
    xadd(&mut c, "tasks", r#"{"id":7,"exit":true}"#);
    assert_eq!(
        w1.wait_exit(WAIT),
        Some(9),
        "the worker crashed mid-message"
    );
    assert_eq!(pending_count(&mut c, "tasks", "workers"), 1);
    // A second worker with max_retries 0 (one run allowed) claims it with
    // delivery count 2 and dead-letters it without running it again.
    let w2 = Worker::spawn(&redis.url(), &env("w2", &[("RILLKIT_MAX_RETRIES", "0")]));
    xadd(&mut c, "tasks", r#"{"id":8}"#);
    eventually_blocking("entry 8 handled", WAIT, || w2.handled().contains(&(8, 1)));
    eventually_blocking("crashed entry dead-lettered", WAIT, || {
        stream_len(&mut c, "tasks-dlq") == 1
    });
    eventually_blocking("PEL empty", WAIT, || {
        pending_count(&mut c, "tasks", "workers") == 0
    });
    assert!(
        !w2.handled().iter().any(|(id, _)| *id == 7),
        "no further run of the crashing entry"
    );
}

#[test]
fn a_poison_entry_that_crashes_every_run_ends_in_the_dlq_while_others_flow() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let max_retries = 2; // 3 runs, then the DLQ
    let extra = [("RILLKIT_MAX_RETRIES", "2"), ("RILLKIT_COUNT", "10")];
    // The poison entry, with healthy neighbours right behind it.
    xadd(&mut c, "tasks", r#"{"id":666,"exit":true}"#);
    for id in 100..103 {
        xadd(&mut c, "tasks", &format!(r#"{{"id":{id}}}"#));
    }
    let mut crashes = 0;
    let mut next_id = 1;
    let mut handled = Vec::new();
    // Keep a worker running, restarting it after each crash, as a process
    // manager would; feed it ordinary entries all along.
    while crashes <= max_retries {
        let name = format!("w{crashes}");
        let mut w = Worker::spawn(&redis.url(), &env(&name, &extra));
        xadd(&mut c, "tasks", &format!(r#"{{"id":{next_id}}}"#));
        next_id += 1;
        assert_eq!(
            w.wait_exit(WAIT),
            Some(9),
            "run {} of the poison entry crashes",
            crashes + 1
        );
        handled.extend(w.handled());
        crashes += 1;
    }
    let survivor = Worker::spawn(&redis.url(), &env("survivor", &extra));
    eventually_blocking("poison entry dead-lettered", WAIT, || {
        stream_len(&mut c, "tasks-dlq") == 1
    });
    eventually_blocking("ordinary entries handled", WAIT, || {
        let mut all = handled.clone();
        all.extend(survivor.handled());
        (1..next_id)
            .chain(100..103)
            .all(|id| all.iter().any(|(h, _)| *h == id))
    });
    eventually_blocking("PEL empty", WAIT, || {
        pending_count(&mut c, "tasks", "workers") == 0
    });
    let dlq: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("tasks-dlq")
        .arg("-")
        .arg("+")
        .query(&mut c)
        .unwrap();
    let fields: std::collections::HashMap<_, _> = dlq[0].1.iter().cloned().collect();
    assert_eq!(fields["data"], r#"{"id":666,"exit":true}"#);
    assert_eq!(
        fields["delivery_count"], "4",
        "claimed a 4th time, dead-lettered without a 4th run"
    );
    assert_eq!(crashes, 3);
}

#[test]
fn fail_and_panic_entries_run_max_retries_plus_one_times_then_one_dlq_entry_each() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let w = Worker::spawn(
        &redis.url(),
        &env(
            "w1",
            &[
                ("RILLKIT_MAX_RETRIES", "2"),
                ("RILLKIT_CLAIM_IDLE_MS", "200"),
            ],
        ),
    );
    xadd(&mut c, "tasks", r#"{"id":1,"fail":true}"#);
    xadd(&mut c, "tasks", r#"{"id":2,"panic":true}"#);
    xadd(&mut c, "tasks", r#"{"id":3}"#);
    eventually_blocking("two DLQ entries", WAIT, || {
        stream_len(&mut c, "tasks-dlq") == 2
    });
    eventually_blocking("PEL empty", WAIT, || {
        pending_count(&mut c, "tasks", "workers") == 0
    });
    assert_eq!(w.handled(), [(3, 1)]);
    let log = w.log().join("\n");
    assert_eq!(
        log.matches("asked to fail").count(),
        3,
        "3 runs of the failing entry:\n{log}"
    );
    assert_eq!(
        log.matches("panicked at examples/worker.rs").count(),
        3,
        "3 runs of the panicking entry:\n{log}"
    );
}

#[test]
fn a_waiting_redelivery_is_not_charged_for_a_neighbours_crash() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    // Entry 1 was delivered to a consumer that died before running it.
    support::strand(&redis, "tasks", "workers", "dead", 1..2);
    let extra = [
        ("RILLKIT_MAX_RETRIES", "1"),
        ("RILLKIT_CONCURRENCY", "2"),
        ("RILLKIT_CLAIM_IDLE_MS", "1500"),
    ];
    let mut w1 = Worker::spawn(&redis.url(), &env("w1", &extra));
    // w1 is busy for 3 s with an entry that then crashes it. Meanwhile entry 1
    // becomes claimable; w1 must not claim it while it cannot run it alone.
    xadd(&mut c, "tasks", r#"{"id":2,"sleep_ms":3000,"exit":true}"#);
    assert_eq!(w1.wait_exit(WAIT), Some(9));
    let w2 = Worker::spawn(&redis.url(), &env("w2", &extra));
    // Entry 1 has had one delivery and no run: it runs as delivery 2 (in w2,
    // or in w1 if w1 took it before the crashing entry arrived).
    eventually_blocking("entry 1 handled", WAIT, || {
        w1.handled().contains(&(1, 2)) || w2.handled().contains(&(1, 2))
    });
    let dlq: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("tasks-dlq")
        .arg("-")
        .arg("+")
        .query(&mut c)
        .unwrap();
    assert!(
        dlq.iter().all(|(_, f)| !f
            .iter()
            .any(|(k, v)| k == "data" && v.contains(r#""id":1"#))),
        "entry 1 was dead-lettered without running: {dlq:?}"
    );
}

#[test]
fn a_redelivery_claimed_at_start_runs_before_entries_read_beside_it() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    // Entry 1 was delivered to a consumer that died, and is idle long enough
    // to be claimed; entry 2, which crashes its worker, waits behind it.
    support::strand(&redis, "tasks", "workers", "dead", 1..2);
    eventually_blocking("entry 1 idle past claim_idle", WAIT, || {
        let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
            .arg("tasks")
            .arg("workers")
            .arg("-")
            .arg("+")
            .arg(1)
            .query(&mut c)
            .unwrap();
        rows.first().is_some_and(|r| r.2 >= 600)
    });
    xadd(&mut c, "tasks", r#"{"id":2,"sleep_ms":500,"exit":true}"#);
    let extra = [
        ("RILLKIT_MAX_RETRIES", "1"),
        ("RILLKIT_CONCURRENCY", "2"),
        ("RILLKIT_CLAIM_IDLE_MS", "500"),
    ];
    // w1's first claim and its first read would both be in flight at once if
    // reads did not wait for claims: entry 2 would start first, crash the
    // worker, and charge entry 1 a delivery it never ran.
    let mut w1 = Worker::spawn(&redis.url(), &env("w1", &extra));
    assert_eq!(w1.wait_exit(WAIT), Some(9));
    assert!(
        w1.handled().contains(&(1, 2)),
        "entry 1 ran (as its second delivery) before entry 2 crashed w1: {:?}",
        w1.handled()
    );
}
