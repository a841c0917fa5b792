//! The lifecycle: hook order, the startup PING, group creation, the four hook-error
//! rules, stop() idempotence, publish before start and after stop.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rillkit::prelude::*;
use rillkit::{BoxError, Error, Phase, Stage};
use support::{RedisServer, eventually};

type Log = Arc<Mutex<Vec<String>>>;

fn push(log: &Log, s: impl Into<String>) {
    log.lock().unwrap().push(s.into());
}

fn fast() -> ConsumerOptions {
    ConsumerOptions::default().with_block(Duration::from_millis(100))
}

/// A hook that records `what` in `log`, then fails with `fail` if given.
fn record(
    log: &Log,
    what: &'static str,
    fail: Option<&'static str>,
) -> impl Fn(Broker) -> std::future::Ready<Result<(), BoxError>> + Send + Sync + 'static {
    let log = log.clone();
    move |_| {
        push(&log, what);
        std::future::ready(fail.map_or(Ok(()), |m| Err(m.into())))
    }
}

#[actix_rt::test]
async fn hooks_run_in_order_around_redis_work() {
    support::init_tracing();
    let redis = RedisServer::start();
    let log: Log = Arc::default();
    let s = Stream::new("tasks", "g");
    let handled = Arc::new(AtomicUsize::new(0));
    let url = redis.url();
    let (l1, l2, l3, l4, l5, l6) = (
        log.clone(),
        log.clone(),
        log.clone(),
        log.clone(),
        log.clone(),
        log.clone(),
    );
    let h = handled.clone();
    let broker = Broker::builder(redis.url())
        .on_startup(move |b: Broker| {
            let l = l1.clone();
            async move {
                // Before any Redis I/O: nothing is connected yet.
                assert_eq!(b.phase(), Phase::Starting);
                assert!(matches!(b.ping().await, Err(Error::NotStarted)));
                push(&l, "on_startup 1");
                Ok(())
            }
        })
        .on_startup(move |_| {
            let l = l2.clone();
            async move {
                push(&l, "on_startup 2");
                Ok(())
            }
        })
        .after_startup(move |b: Broker| {
            let l = l3.clone();
            let url = url.clone();
            async move {
                // Groups exist, consumers run.
                let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
                let groups: Vec<redis::Value> = redis::cmd("XINFO")
                    .arg("GROUPS")
                    .arg("tasks")
                    .query(&mut c)
                    .unwrap();
                assert_eq!(groups.len(), 1);
                assert_eq!(b.phase(), Phase::Running);
                push(&l, "after_startup");
                Ok(())
            }
        })
        .on_shutdown(move |b: Broker| {
            let l = l4.clone();
            let h = h.clone();
            async move {
                // Consumers are done; the connection still answers.
                assert_eq!(h.load(Ordering::SeqCst), 3);
                b.ping().await.expect("on_shutdown: PING works");
                assert_eq!(b.phase(), Phase::Draining);
                push(&l, "on_shutdown");
                Ok(())
            }
        })
        .after_shutdown(move |b: Broker| {
            let l = l5.clone();
            async move {
                assert!(matches!(b.ping().await, Err(Error::ShutDown)));
                assert_eq!(b.phase(), Phase::Stopped);
                push(&l, "after_shutdown");
                Ok(())
            }
        })
        .subscribe(&s, fast(), move |_: serde_json::Value| {
            let l = l6.clone();
            let h = handled.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                h.fetch_add(1, Ordering::SeqCst);
                push(&l, "handled");
                HandlerResult::Ok(())
            }
        })
        .build()
        .unwrap();
    assert_eq!(broker.phase(), Phase::Configured);
    broker.start().await.unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        ["on_startup 1", "on_startup 2", "after_startup"]
    );
    broker.publish_batch(&s, [1, 2, 3]).await.unwrap();
    eventually("3 handled", Duration::from_secs(10), || {
        log.lock().unwrap().len() == 6
    })
    .await;
    let outcome = broker.stop().await.unwrap();
    assert!(outcome.is_clean());
    assert_eq!(
        *log.lock().unwrap(),
        [
            "on_startup 1",
            "on_startup 2",
            "after_startup",
            "handled",
            "handled",
            "handled",
            "on_shutdown",
            "after_shutdown"
        ]
    );
}

