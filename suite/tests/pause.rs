//! Pausing and resuming a subscription (`Broker::pause`, `Broker::resume`,
//! `SubscriptionHandle::pause`): a paused stream or list consumer reads
//! nothing while another subscription of the same broker goes on, reads
//! everything after the resume, and drains while paused; a channel cannot
//! be paused.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rillkit::prelude::*;
use rillkit::{Error, SourceKind, SubscriptionId, SubscriptionState};
use support::{RedisServer, eventually};

const WAIT: Duration = Duration::from_secs(30);

/// A handler counting its runs.
fn counter() -> (
    Arc<AtomicUsize>,
    impl Fn(u64) -> std::future::Ready<HandlerResult> + Send + Sync + 'static,
) {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    (runs, move |_: u64| {
        r.fetch_add(1, Ordering::SeqCst);
        std::future::ready(HandlerResult::Ok(()))
    })
}

/// `XINFO GROUPS`'s `lag` and `pending` of `group` on `stream`.
fn lag_and_pending(c: &mut redis::Connection, stream: &str, group: &str) -> (i64, i64) {
    let groups: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(stream)
        .query(c)
        .unwrap();
    let g = groups
        .into_iter()
        .find(|g| g.get("name") == Some(&redis::Value::BulkString(group.as_bytes().to_vec())))
        .expect("the group");
    let int = |k: &str| match g.get(k) {
        Some(redis::Value::Int(n)) => *n,
        other => panic!("{k}: {other:?}"),
    };
    (int("lag"), int("pending"))
}

fn state_of(broker: &Broker, key: &str) -> (SubscriptionState, bool) {
    let s = broker
        .status()
        .subscriptions
        .into_iter()
        .find(|s| s.key == key)
        .expect("the subscription");
    (s.state, s.paused)
}

#[actix::test]
async fn a_paused_stream_subscription_reads_nothing_until_resumed() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let orders = Stream::new("orders", "g");
    let marker = Stream::new("marker", "m");
    let (runs, handler) = counter();
    let (marks, mark) = counter();
    let broker = Broker::builder(redis.url())
        .status_period(Duration::from_millis(200))
        .subscribe(
            &orders,
            // A long block: the pause cuts the blocked read short.
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(Duration::from_secs(60)),
            handler,
        )
        .subscribe(&marker, ConsumerOptions::default(), mark)
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish(&orders, &0u64).await.unwrap();
    eventually("the first entry handled", WAIT, || {
        runs.load(Ordering::SeqCst) == 1
    })
    .await;

    let id = SubscriptionId::stream("orders", "g", "c1");
    let nobody = SubscriptionId::stream("orders", "g", "nobody");
    assert!(
        matches!(
            broker.pause_local(&nobody),
            Err(Error::NoSuchSubscription { .. })
        ),
        "an unknown subscription is refused"
    );
    broker.pause_local(&id).unwrap();
    assert!(
        state_of(&broker, "orders").1,
        "the pause is asked for at once"
    );
    eventually("paused", WAIT, || {
        state_of(&broker, "orders").0 == SubscriptionState::Paused
    })
    .await;
    eventually("a paused broker is still ready", WAIT, || {
        broker.status().is_ready()
    })
    .await;

    const N: usize = 20;
    for n in 1..=N as u64 {
        broker.publish(&orders, &n).await.unwrap();
    }
    // The window: until the other subscription handled an entry published
    // after the N. Through it, nothing of the N is read.
    broker.publish(&marker, &0u64).await.unwrap();
    eventually("the marker handled", WAIT, || {
        marks.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "handled while paused");
    assert_eq!(
        lag_and_pending(&mut c, "orders", "g"),
        (N as i64, 0),
        "read while paused"
    );
    assert_eq!(state_of(&broker, "orders").0, SubscriptionState::Paused);

    broker.resume_local(&id).unwrap();
    eventually("all handled after the resume", WAIT, || {
        runs.load(Ordering::SeqCst) == 1 + N
    })
    .await;
    eventually("acked", WAIT, || {
        lag_and_pending(&mut c, "orders", "g") == (0, 0)
    })
    .await;
    assert_eq!(
        state_of(&broker, "orders"),
        (SubscriptionState::Running, false)
    );

    // A drain while paused: the stop is clean, and what was published
    // meanwhile stays for the group.
    broker.pause_local(&id).unwrap();
    eventually("paused again", WAIT, || {
        state_of(&broker, "orders").0 == SubscriptionState::Paused
    })
    .await;
    broker.publish(&orders, &99u64).await.unwrap();
    let outcome = broker.stop().await.unwrap();
    assert!(outcome.is_clean(), "{outcome:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1 + N);
    assert_eq!(lag_and_pending(&mut c, "orders", "g"), (1, 0));
}

#[actix::test]
async fn a_paused_list_subscription_pops_nothing_until_resumed_and_a_channel_cannot_pause() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let marker = Stream::new("marker", "m");
    let (marks, mark) = counter();
    let events = Channel::new("events");
    let broker = Broker::builder(redis.url())
        .subscribe(&marker, ConsumerOptions::default(), mark)
        .subscribe_channel(&events, ChannelOptions::default(), |_: u64| async {
            HandlerResult::Ok(())
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let channel = broker
        .status()
        .subscriptions
        .into_iter()
        .find(|s| s.kind == SourceKind::Channel)
        .unwrap();
    assert!(
        matches!(
            broker.pause_local(&channel.id()),
            Err(Error::NotPausable { .. })
        ),
        "a channel cannot be paused"
    );

    let jobs = List::new("jobs");
    let (runs, handler) = counter();
    let handle = broker
        .subscribe_list(
            &jobs,
            ListOptions::default()
                .with_consumer("w1")
                .with_block(Duration::from_secs(60)),
            handler,
        )
        .await
        .unwrap();
    broker.publish_list(&jobs, &0u64).await.unwrap();
    eventually("the first item handled", WAIT, || {
        runs.load(Ordering::SeqCst) == 1
    })
    .await;

    handle.pause_local().unwrap();
    eventually("paused", WAIT, || {
        handle.status().state == SubscriptionState::Paused
    })
    .await;
    const N: usize = 20;
    broker
        .publish_list_batch(&jobs, 1..=N as u64)
        .await
        .unwrap();
    broker.publish(&marker, &0u64).await.unwrap();
    eventually("the marker handled", WAIT, || {
        marks.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "handled while paused");
    let len: usize = redis::cmd("LLEN").arg("jobs").query(&mut c).unwrap();
    assert_eq!(len, N, "popped while paused");

    // Resumed through the broker, by its status row.
    broker.resume_local(&handle.status().id()).unwrap();
    eventually("all handled after the resume", WAIT, || {
        runs.load(Ordering::SeqCst) == 1 + N
    })
    .await;
    eventually("running", WAIT, || {
        handle.status().state == SubscriptionState::Running
    })
    .await;
    let len: usize = redis::cmd("LLEN").arg("jobs").query(&mut c).unwrap();
    assert_eq!(len, 0);

    handle.pause_local().unwrap();
    eventually("paused again", WAIT, || {
        handle.status().state == SubscriptionState::Paused
    })
    .await;
    let removed = handle.remove().await.unwrap();
    assert!(removed.outcome.is_clean(), "{removed:?}");
    assert!(broker.stop().await.unwrap().is_clean());
}
