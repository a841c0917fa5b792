//! A stop requested during startup: signals are watched from the
//! first instruction, so a SIGTERM while Redis is silent or still loading
//! abandons the start with a log line and exit code 0, instead of killing the
//! process by the signal's default action; an in-process `request_stop`
//! during startup abandons it after the hook in progress.

mod support;

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rillkit::prelude::*;
use rillkit::{Error, Stage};
use support::{RedisServer, Worker, eventually, eventually_blocking};

const WAIT: Duration = Duration::from_secs(30);

/// A TCP server that accepts connections and never answers; answers the
/// address and a count of accepted connections.
fn silent_server() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let a = accepted.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().map_while(Result::ok) {
            a.fetch_add(1, Ordering::SeqCst);
            held.push(conn);
        }
    });
    (url, accepted)
}

fn sigterm_during_startup_exits_0_with_a_log_line(worker: &mut Worker) {
    worker.signal("TERM");
    assert_eq!(
        worker.wait_exit(WAIT),
        Some(0),
        "a stop during startup is clean: {:?}",
        worker.log()
    );
    let log = worker.log().join("\n");
    assert!(log.contains("SIGTERM"), "{log}");
    assert!(log.contains("abandon"), "{log}");
}

#[test]
fn sigterm_while_redis_is_silent_abandons_the_start_with_exit_0() {
    let (url, accepted) = silent_server();
    let mut worker = Worker::spawn_starting(&url, &support::worker_env("w1", &[]));
    eventually_blocking("the worker connected", WAIT, || {
        accepted.load(Ordering::SeqCst) > 0
    });
    sigterm_during_startup_exits_0_with_a_log_line(&mut worker);
}

#[test]
fn sigterm_while_redis_is_loading_abandons_the_start_with_exit_0() {
    support::worker_bin(); // built before the load starts
    let redis = RedisServer::start_loading(100_000, 50);
    let mut worker = Worker::spawn_starting(&redis.url(), &support::worker_env("w1", &[]));
    eventually_blocking("the worker waits for the load", WAIT, || {
        worker.log().iter().any(|l| l.contains("not ready yet"))
    });
    assert!(redis.is_loading(), "still loading when the signal comes");
    sigterm_during_startup_exits_0_with_a_log_line(&mut worker);
}

#[actix_rt::test]
async fn a_stop_requested_during_an_on_startup_hook_abandons_the_start_after_it() {
    let redis = RedisServer::start();
    let ran: Arc<std::sync::Mutex<Vec<&str>>> = Default::default();
    let (r1, r2, r3) = (ran.clone(), ran.clone(), ran.clone());
    let broker = Broker::builder(redis.url())
        .on_startup(move |b: Broker| {
            let r = r1.clone();
            async move {
                // The stop arrives while this hook runs; it still finishes.
                b.request_stop();
                r.lock().unwrap().push("first on_startup");
                Ok(())
            }
        })
        .on_startup(move |_| {
            let r = r2.clone();
            async move {
                r.lock().unwrap().push("second on_startup");
                Ok(())
            }
        })
        .after_shutdown(move |_| {
            let r = r3.clone();
            async move {
                r.lock().unwrap().push("after_shutdown");
                Ok(())
            }
        })
        .subscribe(
            &Stream::new("s", "g"),
            ConsumerOptions::default(),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap();
    let err = broker.start().await.unwrap_err();
    assert!(matches!(err, Error::StartAborted), "{err:?}");
    assert_eq!(err.exit_code(), 0);
    assert_eq!(
        *ran.lock().unwrap(),
        vec!["first on_startup", "after_shutdown"],
        "the hook in progress finished, the next was skipped, after_shutdown ran"
    );
    assert_eq!(broker.phase(), Phase::Stopped);
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    assert_eq!(
        redis.command_calls("xgroup|create"),
        0,
        "no Redis work after the stop"
    );
    let _ = Stage::OnStartup;
    eventually("nothing left connected", WAIT, || {
        redis.connected_clients() <= 1
    })
    .await;
}
