//! A stall is not a death: a Lua script keeps the server `BUSY` for longer
//! than the liveness window while consumer Y runs a long item and consumer X
//! is idle. The server's clock runs meanwhile, so Y's claim (its list
//! heartbeat, its stream entry's idle time) ages past the window with
//! nobody able to renew. Once the script is killed, X must not take Y for
//! dead and run Y's item a second time: X saw the stall, so it waits one
//! window of a responsive server while Y renews.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rillkit::prelude::*;
use serde::{Deserialize, Serialize};
use support::{RedisServer, eventually, eventually_blocking};

const WAIT: Duration = Duration::from_secs(30);
/// How long the script keeps the server busy: over twice the liveness
/// window.
const BUSY: Duration = Duration::from_millis(2_500);
/// Stalls while Y runs its job: after each, X and Y race to the server,
/// and before the fix X won about half the time.
const STALLS: usize = 4;
/// Y's job outlasts the stalls.
const JOB_MS: u64 = 16_000;

#[derive(Debug, Serialize, Deserialize)]
struct Job {
    id: u64,
    sleep_ms: u64,
}

/// Runs of each job, by the consumer that ran it.
type Runs = Arc<Mutex<HashMap<u64, Vec<&'static str>>>>;

async fn run_job(runs: Runs, who: &'static str, job: Job) -> HandlerResult {
    runs.lock().unwrap().entry(job.id).or_default().push(who);
    tokio::time::sleep(Duration::from_millis(job.sleep_ms)).await;
    Ok(())
}

/// Keeps the server busy with a script for `BUSY`, from a thread of its own
/// (the script's client blocks), then kills the script; `STALLS` times,
/// half a second apart.
fn stalls(url: &str) {
    for _ in 0..STALLS {
        stall(url);
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn stall(url: &str) {
    let client = redis::Client::open(url).unwrap();
    let mut busy = client.get_connection().unwrap();
    let script = std::thread::spawn(move || {
        let _ = redis::cmd("EVAL")
            .arg("while true do end")
            .arg(0)
            .query::<redis::Value>(&mut busy);
    });
    let mut killer = client.get_connection().unwrap();
    // The script is running once other clients get BUSY.
    eventually_blocking("the server is busy", WAIT, || {
        redis::cmd("PING")
            .query::<String>(&mut killer)
            .is_err_and(|e| e.code() == Some("BUSY"))
    });
    std::thread::sleep(BUSY);
    eventually_blocking("the script is killed", WAIT, || {
        match redis::cmd("SCRIPT")
            .arg("KILL")
            .query::<String>(&mut killer)
        {
            Ok(_) => true,
            Err(e) => e.code() == Some("NOTBUSY"),
        }
    });
    script.join().unwrap();
}

fn list_broker(redis: &RedisServer, who: &'static str, runs: &Runs) -> Broker {
    let runs = runs.clone();
    Broker::builder(redis.url())
        .shutdown_timeout(Duration::from_secs(10))
        .subscribe_list(
            &List::new("jobs"),
            ListOptions::default()
                .with_consumer(who)
                .with_heartbeat_ttl(Duration::from_secs(1))
                .with_block(Duration::from_millis(200)),
            move |job: Job| run_job(runs.clone(), who, job),
        )
        .build()
        .unwrap()
}

#[actix::test]
async fn a_busy_server_does_not_make_a_list_consumer_take_a_live_one_for_dead() {
    let redis = RedisServer::start_with(&["--busy-reply-threshold", "100"]);
    let mut c = redis.conn();
    let runs: Runs = Arc::default();
    let y = list_broker(&redis, "Y", &runs);
    y.start().await.unwrap();
    let job = serde_json::to_string(&Job {
        id: 1,
        sleep_ms: JOB_MS,
    })
    .unwrap();
    redis::cmd("LPUSH")
        .arg("jobs")
        .arg(&job)
        .query::<()>(&mut c)
        .unwrap();
    eventually("Y runs the long job", WAIT, || {
        runs.lock().unwrap().get(&1).is_some_and(|r| r == &["Y"])
    })
    .await;
    let x = list_broker(&redis, "X", &runs);
    x.start().await.unwrap();

    let url = redis.url();
    tokio::task::spawn_blocking(move || stalls(&url))
        .await
        .unwrap();

    // Y finishes its job and removes it from its processing list; had X
    // taken Y for dead, it would have run the job before then.
    eventually("Y finished the job", WAIT, || {
        redis::cmd("LLEN")
            .arg("{jobs}:rillkit:processing:Y")
            .query::<usize>(&mut c)
            .is_ok_and(|n| n == 0)
    })
    .await;
    assert_eq!(runs.lock().unwrap()[&1], ["Y"], "the long job ran once");
    assert!(x.stop().await.unwrap().is_clean());
    assert!(y.stop().await.unwrap().is_clean());
}

fn stream_broker(redis: &RedisServer, who: &'static str, runs: &Runs) -> Broker {
    let runs = runs.clone();
    Broker::builder(redis.url())
        .shutdown_timeout(Duration::from_secs(10))
        .subscribe(
            &Stream::new("jobs", "workers"),
            ConsumerOptions::default()
                .with_consumer(who)
                .with_claim_idle(Duration::from_secs(1))
                .with_block(Duration::from_millis(200))
                .with_count(1),
            move |job: Job| run_job(runs.clone(), who, job),
        )
        .build()
        .unwrap()
}

#[actix::test]
async fn a_busy_server_does_not_make_a_stream_consumer_claim_a_running_entry() {
    support::init_tracing();
    let redis = RedisServer::start_with(&["--busy-reply-threshold", "100"]);
    let mut c = redis.conn();
    let runs: Runs = Arc::default();
    let y = stream_broker(&redis, "Y", &runs);
    y.start().await.unwrap();
    let job = serde_json::to_string(&Job {
        id: 1,
        sleep_ms: JOB_MS,
    })
    .unwrap();
    redis::cmd("XADD")
        .arg("jobs")
        .arg("*")
        .arg("data")
        .arg(&job)
        .query::<String>(&mut c)
        .unwrap();
    eventually("Y runs the long entry", WAIT, || {
        runs.lock().unwrap().get(&1).is_some_and(|r| r == &["Y"])
    })
    .await;
    let x = stream_broker(&redis, "X", &runs);
    x.start().await.unwrap();

    let url = redis.url();
    tokio::task::spawn_blocking(move || stalls(&url))
        .await
        .unwrap();

    // Y acks the entry once its handler is done; had X claimed it, X would
    // have run it before then.
    eventually("Y acked the entry", WAIT, || {
        redis::cmd("XPENDING")
            .arg("jobs")
            .arg("workers")
            .query::<redis::Value>(&mut c)
            .is_ok_and(|v| matches!(v, redis::Value::Array(ref a) if a.first() == Some(&redis::Value::Int(0))))
    })
    .await;
    assert_eq!(runs.lock().unwrap()[&1], ["Y"], "the long entry ran once");
    assert!(x.stop().await.unwrap().is_clean());
    assert!(y.stop().await.unwrap().is_clean());
}