#[actix_rt::test]
async fn on_startup_failure_stops_everything_and_opens_no_connection() {
    let redis = RedisServer::start();
    let log: Log = Arc::default();
    let broker = Broker::builder(redis.url())
        .on_startup(record(&log, "on_startup 1", Some("no database")))
        .on_startup(record(&log, "on_startup 2", None))
        .after_startup(record(&log, "after_startup", None))
        .on_shutdown(record(&log, "on_shutdown", None))
        .after_shutdown(record(&log, "after_shutdown", None))
        .subscribe(&Stream::new("tasks", "g"), fast(), |_: u64| async {
            HandlerResult::Ok(())
        })
        .build()
        .unwrap();
    let err = broker.start().await.unwrap_err();
    match &err {
        Error::Hook(f) => {
            assert_eq!(f.failures.len(), 1);
            assert_eq!(f.failures[0].stage, Stage::OnStartup);
            assert_eq!(f.failures[0].index, 0);
            assert!(f.failures[0].to_string().contains("no database"));
        }
        other => panic!("expected a hook error, got {other:?}"),
    }
    assert_eq!(err.exit_code(), 1);
    assert_eq!(*log.lock().unwrap(), ["on_startup 1"]);
    assert_eq!(broker.phase(), Phase::Stopped);
    // No Redis I/O happened: the stream was never created and only the
    // asking connection is there.
    let exists: bool = redis::cmd("EXISTS")
        .arg("tasks")
        .query(&mut redis.conn())
        .unwrap();
    assert!(!exists);
    assert_eq!(redis.connected_clients(), 1);
    // stop() after a failed start is fine and runs nothing.
    assert!(broker.stop().await.unwrap().is_clean());
    assert_eq!(log.lock().unwrap().len(), 1);
}

#[actix_rt::test]
async fn after_startup_failure_runs_shutdown_path_without_on_shutdown() {
    let redis = RedisServer::start();
    let log: Log = Arc::default();
    let broker = Broker::builder(redis.url())
        .after_startup(record(&log, "after_startup 1", Some("warm-up failed")))
        .after_startup(record(&log, "after_startup 2", None))
        .on_shutdown(record(&log, "on_shutdown", None))
        .after_shutdown(record(&log, "after_shutdown", None))
        .subscribe(&Stream::new("tasks", "g"), fast(), |_: u64| async {
            HandlerResult::Ok(())
        })
        .build()
        .unwrap();
    let err = broker.start().await.unwrap_err();
    let Error::Hook(f) = &err else {
        panic!("expected a hook error, got {err:?}")
    };
    assert_eq!(f.failures.len(), 1);
    assert_eq!(f.failures[0].stage, Stage::AfterStartup);
    assert!(err.to_string().contains("warm-up failed"));
    assert_eq!(*log.lock().unwrap(), ["after_startup 1", "after_shutdown"]);
    assert_eq!(broker.phase(), Phase::Stopped);
    let s = Stream::new("tasks", "g");
    assert!(matches!(broker.publish(&s, &1).await, Err(Error::ShutDown)));
}

#[actix_rt::test]
async fn every_after_shutdown_hook_runs_and_failures_are_reported_together() {
    let redis = RedisServer::start();
    let log: Log = Arc::default();
    let broker = Broker::builder(redis.url())
        .after_shutdown(record(&log, "first", Some("first failed")))
        .after_shutdown(record(&log, "second", None))
        .after_shutdown(record(&log, "third", Some("third failed")))
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let err = broker.stop().await.unwrap_err();
    assert_eq!(*log.lock().unwrap(), ["first", "second", "third"]);
    let Error::Hook(f) = &err else {
        panic!("expected a hook error, got {err:?}")
    };
    let idx: Vec<usize> = f.failures.iter().map(|e| e.index).collect();
    assert_eq!(idx, [0, 2]);
    assert!(f.outcome.unwrap().is_clean());
    assert!(err.to_string().contains("first failed") && err.to_string().contains("third failed"));
    assert_eq!(err.exit_code(), 1);
    // Every caller learns of the failures, not just the first.
    let again = broker.stop().await.unwrap_err();
    assert!(matches!(&again, Error::Hook(f) if f.failures.len() == 2));
}

