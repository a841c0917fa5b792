//! A stream read by several consumer groups: a dead letter of one group,
//! redriven, runs again in that group only. A group that had read every
//! entry is moved past the redriven one; a group still behind reads it and
//! acks it without running it.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rillkit::admin::{Admin, DeadLetterFilter};
use rillkit::prelude::*;
use support::{RedisServer, eventually, pending_count, stream_len};

const WAIT: Duration = Duration::from_secs(15);

/// How many times each `n` ran, and whether the run was of a redriven entry.
type Runs = Arc<Mutex<HashMap<(u64, bool), usize>>>;

fn n_of(m: &Message) -> u64 {
    std::str::from_utf8(m.field("n").expect("an n field"))
        .unwrap()
        .parse()
        .unwrap()
}

/// A broker of `group` on `tasks` recording its runs; while `failing` is set
/// it rejects `n` = 2.
fn broker(redis: &RedisServer, group: &str, runs: &Runs, failing: &Arc<AtomicBool>) -> Broker {
    let (runs, failing) = (runs.clone(), failing.clone());
    let opts = ConsumerOptions::default()
        .with_consumer(format!("{group}-c1"))
        .with_block(Duration::from_millis(50))
        .with_max_retries(0);
    Broker::builder(redis.url())
        .subscribe_message(&Stream::new("tasks", group), opts, move |m: Message| {
            let n = n_of(&m);
            let redriven = m.field("redriven_from").is_some();
            *runs.lock().unwrap().entry((n, redriven)).or_default() += 1;
            let fail = n == 2 && failing.load(Ordering::SeqCst);
            async move {
                if fail {
                    Err(HandlerError::reject("task 2 failed"))
                } else {
                    Ok(())
                }
            }
        })
        .build()
        .unwrap()
}

fn runs_of(runs: &Runs, n: u64, redriven: bool) -> usize {
    runs.lock()
        .unwrap()
        .get(&(n, redriven))
        .copied()
        .unwrap_or(0)
}

async fn group(admin: &Admin, name: &str) -> rillkit::admin::GroupInfo {
    admin
        .groups("tasks")
        .await
        .unwrap()
        .into_iter()
        .find(|g| g.name == name)
        .unwrap_or_else(|| panic!("group {name}"))
}

/// The last-delivered id of `group` on `tasks` (`XINFO GROUPS`).
fn last_delivered(redis: &RedisServer, group: &str) -> String {
    let groups: Vec<HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg("tasks")
        .query(&mut redis.conn())
        .unwrap();
    let g = groups
        .iter()
        .find(|g| {
            g.get("name")
                .map(|v| redis::from_redis_value_ref::<String>(v).unwrap())
                == Some(group.into())
        })
        .expect("the group");
    redis::from_redis_value_ref(&g["last-delivered-id"]).unwrap()
}

/// Five entries, read by `workers` (which fails task 2 into the dead-letter
/// stream) and `audit` (which runs all five).
async fn five_tasks(admin: &Admin) {
    admin.create_group("tasks", "workers", "0").await.unwrap();
    admin.create_group("tasks", "audit", "0").await.unwrap();
    for n in 1..=5 {
        admin
            .add("tasks", &[("n", n.to_string().as_str())])
            .await
            .unwrap();
    }
}

