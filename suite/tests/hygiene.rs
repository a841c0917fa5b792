//! Consumer hygiene: the consumer name's lease — a
//! second live process under a name is held off and never runs the first
//! one's entries; a successor after a crash waits at most one TTL; a clean
//! stop hands the name over at once; a consumer whose lease is taken stops
//! reading — and pruning the group's idle empty consumers, from a
//! subscription and from `Admin`.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rillkit::admin::Admin;
use rillkit::prelude::*;
use rillkit::{Error, Status, SubscriptionState};
use support::{RedisServer, Worker, consumers, eventually, eventually_blocking, xadd};

const WAIT: Duration = Duration::from_secs(30);
const LEASE: &str = "rillkit:lease:tasks:workers:w1";

fn lease_holder(c: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(c).unwrap()
}

#[test]
fn a_second_process_under_a_live_name_is_held_off_and_never_runs_the_first_ones_entries() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let env = support::worker_env("w1", &[("RILLKIT_LEASE_TTL_MS", "2000")]);
    let first = Worker::spawn(&redis.url(), &env);
    // The first worker holds entries: one running (3 s), the rest fetched
    // or pending under its name.
    for id in 1..=3 {
        xadd(
            &mut c,
            "tasks",
            &format!(r#"{{"id":{id},"sleep_ms":3000}}"#),
        );
    }
    eventually_blocking("the first worker holds an entry", WAIT, || {
        support::pending_count(&mut c, "tasks", "workers") >= 1
    });
    let holder = lease_holder(&mut c, LEASE).expect("the first worker holds the lease");
    assert!(
        holder.contains(&format!("-{}-", first.pid())),
        "the lease names its holder's pid: {holder}"
    );

    // A second process under the same name waits for the lease, then fails
    // at its startup deadline with exit code 1 and a clear log line.
    let mut second = Worker::spawn_starting(
        &redis.url(),
        &support::worker_env(
            "w1",
            &[
                ("RILLKIT_LEASE_TTL_MS", "2000"),
                ("RILLKIT_STARTUP_TIMEOUT_MS", "2500"),
            ],
        ),
    );
    assert_eq!(second.wait_exit(WAIT), Some(1), "{:?}", second.log());
    let log = second.log().join("\n");
    assert!(
        log.contains("another live process holds this consumer name"),
        "{log}"
    );
    assert!(log.contains("is in use by another live process"), "{log}");
    assert!(log.contains(&holder), "the error names the holder: {log}");
    assert!(
        second.handled().is_empty(),
        "the second process ran none of the first one's entries: {:?}",
        second.lines()
    );

    // The first one goes on undisturbed and handles each entry once.
    eventually_blocking("the first worker handled all three", WAIT, || {
        first.handled().len() == 3
    });
    assert_eq!(
        first.handled(),
        vec![(1, 1), (2, 1), (3, 1)],
        "each once, first delivery"
    );
    assert_eq!(lease_holder(&mut c, LEASE), Some(holder));
}

