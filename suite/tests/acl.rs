//! ACL users and refusals. The minimal worker ACL is the one the guide shows
//! (between `<!-- minimal-acl -->` and `<!-- /minimal-acl -->`): the test runs
//! that very line on a server, so the guide cannot drift from what a worker
//! needs. `ACL LOG` on the server names any command the user was refused.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rillkit::prelude::*;
use rillkit::{Error, Phase};
use serde::{Deserialize, Serialize};
use support::{RedisServer, eventually, pending_count, stream_len};

/// How long consumption may take before the test fails.
const WAIT: Duration = Duration::from_secs(15);
/// A bound on `start()`, `stop()` and `publish()` calls that must fail or
/// finish, not hang.
const BOUND: Duration = Duration::from_secs(20);
/// The guide's placeholders.
const USER: &str = "worker";
const PASSWORD: &str = "change-me";

#[derive(Debug, Serialize, Deserialize)]
struct Job {
    id: u64,
}

/// The `ACL SETUSER` line of the guide's minimal-ACL block for `redis`'s
/// server (Redis 7.0, or Redis 7.2+ and Valkey), split on whitespace.
fn guide_acl(redis: &RedisServer) -> Vec<String> {
    let server = support::ServerVersion::of(&mut redis.conn());
    let words = support::guide_acl_words(&server);
    eprintln!("the guide's minimal ACL for {server}: {}", words.join(" "));
    assert_eq!(words.get(2).map(String::as_str), Some(USER), "{words:?}");
    assert!(
        words.iter().any(|w| *w == format!(">{PASSWORD}")),
        "the guide's line sets the password >{PASSWORD}: {words:?}"
    );
    words
}

/// Runs the guide's ACL line on `redis` for `user`, with the password and
/// without the rules in `without` (each must be in the line).
fn setuser(redis: &RedisServer, user: &str, password: &str, without: &[&str]) {
    let mut words = guide_acl(redis);
    for rule in without {
        let before = words.len();
        words.retain(|w| w != rule);
        assert!(
            words.len() < before,
            "the guide's ACL line has no {rule} to remove: {words:?}"
        );
    }
    words[2] = user.to_owned();
    for w in &mut words {
        if *w == format!(">{PASSWORD}") {
            *w = format!(">{password}");
        }
    }
    let _: () = redis::cmd(&words[0])
        .arg(&words[1..])
        .query(&mut redis.conn())
        .unwrap_or_else(|e| panic!("{}: {e}", words.join(" ")));
}

fn url_as(redis: &RedisServer, user: &str, password: &str) -> String {
    format!("redis://{user}:{password}@127.0.0.1:{}", redis.port)
}

/// `ACL LOG` as one map per entry (`reason`, `object`, `username`, `count`…).
/// Nothing is left out: the guide's line for the server allows
/// `CLIENT SETINFO` where it exists (Redis 7.2+, Valkey), and Redis 7.0
/// answers it as an unknown subcommand, which `ACL LOG` does not record.
fn acl_log(redis: &RedisServer) -> Vec<HashMap<String, String>> {
    fn text(v: &redis::Value) -> String {
        match v {
            redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            redis::Value::SimpleString(s) => s.clone(),
            redis::Value::Int(n) => n.to_string(),
            redis::Value::Double(d) => d.to_string(),
            other => format!("{other:?}"),
        }
    }
    let v: redis::Value = redis::cmd("ACL")
        .arg("LOG")
        .query(&mut redis.conn())
        .expect("ACL LOG");
    let redis::Value::Array(entries) = v else {
        panic!("ACL LOG: {v:?}")
    };
    entries
        .iter()
        .map(|e| match e {
            redis::Value::Array(flat) => flat
                .chunks(2)
                .map(|kv| (text(&kv[0]), text(&kv[1])))
                .collect::<HashMap<_, _>>(),
            redis::Value::Map(pairs) => pairs.iter().map(|(k, v)| (text(k), text(v))).collect(),
            other => panic!("ACL LOG entry: {other:?}"),
        })
        .collect()
}

/// The commands (or keys) the ACL refused, as `reason object` strings.
fn refusals(redis: &RedisServer) -> Vec<String> {
    acl_log(redis)
        .iter()
        .map(|e| {
            format!(
                "{} {} (user {}, {} times)",
                e.get("reason").map_or("?", String::as_str),
                e.get("object").map_or("?", String::as_str),
                e.get("username").map_or("?", String::as_str),
                e.get("count").map_or("?", String::as_str),
            )
        })
        .collect()
}