#[actix_rt::test]
async fn a_panicking_hook_is_a_failed_hook_and_stop_still_finishes() {
    let redis = RedisServer::start();
    let log: Log = Arc::default();
    let broker = Broker::builder(redis.url())
        .on_shutdown(|_| async { panic!("hook bug") })
        .after_shutdown(record(&log, "after_shutdown", None))
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), broker.stop())
        .await
        .expect("stop() must not hang on a panicking hook")
        .unwrap_err();
    assert!(err.to_string().contains("hook panicked: hook bug"), "{err}");
    assert_eq!(*log.lock().unwrap(), ["after_shutdown"]);
    assert_eq!(broker.phase(), Phase::Stopped);
}

#[actix_rt::test]
async fn stop_from_within_a_hook_requests_the_stop_instead_of_deadlocking() {
    let redis = RedisServer::start();
    let answer: Arc<Mutex<Option<String>>> = Arc::default();
    let a = answer.clone();
    let broker = Broker::builder(redis.url())
        .after_startup(move |b: Broker| {
            let a = a.clone();
            async move {
                let r = b.stop().await;
                *a.lock().unwrap() = Some(format!("{r:?}"));
                Ok(())
            }
        })
        .build()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), broker.start())
        .await
        .expect("start() must not deadlock")
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), broker.stop())
        .await
        .expect("the requested stop completes")
        .unwrap();
    assert!(outcome.is_clean());
    assert!(
        answer
            .lock()
            .unwrap()
            .as_deref()
            .unwrap()
            .contains("StopFromWithin")
    );
}

#[actix_rt::test]
async fn on_shutdown_failure_still_closes_and_runs_after_shutdown() {
    let redis = RedisServer::start();
    let log: Log = Arc::default();
    let broker = Broker::builder(redis.url())
        .on_shutdown(record(&log, "on_shutdown 1", Some("flush failed")))
        .on_shutdown(record(&log, "on_shutdown 2", None))
        .after_shutdown(record(&log, "after_shutdown", None))
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let err = broker.stop().await.unwrap_err();
    let Error::Hook(f) = &err else {
        panic!("expected a hook error, got {err:?}")
    };
    assert_eq!(f.failures[0].stage, Stage::OnShutdown);
    assert_eq!(*log.lock().unwrap(), ["on_shutdown 1", "after_shutdown"]);
    assert_eq!(broker.phase(), Phase::Stopped);
}

#[actix_rt::test]
async fn unreachable_redis_fails_start_at_once_with_a_connection_error() {
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let after = Arc::new(AtomicUsize::new(0));
    let a = after.clone();
    let broker = Broker::builder(format!("redis://127.0.0.1:{port}"))
        .after_startup(move |_| {
            a.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        })
        .subscribe(&Stream::new("tasks", "g"), fast(), |_: u64| async {
            HandlerResult::Ok(())
        })
        .build()
        .unwrap();
    let res = tokio::time::timeout(Duration::from_secs(10), broker.start())
        .await
        .expect("start() must not retry an unreachable server");
    let err = res.unwrap_err();
    assert!(matches!(err, Error::Connect(_)), "got {err:?}");
    assert!(err.is_connection() && err.is_retryable());
    assert_eq!(after.load(Ordering::SeqCst), 0);
    assert_eq!(broker.phase(), Phase::Stopped);
}

/// A port where an HTTP server listens, not Redis: `start()` fails at once
/// with `Error::NotRedis`, naming the address and the first line it sent.
#[actix_rt::test]
async fn a_port_that_is_not_redis_fails_start_naming_what_answered() {
    let port = support::http_server();
    let broker = Broker::builder(format!("redis://127.0.0.1:{port}"))
        .subscribe(&Stream::new("tasks", "g"), fast(), |_: u64| async {
            HandlerResult::Ok(())
        })
        .build()
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), broker.start())
        .await
        .expect("start() must not wait for a server that is not Redis")
        .unwrap_err();
    let Error::NotRedis { addr, sent } = &err else {
        panic!("expected Error::NotRedis, got {err:?}")
    };
    assert_eq!(addr, &format!("127.0.0.1:{port}"));
    assert_eq!(sent.as_deref(), Some("HTTP/1.1 400 Bad Request"));
    let text = err.to_string();
    assert!(
        !text.contains('\n') && text.ends_with("is the port a Redis port?"),
        "{text}"
    );
    assert_eq!(broker.phase(), Phase::Stopped);
}

