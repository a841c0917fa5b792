//! The server's limits: an entry larger than the server may send one client
//! is read in pieces and handled, or, when even a piece is too large,
//! dead-lettered by id without its body crossing the wire; the entries
//! around it run meanwhile.

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

/// A server that closes a client whose pending reply passes `limit`, with
/// a group `g` on `jobs` holding 5 small entries, one of `pad` bytes built on
/// the server (so the test's own request stays small), and 15 small ones.
/// Answers the server and the large entry's id.
fn server_with_a_large_entry(limit: &str, pad: usize) -> (RedisServer, String) {
    let server = RedisServer::start_with(&["--client-output-buffer-limit", limit]);
    let mut c = server.conn();
    let _: () = redis::cmd("XGROUP")
        .arg(&["CREATE", "jobs", "g", "0", "MKSTREAM"][..])
        .query(&mut c)
        .unwrap();
    for id in 1..=5 {
        support::xadd(&mut c, "jobs", &format!(r#"{{"id":{id}}}"#));
    }
    let large: String = redis::cmd("EVAL")
        .arg(
            "return redis.call('XADD', KEYS[1], '*', 'data', \
             '{\"id\":1000,\"pad\":\"' .. string.rep('x', ARGV[1]) .. '\"}')",
        )
        .arg(1)
        .arg("jobs")
        .arg(pad)
        .query(&mut c)
        .unwrap();
    for id in 6..=20 {
        support::xadd(&mut c, "jobs", &format!(r#"{{"id":{id}}}"#));
    }
    (server, large)
}

fn connections(server: &RedisServer) -> u64 {
    server
        .info("stats", "total_connections_received")
        .unwrap()
        .parse()
        .unwrap()
}

fn consumer(server: &RedisServer, runs: &Runs, max_failed_sends: u32) -> Broker {
    Broker::builder(server.url())
        .subscribe(
            &Stream::new("jobs", "g"),
            ConsumerOptions::default()
                .with_count(10)
                .with_block(Duration::from_millis(500))
                .with_claim_idle(Duration::from_secs(5))
                .with_max_failed_sends(max_failed_sends),
            recording(runs),
        )
        .build()
        .unwrap()
}

fn reruns(runs: &Runs) -> Vec<u64> {
    runs.lock()
        .unwrap()
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| *id)
        .collect()
}

#[actix_rt::test]
async fn an_entry_larger_than_a_reply_may_be_is_read_in_pieces_and_handled() {
    support::init_tracing();
    // As some managed services set it: a client whose pending reply passes
    // 1 MB is closed. The entry is 2 MB.
    let (server, _) = server_with_a_large_entry("normal 1mb 512kb 10", 2_000_000);
    let before = connections(&server);
    let runs = Runs::default();
    let broker = consumer(&server, &runs, 3);
    broker.start().await.unwrap();
    eventually(
        "the 20 small entries and the large one handled",
        WAIT,
        || {
            let r = runs.lock().unwrap();
            (1..=20).chain([1000]).all(|id| r.contains_key(&id))
        },
    )
    .await;
    assert_eq!(reruns(&runs), Vec::<u64>::new(), "entries run twice");
    let mut c = server.conn();
    eventually("nothing pending", WAIT, || {
        pending_count(&mut c, "jobs", "g") == 0
    })
    .await;
    assert!(
        dead_letters(&mut c, "jobs-dlq").is_empty(),
        "nothing dead-lettered"
    );
    let opened = connections(&server) - before;
    assert!(
        opened <= 12,
        "no reconnect storm: {opened} connections for one large entry"
    );
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

#[actix_rt::test]
async fn an_entry_even_a_piece_of_which_is_too_large_is_dead_lettered_by_id() {
    support::init_tracing();
    // Smaller than one piece (128 KiB): the entry cannot be read at all.
    let (server, large) = server_with_a_large_entry("normal 64kb 32kb 10", 300_000);
    let before = connections(&server);
    let runs = Runs::default();
    let broker = consumer(&server, &runs, 3);
    broker.start().await.unwrap();
    eventually("the 20 small entries handled", WAIT, || {
        let r = runs.lock().unwrap();
        (1..=20).all(|id| r.contains_key(&id))
    })
    .await;
    let mut c = server.conn();
    eventually("the large entry dead-lettered", WAIT, || {
        !dead_letters(&mut c, "jobs-dlq").is_empty()
    })
    .await;
    let dlq = dead_letters(&mut c, "jobs-dlq");
    assert_eq!(dlq.len(), 1, "one dead letter: {dlq:?}");
    let (origin, error, data_len) = &dlq[0];
    assert_eq!(origin, &large);
    assert!(
        *data_len > 300_000,
        "the copy keeps the entry's field, copied on the server ({data_len} bytes)"
    );
    assert!(
        error.contains("(300024 bytes)") && error.contains("client-output-buffer-limit"),
        "the error names the cause and the size: {error}"
    );
    assert!(!runs.lock().unwrap().contains_key(&1000), "never handled");
    assert_eq!(reruns(&runs), Vec::<u64>::new(), "entries run twice");
    eventually("nothing pending", WAIT, || {
        pending_count(&mut c, "jobs", "g") == 0
    })
    .await;
    let opened = connections(&server) - before;
    assert!(
        opened <= 15,
        "no reconnect storm: {opened} connections for one dead letter"
    );
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}
