//! Redis Cluster: streams on different nodes consumed by one
//! broker, a slot migration in the middle of a stream, dead letters that stay
//! one copy while their slot migrates, and a stop that interrupts a blocked
//! read on the node that holds it.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rillkit::prelude::*;
use rillkit::{ConfigError, Topology};
use serde::{Deserialize, Serialize};
use support::{RedisCluster, eventually, pending_count, stream_len};

const WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Serialize, Deserialize)]
struct Job {
    id: u64,
    #[serde(default)]
    poison: bool,
}

type Seen = Arc<Mutex<HashMap<u64, u32>>>;

fn topology(cluster: &RedisCluster) -> Topology {
    Topology::cluster(cluster.seeds())
}

/// Stream names whose slots are owned by `n` different masters.
fn streams_on_distinct_nodes(cluster: &RedisCluster, n: usize) -> Vec<String> {
    let mut by_owner: HashMap<usize, String> = HashMap::new();
    for i in 0.. {
        let name = format!("orders-{i}");
        let owner = cluster.owner_of_slot(cluster.slot_of(&name));
        by_owner.entry(owner).or_insert(name);
        if by_owner.len() == n {
            break;
        }
    }
    by_owner.into_values().collect()
}

/// Counts each handled id; fails (retry, then dead letter) a poison job.
fn counting(
    seen: &Seen,
) -> impl Fn(Job) -> std::future::Ready<HandlerResult> + Send + Sync + Clone + use<> {
    let seen = seen.clone();
    move |job: Job| {
        if job.poison {
            return std::future::ready(Err(HandlerError::retry(format!(
                "job {} is poison",
                job.id
            ))));
        }
        *seen.lock().unwrap().entry(job.id).or_default() += 1;
        std::future::ready(Ok(()))
    }
}

fn dead_letter_origins(conn: &mut redis::Connection, dlq: &str) -> Vec<String> {
    let rows: Vec<(String, HashMap<String, String>)> = redis::cmd("XRANGE")
        .arg(dlq)
        .arg("-")
        .arg("+")
        .query(conn)
        .unwrap();
    rows.into_iter()
        .map(|(_, f)| f["origin_id"].clone())
        .collect()
}

#[test]
fn a_dead_letter_name_in_another_slot_fails_the_build_naming_the_fix() {
    let cluster = Topology::cluster(["127.0.0.1:1"]);
    let bad = Stream::new("orders", "billing").with_dlq_name("orders-dlq");
    let e = Broker::with_topology(cluster.clone())
        .subscribe(&bad, ConsumerOptions::default(), |_: Job| async {
            HandlerResult::Ok(())
        })
        .build()
        .expect_err("orders and orders-dlq hash to different slots");
    match &e {
        ConfigError::Invalid { option, reason, .. } => {
            assert_eq!(*option, "dlq_name");
            assert!(reason.contains("{orders}-dlq"), "{reason}");
        }
        other => panic!("unexpected {other:?}"),
    }
    // The default, and a name sharing the tag, build.
    let ok = Stream::new("orders", "billing");
    assert_eq!(ok.dlq_for(&cluster), "{orders}-dlq");
    let tagged = Stream::new("{orders}", "billing").with_dlq_name("{orders}:dead");
    Broker::with_topology(cluster)
        .subscribe(&ok, ConsumerOptions::default(), |_: Job| async {
            HandlerResult::Ok(())
        })
        .subscribe(&tagged, ConsumerOptions::default(), |_: Job| async {
            HandlerResult::Ok(())
        })
        .build()
        .expect("same slots");
}

