//! TLS to a Redis Cluster: a real three-master cluster that speaks nothing
//! but TLS (clients and cluster bus, [`TlsCluster`]). A broker with the
//! cluster's CA publishes, consumes, dead-letters and stops cleanly (its
//! blocked read interrupted with `CLIENT UNBLOCK` over TLS); a broker without
//! TLS, or with TLS but without the CA, fails `start()` with an error rather
//! than hanging.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rillkit::prelude::*;
use rillkit::{BrokerBuilder, Phase, Tls, Topology};
use serde::{Deserialize, Serialize};
use support::cluster::TlsCluster;
use support::{eventually, pending_count, stream_len};

/// How long a round trip may take before the test fails.
const WAIT: Duration = Duration::from_secs(30);
/// A bound on `start()` calls that must fail, not hang.
const BOUND: Duration = Duration::from_secs(20);
/// Entries published one by one, then as one batch.
const N: u64 = 20;
/// The id of the entry the handler rejects.
const POISON: u64 = 1_000;

#[derive(Debug, Serialize, Deserialize)]
struct Job {
    id: u64,
}

/// Handled ids, with how many times each ran.
type Seen = Arc<Mutex<HashMap<u64, u32>>>;

/// Starts the TLS cluster (for mutual TLS when `mutual`), printing how long
/// that took.
fn start_cluster(mutual: bool) -> TlsCluster {
    let t = Instant::now();
    let cluster = if mutual {
        TlsCluster::start_mutual()
    } else {
        TlsCluster::start()
    };
    eprintln!("TlsCluster::start took {:?}", t.elapsed());
    cluster
}

fn stream() -> Stream {
    Stream::new("orders", "billing")
}

/// `builder` with one subscription on `orders`/`billing` (reads block
/// `block`) whose handler counts each job and rejects [`POISON`] (straight
/// to the dead-letter stream).
fn subscribed(builder: BrokerBuilder, seen: &Seen, block: Duration) -> Broker {
    let seen = seen.clone();
    builder
        .subscribe(
            &stream(),
            ConsumerOptions::default()
                .with_consumer("tls-1")
                .with_block(block),
            move |job: Job| {
                let result = if job.id == POISON {
                    Err(HandlerError::reject(format!("job {} is poison", job.id)))
                } else {
                    *seen.lock().unwrap().entry(job.id).or_default() += 1;
                    Ok(())
                };
                std::future::ready(result)
            },
        )
        .build()
        .expect("valid configuration")
}

/// The `origin_id` of every entry of the dead-letter stream `dlq`.
fn dead_letter_origins(conn: &mut redis::Connection, dlq: &str) -> Vec<String> {
    let rows: Vec<(String, HashMap<String, String>)> = redis::cmd("XRANGE")
        .arg(dlq)
        .arg("-")
        .arg("+")
        .query(conn)
        .expect("XRANGE");
    rows.into_iter()
        .map(|(_, f)| f["origin_id"].clone())
        .collect()
}

/// `INFO <section>`'s `field` as a number, asked over `conn` (0 when
/// missing).
fn info_number(conn: &mut redis::Connection, section: &str, field: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg(section).query(conn).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| {
            // `cmdstat_*` values are `calls=<n>,usec=…`.
            let v = v.trim();
            let v = v.strip_prefix("calls=").unwrap_or(v);
            v.split(',').next()?.parse().ok()
        })
        .unwrap_or(0)
}

/// Starts `broker`, which must fail: returns the error, after checking that
/// it came within `BOUND` and left the broker stopped, and that a stop
/// afterwards is clean.
async fn failed_start(broker: &Broker) -> rillkit::Error {
    let t = Instant::now();
    let result = tokio::time::timeout(BOUND, broker.start())
        .await
        .unwrap_or_else(|_| panic!("start() still running after {BOUND:?}"));
    let err = result.expect_err("start() must fail");
    eprintln!("start() failed after {:?}: {}", t.elapsed(), chain(&err));
    assert_eq!(broker.phase(), Phase::Stopped, "after {err}");
    let outcome = tokio::time::timeout(BOUND, broker.stop())
        .await
        .expect("stop() after a failed start returned in time")
        .expect("stop() after a failed start");
    assert!(outcome.is_clean(), "{outcome:?}");
    err
}