#[test]
fn a_database_the_server_refuses_is_not_called_unreachable() {
    let redis = RedisServer::start();
    let mut w = support::Worker::spawn_starting(
        &format!("{}/99", redis.url()),
        &support::worker_env("w1", &[]),
    );
    assert_eq!(w.wait_exit(Duration::from_secs(30)), Some(1));
    let log = w.log().join("\n");
    assert!(
        log.contains("redis refused the connection's setup; start failed")
            && log.contains("DB index is out of range")
            && !log.contains("unreachable"),
        "the server answered: it refused the database, naming it:\n{log}"
    );
}

#[actix_rt::test]
async fn busygroup_is_fine_and_a_wrong_key_type_fails_group_creation() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("s")
        .arg("g")
        .arg("0")
        .arg("MKSTREAM")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("not-a-stream")
        .arg("x")
        .query(&mut c)
        .unwrap();
    let ok = Broker::builder(redis.url())
        .subscribe(&Stream::new("s", "g"), fast(), |_: u64| async {
            HandlerResult::Ok(())
        })
        .build()
        .unwrap();
    ok.start().await.expect("an existing group is fine");
    assert!(ok.stop().await.unwrap().is_clean());

    let bad = Broker::builder(redis.url())
        .subscribe(&Stream::new("not-a-stream", "g"), fast(), |_: u64| async {
            HandlerResult::Ok(())
        })
        .build()
        .unwrap();
    let err = bad.start().await.unwrap_err();
    assert!(matches!(err, Error::GroupCreate { .. }), "got {err:?}");
    assert_eq!(bad.phase(), Phase::Stopped);
}

