//! Redis Cluster: the master that owns a stream's slot fails over to its
//! replica (`CLUSTER FAILOVER`, the graceful manual one) in the middle of a
//! stream, while entries are published and consumed through it.

mod support;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rillkit::prelude::*;
use rillkit::{Json, Topology};
use serde::{Deserialize, Serialize};
use support::{RedisCluster, eventually, pending_count, stream_len};

const WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Serialize, Deserialize)]
struct Job {
    id: u64,
}

/// What the handler saw: runs per job id and per entry id.
#[derive(Default)]
struct Seen {
    jobs: HashMap<u64, u32>,
    entries: HashMap<String, u32>,
}

/// Every entry of `stream` as `(entry id, job id)`, from `XRANGE`.
fn entries(conn: &mut redis::Connection, stream: &str) -> Vec<(String, u64)> {
    let rows: Vec<(String, HashMap<String, String>)> = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query(conn)
        .expect("XRANGE");
    rows.into_iter()
        .map(|(id, fields)| {
            let job: Job = serde_json::from_str(&fields["data"]).expect("a job");
            (id, job.id)
        })
        .collect()
}

#[actix_rt::test]
async fn a_master_failover_mid_stream_loses_nothing_and_repeats_only_entries_in_flight() {
    support::init_tracing();
    const ENTRIES: u64 = 5_000;
    const COUNT: usize = 50;
    /// Published only once the failover is over, so some publishes land on
    /// the new master whatever the timing.
    const AFTER: u64 = 100;
    let cluster = Arc::new(RedisCluster::start_with_replicas());
    let topology = Topology::cluster(cluster.seeds());
    let s = Stream::new("orders", "billing");
    let dlq = s.dlq_for(&topology);
    let slot = cluster.slot_of("orders");
    assert_eq!(slot, cluster.slot_of(&dlq));
    let old_master = cluster.owner_of_slot(slot);
    let replica = cluster.replica_of(old_master);

    let seen: Arc<Mutex<Seen>> = Default::default();
    let record = seen.clone();
    let broker = Broker::with_topology(topology)
        .subscribe_message(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_count(COUNT)
                .with_concurrency(4)
                .with_block(Duration::from_millis(500)),
            move |m: Message| {
                let job: Result<Job, _> = m.decode(&Json);
                if let Ok(job) = &job {
                    let mut seen = record.lock().unwrap();
                    *seen.jobs.entry(job.id).or_default() += 1;
                    *seen.entries.entry(m.id.to_string()).or_default() += 1;
                }
                async move {
                    job.map_err(HandlerError::reject)?;
                    // About 2 000 entries a second: the failover lands
                    // mid-stream.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();

    // The first half published up front; the second while the master fails
    // over.
    let first: Vec<Job> = (0..ENTRIES / 2).map(|id| Job { id }).collect();
    for chunk in first.chunks(500) {
        broker.publish_batch(&s, chunk).await.unwrap();
    }
    eventually("a fifth handled", WAIT, || {
        seen.lock().unwrap().jobs.len() as u64 >= ENTRIES / 5
    })
    .await;

    let failed_over = Arc::new(AtomicBool::new(false));
    let failover = {
        let (cluster, done) = (cluster.clone(), failed_over.clone());
        std::thread::spawn(move || {
            let took = cluster.failover(replica);
            done.store(true, Ordering::SeqCst);
            took
        })
    };
    let mut retried = 0u32;
    let mut published_before_done = None;
    let mut handled_at_done = 0;
    for id in ENTRIES / 2..ENTRIES {
        if id == ENTRIES - AFTER {
            let failover = &failover;
            eventually("the failover is over", WAIT, || failover.is_finished()).await;
        }
        if published_before_done.is_none() && failed_over.load(Ordering::SeqCst) {
            published_before_done = Some(id - ENTRIES / 2);
            handled_at_done = seen.lock().unwrap().jobs.len();
        }
        let mut tries = 0;
        loop {
            match broker.publish(&s, &Job { id }).await {
                Ok(_) => break,
                // A failover under way: the caller tries again (a reply
                // lost with its connection may mean the entry is there
                // twice then).
                Err(e) if e.is_retryable() && tries < 100 => {
                    tries += 1;
                    retried += 1;
                    eprintln!("publish of job {id} failed (try {tries}), retrying: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("publish of job {id} failed for good after {tries} retries: {e}"),
            }
        }
    }
    let took = failover.join().unwrap();
    let new_master = cluster.owner_of_slot(slot);
    assert_eq!(new_master, replica, "the replica took the slot");
    let published_before_done = published_before_done.expect("measured before the last publishes");

    eventually("every job handled", WAIT, || {
        seen.lock().unwrap().jobs.len() as u64 == ENTRIES
    })
    .await;
    let mut conn = cluster.nodes()[new_master].conn();
    eventually("every entry in the stream handled", WAIT, || {
        seen.lock().unwrap().entries.len() == stream_len(&mut conn, "orders")
    })
    .await;
    eventually("every entry acked on the new master", WAIT, || {
        pending_count(&mut conn, "orders", "billing") == 0
    })
    .await;
    assert_eq!(broker.phase(), rillkit::Phase::Running, "the process is up");
    let outcome = broker.stop().await.unwrap();
    assert_eq!(outcome.exit_code(), 0);

    // What is in the stream on the new master is what was handled.
    let in_stream = entries(&mut conn, "orders");
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    let stream_ids: BTreeSet<&str> = in_stream.iter().map(|(e, _)| e.as_str()).collect();
    let handled_ids: BTreeSet<&str> = seen.entries.keys().map(String::as_str).collect();
    assert_eq!(stream_ids, handled_ids, "every entry handled, nothing else");
    let jobs: BTreeSet<u64> = in_stream.iter().map(|(_, j)| *j).collect();
    assert_eq!(
        jobs,
        (0..ENTRIES).collect(),
        "every job published once at least"
    );
    let doubles = in_stream.len() - jobs.len();
    assert!(
        doubles <= retried as usize,
        "{doubles} jobs are in the stream twice, more than the {retried} retried publishes"
    );
    assert_eq!(pending_count(&mut conn, "orders", "billing"), 0);
    assert_eq!(stream_len(&mut conn, &dlq), 0, "nothing dead-lettered");

    let repeats: u32 = seen.entries.values().map(|n| n - 1).sum();
    eprintln!(
        "master failover (node {old_master} -> node {replica}) took {took:?}, over after \
         {published_before_done} of {} publishes, with {handled_at_done} of {ENTRIES} jobs \
         handled; {retried} publishes retried, {doubles} jobs in the stream twice; \
         {repeats} repeats of {} entries",
        ENTRIES / 2,
        in_stream.len()
    );
    // Only what a read had fetched and not yet acked when the master changed
    // may run again: at most one read's count.
    assert!(
        repeats as usize <= COUNT,
        "{repeats} repeats; at most {COUNT} entries are in flight"
    );

    // The old master follows the new one.
    let cluster = &cluster;
    eventually("the old master replicates the new one", WAIT, || {
        cluster.settled()
    })
    .await;
    assert_eq!(cluster.master_of(old_master), new_master);
}

#[actix_rt::test]
async fn a_read_blocked_on_the_old_master_moves_to_the_new_one_and_a_stop_interrupts_it_there() {
    support::init_tracing();
    let cluster = Arc::new(RedisCluster::start_with_replicas());
    let s = Stream::new("payments", "billing");
    let slot = cluster.slot_of("payments");
    let old_master = cluster.owner_of_slot(slot);
    let replica = cluster.replica_of(old_master);
    // Longer than WAIT (and its response timeout longer still): a read that
    // the failover did not cut short would still be blocked on the old master
    // when the waits below give up.
    let block = Duration::from_secs(90);
    let seen: Arc<Mutex<Seen>> = Default::default();
    let record = seen.clone();
    let broker = Broker::with_topology(Topology::cluster(cluster.seeds()))
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(block),
            move |job: Job| {
                *record.lock().unwrap().jobs.entry(job.id).or_default() += 1;
                std::future::ready(HandlerResult::Ok(()))
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish(&s, &Job { id: 0 }).await.unwrap();
    eventually("job 0 handled", WAIT, || {
        seen.lock().unwrap().jobs.contains_key(&0)
    })
    .await;
    let old = &cluster.nodes()[old_master];
    eventually("the read blocked on the old master", WAIT, || {
        old.blocked_clients() >= 1
    })
    .await;
    let (unblocked_before, moved_before) = (old.error_count("UNBLOCKED"), old.error_count("MOVED"));

    let failover = {
        let cluster = cluster.clone();
        std::thread::spawn(move || cluster.failover(replica))
    };
    let failover_thread = &failover;
    eventually("the failover is over", WAIT, || {
        failover_thread.is_finished()
    })
    .await;
    let took = failover.join().unwrap();
    assert_eq!(cluster.owner_of_slot(slot), replica);
    let new = &cluster.nodes()[replica];
    eventually("the read blocked on the new master", WAIT, || {
        new.blocked_clients() >= 1
    })
    .await;
    let (unblocked, moved) = (
        old.error_count("UNBLOCKED") - unblocked_before,
        old.error_count("MOVED") - moved_before,
    );
    eprintln!(
        "master failover (node {old_master} -> node {replica}) took {took:?}; the old master \
         answered the blocked read's connection {unblocked} UNBLOCKED and {moved} MOVED"
    );
    assert!(
        unblocked + moved >= 1,
        "the old master cut the blocked read short"
    );

    for id in 1..=10 {
        broker.publish(&s, &Job { id }).await.unwrap();
    }
    eventually("jobs 1-10 handled", WAIT, || {
        seen.lock().unwrap().jobs.len() == 11
    })
    .await;
    eventually("the read blocked on the new master again", WAIT, || {
        new.blocked_clients() >= 1
    })
    .await;
    let unblocks_before = new.command_calls("client|unblock");
    let outcome = broker.stop().await.unwrap();
    assert!(!outcome.timed_out);
    assert_eq!(outcome.exit_code(), 0);
    assert!(
        new.command_calls("client|unblock") > unblocks_before,
        "the stop sent CLIENT UNBLOCK to the new master"
    );
    assert_eq!(pending_count(&mut new.conn(), "payments", "billing"), 0);
    assert!(seen.lock().unwrap().jobs.values().all(|n| *n == 1));
}
