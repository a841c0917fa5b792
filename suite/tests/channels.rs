//! Pub/Sub subscriptions: messages published while
//! subscribed are handled, a closed connection is subscribed again, a slow
//! handler with a full buffer drops the oldest messages and counts them
//! (full by count, or by bytes of payloads),
//! patterns, and removal at run time.

mod support;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rillkit::prelude::*;
use rillkit::{SourceKind, SubscriptionState};
use support::{RedisServer, eventually};

const WAIT: Duration = Duration::from_secs(30);

fn kill_pubsub_clients(c: &mut redis::Connection) -> u64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(c)
        .unwrap()
}

#[actix::test]
async fn published_messages_are_handled_and_a_closed_connection_subscribes_again() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let events = Channel::new("events");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_channel(
            &events,
            ChannelOptions::default().with_concurrency(4),
            move |n: u64| {
                let s = s.clone();
                async move {
                    s.lock().unwrap().push(n);
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    // start() returns once subscribed: nothing published after it is missed.
    for n in 1..=50u64 {
        assert_eq!(broker.publish_channel(&events, &n).await.unwrap(), 1);
    }
    eventually("50 handled", WAIT, || seen.lock().unwrap().len() == 50).await;
    let status = broker.status();
    assert_eq!(status.subscriptions[0].kind, SourceKind::Channel);
    assert_eq!(status.subscriptions[0].handled, 50);

    // Redis drops the subscriber (as at its client-output-buffer-limit).
    assert_eq!(kill_pubsub_clients(&mut c), 1);
    eventually("subscribed again", WAIT, || {
        redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("events")
            .query::<(String, u64)>(&mut c)
            .unwrap()
            .1
            == 1
    })
    .await;
    eventually("running again", WAIT, || {
        broker.status().subscriptions[0].state == SubscriptionState::Running
    })
    .await;
    broker.publish_channel(&events, &51u64).await.unwrap();
    eventually("51 handled", WAIT, || seen.lock().unwrap().contains(&51)).await;
    assert!(broker.stop().await.unwrap().is_clean());
}

#[actix::test]
async fn a_slow_handler_with_a_full_buffer_drops_the_oldest_and_counts_them() {
    let redis = RedisServer::start();
    let events = Channel::new("firehose");
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let handled = Arc::new(Mutex::new(Vec::new()));
    let (g, h) = (gate.clone(), handled.clone());
    let broker = Broker::builder(redis.url())
        .shutdown_timeout(Duration::from_secs(5))
        .subscribe_channel(
            &events,
            ChannelOptions::default().with_buffer(10),
            move |n: u64| {
                let (g, h) = (g.clone(), h.clone());
                async move {
                    g.acquire().await.unwrap().forget();
                    h.lock().unwrap().push(n);
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    // The handler holds message 1; 2..=1000 arrive meanwhile into a buffer
    // of 10.
    for n in 1..=1000u64 {
        broker.publish_channel(&events, &n).await.unwrap();
    }
    eventually("the buffer overflowed", WAIT, || {
        broker.status().subscriptions[0].dropped >= 989
    })
    .await;
    gate.add_permits(1000);
    eventually("every message handled or dropped", WAIT, || {
        handled.lock().unwrap().len() as u64 + broker.status().subscriptions[0].dropped == 1000
    })
    .await;
    let got = handled.lock().unwrap().clone();
    assert!(
        got.len() <= 11,
        "at most the running one and a full buffer: {got:?}"
    );
    assert_eq!(
        &got[got.len() - 10..],
        &(991..=1000).collect::<Vec<_>>()[..],
        "the newest are kept"
    );
    assert!(broker.stop().await.unwrap().is_clean());
}

#[actix::test]
async fn a_buffer_full_by_bytes_drops_the_oldest_however_few_messages_it_holds() {
    let redis = RedisServer::start();
    let events = Channel::new("frames");
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let handled = Arc::new(Mutex::new(Vec::new()));
    let (g, h) = (gate.clone(), handled.clone());
    // 1 MiB of payloads and the default 1 024 messages: ten messages of
    // 100 000 bytes fit, an eleventh does not.
    let broker = Broker::builder(redis.url())
        .shutdown_timeout(Duration::from_secs(5))
        .subscribe_channel(
            &events,
            ChannelOptions::default().with_buffer_bytes(1 << 20),
            move |(n, _pad): (u64, String)| {
                let (g, h) = (g.clone(), h.clone());
                async move {
                    g.acquire().await.unwrap().forget();
                    h.lock().unwrap().push(n);
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let pad = "x".repeat(100_000);
    for n in 1..=40u64 {
        broker.publish_channel(&events, &(n, &pad)).await.unwrap();
    }
    // The handler holds one; ten wait; the other 29 were dropped.
    eventually("the buffer overflowed by bytes", WAIT, || {
        broker.status().subscriptions[0].dropped >= 29
    })
    .await;
    gate.add_permits(40);
    eventually("every message handled or dropped", WAIT, || {
        handled.lock().unwrap().len() as u64 + broker.status().subscriptions[0].dropped == 40
    })
    .await;
    let got = handled.lock().unwrap().clone();
    assert!(
        got.len() <= 11,
        "at most the running one and ten of 100 000 bytes: {got:?}"
    );
    assert_eq!(
        &got[got.len() - 10..],
        &(31..=40).collect::<Vec<_>>()[..],
        "the newest are kept"
    );
    assert_eq!(ChannelOptions::default().buffer_bytes(), 32 << 20);
    assert!(broker.stop().await.unwrap().is_clean());
}

#[actix::test]
async fn patterns_and_removal_at_run_time() {
    let redis = RedisServer::start();
    let broker = Broker::builder(redis.url()).build().unwrap();
    broker.start().await.unwrap();
    let sum = Arc::new(AtomicU64::new(0));
    let runs = Arc::new(AtomicUsize::new(0));
    let (s, r) = (sum.clone(), runs.clone());
    let handle = broker
        .subscribe_channel(
            &Channel::pattern("orders.*"),
            ChannelOptions::default(),
            move |n: u64| {
                let (s, r) = (s.clone(), r.clone());
                async move {
                    s.fetch_add(n, Ordering::SeqCst);
                    r.fetch_add(1, Ordering::SeqCst);
                    HandlerResult::Ok(())
                }
            },
        )
        .await
        .unwrap();
    broker
        .publish_channel(&Channel::new("orders.eu"), &5u64)
        .await
        .unwrap();
    broker
        .publish_channel(&Channel::new("orders.us"), &7u64)
        .await
        .unwrap();
    broker
        .publish_channel(&Channel::new("invoices.eu"), &100u64)
        .await
        .unwrap();
    eventually("two matched", WAIT, || runs.load(Ordering::SeqCst) == 2).await;
    assert_eq!(sum.load(Ordering::SeqCst), 12);
    let removed = handle.remove().await.unwrap();
    assert_eq!(removed.handled, 2);
    assert_eq!(
        broker
            .publish_channel(&Channel::new("orders.eu"), &1u64)
            .await
            .unwrap(),
        0,
        "no subscriber once removed"
    );
    assert!(broker.stop().await.unwrap().is_clean());
}

/// A pattern subscription's handler learns which channel matched.
#[actix::test]
async fn a_pattern_handler_with_context_learns_the_channel() {
    let redis = RedisServer::start();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_channel_with_context(
            &Channel::pattern("prices.*"),
            ChannelOptions::default(),
            move |n: u64, d: rillkit::ItemDelivery| {
                let s = s.clone();
                async move {
                    s.lock().unwrap().push((
                        d.source().to_string(),
                        d.pattern().map(str::to_owned),
                        d.attempt(),
                        n,
                    ));
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker
        .publish_channel(&Channel::new("prices.eu"), &5u64)
        .await
        .unwrap();
    eventually("heard", WAIT, || seen.lock().unwrap().len() == 1).await;
    assert_eq!(
        seen.lock().unwrap()[0],
        ("prices.eu".to_owned(), Some("prices.*".to_owned()), 1, 5)
    );
    assert!(broker.stop().await.unwrap().is_clean());
}
