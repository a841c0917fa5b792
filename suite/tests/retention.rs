//! Retention that never drops work: `retain_acked` trims what
//! every group has acked and nothing a group has not read or still holds;
//! the dead-letter stream keeps to its cap.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rillkit::prelude::*;
use support::{RedisServer, eventually, stream_len};

const WAIT: Duration = Duration::from_secs(60);

fn first_id(c: &mut redis::Connection, key: &str) -> Option<String> {
    let rows: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .arg("COUNT")
        .arg(1)
        .query(c)
        .unwrap();
    rows.into_iter().next().map(|r| r.0)
}

#[actix_rt::test]
async fn acked_entries_are_trimmed_and_nothing_a_group_still_needs() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let s = Stream::new("orders", "billing").with_retain_acked(true);
    let handled = Arc::new(AtomicU64::new(0));
    let h = handled.clone();
    let broker = Broker::builder(redis.url())
        .retention_period(Duration::from_millis(100))
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_count(100)
                .with_concurrency(4)
                .with_block(Duration::from_millis(100)),
            move |v: u64| {
                let h = h.clone();
                async move {
                    if v == u64::MAX {
                        // Held until the test ends: never acked.
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                    h.fetch_add(1, Ordering::SeqCst);
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    // A stream with no group yet is not trimmed.
    support::xadd_values(&mut c, "orders", 0..2_000);
    broker.start().await.unwrap();
    eventually("2 000 handled", WAIT, || {
        handled.load(Ordering::SeqCst) == 2_000
    })
    .await;
    eventually("the acked entries trimmed", WAIT, || {
        stream_len(&mut c, "orders") <= 200
    })
    .await;

    // A group that has read nothing keeps everything after its start.
    let () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("orders")
        .arg("audit")
        .arg("$")
        .query(&mut c)
        .unwrap();
    let first_new = broker.publish(&s, &5_000u64).await.unwrap();
    broker
        .publish_batch(&s, (5_001..5_500u64).collect::<Vec<_>>())
        .await
        .unwrap();
    eventually("billing handled them", WAIT, || {
        handled.load(Ordering::SeqCst) == 2_500
    })
    .await;
    // Give the trim several periods: it must not touch what `audit` needs.
    let trims_before = redis.command_calls("xtrim");
    eventually("several trims ran", WAIT, || {
        redis.command_calls("xtrim") >= trims_before + 5
    })
    .await;
    assert!(
        stream_len(&mut c, "orders") >= 500,
        "audit's unread entries stay"
    );
    let first = first_id(&mut c, "orders").unwrap();
    assert!(
        ids_le(&first, first_new.as_ref()),
        "{first} is past {first_new}, which audit has not read"
    );

    // An entry a group holds pending is never trimmed, however old.
    let () = redis::cmd("XGROUP")
        .arg("DESTROY")
        .arg("orders")
        .arg("audit")
        .query(&mut c)
        .unwrap();
    let held = broker.publish(&s, &u64::MAX).await.unwrap();
    broker
        .publish_batch(&s, (6_000..6_500u64).collect::<Vec<_>>())
        .await
        .unwrap();
    eventually("the rest handled", WAIT, || {
        handled.load(Ordering::SeqCst) == 3_000
    })
    .await;
    let trims_before = redis.command_calls("xtrim");
    eventually("several trims ran", WAIT, || {
        redis.command_calls("xtrim") >= trims_before + 5
    })
    .await;
    let first = first_id(&mut c, "orders").unwrap();
    assert!(
        ids_le(&first, held.as_ref()),
        "the pending {held} was kept ({first})"
    );
    broker.request_stop_with_timeout(Duration::from_millis(100));
    let _ = broker.stop().await;
}

/// `a <= b` for entry ids.
fn ids_le(a: &str, b: &str) -> bool {
    let p = |s: &str| {
        let (ms, seq) = s.split_once('-').unwrap();
        (ms.parse::<u64>().unwrap(), seq.parse::<u64>().unwrap())
    };
    p(a) <= p(b)
}

#[actix_rt::test]
async fn the_dead_letter_stream_keeps_to_its_cap() {
    let redis = RedisServer::start();
    let s = Stream::new("jobs", "g").with_dlq_max_len(100);
    let broker = Broker::builder(redis.url())
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_count(50)
                .with_max_retries(0)
                .with_block(Duration::from_millis(100)),
            |_: u64| async { Err(HandlerError::reject("poison")) },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker
        .publish_batch(&s, (0..300u64).collect::<Vec<_>>())
        .await
        .unwrap();
    let mut c = redis.conn();
    eventually("all 300 dead-lettered", WAIT, || {
        support::pending_count(&mut c, "jobs", "g") == 0 && redis.command_calls("evalsha") >= 300
    })
    .await;
    let n = stream_len(&mut c, "jobs-dlq");
    assert!((100..=250).contains(&n), "XLEN jobs-dlq {n}, cap about 100");
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}
