//! The server's limits: an entry larger than the server may send one client
//! is read in pieces and handled, or, when even a piece is too large,
//! dead-lettered by id without its body crossing the wire; the entries
//! around it run meanwhile.

mod support;

use std::sync::Arc;
use std::time::Duration;

use rillkit::prelude::*;
use support::runs::{Job, Runs, recording};
use support::{RedisServer, eventually, pending_count};

const WAIT: Duration = Duration::from_secs(40);

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
        || runs.all((1..=20).chain([1000])),
    )
    .await;
    assert_eq!(runs.reruns(), Vec::<u64>::new(), "entries run twice");
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
    eventually("the 20 small entries handled", WAIT, || runs.all(1..=20)).await;
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
    assert_eq!(runs.of(1000), 0, "never handled");
    assert_eq!(runs.reruns(), Vec::<u64>::new(), "entries run twice");
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

/// A list consumer that records its runs and holds item `hold` until
/// `release` is set.
fn list_consumer(
    server: &RedisServer,
    name: &str,
    runs: &Runs,
    hold: u64,
    release: &Arc<std::sync::atomic::AtomicBool>,
) -> Broker {
    let (runs, release) = (runs.clone(), release.clone());
    Broker::builder(server.url())
        .subscribe_list(
            &List::new("jobs"),
            ListOptions::default()
                .with_consumer(name)
                .with_block(Duration::from_millis(200))
                .with_heartbeat_ttl(Duration::from_millis(600)),
            move |job: Job| {
                runs.record(job.id);
                let release = release.clone();
                async move {
                    while job.id == hold && !release.load(std::sync::atomic::Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap()
}

const HEARTBEAT_A: &str = "{jobs}:rillkit:heartbeat:A";

fn get(c: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(c).unwrap()
}

#[actix_rt::test]
async fn a_list_consumers_liveness_survives_eviction_and_a_lost_record() {
    support::init_tracing();
    // Users pick a volatile-* policy believing keys without a TTL are safe;
    // volatile-ttl evicts the nearest expiry first.
    let server = RedisServer::start_with(&[
        "--maxmemory",
        "8mb",
        "--maxmemory-policy",
        "volatile-ttl",
        "--maxmemory-samples",
        "10",
    ]);
    let mut c = server.conn();
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (runs_a, runs_b) = (Runs::default(), Runs::default());
    let a = list_consumer(&server, "A", &runs_a, 1, &release);
    let b = list_consumer(&server, "B", &runs_b, 1, &release);
    a.start().await.unwrap();
    a.publish_list(&List::new("jobs"), &Job { id: 1 })
        .await
        .unwrap();
    eventually("A runs item 1", WAIT, || runs_a.of(1) > 0).await;
    b.start().await.unwrap();

    // Cache writes with long TTLs push the server over maxmemory: it evicts
    // keys with a TTL, nearest expiry first.
    let url = server.url();
    let flood = std::thread::spawn(move || {
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        let value = vec![b'x'; 100_000];
        for i in 0..400 {
            let _: redis::RedisResult<()> = redis::cmd("SET")
                .arg(format!("cache:{i}"))
                .arg(&value)
                .arg("EX")
                .arg(86_400)
                .query(&mut c);
        }
    });
    eventually("the flood written", WAIT, || flood.is_finished()).await;
    let evicted: u64 = server
        .info("stats", "evicted_keys")
        .unwrap()
        .parse()
        .unwrap();
    assert!(evicted > 0, "the server evicted keys");
    assert!(
        get(&mut c, HEARTBEAT_A).is_some_and(|r| !r.starts_with('?')),
        "A's heartbeat record is not a key eviction may take"
    );

    // A record lost all the same (allkeys-* eviction, a hand): B's recovery
    // gives A a window instead of taking it for dead, and A's next beat
    // takes its record back.
    let _: () = redis::cmd("DEL").arg(HEARTBEAT_A).query(&mut c).unwrap();
    eventually("A's record back, by A", WAIT, || {
        get(&mut c, HEARTBEAT_A).is_some_and(|r| !r.starts_with('?'))
    })
    .await;
    // Two more windows of B's recoveries.
    let rounds = server.command_calls("evalsha") + 20;
    eventually("B ran its recovery again", WAIT, || {
        server.command_calls("evalsha") >= rounds
    })
    .await;
    release.store(true, std::sync::atomic::Ordering::SeqCst);
    eventually("item 1 done", WAIT, || {
        redis::cmd("LLEN")
            .arg("{jobs}:rillkit:processing:A")
            .query::<usize>(&mut c)
            .unwrap()
            == 0
    })
    .await;
    assert_eq!(runs_a.of(1), 1);
    assert_eq!(runs_b.of(1), 0, "B never took the live A for dead");

    // A consumer registered with no record that never beats (it died, and
    // its record is gone) is recovered after one window.
    let _: () = redis::cmd("SADD")
        .arg("{jobs}:rillkit:consumers")
        .arg("ghost")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("LPUSH")
        .arg("{jobs}:rillkit:processing:ghost")
        .arg(r#"{"id":7}"#)
        .query(&mut c)
        .unwrap();
    eventually("the ghost's item recovered and run", WAIT, || {
        runs_a.of(7) + runs_b.of(7) > 0
    })
    .await;
    assert_eq!(
        get(&mut c, "{jobs}:rillkit:heartbeat:ghost"),
        None,
        "its placeholder is gone with it"
    );
    assert_eq!(a.stop().await.unwrap().exit_code(), 0);
    assert_eq!(b.stop().await.unwrap().exit_code(), 0);
}

#[actix_rt::test]
async fn a_list_item_larger_than_a_reply_may_be_is_read_in_pieces_and_handled() {
    support::init_tracing();
    let server = RedisServer::start_with(&["--client-output-buffer-limit", "normal 1mb 512kb 10"]);
    let mut c = server.conn();
    let push_large = |c: &mut redis::Connection, id: u64| {
        let _: i64 = redis::cmd("EVAL")
            .arg(
                "return redis.call('LPUSH', KEYS[1], \
                 '{\"id\":' .. ARGV[1] .. ',\"pad\":\"' .. string.rep('x', 2000000) .. '\"}')",
            )
            .arg(1)
            .arg("jobs")
            .arg(id)
            .query(c)
            .unwrap();
    };
    let push = |c: &mut redis::Connection, id: u64| {
        let _: i64 = redis::cmd("LPUSH")
            .arg("jobs")
            .arg(format!(r#"{{"id":{id}}}"#))
            .query(c)
            .unwrap();
    };
    // A busy list: the pop script answers the large item's length, and the
    // consumer reads it in pieces.
    for id in 1..=5 {
        push(&mut c, id);
    }
    push_large(&mut c, 1000);
    for id in 6..=10 {
        push(&mut c, id);
    }
    let runs = Runs::default();
    let release = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let broker = list_consumer(&server, "A", &runs, 0, &release);
    broker.start().await.unwrap();
    eventually("the busy list's items handled", WAIT, || {
        runs.all((1..=10).chain([1000]))
    })
    .await;
    // An empty list: `BLMOVE` hands the large item over whole, the server
    // drops the connection, and the item goes back to be popped in pieces.
    let before = connections(&server);
    push_large(&mut c, 2000);
    push(&mut c, 11);
    eventually("the item pushed onto the empty list handled", WAIT, || {
        runs.all([2000, 11])
    })
    .await;
    assert_eq!(runs.reruns(), Vec::<u64>::new(), "items run twice");
    // The item's LREM follows its handler's end: awaited, not assumed.
    eventually("the processing list emptied", WAIT, || {
        let processing: usize = redis::cmd("LLEN")
            .arg("{jobs}:rillkit:processing:A")
            .query(&mut c)
            .unwrap();
        processing == 0
    })
    .await;
    let opened = connections(&server) - before;
    assert!(opened <= 5, "no reconnect storm: {opened} connections");
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}
