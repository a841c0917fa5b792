//! Autoscaling on the group's backlog: a worker with `RILLKIT_AUTOSCALE`
//! grows its concurrency while entries wait and shrinks it once idle, as
//! its log, the fleet view and its metrics say; bounds are checked and the
//! subscriptions whose concurrency cannot change refuse it.

mod support;

use std::time::{Duration, Instant};

use rillkit::prelude::*;
use rillkit::{BatchEntry, BatchOptions, ConfigError};
use serde_json::Value;
use support::{RedisServer, Worker};

fn refused(builder: rillkit::BrokerBuilder, what: &str) {
    match builder.build() {
        Err(
            e @ ConfigError::Invalid {
                option: "autoscale",
                ..
            },
        ) => {
            eprintln!("{what}: {e}");
        }
        Err(e) => panic!("{what}: another error: {e}"),
        Ok(_) => panic!("{what}: built"),
    }
}

#[test]
fn bounds_are_checked_and_batch_and_ordered_subscriptions_refuse_it() {
    let url = "redis://127.0.0.1:1";
    let s = Stream::new("tasks", "g");
    let run = |_: u64| async { HandlerResult::Ok(()) };
    // min above max, built from values so the range is not a literal.
    let (five, four) = (5, 4);
    for bad in [0..=4, five..=four, 1..=10_001] {
        refused(
            Broker::builder(url).subscribe(
                &s,
                ConsumerOptions::default().with_autoscale(bad.clone()),
                run,
            ),
            &format!("{bad:?}"),
        );
    }
    refused(
        Broker::builder(url).subscribe(
            &Stream::new("orders", "g").ordered_by("k", 4),
            ConsumerOptions::default().with_autoscale(1..=8),
            run,
        ),
        "ordered",
    );
    refused(
        Broker::builder(url).subscribe_batch(
            &s,
            ConsumerOptions::default().with_autoscale(1..=8),
            BatchOptions::new(),
            |_: Vec<BatchEntry<u64>>| async { HandlerResult::Ok(()) },
        ),
        "batch",
    );
    let ok = Broker::builder(url)
        .subscribe(&s, ConsumerOptions::default().with_autoscale(2..=8), run)
        .build()
        .expect("a plain stream autoscales");
    assert_eq!(
        ok.status().subscriptions[0].concurrency,
        2,
        "it starts at min"
    );
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The worker's one subscription in `rillkit::admin::Admin::fleet`, as the
/// CLI prints it (`rillkit fleet --json`).
fn fleet_row(url: &str) -> Option<Value> {
    let out = std::process::Command::new(support::rillkit_bin())
        .env_remove("REDIS_URL")
        .args(["--url", url, "fleet", "--json"])
        .output()
        .expect("run rillkit fleet");
    let doc: Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(doc.get(0)?["subscriptions"][0].clone())
}

#[test]
fn a_backlog_grows_the_concurrency_and_idle_shrinks_it_back() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    // 2 000 entries of 20 ms: about 40 s at concurrency 1.
    support::create_group(&mut c, "tasks", "workers", "0");
    let mut pipe = redis::pipe();
    for id in 0..2000 {
        pipe.cmd("XADD")
            .arg("tasks")
            .arg("*")
            .arg("data")
            .arg(format!(r#"{{"id":{id},"sleep_ms":20}}"#))
            .ignore();
    }
    let _: () = pipe.query(&mut c).unwrap();
    // Built now, not in the middle of the drain the test watches.
    support::rillkit_bin();
    let started = Instant::now();
    let started_ms = now_ms();
    let mut w = Worker::spawn(
        &url,
        &[
            ("RILLKIT_STREAM", "tasks"),
            ("RILLKIT_GROUP", "workers"),
            ("RILLKIT_CONSUMER", "w1"),
            ("RILLKIT_AUTOSCALE", "1-32"),
            ("RILLKIT_COUNT", "64"),
        ],
    );
    let mut peak = 0;
    support::eventually_blocking("every entry handled", Duration::from_secs(120), || {
        if let Some(row) = fleet_row(&url) {
            peak = peak.max(row["concurrency"].as_u64().unwrap_or(0));
        }
        w.handled().len() >= 2000
    });
    // From the worker's own output, whatever the polling above took: when
    // the last entry was handled, and how far the autoscaler went.
    let last_ms = w
        .lines()
        .iter()
        .filter_map(|l| {
            l.rsplit_once(" at ")
                .and_then(|(_, ms)| ms.parse::<u64>().ok())
        })
        .max()
        .unwrap_or(started_ms);
    let log = w.log();
    let grown: Vec<u64> = log
        .iter()
        .filter(|l| l.contains("autoscaled up"))
        .filter_map(|l| {
            l.split(" to=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    eprintln!(
        "2000 entries of 20 ms drained {} ms after the worker's start ({:?} to see it); grown to {grown:?}; the fleet view showed up to {peak}",
        last_ms.saturating_sub(started_ms),
        started.elapsed()
    );
    assert!(
        grown.len() >= 3,
        "grew at least 1 -> 2 -> 4 -> 8: {grown:?}"
    );
    let top = grown.iter().copied().max().unwrap_or(0);
    assert!(
        (8..=32).contains(&top),
        "grown to at least 8, never above max: {top}"
    );

    // Idle: it shrinks back, and the fleet view says so.
    let idle = Instant::now();
    let mut row = Value::Null;
    support::eventually_blocking(
        "back to at most 2 once idle",
        Duration::from_secs(90),
        || {
            row = fleet_row(&url).unwrap_or(Value::Null);
            row["concurrency"].as_u64().is_some_and(|n| n <= 2)
        },
    );
    eprintln!("concurrency <= 2 after {:?} idle", idle.elapsed());
    let auto = &row["autoscale"];
    assert_eq!(
        (auto["min"].as_u64(), auto["max"].as_u64()),
        (Some(1), Some(32)),
        "{row}"
    );
    assert_eq!(auto["backlog"], 0, "its input shows: {row}");
    assert!(
        w.log().iter().any(|l| l.contains("autoscaled down")),
        "each change is logged"
    );
    w.signal("TERM");
    assert_eq!(w.wait_exit(Duration::from_secs(30)), Some(0));
}