#[test]
fn a_successor_after_a_crash_waits_at_most_one_ttl_and_resumes_the_pending_entries() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let env = support::worker_env("w1", &[("RILLKIT_LEASE_TTL_MS", "3000")]);
    let mut first = Worker::spawn(&redis.url(), &env);
    xadd(&mut c, "tasks", r#"{"id":1,"sleep_ms":1500}"#);
    eventually_blocking("the first worker runs it", WAIT, || {
        support::pending_count(&mut c, "tasks", "workers") == 1
    });
    first.signal("KILL");
    assert_eq!(first.wait_exit(WAIT), None, "killed");
    assert!(
        lease_holder(&mut c, LEASE).is_some(),
        "a crash leaves the lease until its TTL"
    );

    // The successor under the same name waits for the lease to lapse (at
    // most one TTL), then runs the entry the crash left in its PEL.
    xadd(&mut c, "tasks", r#"{"id":2}"#);
    let successor = Worker::spawn_starting(&redis.url(), &env);
    eventually_blocking(
        "the successor resumed its name's pending entry",
        WAIT,
        || successor.handled().len() == 2,
    );
    assert_eq!(
        successor.handled(),
        vec![(1, 2), (2, 1)],
        "the crashed run's entry first (its second delivery), then the new one"
    );
    let log = successor.log().join("\n");
    assert!(
        log.contains("another live process holds this consumer name"),
        "{log}"
    );
    assert!(log.contains("it is ours now"), "{log}");
    let holder = lease_holder(&mut c, LEASE).unwrap();
    assert!(
        holder.contains(&format!("-{}-", successor.pid())),
        "{holder}"
    );
}

/// A process paused past its lease (SIGSTOP: a frozen VM, a long GC in a
/// sidecar) finds, when it resumes, entries its blocked read received
/// meanwhile; by then another process holds the name and runs them. The
/// paused one starts none of them: its lease is not surely its own, so it
/// asks first, learns it is taken, and drains.
#[test]
fn a_process_paused_past_its_lease_starts_nothing_when_it_resumes() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let env = support::worker_env("w1", &[("RILLKIT_LEASE_TTL_MS", "1000")]);
    let first = Worker::spawn(&redis.url(), &env);
    first.signal("STOP");
    for id in 1..=3 {
        xadd(&mut c, "tasks", &format!(r#"{{"id":{id}}}"#));
    }
    eventually_blocking("the paused worker's lease lapses", WAIT, || {
        lease_holder(&mut c, LEASE).is_none()
    });
    let second = Worker::spawn(&redis.url(), &env);
    eventually_blocking("the successor holds the name", WAIT, || {
        lease_holder(&mut c, LEASE).is_some_and(|h| h.contains(&format!("-{}-", second.pid())))
    });
    first.signal("CONT");
    eventually_blocking("the successor ran all three", WAIT, || {
        second.handled().len() == 3
    });
    eventually_blocking("the resumed worker gave up the name", WAIT, || {
        first
            .log()
            .iter()
            .any(|l| l.contains("was taken by another process"))
    });
    assert!(
        first.handled().is_empty(),
        "the resumed worker ran nothing: {:?}",
        first.lines()
    );
    assert_eq!(support::pending_count(&mut c, "tasks", "workers"), 0);
}

#[test]
fn a_clean_stop_drops_the_lease_so_a_successor_starts_at_once() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    // A TTL far beyond the test's deadline: only the drop lets the next in.
    let env = support::worker_env("w1", &[("RILLKIT_LEASE_TTL_MS", "600000")]);
    let mut first = Worker::spawn(&redis.url(), &env);
    assert!(lease_holder(&mut c, LEASE).is_some());
    first.signal("TERM");
    assert_eq!(first.wait_exit(WAIT), Some(0));
    let log = first.log().join("\n");
    assert!(
        log.contains("signal received; draining") && !log.contains("during startup"),
        "a signal after the start is told as such: {log}"
    );
    assert_eq!(lease_holder(&mut c, LEASE), None, "dropped on a clean stop");
    let next = Worker::spawn(&redis.url(), &env);
    assert!(
        !next
            .log()
            .iter()
            .any(|l| l.contains("another live process")),
        "{:?}",
        next.log()
    );
    xadd(&mut c, "tasks", r#"{"id":7}"#);
    eventually_blocking("the successor handles", WAIT, || {
        next.handled() == vec![(7, 1)]
    });
}

/// A consumer that could not renew its lease and finds it taken by another
/// process (here: set by hand) reads nothing more, drains, and waits for the
/// lease again; once it lapses it takes it and reads again.
#[actix_rt::test]
async fn a_consumer_whose_lease_is_taken_stops_reading_until_it_is_free_again() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let s = Stream::new("s", "g");
    let handled = Arc::new(AtomicUsize::new(0));
    let h = handled.clone();
    let broker = Broker::builder(redis.url())
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(Duration::from_millis(100))
                .with_lease_ttl(Duration::from_millis(600)),
            move |_: u64| {
                h.fetch_add(1, Ordering::SeqCst);
                async { HandlerResult::Ok(()) }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let key = "rillkit:lease:s:g:c1";
    broker.publish(&s, &1u64).await.unwrap();
    eventually("the first entry is handled", WAIT, || {
        handled.load(Ordering::SeqCst) == 1
    })
    .await;

    // Another process takes the name (as if this one had been cut off for
    // longer than the TTL).
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("elsewhere-1-0")
        .arg("PX")
        .arg(3_000)
        .query(&mut c)
        .unwrap();
    let not_running = |st: &Status| {
        st.subscriptions.iter().all(|sub| {
            matches!(
                sub.state,
                SubscriptionState::Restarting { .. } | SubscriptionState::Starting
            )
        })
    };
    eventually("the consumer ended and waits for its name", WAIT, || {
        not_running(&broker.status())
    })
    .await;
    // While the other holds it, nothing is read.
    broker.publish(&s, &2u64).await.unwrap();
    eventually("the other holder's lease lapses", WAIT, || {
        let elsewhere = lease_holder(&mut c, key).as_deref() == Some("elsewhere-1-0");
        if elsewhere {
            assert_eq!(handled.load(Ordering::SeqCst), 1, "nothing runs meanwhile");
        }
        !elsewhere
    })
    .await;
    eventually("the consumer took its name back and read on", WAIT, || {
        handled.load(Ordering::SeqCst) == 2
    })
    .await;
    assert!(lease_holder(&mut c, key).is_some_and(|h| h.contains(&std::process::id().to_string())));
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    assert_eq!(lease_holder(&mut c, key), None);
}

#[actix_rt::test]
async fn a_start_under_a_name_held_elsewhere_fails_at_the_deadline_naming_the_holder() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let _: () = redis::cmd("SET")
        .arg("rillkit:lease:s:g:c1")
        .arg("other-host-42-00ff")
        .arg("PX")
        .arg(60_000)
        .query(&mut c)
        .unwrap();
    let broker = Broker::builder(redis.url())
        .startup_timeout(Duration::from_millis(500))
        .subscribe(
            &Stream::new("s", "g"),
            ConsumerOptions::default().with_consumer("c1"),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap();
    let err = broker.start().await.unwrap_err();
    match &err {
        Error::ConsumerNameInUse {
            consumer,
            holder,
            waited,
            ..
        } => {
            assert_eq!(consumer, "c1");
            assert_eq!(holder, "other-host-42-00ff");
            assert!(*waited >= Duration::from_millis(400), "{waited:?}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(err.exit_code(), 1);
    assert_eq!(
        redis.command_calls("xreadgroup"),
        1,
        "only the startup's ACL probe, which reads nothing"
    );
}

#[actix_rt::test]
async fn without_lease_no_key_is_written() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let broker = Broker::builder(redis.url())
        .subscribe(
            &Stream::new("s", "g"),
            ConsumerOptions::default()
                .with_consumer("c1")
                .without_lease(),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("rillkit:*").query(&mut c).unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

/// Ghost consumers — left by processes killed without a clean stop — are
/// deleted once idle past the TTL when they hold nothing; one holding an
/// entry stays, and so does the live consumer itself.
#[actix_rt::test]
async fn prune_idle_deletes_idle_empty_consumers_and_spares_those_holding_entries() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    support::create_group(&mut c, "s", "g", "$");
    let read = |c: &mut redis::Connection, consumer: &str| {
        let _: redis::Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg("g")
            .arg(consumer)
            .arg("COUNT")
            .arg(1)
            .arg("STREAMS")
            .arg("s")
            .arg(">")
            .query(c)
            .unwrap();
    };
    let _: i64 = redis::cmd("XGROUP")
        .arg("CREATECONSUMER")
        .arg("s")
        .arg("g")
        .arg("ghost-empty")
        .query(&mut c)
        .unwrap();
    xadd(&mut c, "s", "1");
    read(&mut c, "ghost-holding");
    assert_eq!(
        consumers(&mut c, "s", "g"),
        vec![("ghost-empty".into(), 0), ("ghost-holding".into(), 1)]
    );

    let broker = Broker::builder(redis.url())
        .subscribe(
            &Stream::new("s", "g"),
            ConsumerOptions::default()
                .with_consumer("live")
                .with_block(Duration::from_millis(100))
                // Long enough that the ghost's entry is not reclaimed here.
                .with_claim_idle(Duration::from_secs(600))
                .with_prune_idle(Duration::from_secs(1)),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    eventually("the empty ghost is pruned", WAIT, || {
        // `live` itself is listed once a read created it (Redis 7.0 creates
        // a consumer only when a read delivers something).
        let mut v = consumers(&mut c, "s", "g");
        v.retain(|(name, _)| name != "live");
        v == vec![("ghost-holding".into(), 1)]
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);

    // The same script from Admin: nothing idle long enough, then the rest.
    let _: i64 = redis::cmd("XGROUP")
        .arg("CREATECONSUMER")
        .arg("s")
        .arg("g")
        .arg("ghost-2")
        .query(&mut c)
        .unwrap();
    let admin = Admin::connect(&redis.url()).await.unwrap();
    let pruned = admin
        .prune_idle_consumers("s", "g", Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(pruned.is_empty(), "{pruned:?}");
    let idle_ms = |c: &mut redis::Connection, name: &str| -> u64 {
        let rows: Vec<Vec<redis::Value>> = redis::cmd("XINFO")
            .arg("CONSUMERS")
            .arg("s")
            .arg("g")
            .query(c)
            .unwrap();
        rows.iter()
            .find(|r| redis::from_redis_value_ref::<String>(&r[1]).unwrap() == name)
            .map(|r| redis::from_redis_value_ref(&r[5]).unwrap())
            .unwrap()
    };
    eventually("ghost-2 idle for more than 5 ms", WAIT, || {
        idle_ms(&mut c, "ghost-2") > 5
    })
    .await;
    let pruned = admin
        .prune_idle_consumers("s", "g", Duration::from_millis(5))
        .await
        .unwrap();
    assert_eq!(pruned, vec!["ghost-2".to_owned()]);
    assert_eq!(
        consumers(&mut c, "s", "g"),
        vec![("ghost-holding".into(), 1)],
        "a consumer holding an entry is never pruned"
    );
}

/// Before Redis 7.2 a read that finds nothing does not reset a consumer's
/// `idle`, so live consumers waiting on a quiet stream look as idle as dead
/// ones. The prune spares every consumer whose name's lease a live process
/// holds: here two live consumers, in the group from their start, outlive
/// the prune that deletes a ghost created after them, from the loop and
/// from `Admin` alike.
#[actix_rt::test]
async fn prune_idle_spares_live_consumers_waiting_on_a_quiet_stream() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    support::create_group(&mut c, "s", "g", "$");
    let create = |c: &mut redis::Connection, name: &str| {
        let _: i64 = redis::cmd("XGROUP")
            .arg("CREATECONSUMER")
            .arg("s")
            .arg("g")
            .arg(name)
            .query(c)
            .unwrap();
    };
    let start = |name: &'static str| {
        Broker::builder(redis.url())
            .subscribe(
                &Stream::new("s", "g"),
                ConsumerOptions::default()
                    .with_consumer(name)
                    .with_block(Duration::from_millis(200))
                    .with_prune_idle(Duration::from_secs(1)),
                |_: u64| async { HandlerResult::Ok(()) },
            )
            .build()
            .unwrap()
    };
    let (a, b) = (start("live-a"), start("live-b"));
    a.start().await.unwrap();
    b.start().await.unwrap();
    // A started consumer is in the group at once, though no read delivered
    // anything (before Redis 7.2 an empty read does not create it).
    eventually("the live consumers are in the group", WAIT, || {
        consumers(&mut c, "s", "g").len() == 2
    })
    .await;
    // Created after the live ones: once it is pruned, they were idle longer.
    create(&mut c, "ghost");
    eventually("the ghost is pruned", WAIT, || {
        !consumers(&mut c, "s", "g")
            .iter()
            .any(|(name, _)| name == "ghost")
    })
    .await;
    let names = |c: &mut redis::Connection| -> Vec<String> {
        consumers(c, "s", "g").into_iter().map(|(n, _)| n).collect()
    };
    assert_eq!(names(&mut c), ["live-a", "live-b"], "the live ones stay");
    let admin = Admin::connect(&redis.url()).await.unwrap();
    let pruned = admin
        .prune_idle_consumers("s", "g", Duration::from_millis(5))
        .await
        .unwrap();
    assert!(pruned.is_empty(), "{pruned:?}");
    assert_eq!(names(&mut c), ["live-a", "live-b"]);
    assert!(a.stop().await.unwrap().is_clean());
    assert!(b.stop().await.unwrap().is_clean());
}

#[test]
fn prune_idle_below_three_blocks_is_refused_at_build() {
    let err = Broker::builder("redis://127.0.0.1:1")
        .subscribe(
            &Stream::new("s", "g"),
            ConsumerOptions::default()
                .with_block(Duration::from_secs(5))
                .with_prune_idle(Duration::from_secs(10)),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("prune_idle"), "{err}");
    assert!(err.to_string().contains("15000 ms"), "{err}");
    let err = Broker::builder("redis://127.0.0.1:1")
        .subscribe(
            &Stream::new("s", "g"),
            ConsumerOptions::default().with_lease_ttl(Duration::from_millis(10)),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("lease_ttl"), "{err}");
}
