//! The fleet: a pause of a group (or a list) kept in Redis stops every
//! process that consumes it, holds for a process started while it is on,
//! and its resume drains the backlog; a scale sets every process's
//! concurrency at run time, within bounds; each process keeps a record of
//! itself that `Admin::fleet` lists and that leaves with it.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rillkit::admin::Admin;
use rillkit::prelude::*;
use rillkit::{Error, SubscriptionState};
use support::{RedisServer, eventually};
use tokio::sync::Semaphore;

const WAIT: Duration = Duration::from_secs(30);

/// A broker of group `g` on `tasks` as consumer `name` (concurrency 2),
/// counting its runs into `runs`.
fn worker(redis: &RedisServer, name: &str, runs: &Arc<AtomicUsize>) -> Broker {
    gated(redis, name, runs, None)
}

/// [`worker`] whose handlers, with a `gate`, each wait for a permit of it
/// (and keep it), counting themselves in `runs` when they start.
fn gated(
    redis: &RedisServer,
    name: &str,
    runs: &Arc<AtomicUsize>,
    gate: Option<Arc<Semaphore>>,
) -> Broker {
    let runs = runs.clone();
    Broker::builder(redis.url())
        .subscribe(
            &Stream::new("tasks", "g"),
            ConsumerOptions::default()
                .with_consumer(name)
                .with_concurrency(2)
                .with_block(Duration::from_secs(30)),
            move |_: u64| {
                runs.fetch_add(1, Ordering::SeqCst);
                let gate = gate.clone();
                async move {
                    if let Some(gate) = gate {
                        gate.acquire().await.unwrap().forget();
                    }
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap()
}

fn only(broker: &Broker) -> rillkit::SubscriptionStatus {
    broker.status().subscriptions.remove(0)
}

/// `XINFO GROUPS`'s lag of group `g` on `tasks`.
fn lag(redis: &RedisServer) -> i64 {
    let groups: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg("tasks")
        .query(&mut redis.conn())
        .unwrap();
    match groups[0].get("lag") {
        Some(redis::Value::Int(n)) => *n,
        other => panic!("lag: {other:?}"),
    }
}

#[actix_rt::test]
async fn a_group_paused_in_redis_stops_every_process_and_one_started_later_until_resumed() {
    let redis = RedisServer::start();
    let admin = Admin::connect(&redis.url()).await.unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let (a, b) = (worker(&redis, "a", &runs), worker(&redis, "b", &runs));
    a.start().await.unwrap();
    b.start().await.unwrap();

    admin.pause_group("tasks", "g").await.unwrap();
    assert!(admin.group_control("tasks", "g").await.unwrap().paused());
    for w in [&a, &b] {
        let w = w.clone();
        eventually(
            "paused by the fleet, its blocked read cut short",
            WAIT,
            move || {
                let s = only(&w);
                s.fleet_paused && s.paused && s.state == SubscriptionState::Paused
            },
        )
        .await;
    }
    // A backlog, and a third process started while the pause is on: it is
    // paused from its first read.
    for n in 0..20u64 {
        admin
            .add("tasks", &[("data", n.to_string().as_str())])
            .await
            .unwrap();
    }
    let c = worker(&redis, "c", &runs);
    c.start().await.unwrap();
    let s = only(&c);
    assert!(s.fleet_paused, "paused before its first read: {s:?}");
    let c2 = c.clone();
    eventually("the third is paused", WAIT, move || {
        only(&c2).state == SubscriptionState::Paused
    })
    .await;
    // Records are renewed every 500 ms: wait for those that show the pause.
    let fleet = loop {
        let fleet = admin.fleet().await.unwrap();
        if fleet.len() == 3 && fleet.iter().all(|p| p.subscriptions[0].state == "paused") {
            break fleet;
        }
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    };
    for p in &fleet {
        let s = &p.subscriptions[0];
        assert_eq!((s.stream.as_str(), s.group.as_str()), ("tasks", "g"));
        assert!(s.fleet_paused && s.state == "paused", "{p:?}");
        assert_eq!(p.pid, std::process::id());
        assert!(!p.version.is_empty() && !p.host.is_empty(), "{p:?}");
    }
    let mut names: Vec<_> = fleet.iter().map(|p| p.consumer.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing ran while paused");
    assert_eq!(lag(&redis), 20, "nothing was read while paused");

    admin.resume_group("tasks", "g").await.unwrap();
    eventually("the backlog drained after the resume", WAIT, || {
        runs.load(Ordering::SeqCst) == 20
    })
    .await;
    for w in [&a, &b, &c] {
        let w2 = w.clone();
        eventually("every process resumed", WAIT, move || {
            !only(&w2).fleet_paused
        })
        .await;
        assert_eq!(w.stop().await.unwrap().exit_code(), 0);
    }
    assert!(
        admin.fleet().await.unwrap().is_empty(),
        "a stopped process leaves the fleet view"
    );
}

#[actix_rt::test]
async fn a_scale_sets_every_processs_concurrency_within_bounds() {
    let redis = RedisServer::start();
    let admin = Admin::connect(&redis.url()).await.unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(0));
    let a = gated(&redis, "a", &runs, Some(gate.clone()));
    let b = gated(&redis, "b", &runs, Some(gate.clone()));
    a.start().await.unwrap();
    b.start().await.unwrap();
    assert_eq!(only(&a).concurrency, 2);

    let err = admin.scale_group("tasks", "g", Some(0)).await.unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
    assert!(err.to_string().contains("concurrency"), "{err}");
    let err = admin
        .scale_group("tasks", "g", Some(rillkit::admin::MAX_CONCURRENCY + 1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");

    // A backlog: each process runs two of it (they hold their handlers).
    for n in 0..24u64 {
        admin
            .add("tasks", &[("data", n.to_string().as_str())])
            .await
            .unwrap();
    }
    let (a2, b2) = (a.clone(), b.clone());
    eventually("two handlers running in each", WAIT, move || {
        only(&a2).in_flight == 2 && only(&b2).in_flight == 2
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 4);

    admin.scale_group("tasks", "g", Some(8)).await.unwrap();
    assert_eq!(
        admin.group_control("tasks", "g").await.unwrap().concurrency,
        Some(8)
    );
    let (a2, b2) = (a.clone(), b.clone());
    eventually(
        "eight handlers running in each, without a restart",
        WAIT,
        move || {
            let (a, b) = (only(&a2), only(&b2));
            (a.concurrency, a.in_flight, b.concurrency, b.in_flight) == (8, 8, 8, 8)
        },
    )
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 16);
    let fleet = loop {
        let fleet = admin.fleet().await.unwrap();
        if fleet.len() == 2 && fleet.iter().all(|p| p.subscriptions[0].in_flight == 8) {
            break fleet;
        }
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    };
    for p in &fleet {
        let s = &p.subscriptions[0];
        assert_eq!((s.concurrency, s.configured_concurrency), (8, 2), "{p:?}");
        assert!(s.scalable);
    }
    gate.add_permits(24);
    eventually("the backlog handled", WAIT, || {
        runs.load(Ordering::SeqCst) == 24
    })
    .await;

    admin.scale_group("tasks", "g", None).await.unwrap();
    for w in [&a, &b] {
        let w2 = w.clone();
        eventually("back to its own concurrency", WAIT, move || {
            only(&w2).concurrency == 2
        })
        .await;
        assert_eq!(w.stop().await.unwrap().exit_code(), 0);
    }
}

#[actix_rt::test]
async fn a_list_paused_in_redis_pops_nothing_until_resumed() {
    let redis = RedisServer::start();
    let admin = Admin::connect(&redis.url()).await.unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_list(
            &List::new("jobs"),
            ListOptions::default()
                .with_consumer("l1")
                .with_block(Duration::from_secs(30)),
            move |_: u64| {
                r.fetch_add(1, Ordering::SeqCst);
                async { HandlerResult::Ok(()) }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    admin.pause_list("jobs").await.unwrap();
    let b = broker.clone();
    eventually("the list consumer is paused", WAIT, move || {
        let s = only(&b);
        s.fleet_paused && s.state == SubscriptionState::Paused
    })
    .await;
    let mut c = redis.conn();
    for n in 0..5u64 {
        let _: i64 = redis::cmd("LPUSH")
            .arg("jobs")
            .arg(n.to_string())
            .query(&mut c)
            .unwrap();
    }
    // The pause holds across the fleet watch's next looks.
    let control = loop {
        let fleet = admin.fleet().await.unwrap();
        if let Some(p) = fleet.first() {
            break p.subscriptions[0].clone();
        }
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(control.kind, "list");
    assert!(control.fleet_paused);
    let len: i64 = redis::cmd("LLEN").arg("jobs").query(&mut c).unwrap();
    assert_eq!((len, runs.load(Ordering::SeqCst)), (5, 0));
    admin.resume_list("jobs").await.unwrap();
    eventually("every item handled after the resume", WAIT, || {
        runs.load(Ordering::SeqCst) == 5
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}
