//! Retries through the PEL, the dead-letter stream, bad entries,
//! panics, rejects, trimmed entries.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rillkit::prelude::*;
use serde::{Deserialize, Serialize};
use support::{RedisServer, eventually, pending_count, stream_len};

const WAIT: Duration = Duration::from_secs(15);

#[derive(Debug, Serialize, Deserialize)]
struct Job {
    id: u64,
}

fn opts(max_retries: u64) -> ConsumerOptions {
    ConsumerOptions::default()
        .with_consumer("c1")
        .with_block(Duration::from_millis(50))
        .with_max_retries(max_retries)
        .with_claim_idle(Duration::from_millis(100))
}

/// The dead-letter stream's entries as field → value maps (UTF-8 lossy).
fn dlq_entries(redis: &RedisServer, key: &str) -> Vec<HashMap<String, Vec<u8>>> {
    let v: redis::Value = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query(&mut redis.conn())
        .unwrap();
    let redis::Value::Array(rows) = v else {
        return Vec::new();
    };
    rows.into_iter()
        .map(|row| {
            let redis::Value::Array(mut pair) = row else {
                panic!("row")
            };
            let redis::Value::Array(flat) = pair.pop().unwrap() else {
                panic!("fields")
            };
            flat.chunks(2)
                .map(|kv| {
                    let k: String = redis::from_redis_value_ref(&kv[0]).unwrap();
                    let v: Vec<u8> = redis::from_redis_value_ref(&kv[1]).unwrap();
                    (k, v)
                })
                .collect()
        })
        .collect()
}

fn text(m: &HashMap<String, Vec<u8>>, k: &str) -> String {
    String::from_utf8_lossy(
        m.get(k)
            .unwrap_or_else(|| panic!("DLQ entry lacks {k}: {m:?}")),
    )
    .into_owned()
}

/// A broker whose handler rejects every entry with `reason`, counting runs.
fn rejecting(
    redis: &RedisServer,
    s: &Stream,
    max_retries: u64,
    reason: &'static str,
) -> (Broker, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let broker = Broker::builder(redis.url())
        .subscribe(s, opts(max_retries), move |_: Job| {
            r.fetch_add(1, Ordering::SeqCst);
            async move { Err(HandlerError::reject(reason)) }
        })
        .build()
        .unwrap();
    (broker, runs)
}

