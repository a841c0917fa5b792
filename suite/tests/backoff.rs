//! Backoff between retries, separate from crash recovery: a
//! failed entry waits `retry_backoff(n)` in the consumer that saw it fail,
//! measured here against a real server; entries that failed here run again
//! beside each other (a downstream outage does not serialise the consumer);
//! at a drain a waiting entry is handed back and another consumer runs it
//! once the rest of its wait is over, not after `claim_idle`.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rillkit::prelude::*;
use rillkit::{ConfigError, RetryBackoff};
use support::{RedisServer, eventually, pending_count, stream_len};

const WAIT: Duration = Duration::from_secs(30);
/// Far longer than any backoff here: a retry that waited for it would fail
/// the tests' deadlines.
const CLAIM_IDLE: Duration = Duration::from_secs(20);

#[actix_rt::test]
async fn each_retry_waits_its_backoff_then_the_entry_is_dead_lettered() {
    let redis = RedisServer::start();
    let s = Stream::new("jobs", "g");
    let runs: Arc<Mutex<Vec<(u64, Instant)>>> = Default::default();
    let r = runs.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_message(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_max_retries(3)
                .with_claim_idle(CLAIM_IDLE)
                .with_retry_backoff(
                    RetryBackoff::exponential(Duration::from_millis(200)).with_jitter(false),
                ),
            move |m: Message| {
                r.lock().unwrap().push((m.delivery_count, Instant::now()));
                async { Err(HandlerError::retry("downstream is down")) }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish(&s, &1u64).await.unwrap();
    let mut conn = redis.conn();
    eventually("dead-lettered after 4 runs", WAIT, || {
        stream_len(&mut conn, "jobs-dlq") == 1
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    let runs = runs.lock().unwrap().clone();
    let counts: Vec<u64> = runs.iter().map(|r| r.0).collect();
    assert_eq!(
        counts,
        [1, 2, 3, 4],
        "the server's count rises by one per run"
    );
    let gaps: Vec<Duration> = runs.windows(2).map(|w| w[1].1 - w[0].1).collect();
    eprintln!("gaps between runs: {gaps:?} (backoff 200, 400, 800 ms)");
    for (gap, nominal) in gaps.iter().zip([200u64, 400, 800]) {
        let nominal = Duration::from_millis(nominal);
        assert!(
            *gap >= nominal,
            "{gap:?} is shorter than its backoff {nominal:?}"
        );
        assert!(
            *gap < CLAIM_IDLE / 2,
            "{gap:?}: the retry waited for crash recovery, not its backoff"
        );
    }
    assert_eq!(pending_count(&mut conn, "jobs", "g"), 0);
}

#[actix_rt::test]
async fn entries_that_failed_here_run_again_beside_each_other() {
    const N: usize = 8;
    let redis = RedisServer::start();
    let s = Stream::new("calls", "g");
    let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let done = Arc::new(AtomicUsize::new(0));
    let (ru, mo, dn) = (running.clone(), most.clone(), done.clone());
    let broker = Broker::builder(redis.url())
        .subscribe_message(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_concurrency(N)
                .with_count(N)
                .with_claim_idle(CLAIM_IDLE)
                .with_retry_backoff(RetryBackoff::fixed(Duration::from_millis(300))),
            move |m: Message| {
                let (ru, mo, dn) = (ru.clone(), mo.clone(), dn.clone());
                async move {
                    if m.delivery_count == 1 {
                        return Err(HandlerError::retry("downstream outage"));
                    }
                    let now = ru.fetch_add(1, Ordering::SeqCst) + 1;
                    mo.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    ru.fetch_sub(1, Ordering::SeqCst);
                    dn.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker
        .publish_batch(&s, (0..N as u64).collect::<Vec<_>>())
        .await
        .unwrap();
    eventually("every entry succeeded on its retry", WAIT, || {
        done.load(Ordering::SeqCst) == N
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    let most = most.load(Ordering::SeqCst);
    eprintln!("at most {most} retries ran at once");
    assert!(
        most >= N / 2,
        "retries of entries that failed here ran {most} at a time: serialised"
    );
}

#[actix_rt::test]
async fn a_drain_hands_a_waiting_entry_back_for_the_rest_of_its_wait() {
    let redis = RedisServer::start();
    let s = Stream::new("mail", "g");
    let backoff = Duration::from_secs(2);
    let opts = |name: &str| {
        ConsumerOptions::default()
            .with_consumer(name)
            .with_block(Duration::from_millis(100))
            .with_claim_idle(CLAIM_IDLE)
            .with_retry_backoff(RetryBackoff::fixed(backoff))
    };
    let failed_at: Arc<Mutex<Option<Instant>>> = Default::default();
    let f = failed_at.clone();
    let first = Broker::builder(redis.url())
        .subscribe(&s, opts("c1"), move |_: u64| {
            *f.lock().unwrap() = Some(Instant::now());
            async { Err(HandlerError::retry("not now")) }
        })
        .build()
        .unwrap();
    first.start().await.unwrap();
    first.publish(&s, &1u64).await.unwrap();
    eventually("the first run failed", WAIT, || {
        failed_at.lock().unwrap().is_some()
    })
    .await;
    // Stopped while the entry waits for its retry: it is handed back.
    assert_eq!(first.stop().await.unwrap().exit_code(), 0);
    let failed_at = failed_at.lock().unwrap().unwrap();

    let second_run: Arc<Mutex<Option<(u64, Instant)>>> = Default::default();
    let sr = second_run.clone();
    let second = Broker::builder(redis.url())
        .subscribe_message(&s, opts("c2"), move |m: Message| {
            *sr.lock().unwrap() = Some((m.delivery_count, Instant::now()));
            async { HandlerResult::Ok(()) }
        })
        .build()
        .unwrap();
    second.start().await.unwrap();
    eventually("another consumer ran it", WAIT, || {
        second_run.lock().unwrap().is_some()
    })
    .await;
    assert_eq!(second.stop().await.unwrap().exit_code(), 0);
    let (count, at) = second_run.lock().unwrap().unwrap();
    let waited = at - failed_at;
    eprintln!("handed back; ran again {waited:?} after failing (backoff {backoff:?})");
    assert_eq!(count, 2, "the second run, counted once");
    assert!(
        waited >= backoff,
        "{waited:?}: ran before its backoff was over"
    );
    assert!(waited < CLAIM_IDLE, "{waited:?}: waited for claim_idle");
    assert_eq!(pending_count(&mut redis.conn(), "mail", "g"), 0);
}

#[test]
fn a_backoff_longer_than_claim_idle_is_refused_by_build() {
    let err = Broker::builder("redis://127.0.0.1")
        .subscribe(
            &Stream::new("s", "g"),
            ConsumerOptions::default()
                .with_claim_idle(Duration::from_secs(10))
                .with_retry_backoff(
                    RetryBackoff::exponential(Duration::from_secs(1))
                        .with_max(Duration::from_secs(60)),
                ),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap_err();
    match err {
        ConfigError::Invalid { option, reason, .. } => {
            assert_eq!(option, "retry_backoff");
            assert!(reason.contains("claim_idle"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}
