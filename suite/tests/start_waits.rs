//! What `start()` waits through, up to `startup_timeout`: a server with no
//! free connection slot, a cluster master that died and is being replaced,
//! a slot being migrated. (A refused connection to a standalone server still
//! fails at once: `tests/lifecycle.rs`.)

mod support;

use std::time::Duration;

use rillkit::Topology;
use rillkit::prelude::*;
use support::runs::{Job, Runs, recording};
use support::{RedisCluster, RedisServer, eventually, pending_count};

const WAIT: Duration = Duration::from_secs(60);

fn info_field(conn: &mut redis::Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(conn).ok()?;
    info.lines().find_map(|l| {
        l.strip_prefix(field)?
            .strip_prefix(':')
            .map(|v| v.trim().to_owned())
    })
}

/// Group `ops` on stream `alerts`, with entries 1 to 3.
fn group_with_three_entries(c: &mut redis::Connection) {
    let _: () = redis::cmd("XGROUP")
        .arg(&["CREATE", "alerts", "ops", "0", "MKSTREAM"][..])
        .query(c)
        .unwrap();
    for id in 1..=3 {
        support::xadd(c, "alerts", &format!(r#"{{"id":{id}}}"#));
    }
}

/// Consumer `c1` of `s` on the cluster, recording into `runs`.
fn cluster_consumer(cluster: &RedisCluster, s: &Stream, runs: &Runs) -> Broker {
    Broker::with_topology(Topology::cluster(cluster.seeds()))
        .startup_timeout(Duration::from_secs(60))
        .subscribe(
            s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(Duration::from_millis(500)),
            recording(runs),
        )
        .build()
        .unwrap()
}

/// The 3 entries there before the start are handled, then one published
/// after it, and none twice.
async fn consumes_all_once(broker: &Broker, s: &Stream, runs: &Runs) {
    eventually("the 3 entries handled", WAIT, || runs.ids() == 3).await;
    broker.publish(s, &Job { id: 4 }).await.unwrap();
    eventually("the entry published after start handled", WAIT, || {
        runs.ids() == 4
    })
    .await;
    assert_eq!(runs.reruns(), Vec::<u64>::new());
}

#[actix_rt::test]
async fn start_waits_for_a_free_connection_slot() {
    support::init_tracing();
    // Every slot taken by the test: the server answers each new connection
    // `ERR max number of clients reached` and closes it, and redis-rs may see
    // only the close (a broken pipe, a reset).
    const SLOTS: usize = 6;
    let server = RedisServer::start_with(&["--maxclients", &SLOTS.to_string()]);
    let mut held: Vec<redis::Connection> = Vec::new();
    while held.len() < SLOTS {
        match redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c).map(|_| c))
        {
            Ok(c) => held.push(c),
            Err(e) => panic!("taking slot {} of {SLOTS}: {e}", held.len() + 1),
        }
    }
    let s = Stream::new("jobs", "g");
    let runs = Runs::default();
    let broker = Broker::builder(server.url())
        .startup_timeout(Duration::from_secs(60))
        .subscribe(
            &s,
            ConsumerOptions::default().with_block(Duration::from_millis(200)),
            recording(&runs),
        )
        .build()
        .unwrap();
    let starting = {
        let broker = broker.clone();
        actix_rt::spawn(async move { broker.start().await })
    };
    // The start has been turned away at least twice (it is waiting, not
    // failed), then the slots are given back.
    let mut watcher = held.pop().unwrap();
    eventually("the start turned away twice (or ended)", WAIT, || {
        starting.is_finished()
            || info_field(&mut watcher, "stats", "rejected_connections")
                .and_then(|v| v.parse::<u64>().ok())
                .is_some_and(|n| n >= 2)
    })
    .await;
    assert!(
        !starting.is_finished(),
        "start() gave up while the server had no free slot: {:?}",
        starting.await
    );
    drop(held);
    drop(watcher);
    starting
        .await
        .unwrap()
        .expect("start() waits for a free connection slot");
    broker.publish(&s, &Job { id: 1 }).await.unwrap();
    eventually("the entry handled", WAIT, || runs.ids() == 1).await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

#[actix_rt::test]
async fn start_waits_while_a_dead_cluster_master_is_replaced() {
    support::init_tracing();
    let mut cluster = RedisCluster::start_with_replicas();
    let slot = cluster.slot_of("alerts");
    let master = cluster.owner_of_slot(slot);
    {
        let mut c = cluster.conn_for_key("alerts");
        group_with_three_entries(&mut c);
        // The replica has the entries before its master dies.
        let _: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut c).unwrap();
    }
    cluster.kill_node(master);
    let s = Stream::new("alerts", "ops");
    let runs = Runs::default();
    let broker = cluster_consumer(&cluster, &s, &runs);
    // Started before the other nodes even mark the master failed (5 s):
    // it must wait through the refused connections and the promotion.
    broker
        .start()
        .await
        .expect("start() waits while the cluster replaces a dead master");
    consumes_all_once(&broker, &s, &runs).await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

#[actix_rt::test]
async fn start_during_a_slot_migration_consumes_once_it_settles() {
    support::init_tracing();
    let cluster = RedisCluster::start();
    let slot = cluster.slot_of("alerts");
    let from = cluster.owner_of_slot(slot);
    let to = (from + 1) % 3;
    {
        let mut c = cluster.conn_for_key("alerts");
        group_with_three_entries(&mut c);
    }
    // Half-way: the keys are on the target, the source answers `ASK` for
    // them, and `CLUSTER SLOTS` still names the source.
    let migration = cluster.begin_migration(slot, to);
    assert_eq!(migration.move_keys(&cluster), 1, "the stream moved");
    let s = Stream::new("alerts", "ops");
    let runs = Runs::default();
    let broker = cluster_consumer(&cluster, &s, &runs);
    broker
        .start()
        .await
        .expect("start() works while the slot migrates");
    migration.finish(&cluster);
    consumes_all_once(&broker, &s, &runs).await;
    let mut c = cluster.conn_for_key("alerts");
    eventually("nothing pending", WAIT, || {
        pending_count(&mut c, "alerts", "ops") == 0
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}