#[actix_rt::test]
async fn a_failing_entry_runs_max_retries_plus_one_times_then_one_dlq_entry() {
    support::init_tracing();
    let redis = RedisServer::start();
    let s = Stream::new("jobs", "g");
    let runs = Arc::new(Mutex::new(Vec::<u64>::new()));
    let ok = Arc::new(AtomicUsize::new(0));
    let (r, k) = (runs.clone(), ok.clone());
    let broker = Broker::builder(redis.url())
        .subscribe_message(&s, opts(2), move |m: Message| {
            let (r, k) = (r.clone(), k.clone());
            async move {
                let job: Job = m.decode(&rillkit::Json).map_err(HandlerError::Reject)?;
                if job.id == 13 {
                    r.lock().unwrap().push(m.delivery_count);
                    return Err(HandlerError::retry("unlucky"));
                }
                k.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let ids = broker
        .publish_batch(&s, [Job { id: 1 }, Job { id: 13 }, Job { id: 2 }])
        .await
        .unwrap();
    eventually("one DLQ entry", WAIT, || {
        stream_len(&mut redis.conn(), "jobs-dlq") == 1
    })
    .await;
    let mut c = redis.conn();
    eventually("PEL empty", WAIT, || {
        pending_count(&mut c, "jobs", "g") == 0
    })
    .await;
    assert!(
        broker.stop().await.unwrap().is_clean(),
        "handler errors never count in the outcome"
    );
    assert_eq!(
        *runs.lock().unwrap(),
        [1, 2, 3],
        "exactly max_retries + 1 runs, by the server's delivery count"
    );
    assert_eq!(ok.load(Ordering::SeqCst), 2);
    let dlq = dlq_entries(&redis, "jobs-dlq");
    assert_eq!(dlq.len(), 1);
    let e = &dlq[0];
    assert_eq!(
        e.get("data").unwrap(),
        br#"{"id":13}"#,
        "original bytes verbatim"
    );
    assert_eq!(text(e, "origin_stream"), "jobs");
    assert_eq!(text(e, "origin_id"), ids[1].as_str());
    assert_eq!(text(e, "origin_group"), "g");
    assert_eq!(text(e, "origin_consumer"), "c1");
    assert_eq!(text(e, "delivery_count"), "3");
    assert!(text(e, "error").contains("unlucky"));
    assert!(text(e, "failed_at_ms").parse::<u64>().unwrap() > 1_600_000_000_000);
}

#[actix_rt::test]
async fn a_panicking_handler_is_retried_then_dead_lettered_and_the_consumer_goes_on() {
    let redis = RedisServer::start();
    let s = Stream::new("jobs", "g");
    let runs = Arc::new(AtomicUsize::new(0));
    let ok = Arc::new(AtomicUsize::new(0));
    let (r, k) = (runs.clone(), ok.clone());
    let broker = Broker::builder(redis.url())
        .subscribe(&s, opts(1), move |job: Job| {
            let (r, k) = (r.clone(), k.clone());
            async move {
                if job.id == 0 {
                    r.fetch_add(1, Ordering::SeqCst);
                    panic!("boom in handler");
                }
                k.fetch_add(1, Ordering::SeqCst);
                HandlerResult::Ok(())
            }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker
        .publish_batch(&s, (0..5).map(|id| Job { id }))
        .await
        .unwrap();
    eventually("DLQ entry", WAIT, || {
        stream_len(&mut redis.conn(), "jobs-dlq") == 1
    })
    .await;
    eventually("others handled", WAIT, || ok.load(Ordering::SeqCst) == 4).await;
    let outcome = broker.stop().await.unwrap();
    assert!(
        outcome.is_clean(),
        "a handler panic is not a rillkit panic: {outcome:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let e = &dlq_entries(&redis, "jobs-dlq")[0];
    assert!(
        text(e, "error").contains("boom in handler"),
        "{:?}",
        text(e, "error")
    );
    assert_eq!(pending_count(&mut redis.conn(), "jobs", "g"), 0);
}

#[actix_rt::test]
async fn a_rejected_entry_goes_to_the_dlq_at_once() {
    let redis = RedisServer::start();
    let s = Stream::new("jobs", "g").with_dlq_name("rejected-jobs");
    let (broker, runs) = rejecting(&redis, &s, 5, "never valid");
    broker.start().await.unwrap();
    broker.publish(&s, &Job { id: 1 }).await.unwrap();
    eventually("DLQ entry", WAIT, || {
        stream_len(&mut redis.conn(), "rejected-jobs") == 1
    })
    .await;
    let mut c = redis.conn();
    eventually("acked", WAIT, || pending_count(&mut c, "jobs", "g") == 0).await;
    assert!(broker.stop().await.unwrap().is_clean());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let e = &dlq_entries(&redis, "rejected-jobs")[0];
    assert!(text(e, "error").contains("never valid"));
    assert_eq!(text(e, "delivery_count"), "1");
}

#[actix_rt::test]
async fn bad_entries_go_to_the_dlq_without_reaching_the_handler() {
    let redis = RedisServer::start();
    let s = Stream::new("jobs", "g");
    let seen = Arc::new(Mutex::new(Vec::<u64>::new()));
    let sn = seen.clone();
    let broker = Broker::builder(redis.url())
        .subscribe(&s, opts(3).with_count(20), move |job: Job| {
            let sn = sn.clone();
            async move {
                sn.lock().unwrap().push(job.id);
                HandlerResult::Ok(())
            }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let mut c = redis.conn();
    type Fields<'a> = Vec<(&'a str, &'a [u8])>;
    let bad: Vec<(&str, Fields)> = vec![
        ("no data field", vec![("other", b"x")]),
        ("empty data", vec![("data", b"")]),
        ("not JSON", vec![("data", b"{oops")]),
        ("wrong shape", vec![("data", br#"{"name":"no id"}"#)]),
        ("not UTF-8", vec![("data", b"\xff\xfe\x00")]),
    ];
    // Valid neighbours around every bad entry, all in one XREADGROUP reply.
    let _: () = redis::cmd("XADD")
        .arg("jobs")
        .arg("*")
        .arg("data")
        .arg(r#"{"id":100}"#)
        .query(&mut c)
        .unwrap();
    let mut bad_ids = Vec::new();
    for (i, (_, fields)) in bad.iter().enumerate() {
        let mut cmd = redis::cmd("XADD");
        cmd.arg("jobs").arg("*");
        for (k, v) in fields {
            cmd.arg(*k).arg(*v);
        }
        bad_ids.push(cmd.query::<String>(&mut c).unwrap());
        let _: String = redis::cmd("XADD")
            .arg("jobs")
            .arg("*")
            .arg("data")
            .arg(format!(r#"{{"id":{}}}"#, 101 + i))
            .query(&mut c)
            .unwrap();
    }
    eventually("5 DLQ entries", WAIT, || {
        stream_len(&mut redis.conn(), "jobs-dlq") == 5
    })
    .await;
    eventually("valid neighbours handled", WAIT, || {
        seen.lock().unwrap().len() == 6
    })
    .await;
    eventually("PEL empty", WAIT, || {
        pending_count(&mut c, "jobs", "g") == 0
    })
    .await;
    assert!(broker.stop().await.unwrap().is_clean());
    let mut ids = seen.lock().unwrap().clone();
    ids.sort();
    assert_eq!(ids, [100, 101, 102, 103, 104, 105]);
    // Dead-letter moves run concurrently: match them by origin id.
    let mut dlq = dlq_entries(&redis, "jobs-dlq");
    dlq.sort_by_key(|e| {
        bad_ids
            .iter()
            .position(|id| *id == text(e, "origin_id"))
            .expect("a bad entry")
    });
    let reasons: Vec<String> = dlq.iter().map(|e| text(e, "error")).collect();
    assert!(reasons[0].contains("no data field"), "{reasons:?}");
    assert!(reasons[1].contains("empty data"), "{reasons:?}");
    assert!(reasons[2].contains("does not decode"), "{reasons:?}");
    assert!(reasons[3].contains("does not decode"), "{reasons:?}");
    assert!(reasons[4].contains("does not decode"), "{reasons:?}");
    // Bytes are kept verbatim, also the non-UTF-8 ones and foreign fields.
    assert_eq!(dlq[0].get("other").unwrap(), b"x");
    assert_eq!(dlq[4].get("data").unwrap(), b"\xff\xfe\x00");
}

#[actix_rt::test]
async fn entries_trimmed_while_pending_are_acked_and_skipped() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    // A consumer "c1" took 5 entries and died; then the stream was trimmed.
    support::strand(&redis, "jobs", "g", "c1", 0..5);
    let _: i64 = redis::cmd("XTRIM")
        .arg("jobs")
        .arg("MAXLEN")
        .arg(0)
        .query(&mut c)
        .unwrap();
    let _: String = redis::cmd("XADD")
        .arg("jobs")
        .arg("*")
        .arg("data")
        .arg(r#"{"id":99}"#)
        .query(&mut c)
        .unwrap();
    assert_eq!(pending_count(&mut c, "jobs", "g"), 5);

    let seen = Arc::new(Mutex::new(Vec::<u64>::new()));
    let sn = seen.clone();
    // The same consumer name restarts: it re-reads its PEL and finds nil bodies.
    let broker = Broker::builder(redis.url())
        .subscribe(&Stream::new("jobs", "g"), opts(3), move |job: Job| {
            let sn = sn.clone();
            async move {
                sn.lock().unwrap().push(job.id);
                HandlerResult::Ok(())
            }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    eventually("new entry handled", WAIT, || {
        seen.lock().unwrap().len() == 1
    })
    .await;
    eventually("PEL empty", WAIT, || {
        pending_count(&mut c, "jobs", "g") == 0
    })
    .await;
    assert!(broker.stop().await.unwrap().is_clean());
    assert_eq!(*seen.lock().unwrap(), [99]);
    assert_eq!(stream_len(&mut c, "jobs-dlq"), 0);
}

#[actix_rt::test]
async fn a_restarted_consumer_resumes_its_own_pending_entries_first() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    support::strand(&redis, "jobs", "g", "c1", 0..3);
    let _: String = redis::cmd("XADD")
        .arg("jobs")
        .arg("*")
        .arg("data")
        .arg(r#"{"id":3}"#)
        .query(&mut c)
        .unwrap();

    let seen = Arc::new(Mutex::new(Vec::<(u64, u64)>::new()));
    let sn = seen.clone();
    let broker = Broker::builder(redis.url())
        // claim_idle far away: only the PEL re-read can find entries 0..3 now.
        .subscribe_message(
            &Stream::new("jobs", "g"),
            opts(3).with_claim_idle(Duration::from_secs(3600)),
            move |m: Message| {
                let sn = sn.clone();
                async move {
                    let job: Job = m.decode(&rillkit::Json).map_err(HandlerError::Reject)?;
                    sn.lock().unwrap().push((job.id, m.delivery_count));
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    eventually("4 handled", WAIT, || seen.lock().unwrap().len() == 4).await;
    assert!(broker.stop().await.unwrap().is_clean());
    assert_eq!(*seen.lock().unwrap(), [(0, 2), (1, 2), (2, 2), (3, 1)]);
}

#[actix_rt::test]
async fn a_failed_dead_letter_move_loses_nothing_and_is_retried() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    // The dead-letter key holds a string: XADD to it fails with WRONGTYPE.
    let _: () = redis::cmd("SET")
        .arg("jobs-dlq")
        .arg("not a stream")
        .query(&mut c)
        .unwrap();
    let s = Stream::new("jobs", "g");
    let (broker, runs) = rejecting(&redis, &s, 3, "bad job");
    broker.start().await.unwrap();
    broker.publish(&s, &Job { id: 1 }).await.unwrap();
    // (Counted on the XADD in the move script: the status poller's XLEN of the
    // dead-letter key meets WRONGTYPE too.)
    eventually("the move failed once", WAIT, || {
        redis.command_failed_calls("xadd") >= 1
    })
    .await;
    assert_eq!(
        pending_count(&mut c, "jobs", "g"),
        1,
        "not acked without its copy"
    );
    // The operator repairs the key; the retried move goes through.
    let _: () = redis::cmd("DEL").arg("jobs-dlq").query(&mut c).unwrap();
    eventually("dead-lettered", WAIT, || {
        stream_len(&mut redis.conn(), "jobs-dlq") == 1
    })
    .await;
    eventually("acked", WAIT, || pending_count(&mut c, "jobs", "g") == 0).await;
    assert!(broker.stop().await.unwrap().is_clean());
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "a rejected entry never runs again"
    );
}

/// An entry that fails three times carries its three failed runs into its
/// dead letter (`attempts`): delivery count, time and error of each.
#[actix_rt::test]
async fn a_dead_letter_keeps_every_failed_run() {
    let redis = RedisServer::start();
    let s = Stream::new("thrice", "g");
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let broker = Broker::builder(redis.url())
        .subscribe(
            &s,
            opts(2).with_retry_backoff(rillkit::RetryBackoff::fixed(Duration::from_millis(10))),
            move |_: Job| {
                let n = r.fetch_add(1, Ordering::SeqCst) + 1;
                async move { Err::<(), _>(HandlerError::retry(format!("timeout on run {n}"))) }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish(&s, &Job { id: 1 }).await.unwrap();
    let dlq = "thrice-dlq".to_owned();
    support::eventually("dead-lettered after three runs", WAIT, || {
        stream_len(&mut redis.conn(), &dlq) == 1
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    let admin = rillkit::admin::Admin::connect(&redis.url()).await.unwrap();
    let dl = admin
        .dead_letters(&dlq, &rillkit::admin::DeadLetterFilter::new())
        .await
        .unwrap()
        .pop()
        .unwrap();
    let origin = dl.origin.expect("a rillkit dead letter");
    let attempts: Vec<(u64, String)> = origin
        .attempts
        .iter()
        .map(|a| (a.delivery_count, a.error.clone()))
        .collect();
    assert_eq!(attempts.len(), 3, "{attempts:?}");
    for (i, (count, error)) in attempts.iter().enumerate() {
        assert_eq!(*count, i as u64 + 1);
        assert!(
            error.contains(&format!("timeout on run {}", i + 1)),
            "{error}"
        );
    }
    assert!(origin.attempts.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    assert_eq!(
        origin.error, attempts[2].1,
        "the last run's error is the dead letter's"
    );
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}
