//! Rate limits: a group's consumers, in every process, start no more
//! entries than its limit, and a limited consumer holds nothing it may not
//! start.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rillkit::prelude::*;
use rillkit::{ConfigError, RateLimit};
use support::{RedisServer, eventually, xadd};

const WAIT: Duration = Duration::from_secs(60);

/// `XPENDING <stream> <group>`'s count.
fn pending(c: &mut redis::Connection, stream: &str) -> usize {
    support::pending_count(c, stream, "g")
}

#[actix_rt::test]
async fn a_limited_consumer_reads_only_what_it_may_start_and_drains_at_once() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    for n in 0..200 {
        xadd(&mut c, "slow", &n.to_string());
    }
    let s = Stream::new("slow", "g");
    let handled = Arc::new(AtomicU64::new(0));
    let h = handled.clone();
    let limit = RateLimit::per_second(10).with_burst(2);
    let broker = Broker::builder(redis.url())
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_concurrency(16)
                .with_count(50)
                .with_rate_limit(limit),
            move |_: serde_json::Value| {
                let h = h.clone();
                async move {
                    h.fetch_add(1, Ordering::SeqCst);
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let status = broker.status();
    assert_eq!(status.subscriptions[0].rate_limit, Some(limit));
    // The fleet view shows it too.
    let admin = rillkit::admin::Admin::connect(&redis.url()).await.unwrap();
    let mut shown = None;
    for _ in 0..200 {
        let fleet = admin.fleet().await.unwrap();
        shown = fleet
            .iter()
            .flat_map(|p| &p.subscriptions)
            .find_map(|s| s.rate_limit.clone());
        if shown.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(shown.as_deref(), Some("10/s burst 2"));

    // With 16 free slots and reads of 50, it holds at most a burst (2) at
    // a time, and the burst before it whose XACK may not have landed yet.
    let mut most = 0;
    eventually("20 handled", WAIT, || {
        most = most.max(pending(&mut c, "slow"));
        handled.load(Ordering::SeqCst) >= 20
    })
    .await;
    assert!(most <= 4, "held {most} entries under a burst of 2");

    // The drain has nothing to wait for and nothing to hand back.
    let outcome = broker.stop().await.unwrap();
    assert_eq!(outcome.exit_code(), 0);
    assert_eq!(pending(&mut c, "slow"), 0);
    // Seconds after the first entries the limit let through: far fewer
    // than the 200 waiting.
    let n = handled.load(Ordering::SeqCst);
    assert!(n < 200, "{n} handled under 10/s");
}

/// Permits a read was given and did not use go back to the group's bucket:
/// an idle consumer's reads, each blocking and ending empty, do not use the
/// limit up.
#[actix_rt::test]
async fn permits_a_read_did_not_use_go_back() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    // One permit a second, ten in the bucket at first; reads that block
    // 100 ms, so about ten a second end empty.
    let limit = RateLimit::per_minute(60).with_burst(10);
    let s = Stream::new("idle", "g");
    let broker = Broker::builder(redis.url())
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(Duration::from_millis(100))
                .with_count(10)
                .with_rate_limit(limit),
            |_: serde_json::Value| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let reads = redis.command_calls("xreadgroup");
    // Thirty empty reads: had each kept its permit, the bucket (ten, and
    // one more a second) would be empty by now.
    eventually("thirty reads", WAIT, || {
        redis.command_calls("xreadgroup") >= reads + 30
    })
    .await;
    let tokens: Option<String> = redis::cmd("HGET")
        .arg("{idle}:rillkit:rate:idle:g")
        .arg("tokens")
        .query(&mut c)
        .unwrap();
    let tokens: f64 = tokens.expect("the bucket").parse().unwrap();
    assert!(tokens >= 8.0, "{tokens} permits left in the bucket");
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

#[test]
fn a_rate_limit_is_checked_at_build() {
    let s = Stream::new("s", "g");
    let build = |limit: RateLimit, stream: &Stream| {
        Broker::builder("redis://127.0.0.1:1")
            .subscribe(
                stream,
                ConsumerOptions::default().with_rate_limit(limit),
                |_: u64| async { HandlerResult::Ok(()) },
            )
            .build()
            .err()
    };
    let invalid = |e: Option<ConfigError>| match e {
        Some(ConfigError::Invalid { option, reason, .. }) => (option, reason),
        other => panic!("{other:?}"),
    };
    let (option, reason) = invalid(build(RateLimit::per_second(0), &s));
    assert_eq!(option, "rate_limit");
    assert!(reason.contains("count"), "{reason}");
    let (option, _) = invalid(build(RateLimit::per_minute(5).with_burst(0), &s));
    assert_eq!(option, "rate_limit");
    let ordered = Stream::new("o", "g").ordered_by("k", 4);
    let (option, reason) = invalid(build(RateLimit::per_second(5), &ordered));
    assert_eq!(option, "rate_limit");
    assert!(reason.contains("ordered"), "{reason}");
    assert!(build(RateLimit::per_second(5), &s).is_none());
}

/// Two `worker` processes of one group share the limit.
#[cfg(feature = "cli")]
mod workers {
    use super::*;
    use support::{Worker, eventually_blocking};

    #[test]
    fn two_processes_share_a_limit_of_100_a_second() {
        let redis = RedisServer::start();
        let mut c = redis.conn();
        let mut pipe = redis::pipe();
        for id in 0..2000 {
            pipe.cmd("XADD")
                .arg("limited")
                .arg("*")
                .arg("data")
                .arg(format!("{{\"id\":{id}}}"))
                .ignore();
        }
        pipe.query::<()>(&mut c).unwrap();
        let env = [
            ("RILLKIT_STREAM", "limited"),
            ("RILLKIT_GROUP", "g"),
            ("RILLKIT_CONCURRENCY", "8"),
            ("RILLKIT_RATE_LIMIT", "100/s"),
        ];
        let a = Worker::spawn(&redis.url(), &env);
        let b = Worker::spawn(&redis.url(), &env);
        let times = || {
            let mut at: Vec<(u64, u64)> = Vec::new();
            for w in [&a, &b] {
                for line in w.lines() {
                    let p: Vec<&str> = line.split_whitespace().collect();
                    if let ["handled", id, "delivery", _, "at", ms] = p.as_slice() {
                        at.push((id.parse().unwrap(), ms.parse().unwrap()));
                    }
                }
            }
            at
        };
        // Six seconds after the first entry ran: a second to settle, then
        // five to count.
        eventually_blocking("six seconds of handling", WAIT, || {
            let at = times();
            let first = at.iter().map(|t| t.1).min();
            let last = at.iter().map(|t| t.1).max();
            matches!((first, last), (Some(f), Some(l)) if l >= f + 6000)
        });
        let at = times();
        let first = at.iter().map(|t| t.1).min().unwrap();
        let window = at
            .iter()
            .filter(|t| t.1 >= first + 1000 && t.1 < first + 6000)
            .count();
        eprintln!("handled in the 5 s window: {window}");
        assert!(
            (400..=560).contains(&window),
            "{window} entries in 5 s under 100/s (80–112 a second expected)"
        );
        // Both processes ran entries, and none ran twice.
        for w in [&a, &b] {
            assert!(!w.handled().is_empty(), "a worker ran nothing");
        }
        let mut ids: Vec<u64> = at.iter().map(|t| t.0).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n, "an entry ran twice");
    }
}
