//! Subscriptions added to and removed from a running broker, and a broker
//! built on the application's own `redis::Client`.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rillkit::prelude::*;
use rillkit::{Error, SourceKind, SubscriptionHandle};
use support::{RedisServer, eventually, xadd};

const WAIT: Duration = Duration::from_secs(30);

#[actix::test]
async fn a_stream_subscription_added_at_run_time_consumes_and_its_removal_cuts_the_read_short() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let broker = broker_on(&redis);
    // Not yet: a subscription needs a running broker.
    let early = broker
        .subscribe(
            &Stream::new("orders", "g"),
            ConsumerOptions::default(),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .await;
    assert!(matches!(early, Err(Error::NotStarted)), "{early:?}");
    broker.start().await.unwrap();
    let orders = Stream::new("orders", "g");
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let handle = broker
        .subscribe(
            &orders,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(Duration::from_secs(20)),
            move |_: u64| {
                let r = r.clone();
                async move {
                    r.fetch_add(1, Ordering::SeqCst);
                    HandlerResult::Ok(())
                }
            },
        )
        .await
        .unwrap();
    // The same consumer twice is refused.
    let twice = broker
        .subscribe(
            &orders,
            ConsumerOptions::default().with_consumer("c1"),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .await;
    assert!(matches!(twice, Err(Error::Config(_))), "{twice:?}");
    assert_eq!(handle.status().kind, SourceKind::Stream);
    for n in 0..10u64 {
        broker.publish(&orders, &n).await.unwrap();
    }
    eventually("10 handled", WAIT, || runs.load(Ordering::SeqCst) == 10).await;
    eventually("blocked in XREADGROUP", WAIT, || {
        redis.blocked_clients() == 1
    })
    .await;
    let asked = Instant::now();
    let removed = handle.remove().await.unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "remove waited for the block: {:?}",
        asked.elapsed()
    );
    assert_eq!(removed.handled, 10);
    assert!(removed.outcome.is_clean());
    assert_eq!(
        redis.command_calls("quit"),
        1,
        "its read connection ends with QUIT"
    );
    xadd(&mut c, "orders", "11");
    assert_eq!(support::pending_count(&mut c, "orders", "g"), 0);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        10,
        "nobody reads for a removed subscription"
    );
    assert_eq!(broker.phase(), Phase::Running);
    let outcome = broker.stop().await.unwrap();
    assert!(outcome.is_clean(), "{outcome:?}");
}

#[actix::test]
async fn a_removed_subscription_that_timed_out_counts_in_the_final_outcome() {
    let redis = RedisServer::start();
    let broker = Broker::builder(redis.url()).build().unwrap();
    broker.start().await.unwrap();
    let jobs = List::new("slow");
    let handle = broker
        .subscribe_list(
            &jobs,
            ListOptions::default().with_consumer("c1"),
            |_: u64| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                HandlerResult::Ok(())
            },
        )
        .await
        .unwrap();
    broker.publish_list(&jobs, &1u64).await.unwrap();
    eventually("running", WAIT, || {
        let mut c = redis.conn();
        redis::cmd("LLEN")
            .arg("{slow}:rillkit:processing:c1")
            .query::<usize>(&mut c)
            .unwrap()
            == 1
    })
    .await;
    let removed = handle
        .remove_with_timeout(Duration::from_millis(200))
        .await
        .unwrap();
    assert!(removed.outcome.timed_out);
    // The abandoned item went back onto the list for another consumer.
    let mut c = redis.conn();
    let left: usize = redis::cmd("LLEN").arg("slow").query(&mut c).unwrap();
    assert_eq!(left, 1);
    let outcome = broker.stop().await.unwrap();
    assert_eq!(outcome.exit_code(), 3, "{outcome:?}");
}

#[actix::test]
async fn a_broker_on_the_applications_client_closes_only_its_own_connections() {
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut own = client.get_multiplexed_async_connection().await.unwrap();
    let broker = Broker::from_client(client.clone())
        .pool_size(3)
        .subscribe(
            &Stream::new("s", "g"),
            ConsumerOptions::default(),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish(&Stream::new("s", "g"), &1u64).await.unwrap();
    let outcome = broker.stop().await.unwrap();
    assert!(outcome.is_clean());
    assert_eq!(outcome.closed_connections, 3, "{outcome:?}");
    let mut other = rillkit::SupervisorOutcome::default();
    other.closed_connections = 2;
    assert_eq!(outcome.merge(other).closed_connections, 5, "merging sums");
    // The application's own connection and client still work.
    let pong: String = redis::cmd("PING").query_async(&mut own).await.unwrap();
    assert_eq!(pong, "PONG");
    let mut again = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query_async(&mut again)
        .await
        .unwrap();
}

/// A broker on `redis`, not started, with a 5 s drain.
fn broker_on(redis: &RedisServer) -> Broker {
    Broker::builder(redis.url())
        .shutdown_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// A handler of `u64`s that counts its runs.
fn counting(
    runs: &Arc<AtomicUsize>,
) -> impl Fn(u64) -> std::future::Ready<HandlerResult> + Send + Sync + 'static {
    let runs = runs.clone();
    move |_| {
        runs.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(()))
    }
}

/// Publishes `n` under key `k<n>` for each `n` of `range`.
async fn publish_keyed(broker: &Broker, stream: &Stream, range: std::ops::Range<u64>) {
    for n in range {
        broker
            .publish_keyed(stream, &format!("k{n}"), &n)
            .await
            .unwrap();
    }
}

#[actix::test]
async fn an_ordered_stream_added_at_run_time_runs_its_partitions_and_its_removal_hands_them_on() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let broker = broker_on(&redis);
    broker.start().await.unwrap();
    let orders = Stream::new("orders", "g").ordered_by("key", 4);
    let opts = |name: &str| {
        ConsumerOptions::default()
            .with_consumer(name)
            .with_block(Duration::from_millis(200))
            .with_lease_ttl(Duration::from_secs(30))
    };
    let (first, second) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let handle = broker
        .subscribe(&orders, opts("c1"), counting(&first))
        .await
        .unwrap();
    publish_keyed(&broker, &orders, 0..20).await;
    eventually("20 handled", WAIT, || first.load(Ordering::SeqCst) == 20).await;
    let owned = |h: &SubscriptionHandle| h.status().partitions.iter().filter(|p| p.owned).count();
    eventually("its 4 partitions owned", WAIT, || owned(&handle) == 4).await;
    let removed = handle.remove().await.unwrap();
    assert!(removed.outcome.is_clean(), "{:?}", removed.outcome);
    // Each partition's loop drained and dropped its lease, and the
    // consumer left the members: nothing waits out a 30 s TTL.
    for p in 0..4 {
        let lease: Option<String> = redis::cmd("GET")
            .arg(format!("{{orders:p{p}}}:rillkit:owner:g"))
            .query(&mut c)
            .unwrap();
        assert_eq!(lease, None, "partition {p}'s lease kept");
    }
    let members: usize = redis::cmd("ZCARD")
        .arg("{orders}:rillkit:members:g")
        .query(&mut c)
        .unwrap();
    assert_eq!(members, 0);
    // Another consumer takes every partition and runs what comes next;
    // nothing of the removed one runs.
    let next = broker
        .subscribe(&orders, opts("c2"), counting(&second))
        .await
        .unwrap();
    publish_keyed(&broker, &orders, 20..28).await;
    eventually("8 handled by the next", WAIT, || {
        second.load(Ordering::SeqCst) == 8 && owned(&next) == 4
    })
    .await;
    assert_eq!(first.load(Ordering::SeqCst), 20);
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}
