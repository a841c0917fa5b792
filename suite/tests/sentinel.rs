//! Connections and server answers under Redis Sentinel: the master is found through the
//! sentinels, and a failover in the middle of a stream moves every connection
//! to the new master while the process stays up.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rillkit::prelude::*;
use rillkit::{Phase, Topology};
use serde::{Deserialize, Serialize};
use support::{SentinelGroup, eventually, pending_count, stream_len};

const WAIT: Duration = Duration::from_secs(60);
const ENTRIES: u64 = 5_000;
const CONCURRENCY: usize = 8;

#[derive(Debug, Serialize, Deserialize)]
struct Job {
    id: u64,
}

/// The `id` of every entry in the stream on `conn`'s server, with how often
/// each occurs (a publish whose reply was lost and that was sent again adds
/// it twice).
fn ids_in_stream(conn: &mut redis::Connection, key: &str) -> HashMap<u64, u32> {
    let rows: Vec<(String, HashMap<String, String>)> = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query(conn)
        .unwrap();
    let mut ids = HashMap::new();
    for (_, fields) in rows {
        let job: Job = serde_json::from_str(&fields["data"]).unwrap();
        *ids.entry(job.id).or_default() += 1;
    }
    ids
}

#[actix_rt::test]
async fn a_failover_mid_stream_loses_no_entry_of_the_master_and_keeps_the_process_up() {
    support::init_tracing();
    let group = Arc::new(SentinelGroup::start("mymaster"));
    let s = Stream::new("orders", "billing");
    // When each id was handled, each time.
    let handled: Arc<Mutex<HashMap<u64, Vec<Instant>>>> = Default::default();
    let h = handled.clone();
    let broker = Broker::with_topology(Topology::sentinel(
        group.master_name(),
        group.sentinel_addrs(),
    ))
    .publish_timeout(Duration::from_secs(1))
    .subscribe(
        &s,
        ConsumerOptions::default()
            .with_consumer("c1")
            .with_concurrency(CONCURRENCY)
            .with_block(Duration::from_millis(200))
            .with_claim_idle(Duration::from_secs(2)),
        move |job: Job| {
            h.lock()
                .unwrap()
                .entry(job.id)
                .or_default()
                .push(Instant::now());
            async { HandlerResult::Ok(()) }
        },
    )
    .build()
    .unwrap();
    broker.start().await.unwrap();

    // Publish 5 000 entries at about 250 a second; the failover starts after
    // the first 1 500 and the producer goes on through it, trying again
    // whatever answers retryable.
    let mut published_at: HashMap<u64, Instant> = HashMap::new();
    let mut refused = 0u32;
    let mut failover: Option<std::thread::JoinHandle<(Instant, Instant)>> = None;
    for id in 1..=ENTRIES {
        if id == 1_500 {
            let g = group.clone();
            failover = Some(std::thread::spawn(move || {
                let t0 = Instant::now();
                g.failover();
                (t0, Instant::now())
            }));
        }
        loop {
            match broker.publish(&s, &Job { id }).await {
                Ok(_) => break,
                Err(e) if e.is_retryable() => {
                    refused += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("publish {id}: not retryable: {e}"),
            }
        }
        published_at.insert(id, Instant::now());
        assert_eq!(broker.phase(), Phase::Running, "the broker stays up");
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let failover = failover.expect("started");
    eventually("the failover finished", WAIT, || failover.is_finished()).await;
    let (switch_began, switch_done) = failover.join().expect("failover thread");

    // Everything the master of the moment holds is handled and acked.
    let mut m = group.conn_to_master();
    let in_stream = ids_in_stream(&mut m, "orders");
    eventually("every entry on the master handled and acked", WAIT, || {
        let h = handled.lock().unwrap();
        in_stream.keys().all(|id| h.contains_key(id))
            && pending_count(&mut m, "orders", "billing") == 0
    })
    .await;
    assert_eq!(stream_len(&mut m, "orders-dlq"), 0, "nothing dead-lettered");
    assert_eq!(broker.phase(), Phase::Running, "the process stays up");

    // Replication is asynchronous: entries added to the old master after the
    // replica was promoted, and before the switch was announced, are gone
    // with it. Only entries published during the switch may be missing.
    let lost: Vec<u64> = (1..=ENTRIES)
        .filter(|id| !in_stream.contains_key(id))
        .collect();
    for id in &lost {
        let t = published_at[id];
        assert!(
            t >= switch_began && t <= switch_done,
            "entry {id} was lost though published outside the failover"
        );
    }
    // Repeated runs: bounded by the entries in flight at the switch plus
    // those handled (and acked on the old master) while it was under way.
    {
        let h = handled.lock().unwrap();
        let repeated: usize = h
            .iter()
            .map(|(id, runs)| {
                runs.len()
                    .saturating_sub(*in_stream.get(id).unwrap_or(&1) as usize)
            })
            .sum();
        let during_switch = h
            .values()
            .filter(|runs| runs[0] >= switch_began && runs[0] <= switch_done)
            .count();
        let bound = during_switch + CONCURRENCY * 2;
        eprintln!(
            "failover took {} ms; publishes refused meanwhile: {refused}; lost (written to the old master after the promotion): {}; repeated runs: {repeated} (bound {bound}: {during_switch} first handled during the switch + in flight)",
            (switch_done - switch_began).as_millis(),
            lost.len()
        );
        assert!(
            repeated <= bound,
            "{repeated} repeated runs, more than {bound}"
        );
    }
    let outcome = broker.stop().await.unwrap();
    assert_eq!(outcome.exit_code(), 0, "{outcome:?}");
}

#[actix_rt::test]
async fn a_master_name_no_sentinel_knows_fails_start_at_once() {
    support::init_tracing();
    let group = SentinelGroup::start("mymaster");
    let broker =
        Broker::with_topology(Topology::sentinel("no-such-master", group.sentinel_addrs()))
            .subscribe(
                &Stream::new("orders", "billing"),
                ConsumerOptions::default(),
                |_: Job| async { HandlerResult::Ok(()) },
            )
            .build()
            .unwrap();
    let t0 = Instant::now();
    let err = broker.start().await.expect_err("no master by that name");
    assert!(
        matches!(err, rillkit::Error::NoMaster { ref master, .. } if master == "no-such-master"),
        "{err:?}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "a wrong name is not waited for like a starting server: {:?}",
        t0.elapsed()
    );
}

/// `ACL SETUSER <args…>` on the server at 127.0.0.1:`port` (a data node or a
/// sentinel: ACL users are per process, never replicated).
fn acl_setuser(port: u16, args: &[&str]) {
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(args)
        .query(&mut c)
        .unwrap();
}

#[actix_rt::test]
async fn credentials_go_to_the_sentinels_and_to_the_master() {
    support::init_tracing();
    let group = SentinelGroup::start("mymaster");
    for node in group.nodes() {
        acl_setuser(
            node.port,
            &["worker", "on", ">master-pass", "~*", "&*", "+@all"],
        );
    }
    for addr in group.sentinel_addrs() {
        let port: u16 = addr.rsplit_once(':').unwrap().1.parse().unwrap();
        acl_setuser(port, &["watcher", "on", ">sentinel-pass", "+@all", "&*"]);
    }
    let s = Stream::new("orders", "billing");
    // (The default users stay open for the sentinels' own monitoring; a
    // wrong password is refused all the same, so these show which
    // credentials go where.)
    let build = |sentinel_password: &str, master_password: &str| {
        Broker::with_topology(
            Topology::sentinel(group.master_name(), group.sentinel_addrs())
                .master_credentials(Some("worker"), master_password)
                .sentinel_credentials(Some("watcher"), sentinel_password),
        )
    };
    for (sentinel_password, master_password) in
        [("not-it", "master-pass"), ("sentinel-pass", "not-it")]
    {
        let wrong = build(sentinel_password, master_password)
            .subscribe(&s, ConsumerOptions::default(), |_: Job| async {
                HandlerResult::Ok(())
            })
            .build()
            .unwrap();
        let err = wrong.start().await.expect_err("a wrong password");
        assert!(
            matches!(err, rillkit::Error::Credentials(_)),
            "refused credentials say so ({sentinel_password}, {master_password}): {err:?}"
        );
    }

    let handled: Arc<Mutex<Vec<u64>>> = Default::default();
    let h = handled.clone();
    let broker = build("sentinel-pass", "master-pass")
        .subscribe(
            &s,
            ConsumerOptions::default().with_block(Duration::from_millis(100)),
            move |job: Job| {
                h.lock().unwrap().push(job.id);
                async { HandlerResult::Ok(()) }
            },
        )
        .build()
        .unwrap();
    broker.start().await.expect("starts with both credentials");
    broker.publish(&s, &Job { id: 7 }).await.unwrap();
    eventually("the entry handled", WAIT, || {
        handled.lock().unwrap().as_slice() == [7]
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

/// Lists and Pub/Sub under a failover: the list consumer and the
/// subscriber follow the master to its new server; items pushed and
/// messages published after the switch are handled, and the process stays up.
#[actix_rt::test]
async fn list_and_channel_subscriptions_follow_a_failover() {
    let group = Arc::new(SentinelGroup::start("mymaster"));
    let jobs = rillkit::List::new("jobs");
    let news = rillkit::Channel::new("news");
    let items: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
    let heard: Arc<Mutex<Vec<u64>>> = Arc::default();
    let (i, h) = (items.clone(), heard.clone());
    let broker = Broker::with_topology(Topology::sentinel(
        group.master_name(),
        group.sentinel_addrs(),
    ))
    .publish_timeout(Duration::from_secs(1))
    .subscribe_list(
        &jobs,
        rillkit::ListOptions::default()
            .with_consumer("c1")
            .with_concurrency(4)
            .with_block(Duration::from_millis(200))
            .with_heartbeat_ttl(Duration::from_secs(2)),
        move |job: Job| {
            *i.lock().unwrap().entry(job.id).or_default() += 1;
            async { HandlerResult::Ok(()) }
        },
    )
    .subscribe_channel(&news, rillkit::ChannelOptions::default(), move |n: u64| {
        h.lock().unwrap().push(n);
        async { HandlerResult::Ok(()) }
    })
    .build()
    .unwrap();
    broker.start().await.unwrap();
    broker
        .publish_list_batch(&jobs, (1..=100).map(|id| Job { id }))
        .await
        .unwrap();
    eventually("the first 100 handled", WAIT, || {
        items.lock().unwrap().len() == 100
    })
    .await;
    let old = group.current_master_port();
    let g = group.clone();
    let failover = std::thread::spawn(move || g.failover());
    eventually("the failover finished", WAIT, || failover.is_finished()).await;
    let new = failover.join().unwrap();
    assert_ne!(old, new);
    // After the switch: pushes and publishes go to the new master (retried
    // while the shared connections move).
    for id in 101..=200u64 {
        loop {
            match broker.publish_list(&jobs, &Job { id }).await {
                Ok(_) => break,
                Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(e) => panic!("push {id}: {e}"),
            }
        }
    }
    eventually("items pushed after the failover handled", WAIT, || {
        (101..=200).all(|id| items.lock().unwrap().contains_key(&id))
    })
    .await;
    eventually("a message published after the failover heard", WAIT, || {
        // Published again until the subscriber, subscribed again on the
        // new master, hears one.
        let mut m = group.conn_to_master();
        let _: i64 = redis::cmd("PUBLISH")
            .arg("news")
            .arg("7")
            .query(&mut m)
            .unwrap();
        heard.lock().unwrap().contains(&7)
    })
    .await;
    let mut m = group.conn_to_master();
    eventually("nothing left on the processing list", WAIT, || {
        redis::cmd("LLEN")
            .arg("{jobs}:rillkit:processing:c1")
            .query::<usize>(&mut m)
            .unwrap()
            == 0
    })
    .await;
    assert_eq!(broker.phase(), Phase::Running, "the process stays up");
    let outcome = broker.stop().await.unwrap();
    assert_eq!(outcome.exit_code(), 0, "{outcome:?}");
}

/// A master killed outright: the shared connections fail and reconnect with
/// backoff while the sentinels still name the dead master; the promotion's
/// announcement ends the backoff at once and they go to the new master.
#[test]
fn a_pool_reconnecting_when_a_promotion_is_announced_goes_to_the_new_master_at_once() {
    let mut group = SentinelGroup::start("killed");
    let spec = format!("killed@{}", group.sentinel_addrs().join(","));
    let mut worker = support::Worker::spawn(
        &group.master().url(),
        &[
            ("RILLKIT_SENTINEL", spec.as_str()),
            ("RILLKIT_STREAM", "jobs"),
            ("RILLKIT_BLOCK_MS", "500"),
            // Renewed every 100 ms: the shared connections meet the dead
            // master at once and start backing off.
            ("RILLKIT_LEASE_TTL_MS", "300"),
        ],
    );
    support::xadd(&mut group.conn_to_master(), "jobs", r#"{"id":1}"#);
    support::eventually_blocking("entry 1 handled", WAIT, || {
        worker.handled().iter().any(|(id, _)| *id == 1)
    });
    let old = group.current_master_port();
    group.kill_master();
    support::eventually_blocking("the replica promoted", WAIT, || {
        group.current_master_port() != old
    });
    support::xadd(&mut group.conn_to_master(), "jobs", r#"{"id":2}"#);
    support::eventually_blocking("entry 2 handled on the new master", WAIT, || {
        worker.handled().iter().any(|(id, _)| *id == 2)
    });
    let log = worker.log();
    assert!(
        log.iter()
            .any(|l| l.contains("a failover was announced; reconnecting to the new master now")),
        "the announcement cut the reconnect backoff short:\n{}",
        log.join("\n")
    );
    worker.signal("TERM");
    assert_eq!(worker.wait_exit(WAIT), Some(0), "{:?}", worker.log());
}