/// `err` followed by each of its sources, for failure messages.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut s = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        s.push_str(" <- ");
        s.push_str(&e.to_string());
        cur = e.source();
    }
    s
}

/// A broker on `cluster` with `tls`: starts; publishes `2 N` jobs (one by
/// one, then as a batch) and a poison one; every job is handled once, the
/// poison one is dead-lettered into `{orders}-dlq` (one copy) and nothing
/// stays pending; then, its read blocked for 60 s on the stream's master, it
/// stops at once (`CLIENT UNBLOCK`, sent there over TLS) with exit code 0.
async fn round_trip(cluster: &TlsCluster, tls: Tls) {
    let topology = Topology::cluster(cluster.seeds());
    let dlq = stream().dlq_for(&topology);
    assert_eq!(dlq, "{orders}-dlq");
    let block = Duration::from_secs(60);
    let seen: Seen = Default::default();
    let broker = subscribed(Broker::with_topology(topology).tls(tls), &seen, block);
    tokio::time::timeout(BOUND, broker.start())
        .await
        .expect("start() returned in time")
        .expect("start() over TLS");
    assert_eq!(broker.phase(), Phase::Running);

    let s = stream();
    for id in 0..N {
        broker
            .publish(&s, &Job { id })
            .await
            .expect("publish over TLS");
    }
    broker
        .publish(&s, &Job { id: POISON })
        .await
        .expect("publish the poison job");
    let ids = broker
        .publish_batch(&s, (N..2 * N).map(|id| Job { id }))
        .await
        .expect("publish_batch over TLS");
    assert_eq!(ids.len() as u64, N);
    eventually(&format!("{} jobs handled", 2 * N), WAIT, || {
        seen.lock().unwrap().len() as u64 == 2 * N
    })
    .await;

    let mut conn = cluster.conn_for_key("orders");
    eventually("the poison job dead-lettered", WAIT, || {
        stream_len(&mut conn, &dlq) >= 1
    })
    .await;
    eventually("nothing pending on the stream's master", WAIT, || {
        pending_count(&mut conn, "orders", "billing") == 0
    })
    .await;
    assert_eq!(stream_len(&mut conn, "orders") as u64, 2 * N + 1);
    let entries: Vec<(String, HashMap<String, String>)> = redis::cmd("XRANGE")
        .arg("orders")
        .arg("-")
        .arg("+")
        .query(&mut conn)
        .expect("XRANGE orders");
    let poison_id = entries
        .into_iter()
        .find(|(_, f)| f["data"] == format!(r#"{{"id":{POISON}}}"#))
        .map(|(id, _)| id)
        .expect("the poison entry is in the stream");
    assert_eq!(
        dead_letter_origins(&mut conn, &dlq),
        vec![poison_id],
        "one dead-letter copy, of the poison entry"
    );

    // The consumer is blocked again, for 60 s, on the stream's master; the
    // stop interrupts it with CLIENT UNBLOCK sent there over TLS.
    eventually("a blocked read on the stream's master", WAIT, || {
        info_number(&mut conn, "clients", "blocked_clients") >= 1
    })
    .await;
    let unblocks_before = info_number(&mut conn, "commandstats", "cmdstat_client|unblock");
    let t0 = Instant::now();
    let outcome = tokio::time::timeout(block, broker.stop())
        .await
        .expect("stop() returned before the read's block ran out")
        .expect("stop()");
    let took = t0.elapsed();
    eprintln!("stop() took {took:?}");
    assert_eq!(outcome.exit_code(), 0, "{outcome:?}");
    assert!(
        took < Duration::from_secs(10),
        "stop took {took:?}: the blocked read was not interrupted"
    );
    assert!(
        info_number(&mut conn, "commandstats", "cmdstat_client|unblock") > unblocks_before,
        "the stream's master got a CLIENT UNBLOCK"
    );
    assert_eq!(broker.phase(), Phase::Stopped);
    assert!(
        seen.lock().unwrap().values().all(|n| *n == 1),
        "each job handled once: {:?}",
        seen.lock().unwrap()
    );
    assert_eq!(pending_count(&mut conn, "orders", "billing"), 0);
}

#[actix_rt::test]
async fn a_broker_with_the_ca_consumes_dead_letters_and_stops_at_once() {
    support::skip_without_tls!();
    support::init_tracing();
    let cluster = start_cluster(false);
    round_trip(&cluster, Tls::new().ca_pem(cluster.ca_pem())).await;
}

#[actix_rt::test]
async fn mutual_tls_with_the_client_certificate_works() {
    support::skip_without_tls!();
    support::init_tracing();
    let cluster = start_cluster(true);
    assert!(cluster.is_mutual());
    round_trip(
        &cluster,
        Tls::new()
            .ca_pem(cluster.ca_pem())
            .client_cert_pem(cluster.client_cert_pem(), cluster.client_key_pem()),
    )
    .await;
}

#[actix_rt::test]
async fn danger_accept_invalid_certs_connects_without_the_ca() {
    support::skip_without_tls!();
    support::init_tracing();
    let cluster = start_cluster(false);
    round_trip(&cluster, Tls::new().danger_accept_invalid_certs()).await;
}

#[actix_rt::test]
async fn a_broker_without_tls_fails_start_against_the_tls_cluster() {
    support::skip_without_tls!();
    support::init_tracing();
    let cluster = start_cluster(false);
    let seen: Seen = Default::default();
    let broker = subscribed(
        Broker::with_topology(Topology::cluster(cluster.seeds())),
        &seen,
        Duration::from_millis(200),
    );
    let err = failed_start(&broker).await;
    assert!(
        !matches!(
            err,
            rillkit::Error::Credentials(_) | rillkit::Error::Permission { .. }
        ),
        "a plain client on a TLS port is not an AUTH or ACL refusal: {err:?}"
    );
    assert!(seen.lock().unwrap().is_empty());
}

#[actix_rt::test]
async fn tls_without_the_ca_fails_start_naming_the_certificate() {
    support::skip_without_tls!();
    support::init_tracing();
    let cluster = start_cluster(false);
    let seen: Seen = Default::default();
    // No CA: the system's trust store, which does not hold the test CA.
    let broker = subscribed(
        Broker::with_topology(Topology::cluster(cluster.seeds())).tls(Tls::new()),
        &seen,
        Duration::from_millis(200),
    );
    let err = failed_start(&broker).await;
    // What an operator reads in the log line (`error = %e`).
    let text = err.to_string().to_lowercase();
    assert!(
        text.contains("certificate"),
        "the error should say the servers' certificate was not trusted: {text:?} \
         (with sources: {})",
        chain(&err)
    );
    // A TLS failure is a configuration problem: neither a lost connection
    // nor worth retrying.
    assert!(
        !err.is_connection() && !err.is_retryable(),
        "a refused certificate is classified as a TLS failure: {}",
        chain(&err)
    );
    assert!(seen.lock().unwrap().is_empty());
}

#[actix_rt::test]
async fn mutual_tls_without_a_client_certificate_fails_start() {
    support::skip_without_tls!();
    support::init_tracing();
    let cluster = start_cluster(true);
    let seen: Seen = Default::default();
    let broker = subscribed(
        Broker::with_topology(Topology::cluster(cluster.seeds()))
            .tls(Tls::new().ca_pem(cluster.ca_pem())),
        &seen,
        Duration::from_millis(200),
    );
    let err = failed_start(&broker).await;
    assert!(
        !matches!(
            err,
            rillkit::Error::Credentials(_) | rillkit::Error::Permission { .. }
        ),
        "a refused handshake is not an AUTH or ACL refusal: {err:?}"
    );
    assert!(seen.lock().unwrap().is_empty());
}
