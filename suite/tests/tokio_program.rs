//! A broker in a `#[tokio::main]` program: outside an actix System,
//! `start()` runs the broker in a System of its own on a thread named
//! `rillkit`, and the handle works from tokio (any flavour).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rillkit::prelude::*;
use support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokio_program_runs_a_broker_on_its_own_thread() {
    let redis = RedisServer::start();
    let s = Stream::new("orders", "billing");
    let sum = Arc::new(AtomicU64::new(0));
    let handler_thread: Arc<std::sync::Mutex<Option<String>>> = Default::default();
    let (h, t) = (sum.clone(), handler_thread.clone());
    let broker = Broker::builder(redis.url())
        .subscribe(&s, ConsumerOptions::default(), move |v: u64| {
            h.fetch_add(v, Ordering::SeqCst);
            *t.lock().unwrap() = std::thread::current().name().map(str::to_owned);
            async { HandlerResult::Ok(()) }
        })
        .build()
        .unwrap();

    // Plain tokio, several worker threads: no actix System here.
    broker.start().await.unwrap();
    assert_eq!(broker.phase(), Phase::Running);
    for v in 1..=10u64 {
        broker.publish(&s, &v).await.unwrap();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while sum.load(Ordering::SeqCst) != 55 {
        assert!(tokio::time::Instant::now() < deadline, "handled in time");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        handler_thread.lock().unwrap().as_deref(),
        Some("rillkit"),
        "handlers run on the broker's own thread"
    );
    let outcome = broker.stop().await.unwrap();
    assert_eq!(outcome.exit_code(), 0);
    assert_eq!(broker.phase(), Phase::Stopped);
}