#[actix_rt::test]
async fn stop_is_idempotent_and_works_from_another_thread() {
    let redis = RedisServer::start();
    let shutdowns = Arc::new(AtomicUsize::new(0));
    let (s1, s2) = (shutdowns.clone(), shutdowns.clone());
    let broker = Broker::builder(redis.url())
        .on_shutdown(move |_| {
            s1.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        })
        .after_shutdown(move |_| {
            s2.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        })
        .subscribe(
            &Stream::new("tasks", "g"),
            ConsumerOptions::default(),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    // From a plain OS thread, with no runtime of its own.
    let b = broker.clone();
    let thread = std::thread::spawn(move || futures::executor::block_on(b.stop()));
    let (here, again) = futures::join!(broker.stop(), broker.stop());
    let there = tokio::task::spawn_blocking(move || thread.join().unwrap())
        .await
        .unwrap();
    for r in [here, again, there] {
        assert!(r.unwrap().is_clean());
    }
    assert!(broker.stop().await.unwrap().is_clean());
    assert_eq!(
        shutdowns.load(Ordering::SeqCst),
        2,
        "each shutdown hook ran exactly once"
    );
}

#[actix_rt::test]
async fn publish_before_start_and_after_stop() {
    let redis = RedisServer::start();
    let s = Stream::new("s", "g");
    let broker = Broker::builder(redis.url()).build().unwrap();
    assert!(matches!(
        broker.publish(&s, &1).await,
        Err(Error::NotStarted)
    ));
    broker.start().await.unwrap();
    assert!(matches!(broker.start().await, Err(Error::AlreadyStarted)));
    broker.publish(&s, &1).await.unwrap();
    assert!(broker.stop().await.unwrap().is_clean());
    assert!(matches!(broker.publish(&s, &2).await, Err(Error::ShutDown)));
    assert!(matches!(
        broker.publish_batch(&s, [3, 4]).await,
        Err(Error::ShutDown)
    ));
    assert!(matches!(broker.start().await, Err(Error::ShutDown)));
    assert_eq!(support::stream_len(&mut redis.conn(), "s"), 1);
}

#[actix_rt::test]
async fn stop_before_start_finishes_the_broker() {
    let broker = Broker::builder("redis://127.0.0.1:1").build().unwrap();
    assert!(broker.stop().await.unwrap().is_clean());
    assert_eq!(broker.phase(), Phase::Stopped);
    assert!(matches!(broker.start().await, Err(Error::ShutDown)));
}

#[actix_rt::test]
async fn stop_interrupts_a_blocked_read_and_closes_connections() {
    let redis = RedisServer::start();
    let broker = Broker::builder(redis.url())
        .pool_size(2)
        .subscribe(
            &Stream::new("idle", "g"),
            // A block far longer than the test's patience.
            ConsumerOptions::default().with_block(Duration::from_secs(60)),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    // 2 shared + 1 read connection + the asking one.
    eventually("read connection open", Duration::from_secs(10), || {
        redis.connected_clients() == 4
    })
    .await;
    eventually(
        "consumer blocked in XREADGROUP",
        Duration::from_secs(10),
        || redis.blocked_clients() == 1,
    )
    .await;
    let outcome = tokio::time::timeout(Duration::from_secs(10), broker.stop())
        .await
        .expect("stop must not wait for a 60 s block")
        .unwrap();
    assert!(outcome.is_clean());
    eventually("connections closed", Duration::from_secs(10), || {
        redis.connected_clients() == 1
    })
    .await;
}

#[test]
fn invalid_configuration_is_rejected_by_build() {
    use rillkit::ConfigError;
    let s = Stream::new("s", "g");
    let err = Broker::builder("not a url").build().unwrap_err();
    assert!(matches!(err, ConfigError::Url(_)));
    let err = Broker::builder("redis://127.0.0.1")
        .subscribe(
            &s,
            ConsumerOptions::default().with_count(0),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Invalid {
                option: "count",
                ..
            }
        ),
        "{err:?}"
    );
    let err = Broker::builder("redis://127.0.0.1")
        .subscribe(
            &s,
            ConsumerOptions::default().with_consumer("c"),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .subscribe(
            &s,
            ConsumerOptions::default().with_consumer("c"),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap_err();
    assert!(
        matches!(err, ConfigError::DuplicateConsumer { .. }),
        "{err:?}"
    );
    let err = Broker::builder("redis://127.0.0.1")
        .pool_size(0)
        .build()
        .unwrap_err();
    assert!(matches!(
        err,
        ConfigError::Invalid {
            option: "pool_size",
            ..
        }
    ));
}

/// Each bad value is refused by `build()` naming the option and the bound,
/// instead of failing later (an overflow panic in a restart loop, a
/// dead-letter loop, publishes that vanish, a group with no name).
#[test]
fn build_names_the_option_and_the_bound_of_each_bad_value() {
    use rillkit::ConfigError;
    fn build_with(s: &Stream, o: ConsumerOptions) -> ConfigError {
        Broker::builder("redis://127.0.0.1")
            .subscribe(s, o, |_: u64| async { HandlerResult::Ok(()) })
            .build()
            .unwrap_err()
    }
    let s = Stream::new("orders", "billing");
    let d = ConsumerOptions::default;
    let cases: Vec<(ConfigError, &str, &str)> = vec![
        (
            build_with(&s, d().with_block(Duration::from_secs(u64::MAX))),
            "block",
            "at most 24 h",
        ),
        (
            build_with(&s, d().with_claim_idle(Duration::MAX)),
            "claim_idle",
            "at most 365 days",
        ),
        (
            build_with(&s.clone().with_dlq_name("orders"), d()),
            "dlq_name",
            "not be the stream itself",
        ),
        (
            build_with(&s.clone().with_max_len(0), d()),
            "max_len",
            "at least 1 entry",
        ),
        (
            build_with(&Stream::new("", "billing"), d()),
            "name",
            "empty",
        ),
        (
            build_with(&Stream::new("orders", ""), d()),
            "group",
            "empty",
        ),
        (
            Broker::builder("redis://127.0.0.1")
                .shutdown_timeout(Duration::MAX)
                .build()
                .unwrap_err(),
            "shutdown_timeout",
            "365 days",
        ),
        (
            Broker::builder("redis://127.0.0.1")
                .connect_timeout(Duration::ZERO)
                .build()
                .unwrap_err(),
            "connect_timeout",
            "at least 1 ms",
        ),
        (
            Broker::builder("redis://127.0.0.1")
                .response_timeout(Duration::MAX)
                .build()
                .unwrap_err(),
            "response_timeout",
            "365 days",
        ),
    ];
    for (err, option, bound) in cases {
        match &err {
            ConfigError::Invalid {
                option: o, reason, ..
            } => {
                assert_eq!(*o, option, "{err}");
                assert!(reason.contains(bound), "{option}: {err}");
            }
            other => panic!("{option}: expected Invalid, got {other:?}"),
        }
        assert_eq!(err.exit_code(), 78);
        assert_eq!(Error::from(err).exit_code(), 78);
    }
    for (url, says) in [
        ("localhost:6379", "scheme"),
        ("http://localhost", "\"http\""),
        ("redis://localhost:99999", "port"),
        ("redis://localhost/orders", "database number"),
    ] {
        match Broker::builder(url).build().unwrap_err() {
            ConfigError::Url(m) => assert!(m.contains(says), "{url}: {m}"),
            other => panic!("{url}: {other:?}"),
        }
    }
}

#[actix_rt::test]
async fn publishing_to_a_stream_capped_at_zero_is_refused_not_lost() {
    let redis = RedisServer::start();
    let broker = Broker::builder(redis.url()).build().unwrap();
    broker.start().await.unwrap();
    let err = broker
        .publish(&Stream::new("events", "g").with_max_len(0), &1u64)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
    assert!(
        broker
            .publish(&Stream::new("events", "g").with_max_len(1), &1u64)
            .await
            .is_ok()
    );
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

#[actix_rt::test]
async fn the_connect_timeout_is_an_option() {
    // A server that accepts connections and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", listener.local_addr().unwrap());
    let broker = Broker::builder(url)
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let t0 = std::time::Instant::now();
    let err = broker.start().await.unwrap_err();
    let took = t0.elapsed();
    assert!(err.is_connection(), "{err:?}");
    // Well under the 5 s default: the option took effect.
    assert!(took < Duration::from_secs(4), "start failed after {took:?}");
    drop(listener);
}

/// Consumer hygiene: a worker restarted under a fresh default name
/// (`<group>-<hostname>-<pid>`) does not leave its old name behind; a
/// consumer that still holds pending entries is never deleted.
#[actix_rt::test]
async fn a_clean_stop_leaves_the_group_unless_entries_are_pending() {
    fn consumers(c: &mut redis::Connection) -> Vec<String> {
        support::consumers(c, "s", "g")
            .into_iter()
            .map(|(name, _)| name)
            .collect()
    }
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let s = Stream::new("s", "g");
    for i in 0..5u64 {
        let handled = Arc::new(AtomicUsize::new(0));
        let h = handled.clone();
        let broker = Broker::builder(redis.url())
            .subscribe(
                &s,
                ConsumerOptions::default()
                    .with_consumer(format!("w-{i}"))
                    .with_block(Duration::from_millis(50)),
                move |_: u64| {
                    h.fetch_add(1, Ordering::SeqCst);
                    async { HandlerResult::Ok(()) }
                },
            )
            .build()
            .unwrap();
        broker.start().await.unwrap();
        broker.publish(&s, &i).await.unwrap();
        eventually("handled and acked", Duration::from_secs(10), || {
            handled.load(Ordering::SeqCst) == 1 && support::pending_count(&mut c, "s", "g") == 0
        })
        .await;
        assert_eq!(consumers(&mut c), vec![format!("w-{i}")]);
        assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    }
    assert!(
        consumers(&mut c).is_empty(),
        "5 clean cycles left nobody behind"
    );

    // A consumer whose handler is abandoned at the drain deadline keeps its
    // pending entry, and stays.
    let broker = Broker::builder(redis.url())
        .shutdown_timeout(Duration::from_millis(100))
        .subscribe(
            &s,
            ConsumerOptions::default().with_consumer("slow"),
            |_: u64| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                HandlerResult::Ok(())
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish(&s, &99u64).await.unwrap();
    eventually("the slow handler holds it", Duration::from_secs(10), || {
        support::pending_count(&mut c, "s", "g") == 1
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 3);
    assert_eq!(
        consumers(&mut c),
        vec!["slow".to_owned()],
        "it holds an entry"
    );
}