#[actix_rt::test]
async fn streams_on_three_masters_are_consumed_by_one_broker() {
    support::init_tracing();
    let cluster = RedisCluster::start();
    let names = streams_on_distinct_nodes(&cluster, 3);
    let seen: Seen = Default::default();
    let mut builder = Broker::with_topology(topology(&cluster));
    let streams: Vec<Stream> = names.iter().map(|n| Stream::new(n, "billing")).collect();
    for s in &streams {
        builder = builder.subscribe(
            s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(Duration::from_millis(500)),
            counting(&seen),
        );
    }
    let broker = builder.build().unwrap();
    broker.start().await.unwrap();

    // Batch publishes are pipelined to the stream's node; ids are unique
    // across streams.
    for (k, s) in streams.iter().enumerate() {
        let jobs: Vec<Job> = (0..300)
            .map(|i| Job {
                id: (k * 1000 + i) as u64,
                poison: false,
            })
            .collect();
        broker.publish_batch(s, &jobs).await.unwrap();
        broker
            .publish(
                s,
                &Job {
                    id: (k * 1000 + 999) as u64,
                    poison: false,
                },
            )
            .await
            .unwrap();
    }
    eventually("903 entries handled", WAIT, || {
        seen.lock().unwrap().len() == 903
    })
    .await;
    let outcome = broker.stop().await.unwrap();
    assert_eq!(outcome.exit_code(), 0);
    for name in &names {
        let mut conn = cluster.conn_for_key(name);
        assert_eq!(stream_len(&mut conn, name), 301, "{name} on its own node");
        assert_eq!(pending_count(&mut conn, name, "billing"), 0, "{name} acked");
    }
    assert!(seen.lock().unwrap().values().all(|n| *n == 1));
}