/// Starts `broker` (bounded), which must fail: the error.
async fn failed_start(broker: &Broker) -> (Error, Duration) {
    let t = Instant::now();
    let err = tokio::time::timeout(BOUND, broker.start())
        .await
        .unwrap_or_else(|_| panic!("start() still running after {BOUND:?}"))
        .expect_err("start() must fail");
    let took = t.elapsed();
    eprintln!("start() failed after {took:?}: {err}");
    assert_eq!(broker.phase(), Phase::Stopped, "after {err}");
    (err, took)
}

/// Stops `broker` (bounded) and checks the outcome is clean; returns how long
/// `stop()` took.
async fn clean_stop(broker: &Broker) -> Duration {
    let t = Instant::now();
    let outcome = tokio::time::timeout(BOUND, broker.stop())
        .await
        .unwrap_or_else(|_| panic!("stop() still running after {BOUND:?}"))
        .expect("stop()");
    let took = t.elapsed();
    assert_eq!(outcome.exit_code(), 0, "{outcome:?}");
    took
}

#[actix_rt::test]
async fn the_guides_minimal_acl_runs_a_worker() {
    support::init_tracing();
    let redis = RedisServer::start();
    setuser(&redis, USER, PASSWORD, &[]);
    assert_eq!(
        url_as(&redis, USER, PASSWORD),
        format!("redis://worker:change-me@127.0.0.1:{}", redis.port)
    );
    let s = Stream::new("jobs", "workers");
    let ok = Arc::new(AtomicUsize::new(0));
    let unlucky = Arc::new(Mutex::new(Vec::<u64>::new()));
    let (k, u) = (ok.clone(), unlucky.clone());
    let opts = ConsumerOptions::default()
        .with_consumer("acl-1")
        .with_block(Duration::from_secs(30))
        .with_max_retries(1)
        .with_claim_idle(Duration::from_millis(200));
    let broker = Broker::builder(url_as(&redis, USER, PASSWORD))
        .subscribe_message(&s, opts, move |m: Message| {
            let (k, u) = (k.clone(), u.clone());
            async move {
                let job: Job = m.decode(&rillkit::Json).map_err(HandlerError::Reject)?;
                if job.id == 13 {
                    u.lock().unwrap().push(m.delivery_count);
                    return Err(HandlerError::retry("unlucky"));
                }
                k.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .build()
        .unwrap();
    tokio::time::timeout(BOUND, broker.start())
        .await
        .expect("start() returned in time")
        .expect("start() as the guide's ACL user");
    // Publishing as the worker too.
    let ids = broker
        .publish_batch(&s, (0..20).map(|id| Job { id }))
        .await
        .expect("publish_batch as the guide's ACL user");
    assert_eq!(ids.len(), 20);
    eventually("19 entries handled", WAIT, || {
        ok.load(Ordering::SeqCst) >= 19
    })
    .await;
    // Entry 13 failed, was reclaimed (XPENDING … IDLE, XCLAIM), failed again
    // and went to the dead-letter stream (EVALSHA, SCRIPT LOAD on NOSCRIPT).
    eventually("one dead-letter entry", WAIT, || {
        stream_len(&mut redis.conn(), "jobs-dlq") == 1
    })
    .await;
    let mut c = redis.conn();
    eventually("PEL empty", WAIT, || {
        pending_count(&mut c, "jobs", "workers") == 0
    })
    .await;
    assert_eq!(*unlucky.lock().unwrap(), [1, 2], "max_retries(1): two runs");
    assert!(
        redis.command_calls("xclaim") >= 1,
        "the retry went through XCLAIM"
    );
    assert!(
        redis.command_calls("evalsha") >= 1,
        "the dead-letter move ran the script"
    );
    // The consumer is back in its 30 s blocking read.
    eventually("the consumer blocks in XREADGROUP", WAIT, || {
        redis.blocked_clients() >= 1
    })
    .await;
    let unblocks = redis.command_calls("client|unblock");
    let took = clean_stop(&broker).await;
    eprintln!("stop() with block 30 s took {took:?}");
    assert!(
        took < Duration::from_secs(10),
        "stop() took {took:?}: the blocked read was not interrupted"
    );
    assert!(
        redis.command_calls("client|unblock") > unblocks,
        "stop() interrupted the read with CLIENT UNBLOCK"
    );
    assert_eq!(ok.load(Ordering::SeqCst), 19, "each entry handled once");
    let refused = refusals(&redis);
    assert!(
        refused.is_empty(),
        "the guide's minimal ACL lacks what the worker ran; ACL LOG: {refused:#?}"
    );
}

#[actix_rt::test]
async fn without_client_unblock_stop_waits_out_block() {
    support::init_tracing();
    let redis = RedisServer::start();
    setuser(&redis, USER, PASSWORD, &["+client|unblock"]);
    let s = Stream::new("jobs", "workers");
    let handled = Arc::new(AtomicUsize::new(0));
    let h = handled.clone();
    let opts = ConsumerOptions::default()
        .with_consumer("acl-1")
        .with_block(Duration::from_secs(1));
    let broker = Broker::builder(url_as(&redis, USER, PASSWORD))
        .subscribe(&s, opts, move |_: Job| {
            h.fetch_add(1, Ordering::SeqCst);
            async { HandlerResult::Ok(()) }
        })
        .build()
        .unwrap();
    tokio::time::timeout(BOUND, broker.start())
        .await
        .expect("start() returned in time")
        .expect("start() needs no CLIENT UNBLOCK");
    broker
        .publish_batch(&s, (0..10).map(|id| Job { id }))
        .await
        .unwrap();
    eventually("10 entries handled", WAIT, || {
        handled.load(Ordering::SeqCst) >= 10
    })
    .await;
    let mut c = redis.conn();
    eventually("PEL empty", WAIT, || {
        pending_count(&mut c, "jobs", "workers") == 0
    })
    .await;
    eventually("the consumer blocks in XREADGROUP", WAIT, || {
        redis.blocked_clients() >= 1
    })
    .await;
    let took = clean_stop(&broker).await;
    eprintln!("stop() with block 1 s and CLIENT UNBLOCK refused took {took:?}");
    assert!(took < Duration::from_secs(10), "stop() took {took:?}");
    assert_eq!(handled.load(Ordering::SeqCst), 10);
    // The refusal happened (the fallback was exercised), and was not retried
    // every 50 ms for the whole second: once the refusal is known, the read
    // is left to end by itself.
    let log = acl_log(&redis);
    let unblock: Vec<_> = log
        .iter()
        .filter(|e| e.get("object").map(String::as_str) == Some("client|unblock"))
        .collect();
    assert_eq!(unblock.len(), 1, "ACL LOG: {:#?}", refusals(&redis));
    let count: u64 = unblock[0]["count"].parse().unwrap();
    assert!(
        (1..=3).contains(&count),
        "CLIENT UNBLOCK refused {count} times; ACL LOG: {:#?}",
        refusals(&redis)
    );
    assert_eq!(
        log.len(),
        1,
        "nothing but CLIENT UNBLOCK was refused: {:#?}",
        refusals(&redis)
    );
}

#[actix_rt::test]
async fn a_wrong_password_fails_start_fast_with_credentials() {
    support::init_tracing();
    let redis = RedisServer::start();
    setuser(&redis, USER, PASSWORD, &[]);
    let broker = Broker::builder(url_as(&redis, USER, "not-the-password"))
        .subscribe(
            &Stream::new("jobs", "workers"),
            ConsumerOptions::default(),
            |_: Job| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap();
    let (err, took) = failed_start(&broker).await;
    assert!(
        matches!(err, Error::Credentials(_)),
        "expected Error::Credentials, got {err:?}"
    );
    assert!(!err.is_retryable(), "{err:?}");
    assert!(
        took < Duration::from_secs(5),
        "a refused password fails start at once, not after the startup timeout: {took:?}"
    );
    assert_eq!(
        stream_len(&mut redis.conn(), "jobs"),
        0,
        "nothing was created"
    );
}

#[actix_rt::test]
async fn a_user_without_xgroup_create_fails_start_naming_it() {
    start_fails_naming("+xgroup|create", "xgroup").await;
}

#[actix_rt::test]
async fn a_user_without_xreadgroup_fails_start_naming_it() {
    // Without the check at start it would start, then retry its reads forever.
    start_fails_naming("+xreadgroup", "xreadgroup").await;
}

/// A user with the guide's ACL minus `rule` fails `start()` at once with
/// `Error::Permission` naming `command`, and nothing else was refused.
async fn start_fails_naming(rule: &str, command_name: &str) {
    support::init_tracing();
    let redis = RedisServer::start();
    setuser(&redis, USER, PASSWORD, &[rule]);
    let broker = Broker::builder(url_as(&redis, USER, PASSWORD))
        .subscribe(
            &Stream::new("jobs", "workers"),
            ConsumerOptions::default(),
            |_: Job| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap();
    let (err, took) = failed_start(&broker).await;
    let Error::Permission { command, .. } = &err else {
        panic!("expected Error::Permission, got {err:?}")
    };
    assert!(
        command.contains(command_name),
        "{command:?} names {command_name}"
    );
    assert!(
        err.to_string().contains(&format!("+{command_name}")),
        "the message says what to allow: {err}"
    );
    assert!(!err.is_retryable(), "{err:?}");
    assert!(
        took < Duration::from_secs(5),
        "a missing permission fails start at once: {took:?}"
    );
    let refused = refusals(&redis);
    let denied = rule.trim_start_matches('+');
    assert!(
        refused.iter().all(|r| r.contains(denied)),
        "only {denied} was refused: {refused:#?}"
    );
}

#[actix_rt::test]
async fn publish_without_xadd_answers_an_error_that_is_not_retryable() {
    support::init_tracing();
    let redis = RedisServer::start();
    setuser(&redis, USER, PASSWORD, &["+xadd"]);
    let s = Stream::new("jobs", "workers");
    let broker = Broker::builder(url_as(&redis, USER, PASSWORD))
        .subscribe(
            &s,
            ConsumerOptions::default().with_block(Duration::from_millis(200)),
            |_: Job| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap();
    tokio::time::timeout(BOUND, broker.start())
        .await
        .expect("start() returned in time")
        .expect("consuming needs no XADD");
    let t = Instant::now();
    let err = tokio::time::timeout(BOUND, broker.publish(&s, &Job { id: 1 }))
        .await
        .expect("publish() returned in time")
        .expect_err("XADD is refused");
    let took = t.elapsed();
    eprintln!("publish() refused after {took:?}: {err:?}");
    assert!(
        !err.is_retryable(),
        "an ACL refusal is not worth a retry: {err:?}"
    );
    assert!(!err.is_connection(), "{err:?}");
    assert!(
        err.to_string().to_lowercase().contains("xadd"),
        "the error names the refused command: {err}"
    );
    assert!(
        took < Duration::from_secs(5),
        "an ACL refusal is answered at once, not after publish_timeout: {took:?}"
    );
    assert_eq!(stream_len(&mut redis.conn(), "jobs"), 0, "nothing added");
    clean_stop(&broker).await;
}

/// The guide's extra rules for a stream ordered by key (between
/// `<!-- ordered-acl -->` and `<!-- /ordered-acl -->`), without the
/// `ACL SETUSER worker` they follow.
fn guide_ordered_rules() -> Vec<String> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/guide/src/production.md");
    let guide = std::fs::read_to_string(path).unwrap();
    let block = guide
        .split("<!-- ordered-acl -->")
        .nth(1)
        .and_then(|r| r.split("<!-- /ordered-acl -->").next())
        .expect("the guide's ordered-acl block");
    let line = block
        .lines()
        .find(|l| l.starts_with("ACL SETUSER"))
        .expect("an ACL SETUSER line");
    line.split_whitespace().skip(3).map(str::to_owned).collect()
}

#[actix_rt::test]
async fn the_guides_acl_with_its_ordered_rules_runs_an_ordered_consumer() {
    support::init_tracing();
    let redis = RedisServer::start();
    setuser(&redis, USER, PASSWORD, &[]);
    let extra = guide_ordered_rules();
    assert!(!extra.is_empty());
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(USER)
        .arg(&extra)
        .query(&mut redis.conn())
        .unwrap();
    let s = Stream::new("jobs", "workers").ordered_by("key", 2);
    let ok = Arc::new(AtomicUsize::new(0));
    let k = ok.clone();
    let opts = ConsumerOptions::default()
        .with_consumer("acl-1")
        .with_block(Duration::from_millis(200))
        .with_max_retries(0)
        .with_on_key_failure(rillkit::OnKeyFailure::FailRest);
    let broker = Broker::builder(url_as(&redis, USER, PASSWORD))
        .subscribe(&s, opts, move |job: Job| {
            let k = k.clone();
            async move {
                if job.id == 3 {
                    return Err(HandlerError::retry("unlucky"));
                }
                k.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .build()
        .unwrap();
    tokio::time::timeout(BOUND, broker.start())
        .await
        .expect("start() returned in time")
        .expect("start() as the guide's ACL user");
    for id in 0..6 {
        broker
            .publish_keyed(&s, if id < 3 { "a" } else { "b" }, &Job { id })
            .await
            .expect("publish_keyed as the guide's ACL user");
    }
    // Key a: 0, 1, 2 handled; key b: 3 fails and is dead-lettered with
    // fail_rest (the mark: HSETNX), 4 and 5 follow it there.
    eventually("three handled", WAIT, || ok.load(Ordering::SeqCst) == 3).await;
    let p = format!("jobs:p{}", rillkit::partition_of(b"b", 2));
    eventually("b's three dead letters", WAIT, || {
        stream_len(&mut redis.conn(), &format!("{p}-dlq")) == 3
    })
    .await;
    clean_stop(&broker).await;
    let refused = refusals(&redis);
    assert!(
        refused.is_empty(),
        "the guide's ACL lines lack what an ordered consumer ran; ACL LOG: {refused:#?}"
    );
}
