//! The server's limits: an entry larger than the server may send one client
//! is dead-lettered by id, without its body crossing the wire, and the
//! entries around it run.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rillkit::prelude::*;
use serde::{Deserialize, Serialize};
use support::{RedisServer, eventually, pending_count};

const WAIT: Duration = Duration::from_secs(40);

#[derive(Debug, Serialize, Deserialize)]
struct Job {
    id: u64,
}

type Runs = Arc<Mutex<HashMap<u64, u32>>>;

fn recording(
    runs: &Runs,
) -> impl Fn(Job) -> std::future::Ready<HandlerResult> + Send + Sync + use<> {
    let runs = runs.clone();
    move |job: Job| {
        *runs.lock().unwrap().entry(job.id).or_default() += 1;
        std::future::ready(Ok(()))
    }
}

/// The dead letters of `dlq`: (their `origin_id`, their `error`, the size
/// of their `data` field). Read by a script that answers sizes, not bodies:
/// the server would close this connection too for the 2 MB copy.
fn dead_letters(conn: &mut redis::Connection, dlq: &str) -> Vec<(String, String, usize)> {
    redis::cmd("EVAL")
        .arg(
            "local out = {} \
             for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do \
               local f, o, err, n = e[2], '', '', 0 \
               for i = 1, #f, 2 do \
                 if f[i] == 'origin_id' then o = f[i + 1] end \
                 if f[i] == 'error' then err = f[i + 1] end \
                 if f[i] == 'data' then n = #f[i + 1] end \
               end \
               out[#out + 1] = {o, err, n} \
             end \
             return out",
        )
        .arg(1)
        .arg(dlq)
        .query(conn)
        .unwrap()
}

#[actix_rt::test]
async fn an_entry_the_server_cannot_send_is_dead_lettered_by_id_and_its_neighbours_run() {
    support::init_tracing();
    // As some managed services set it: a client whose pending reply passes
    // 1 MB is closed.
    let server = RedisServer::start_with(&["--client-output-buffer-limit", "normal 1mb 512kb 10"]);
    let mut c = server.conn();
    let _: () = redis::cmd("XGROUP")
        .arg(&["CREATE", "jobs", "g", "0", "MKSTREAM"][..])
        .query(&mut c)
        .unwrap();
    for id in 1..=5 {
        support::xadd(&mut c, "jobs", &format!(r#"{{"id":{id}}}"#));
    }
    // 2 MB, built on the server so the test's own request stays small.
    let huge: String = redis::cmd("EVAL")
        .arg(
            "return redis.call('XADD', KEYS[1], '*', 'data', \
             '{\"id\":1000,\"pad\":\"' .. string.rep('x', 2000000) .. '\"}')",
        )
        .arg(1)
        .arg("jobs")
        .query(&mut c)
        .unwrap();
    for id in 6..=20 {
        support::xadd(&mut c, "jobs", &format!(r#"{{"id":{id}}}"#));
    }
    let connections_before: u64 = server
        .info("stats", "total_connections_received")
        .unwrap()
        .parse()
        .unwrap();
    let s = Stream::new("jobs", "g");
    let runs = Runs::default();
    let broker = Broker::builder(server.url())
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_count(10)
                .with_block(Duration::from_millis(500))
                .with_claim_idle(Duration::from_secs(5)),
            recording(&runs),
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    eventually("the 20 small entries handled", WAIT, || {
        let r = runs.lock().unwrap();
        (1..=20).all(|id| r.contains_key(&id))
    })
    .await;
    eventually("the huge entry dead-lettered", WAIT, || {
        dead_letters(&mut c, "jobs-dlq")
            .iter()
            .any(|(origin, _, _)| *origin == huge)
    })
    .await;
    let dlq = dead_letters(&mut c, "jobs-dlq");
    assert_eq!(dlq.len(), 1, "one dead letter, the huge entry: {dlq:?}");
    let (_, error, data_len) = &dlq[0];
    assert!(
        data_len > &2_000_000,
        "the copy keeps the entry's field, copied on the server ({data_len} bytes)"
    );
    assert!(
        error.contains("(2000024 bytes)") && error.contains("client-output-buffer-limit"),
        "the error names the cause and the size: {error}"
    );
    assert!(!runs.lock().unwrap().contains_key(&1000), "never handled");
    let reruns: Vec<u64> = runs
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| *id)
        .collect();
    assert!(reruns.is_empty(), "entries run twice: {reruns:?}");
    eventually("nothing pending", WAIT, || {
        pending_count(&mut c, "jobs", "g") == 0
    })
    .await;
    let connections: u64 = server
        .info("stats", "total_connections_received")
        .unwrap()
        .parse::<u64>()
        .unwrap()
        - connections_before;
    assert!(
        connections <= 15,
        "no reconnect storm: {connections} connections for one dead letter"
    );
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}