#[actix_rt::test]
async fn a_redriven_dead_letter_runs_in_its_own_group_and_a_caught_up_group_never_reads_it() {
    let redis = RedisServer::start();
    let admin = Admin::connect(&redis.url()).await.unwrap();
    five_tasks(&admin).await;
    let failing = Arc::new(AtomicBool::new(true));
    let (workers_runs, audit_runs) = (Runs::default(), Runs::default());
    let workers = broker(&redis, "workers", &workers_runs, &failing);
    let audit = broker(
        &redis,
        "audit",
        &audit_runs,
        &Arc::new(AtomicBool::new(false)),
    );
    workers.start().await.unwrap();
    audit.start().await.unwrap();
    let dlq = admin.dlq_of("tasks");
    eventually("task 2 dead-lettered by workers", WAIT, || {
        stream_len(&mut redis.conn(), &dlq) == 1
    })
    .await;
    eventually("audit acked all five", WAIT, || {
        (1..=5).all(|n| runs_of(&audit_runs, n, false) == 1)
            && pending_count(&mut redis.conn(), "tasks", "audit") == 0
    })
    .await;
    let audit_before = group(&admin, "audit").await;
    assert_eq!(audit_before.lag, Some(0), "{audit_before:?}");

    failing.store(false, Ordering::SeqCst);
    let report = admin
        .redrive(&dlq, &DeadLetterFilter::new().with_group("workers"))
        .await
        .unwrap();
    assert_eq!(report.count(), 1, "{report:?}");
    let redriven = &report.redriven[0];
    assert_eq!(redriven.group, "workers");
    // In the same script as the XADD: audit, caught up, is past the new entry.
    let audit_after = group(&admin, "audit").await;
    assert_eq!(
        audit_after.last_delivered_id, redriven.id,
        "{audit_after:?}"
    );
    assert_eq!(audit_after.lag, Some(0), "{audit_after:?}");
    assert_eq!(
        audit_after.entries_read,
        audit_before.entries_read.map(|n| n + 1),
        "entries-read counts the skipped entry, so the lag stays exact"
    );

    eventually("workers ran the redriven task 2", WAIT, || {
        runs_of(&workers_runs, 2, true) == 1
            && pending_count(&mut redis.conn(), "tasks", "workers") == 0
    })
    .await;
    assert_eq!(stream_len(&mut redis.conn(), &dlq), 0);
    assert_eq!(runs_of(&audit_runs, 2, true), 0, "audit never ran it");
    assert_eq!(group(&admin, "audit").await.pending, 0);
    assert_eq!(workers.stop().await.unwrap().exit_code(), 0);
    assert_eq!(audit.stop().await.unwrap().exit_code(), 0);
}

#[actix_rt::test]
async fn a_group_behind_reads_the_redriven_entry_and_acks_it_without_running_it() {
    let redis = RedisServer::start();
    let admin = Admin::connect(&redis.url()).await.unwrap();
    five_tasks(&admin).await;
    let failing = Arc::new(AtomicBool::new(true));
    let (workers_runs, audit_runs) = (Runs::default(), Runs::default());
    let workers = broker(&redis, "workers", &workers_runs, &failing);
    workers.start().await.unwrap();
    let dlq = admin.dlq_of("tasks");
    eventually("task 2 dead-lettered by workers", WAIT, || {
        stream_len(&mut redis.conn(), &dlq) == 1
    })
    .await;
    failing.store(false, Ordering::SeqCst);
    // Without --group: each dead letter goes back to its own group.
    let report = admin.redrive(&dlq, &DeadLetterFilter::new()).await.unwrap();
    assert_eq!(report.count(), 1, "{report:?}");
    let id = report.redriven[0].id.clone();
    let audit_group = group(&admin, "audit").await;
    assert_ne!(
        audit_group.last_delivered_id, id,
        "audit is behind: not moved"
    );
    let raw: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("tasks")
        .arg(id.as_str())
        .arg(id.as_str())
        .query(&mut redis.conn())
        .unwrap();
    assert!(
        raw[0]
            .1
            .contains(&("redriven_for".into(), "workers".into())),
        "the entry names its group: {raw:?}"
    );
    eventually("workers ran the redriven task 2", WAIT, || {
        runs_of(&workers_runs, 2, true) == 1
    })
    .await;

    let audit = broker(
        &redis,
        "audit",
        &audit_runs,
        &Arc::new(AtomicBool::new(false)),
    );
    audit.start().await.unwrap();
    eventually(
        "audit read everything, the redriven entry too, and holds nothing",
        WAIT,
        || {
            (1..=5).all(|n| runs_of(&audit_runs, n, false) == 1)
                && last_delivered(&redis, "audit") == id.as_str()
                && pending_count(&mut redis.conn(), "tasks", "audit") == 0
        },
    )
    .await;
    assert_eq!(
        runs_of(&audit_runs, 2, true),
        0,
        "and acked it without running it"
    );
    assert_eq!(workers.stop().await.unwrap().exit_code(), 0);
    assert_eq!(audit.stop().await.unwrap().exit_code(), 0);
}