#[actix_rt::test]
async fn a_slot_migration_mid_stream_loses_nothing_and_repeats_only_entries_in_flight() {
    support::init_tracing();
    const ENTRIES: u64 = 5_000;
    const COUNT: usize = 50;
    let cluster = Arc::new(RedisCluster::start());
    let s = Stream::new("orders", "billing");
    let dlq = s.dlq_for(&topology(&cluster));
    let slot = cluster.slot_of("orders");
    assert_eq!(slot, cluster.slot_of(&dlq));
    let from = cluster.owner_of_slot(slot);
    let to = (from + 1) % 3;

    let seen: Seen = Default::default();
    let slow = seen.clone();
    let broker = Broker::with_topology(topology(&cluster))
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_count(COUNT)
                .with_concurrency(4)
                .with_block(Duration::from_millis(500)),
            move |job: Job| {
                *slow.lock().unwrap().entry(job.id).or_default() += 1;
                async {
                    // About 2 000 entries a second: the migration lands
                    // mid-stream.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    // A dead letter beforehand, so the dead-letter stream exists and moves
    // with the slot.
    let mut conn = cluster.conn_for_key("orders");
    let _: String = redis::cmd("XADD")
        .arg(&dlq)
        .arg("*")
        .arg("data")
        .arg("{}")
        .query(&mut conn)
        .unwrap();

    // The first half published up front; the second while the slot moves.
    let first: Vec<Job> = (0..ENTRIES / 2)
        .map(|id| Job { id, poison: false })
        .collect();
    for chunk in first.chunks(500) {
        broker.publish_batch(&s, chunk).await.unwrap();
    }
    eventually("a fifth handled", WAIT, || {
        seen.lock().unwrap().len() as u64 >= ENTRIES / 5
    })
    .await;

    let mover = {
        let cluster = cluster.clone();
        std::thread::spawn(move || {
            let m = cluster.begin_migration(slot, to);
            let moved = m.move_keys(&cluster);
            m.finish(&cluster);
            moved
        })
    };
    for id in ENTRIES / 2..ENTRIES {
        // Through the migration: ASK and MOVED are followed, never an error.
        broker
            .publish(&s, &Job { id, poison: false })
            .await
            .unwrap();
    }
    let moved_keys = mover.join().unwrap();
    // The stream and its dead-letter stream, and the lease of the process
    // that moves the stream's scheduled entries while it holds it.
    assert!(
        (2..=3).contains(&moved_keys),
        "{moved_keys} keys moved: the stream, its dead-letter stream (and the due-mover's lease)"
    );
    assert_eq!(cluster.owner_of_slot(slot), to);

    eventually("every entry handled", WAIT, || {
        seen.lock().unwrap().len() as u64 == ENTRIES
    })
    .await;
    let mut conn = cluster.conn_for_key("orders");
    eventually("every entry acked on the new owner", WAIT, || {
        pending_count(&mut conn, "orders", "billing") == 0
    })
    .await;
    assert_eq!(broker.phase(), rillkit::Phase::Running, "the process is up");
    let outcome = broker.stop().await.unwrap();
    assert_eq!(outcome.exit_code(), 0);

    assert_eq!(stream_len(&mut conn, "orders"), ENTRIES as usize);
    assert_eq!(
        stream_len(&mut conn, &dlq),
        1,
        "nothing dead-lettered beyond the one added by hand"
    );
    let seen = seen.lock().unwrap();
    let repeats: u32 = seen.values().map(|n| n - 1).sum();
    eprintln!("slot migration: {repeats} repeats of {ENTRIES} entries");
    // Only what a read had fetched and not yet acked when the slot moved may
    // run again: at most one read's count.
    assert!(
        repeats as usize <= COUNT,
        "{repeats} repeats; at most {COUNT} entries are in flight"
    );
}

#[actix_rt::test]
async fn poison_entries_are_dead_lettered_once_also_while_their_slot_migrates() {
    support::init_tracing();
    let cluster = RedisCluster::start();
    let s = Stream::new("payments", "billing");
    let dlq = s.dlq_for(&topology(&cluster));
    assert_eq!(dlq, "{payments}-dlq");
    let slot = cluster.slot_of("payments");
    let from = cluster.owner_of_slot(slot);
    let to = (from + 1) % 3;
    let seen: Seen = Default::default();
    let broker = Broker::with_topology(topology(&cluster))
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_max_retries(1)
                .with_claim_idle(Duration::from_millis(200))
                .with_block(Duration::from_millis(200)),
            counting(&seen),
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();

    // 1. A poison entry in a stable slot: one copy.
    let first = broker
        .publish(
            &s,
            &Job {
                id: 1,
                poison: true,
            },
        )
        .await
        .unwrap();
    let mut src = cluster.nodes()[from].conn();
    eventually("the first dead letter", WAIT, || {
        stream_len(&mut src, &dlq) == 1
    })
    .await;

    // 2. The slot starts migrating and the dead-letter stream alone moves:
    // the move (one script over both keys) now answers TRYAGAIN on the old
    // owner, and is retried until the migration ends.
    let m = cluster.begin_migration(slot, to);
    let target = &cluster.nodes()[to];
    let _: () = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target.port)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(&dlq)
        .query(&mut src)
        .unwrap();
    let tryagain_before = cluster.nodes()[from].error_count("TRYAGAIN");
    let second = broker
        .publish(
            &s,
            &Job {
                id: 2,
                poison: true,
            },
        )
        .await
        .unwrap();
    eventually("the move meets TRYAGAIN", WAIT, || {
        cluster.nodes()[from].error_count("TRYAGAIN") > tryagain_before
    })
    .await;
    // 3. The rest of the slot moves; the move lands on the new owner.
    m.move_keys(&cluster);
    m.finish(&cluster);
    let mut dst = cluster.conn_for_key("payments");
    eventually("the second dead letter", WAIT, || {
        stream_len(&mut dst, &dlq) == 2
    })
    .await;
    // A good entry still flows.
    broker
        .publish(
            &s,
            &Job {
                id: 3,
                poison: false,
            },
        )
        .await
        .unwrap();
    eventually("a good entry handled", WAIT, || {
        seen.lock().unwrap().contains_key(&3)
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);

    let origins = dead_letter_origins(&mut dst, &dlq);
    assert_eq!(
        origins,
        vec![first.to_string(), second.to_string()],
        "one copy each"
    );
    assert_eq!(pending_count(&mut dst, "payments", "billing"), 0);
}

#[actix_rt::test]
async fn a_stop_interrupts_the_blocked_read_on_the_node_that_holds_it() {
    support::init_tracing();
    let cluster = RedisCluster::start();
    let names = streams_on_distinct_nodes(&cluster, 3);
    let block = Duration::from_secs(60);
    let mut builder = Broker::with_topology(topology(&cluster));
    for n in &names {
        builder = builder.subscribe(
            &Stream::new(n, "billing"),
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(block),
            |_: Job| async { HandlerResult::Ok(()) },
        );
    }
    let broker = builder.build().unwrap();
    broker.start().await.unwrap();
    eventually("a blocked read on every master", WAIT, || {
        cluster.nodes().iter().all(|n| n.blocked_clients() >= 1)
    })
    .await;
    let unblocks_before: Vec<u64> = cluster
        .nodes()
        .iter()
        .map(|n| n.command_calls("client|unblock"))
        .collect();
    let t0 = Instant::now();
    let outcome = broker.stop().await.unwrap();
    let took = t0.elapsed();
    assert!(!outcome.timed_out);
    assert!(
        took < block / 2,
        "stop took {took:?}: the reads were not interrupted"
    );
    for (i, n) in cluster.nodes().iter().enumerate() {
        assert!(
            n.command_calls("client|unblock") > unblocks_before[i],
            "node {i} got its CLIENT UNBLOCK"
        );
    }
}

#[test]
fn the_worker_example_runs_on_a_cluster_given_rillkit_cluster() {
    let cluster = RedisCluster::start();
    let seeds = cluster.seeds().join(",");
    let env = support::worker_env(
        "w1",
        &[
            ("RILLKIT_CLUSTER", seeds.as_str()),
            ("RILLKIT_MAX_RETRIES", "0"),
            ("RILLKIT_BLOCK_MS", "500"),
        ],
    );
    // REDIS_URL points nowhere: the cluster seeds are used instead.
    let mut worker = support::Worker::spawn("redis://127.0.0.1:1", &env);
    let mut conn = cluster.conn_for_key("tasks");
    support::xadd(&mut conn, "tasks", r#"{"id":1}"#);
    support::xadd(&mut conn, "tasks", r#"{"id":2,"fail":true}"#);
    support::eventually_blocking("task 1 handled", WAIT, || {
        worker.handled().contains(&(1, 1))
    });
    support::eventually_blocking("task 2 dead-lettered", WAIT, || {
        stream_len(&mut conn, "{tasks}-dlq") == 1
    });
    worker.signal("TERM");
    assert_eq!(worker.wait_exit(WAIT), Some(0), "{:?}", worker.log());
    assert_eq!(pending_count(&mut conn, "tasks", "workers"), 0);
}

#[actix_rt::test]
async fn a_blocked_read_follows_its_stream_when_the_slot_migrates() {
    support::init_tracing();
    let cluster = RedisCluster::start();
    let s = Stream::new("alerts", "ops");
    let slot = cluster.slot_of("alerts");
    let from = cluster.owner_of_slot(slot);
    let to = (from + 2) % 3;
    let seen: Seen = Default::default();
    // A block far longer than the test waits: only the migration can end
    // the blocked read.
    let broker = Broker::with_topology(topology(&cluster))
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(Duration::from_secs(300)),
            counting(&seen),
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker
        .publish(
            &s,
            &Job {
                id: 1,
                poison: false,
            },
        )
        .await
        .unwrap();
    eventually("the first entry handled", WAIT, || {
        seen.lock().unwrap().contains_key(&1)
    })
    .await;
    eventually("the read blocked on the owner", WAIT, || {
        cluster.nodes()[from].blocked_clients() == 1
    })
    .await;
    // MIGRATE deletes the key on the old owner, which answers the blocked
    // read `UNBLOCKED the stream key no longer exists`.
    cluster.migrate_slot(slot, to);
    broker
        .publish(
            &s,
            &Job {
                id: 2,
                poison: false,
            },
        )
        .await
        .unwrap();
    eventually("the entry published after the move handled", WAIT, || {
        seen.lock().unwrap().contains_key(&2)
    })
    .await;
    eventually("the read blocked on the new owner", WAIT, || {
        cluster.nodes()[to].blocked_clients() == 1 && cluster.nodes()[from].blocked_clients() == 0
    })
    .await;
    // A migration is not a deleted stream: a group created again from `0`
    // would have delivered entry 1 a second time.
    assert_eq!(
        seen.lock().unwrap().get(&1),
        Some(&1),
        "entry 1 ran once: the group moved with its stream, none was created from 0"
    );
    assert_eq!(
        cluster.command_calls_total("xgroup|create")
            - cluster.command_failed_calls_total("xgroup|create"),
        1,
        "one group created, at start"
    );
    let mut conn = cluster.conn_for_key("alerts");
    // The XACK travels on its own connection, beside the next read: it may
    // land after the read has blocked again.
    eventually("entry 2 acked on the new owner", WAIT, || {
        pending_count(&mut conn, "alerts", "ops") == 0
    })
    .await;
    assert_eq!(
        stream_len(&mut conn, "alerts"),
        2,
        "the group's entries moved with it"
    );
    let t0 = Instant::now();
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    assert!(
        t0.elapsed() < Duration::from_secs(150),
        "the read on the new owner was interrupted"
    );
}

/// The guide's minimal ACL line plus what it says a cluster adds.
const CLUSTER_ACL_EXTRA: [&str; 2] = ["+cluster|slots", "+asking"];

#[actix_rt::test]
async fn a_worker_with_the_guides_minimal_acl_runs_on_a_cluster() {
    support::init_tracing();
    let cluster = RedisCluster::start();
    let guide = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/guide/src/production.md"
    ))
    .unwrap();
    assert!(
        guide.contains(&format!("`{}`", CLUSTER_ACL_EXTRA.join(" "))),
        "the guide names what a cluster adds to the ACL"
    );
    let server = support::ServerVersion::of(&mut cluster.nodes()[0].conn());
    let mut words = support::guide_acl_words(&server);
    words.extend(CLUSTER_ACL_EXTRA.iter().map(|w| w.to_string()));
    let (user, password) = (words[2].clone(), "change-me");
    for node in cluster.nodes() {
        let mut cmd = redis::cmd("ACL");
        for w in &words[1..] {
            cmd.arg(w);
        }
        let () = cmd.query(&mut node.conn()).unwrap();
    }
    let s = Stream::new("invoices", "billing");
    let seen: Seen = Default::default();
    let broker =
        Broker::with_topology(topology(&cluster).master_credentials(Some(&user), password))
            .subscribe(
                &s,
                ConsumerOptions::default()
                    .with_consumer("c1")
                    .with_max_retries(0)
                    .with_block(Duration::from_secs(60)),
                counting(&seen),
            )
            .build()
            .unwrap();
    broker.start().await.unwrap();
    broker
        .publish(
            &s,
            &Job {
                id: 1,
                poison: false,
            },
        )
        .await
        .unwrap();
    broker
        .publish(
            &s,
            &Job {
                id: 2,
                poison: true,
            },
        )
        .await
        .unwrap();
    let mut conn = cluster.conn_for_key("invoices");
    eventually("one handled, one dead-lettered", WAIT, || {
        seen.lock().unwrap().contains_key(&1) && stream_len(&mut conn, "{invoices}-dlq") == 1
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    assert_eq!(pending_count(&mut conn, "invoices", "billing"), 0);
    for (i, node) in cluster.nodes().iter().enumerate() {
        let log: Vec<redis::Value> = redis::cmd("ACL")
            .arg("LOG")
            .query(&mut node.conn())
            .unwrap();
        assert!(log.is_empty(), "node {i} refused a command: {log:?}");
    }
}

/// Lists and Pub/Sub on a cluster: every key beside a list
/// shares its slot (`{<list>}:rillkit:…`), so pops, settles and dead-letter
/// moves work on its master; a channel's subscriber sees what any node
/// publishes.
#[actix::test]
async fn lists_and_channels_work_on_a_cluster() {
    let cluster = RedisCluster::start();
    let jobs = rillkit::List::new("jobs");
    let seen: Seen = Arc::default();
    let heard = Arc::new(Mutex::new(Vec::new()));
    let (s, h) = (seen.clone(), heard.clone());
    let broker = Broker::with_topology(topology(&cluster))
        .subscribe_list(
            &jobs,
            rillkit::ListOptions::default()
                .with_consumer("c1")
                .with_max_retries(0)
                .with_concurrency(4),
            move |job: Job| {
                let s = s.clone();
                async move {
                    if job.poison {
                        return Err(HandlerError::retry("poison"));
                    }
                    *s.lock().unwrap().entry(job.id).or_default() += 1;
                    Ok(())
                }
            },
        )
        .subscribe_channel(
            &rillkit::Channel::new("news"),
            rillkit::ChannelOptions::default(),
            move |n: u64| {
                let h = h.clone();
                async move {
                    h.lock().unwrap().push(n);
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker
        .publish_list_batch(&jobs, (1..=100).map(|id| Job { id, poison: false }))
        .await
        .unwrap();
    broker
        .publish_list(
            &jobs,
            &Job {
                id: 0,
                poison: true,
            },
        )
        .await
        .unwrap();
    for n in 1..=5u64 {
        broker
            .publish_channel(&rillkit::Channel::new("news"), &n)
            .await
            .unwrap();
    }
    let mut c = cluster.conn_for_key("{jobs}-dlq");
    eventually("100 handled and one dead letter", WAIT, || {
        seen.lock().unwrap().len() == 100
            && redis::cmd("LLEN")
                .arg("{jobs}-dlq")
                .query::<usize>(&mut c)
                .unwrap()
                == 1
    })
    .await;
    assert!(seen.lock().unwrap().values().all(|n| *n == 1));
    eventually("5 heard", WAIT, || heard.lock().unwrap().len() == 5).await;
    assert!(broker.stop().await.unwrap().is_clean());
}

/// `cmd` on `conn` right after `ASKING`: what a client sends to the node an
/// `ASK` named (the target of a slot migration serves the slot's keys only
/// to a command sent so).
fn asking<T: redis::FromRedisValue>(conn: &mut redis::Connection, cmd: &redis::Cmd) -> T {
    let (v,): (T,) = redis::pipe()
        .cmd("ASKING")
        .ignore()
        .add_command(cmd.clone())
        .query(conn)
        .unwrap_or_else(|e| panic!("ASKING then {cmd:?}: {e}"));
    v
}

/// A consumer started while its stream's slot is half-migrated (the stream
/// already on the target, the slot still the source's) reads from the
/// target at once: each read the source answers `ASK` goes to the target
/// after `ASKING`, without a backoff and without giving up the source as
/// the slot's owner. The group's creation, publishes (one and a batch) and
/// acks on the shared connection follow `ASK` too. When the migration ends
/// the consumer follows `MOVED` and goes on; nothing is lost or handled
/// twice.
#[actix_rt::test]
async fn a_consumer_started_during_a_slot_migration_reads_from_the_target() {
    support::init_tracing();
    const BEFORE: u64 = 10;
    let cluster = RedisCluster::start();
    let s = Stream::new("audit", "ops");
    let slot = cluster.slot_of("audit");
    let from = cluster.owner_of_slot(slot);
    let to = (from + 1) % 3;
    // Entries written before the migration begins, to move with the stream.
    let mut source = cluster.nodes()[from].conn();
    for id in 0..BEFORE {
        let _: String = redis::cmd("XADD")
            .arg("audit")
            .arg("*")
            .arg("data")
            .arg(format!(r#"{{"id":{id}}}"#))
            .query(&mut source)
            .unwrap();
    }
    let migration = cluster.begin_migration(slot, to);
    assert_eq!(migration.move_keys(&cluster), 1, "the stream moved");
    let ask: redis::RedisResult<usize> = redis::cmd("XLEN").arg("audit").query(&mut source);
    assert_eq!(
        ask.as_ref().err().and_then(|e| e.code()),
        Some("ASK"),
        "the source answers ASK: {ask:?}"
    );

    let seen: Seen = Default::default();
    let broker = Broker::with_topology(topology(&cluster))
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(Duration::from_secs(300)),
            counting(&seen),
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker
        .publish(
            &s,
            &Job {
                id: 100,
                poison: false,
            },
        )
        .await
        .unwrap();
    let batch: Vec<Job> = (101..120).map(|id| Job { id, poison: false }).collect();
    broker.publish_batch(&s, &batch).await.unwrap();
    let during = BEFORE as usize + 1 + batch.len();
    eventually(
        "every entry handled while the slot is half-migrated",
        WAIT,
        || seen.lock().unwrap().len() == during,
    )
    .await;
    let mut target = cluster.nodes()[to].conn();
    let mut xpending = redis::cmd("XPENDING");
    xpending.arg("audit").arg("ops");
    eventually("every entry acked on the target", WAIT, || {
        matches!(asking::<redis::Value>(&mut target, &xpending),
            redis::Value::Array(v) if v.first() == Some(&redis::Value::Int(0)))
    })
    .await;
    eventually("the next read blocked on the target", WAIT, || {
        cluster.nodes()[to].blocked_clients() == 1
    })
    .await;
    assert_eq!(cluster.owner_of_slot(slot), from, "still half-migrated");
    assert_eq!(
        asking::<usize>(&mut target, redis::cmd("XLEN").arg("audit")),
        during,
        "each entry written once"
    );

    migration.finish(&cluster);
    broker
        .publish(
            &s,
            &Job {
                id: 200,
                poison: false,
            },
        )
        .await
        .unwrap();
    eventually(
        "the entry published after the migration handled",
        WAIT,
        || seen.lock().unwrap().contains_key(&200),
    )
    .await;
    let mut conn = cluster.conn_for_key("audit");
    eventually("every entry acked on the new owner", WAIT, || {
        pending_count(&mut conn, "audit", "ops") == 0
    })
    .await;
    let t0 = Instant::now();
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    assert!(
        t0.elapsed() < Duration::from_secs(150),
        "the blocked read was interrupted"
    );
    assert_eq!(stream_len(&mut conn, "audit"), during + 1);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), during + 1, "nothing lost");
    assert!(
        seen.values().all(|n| *n == 1),
        "nothing handled twice: {seen:?}"
    );
}

/// Every source's read connection follows `ASK` (the mechanism is the
/// delivery core's): a stream and an at-most-once list whose slot is
/// half-migrated are read on the target, both block there, and a stop cuts
/// both blocked reads short with `CLIENT UNBLOCK` on the target.
#[actix_rt::test]
async fn reads_blocked_where_an_ask_sent_them_are_cut_short_by_a_stop() {
    support::init_tracing();
    let cluster = RedisCluster::start();
    // One hash tag: the list and the stream share the migrating slot.
    let (list_key, stream_key) = ("jobs", "{jobs}-stream");
    let slot = cluster.slot_of(list_key);
    assert_eq!(slot, cluster.slot_of(stream_key));
    let from = cluster.owner_of_slot(slot);
    let to = (from + 2) % 3;
    let mut source = cluster.nodes()[from].conn();
    for id in 0..3 {
        let _: usize = redis::cmd("LPUSH")
            .arg(list_key)
            .arg(format!(r#"{{"id":{id}}}"#))
            .query(&mut source)
            .unwrap();
    }
    let _: String = redis::cmd("XADD")
        .arg(stream_key)
        .arg("*")
        .arg("data")
        .arg(r#"{"id":10}"#)
        .query(&mut source)
        .unwrap();
    let migration = cluster.begin_migration(slot, to);
    assert_eq!(migration.move_keys(&cluster), 2, "the list and the stream");

    let block = Duration::from_secs(300);
    let seen: Seen = Default::default();
    let list = rillkit::List::new(list_key);
    let broker = Broker::with_topology(topology(&cluster))
        .subscribe(
            &Stream::new(stream_key, "ops"),
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(block),
            counting(&seen),
        )
        .subscribe_list(
            &list,
            rillkit::ListOptions::default()
                .with_consumer("c1")
                .with_at_most_once(true)
                .with_block(block),
            counting(&seen),
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker
        .publish_list(
            &list,
            &Job {
                id: 3,
                poison: false,
            },
        )
        .await
        .unwrap();
    eventually(
        "the list's items and the stream's entry handled",
        WAIT,
        || seen.lock().unwrap().len() == 5,
    )
    .await;
    eventually("both reads blocked on the target", WAIT, || {
        cluster.nodes()[to].blocked_clients() == 2 && cluster.nodes()[from].blocked_clients() == 0
    })
    .await;
    assert_eq!(cluster.owner_of_slot(slot), from, "still half-migrated");
    let unblocks_before = cluster.nodes()[to].command_calls("client|unblock");
    let t0 = Instant::now();
    let outcome = broker.stop().await.unwrap();
    let took = t0.elapsed();
    assert!(!outcome.timed_out);
    assert!(
        took < block / 10,
        "stop took {took:?}: the reads on the target were not cut short"
    );
    assert!(
        cluster.nodes()[to].command_calls("client|unblock") > unblocks_before,
        "the target got the CLIENT UNBLOCKs"
    );
    assert!(seen.lock().unwrap().values().all(|n| *n == 1));
    migration.finish(&cluster);
}
