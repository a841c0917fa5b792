//! Round trips: typed and whole-message handlers, fan-out to groups, work
//! sharing inside a group, interop with plain redis-rs in both directions.

mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Commands;
use rillkit::prelude::*;
use serde::{Deserialize, Serialize};
use support::{RedisServer, eventually, pending_count};

const WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Order {
    id: u64,
    total: f64,
}

fn fast() -> ConsumerOptions {
    ConsumerOptions::default().with_block(Duration::from_millis(100))
}

#[actix_rt::test]
async fn typed_round_trip_acks_every_entry() {
    support::init_tracing();
    let redis = RedisServer::start();
    let orders = Stream::new("orders", "billing");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let broker = Broker::builder(redis.url())
        .subscribe(&orders, fast().with_consumer("c1"), move |o: Order| {
            let s = s.clone();
            async move {
                s.lock().unwrap().push(o);
                HandlerResult::Ok(())
            }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let id = broker
        .publish(&orders, &Order { id: 1, total: 2.5 })
        .await
        .unwrap();
    assert!(
        id.parts().is_some(),
        "entry id {id} has the <ms>-<seq> form"
    );
    let ids = broker
        .publish_batch(&orders, (2..=10).map(|id| Order { id, total: 1.0 }))
        .await
        .unwrap();
    assert_eq!(ids.len(), 9);
    eventually("10 orders handled", WAIT, || {
        seen.lock().unwrap().len() == 10
    })
    .await;
    let mut c = redis.conn();
    eventually("PEL empty", WAIT, || {
        pending_count(&mut c, "orders", "billing") == 0
    })
    .await;
    let outcome = broker.stop().await.unwrap();
    assert!(outcome.is_clean());
    let got: Vec<u64> = seen.lock().unwrap().iter().map(|o| o.id).collect();
    assert_eq!(
        got,
        (1..=10).collect::<Vec<_>>(),
        "one consumer, concurrency 1: stream order"
    );
}

#[actix_rt::test]
async fn whole_message_handler_sees_metadata_and_raw_fields() {
    let redis = RedisServer::start();
    let s = Stream::new("events", "g");
    let got = Arc::new(Mutex::new(None::<Message>));
    let g = got.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_message(&s, fast().with_consumer("whole-1"), move |m: Message| {
            let g = g.clone();
            async move {
                *g.lock().unwrap() = Some(m);
                HandlerResult::Ok(())
            }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let mut c = redis.conn();
    let id: String = redis::cmd("XADD")
        .arg("events")
        .arg("*")
        .arg("data")
        .arg(r#"{"id":7,"total":1.5}"#)
        .arg("trace")
        .arg(&b"\xff\x00binary"[..])
        .query(&mut c)
        .unwrap();
    eventually("message handled", WAIT, || got.lock().unwrap().is_some()).await;
    let m = got.lock().unwrap().take().unwrap();
    assert_eq!(m.id.as_str(), id);
    assert_eq!(&*m.stream, "events");
    assert_eq!(&*m.group, "g");
    assert_eq!(&*m.consumer, "whole-1");
    assert_eq!(m.delivery_count, 1);
    assert!(!m.is_redelivery());
    assert_eq!(m.field("trace"), Some(&b"\xff\x00binary"[..]));
    let o: Order = m.decode(&rillkit::Json).unwrap();
    assert_eq!(o, Order { id: 7, total: 1.5 });
    assert!(broker.stop().await.unwrap().is_clean());
}

#[actix_rt::test]
async fn two_groups_each_see_every_entry() {
    let redis = RedisServer::start();
    let billing = Stream::new("orders", "billing");
    let audit = billing.with_group("audit");
    let a = Arc::new(AtomicUsize::new(0));
    let b = Arc::new(AtomicUsize::new(0));
    let (a2, b2) = (a.clone(), b.clone());
    let broker = Broker::builder(redis.url())
        .subscribe(&billing, fast(), move |_: Order| {
            a2.fetch_add(1, Ordering::SeqCst);
            async { HandlerResult::Ok(()) }
        })
        .subscribe(&audit, fast(), move |_: Order| {
            b2.fetch_add(1, Ordering::SeqCst);
            async { HandlerResult::Ok(()) }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker
        .publish_batch(&billing, (0..20).map(|id| Order { id, total: 0.0 }))
        .await
        .unwrap();
    eventually("both groups saw 20", WAIT, || {
        a.load(Ordering::SeqCst) == 20 && b.load(Ordering::SeqCst) == 20
    })
    .await;
    assert!(broker.stop().await.unwrap().is_clean());
    assert_eq!(a.load(Ordering::SeqCst), 20);
    assert_eq!(b.load(Ordering::SeqCst), 20);
}

#[actix_rt::test]
async fn two_brokers_in_one_group_split_the_work_without_duplicates() {
    let redis = RedisServer::start();
    let s = Stream::new("jobs", "workers");
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let make = |name: &str| {
        let seen = seen.clone();
        Broker::builder(redis.url())
            .subscribe(
                &s,
                fast().with_consumer(name).with_count(5),
                move |o: Order| {
                    let seen = seen.clone();
                    async move {
                        seen.lock().unwrap().push(o.id);
                        // Yield so the other consumer gets a share.
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        HandlerResult::Ok(())
                    }
                },
            )
            .build()
            .unwrap()
    };
    let (w1, w2) = (make("w1"), make("w2"));
    w1.start().await.unwrap();
    w2.start().await.unwrap();
    w1.publish_batch(&s, (0..200).map(|id| Order { id, total: 0.0 }))
        .await
        .unwrap();
    eventually("200 handled", WAIT, || seen.lock().unwrap().len() >= 200).await;
    let mut c = redis.conn();
    eventually("PEL empty", WAIT, || {
        pending_count(&mut c, "jobs", "workers") == 0
    })
    .await;
    // Both consumers joined: XINFO CONSUMERS shows both names while they run.
    let consumers = |c: &mut redis::Connection| -> usize {
        let info: Vec<redis::Value> = redis::cmd("XINFO")
            .arg("CONSUMERS")
            .arg("jobs")
            .arg("workers")
            .query(c)
            .unwrap();
        info.len()
    };
    assert_eq!(consumers(&mut c), 2);
    assert!(w1.stop().await.unwrap().is_clean());
    assert!(w2.stop().await.unwrap().is_clean());
    let ids = seen.lock().unwrap().clone();
    let unique: HashSet<u64> = ids.iter().copied().collect();
    assert_eq!(ids.len(), 200, "no entry handled twice");
    assert_eq!(unique.len(), 200);
    // A clean stop with nothing pending leaves the group as it was.
    assert_eq!(consumers(&mut c), 0, "stopped consumers left the group");
}

#[actix_rt::test]
async fn interop_with_plain_redis_clients_both_ways() {
    let redis = RedisServer::start();
    let s = Stream::new("orders", "billing");
    let seen: Arc<Mutex<Vec<Order>>> = Arc::default();
    let sn = seen.clone();
    let broker = Broker::builder(redis.url())
        .subscribe(&s, fast(), move |o: Order| {
            let sn = sn.clone();
            async move {
                sn.lock().unwrap().push(o);
                HandlerResult::Ok(())
            }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let mut c = redis.conn();
    // A plain producer.
    let _: String = c
        .xadd("orders", "*", &[("data", r#"{"id":1,"total":3.0}"#)])
        .unwrap();
    // rillkit publishes; a plain reader sees JSON in `data`.
    let id = broker
        .publish(&s, &Order { id: 2, total: 4.0 })
        .await
        .unwrap();
    eventually("both handled", WAIT, || seen.lock().unwrap().len() == 2).await;
    let rows: redis::streams::StreamRangeReply =
        c.xrange("orders", id.as_str(), id.as_str()).unwrap();
    let data: String = rows.ids[0].get("data").unwrap();
    let back: Order = serde_json::from_str(&data).unwrap();
    assert_eq!(back, Order { id: 2, total: 4.0 });
    assert!(broker.stop().await.unwrap().is_clean());
    assert_eq!(seen.lock().unwrap()[0], Order { id: 1, total: 3.0 });
}

#[actix_rt::test]
async fn max_len_caps_the_stream() {
    let redis = RedisServer::start();
    let s = Stream::new("capped", "g").with_max_len(10);
    let broker = Broker::builder(redis.url()).build().unwrap();
    broker.start().await.unwrap();
    for chunk in 0..10 {
        broker
            .publish_batch(
                &s,
                (0..100).map(|i| Order {
                    id: chunk * 100 + i,
                    total: 0.0,
                }),
            )
            .await
            .unwrap();
    }
    let mut c = redis.conn();
    let len = support::stream_len(&mut c, "capped");
    assert!(
        len < 1000,
        "MAXLEN ~ 10 trims (approximately): {len} entries left"
    );
    assert!(broker.stop().await.unwrap().is_clean());
}
