//! Delayed delivery: entries scheduled for later are added to their stream
//! when due, exactly once, by one of the consuming processes, whichever of
//! them dies and whether or not Redis restarts.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rillkit::admin::Admin;
use rillkit::prelude::*;
use support::{RedisServer, eventually, stream_len};

const WAIT: Duration = Duration::from_secs(60);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The `rillkit` tool schedules; `worker` processes consume.
#[cfg(feature = "cli")]
mod workers {
    use super::*;
    use std::process::Command;
    use support::{Worker, eventually_blocking};

    /// `handled <id> delivery <n> at <ms>` lines of a worker as `id → [ms]`.
    fn handled_at(w: &Worker, into: &mut HashMap<u64, Vec<u64>>) {
        for line in w.lines() {
            let parts: Vec<&str> = line.split_whitespace().collect();
            if let ["handled", id, "delivery", _, "at", at] = parts.as_slice() {
                into.entry(id.parse().unwrap())
                    .or_default()
                    .push(at.parse().unwrap());
            }
        }
    }

    /// The pid in the mover lease's token (`<host>-<pid>-<random>`), if held.
    fn mover_pid(c: &mut redis::Connection, stream: &str) -> Option<u32> {
        let token: Option<String> = redis::cmd("GET")
            .arg(format!("{{{stream}}}:rillkit:due-mover:{stream}"))
            .query(c)
            .unwrap();
        let token = token?;
        let mut parts = token.rsplitn(3, '-');
        parts.next();
        parts.next()?.parse().ok()
    }

    fn schedule_with_cli(url: &str, stream: &str, first: u64, n: u64) -> u64 {
        use std::io::Write;
        let docs: String = (first..first + n)
            .map(|id| format!("{{\"id\":{id}}}\n"))
            .collect();
        let before = now_ms();
        let mut child = Command::new(support::rillkit_bin())
            .args(["--url", url, "publish", stream, "-", "--delay", "3s"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run rillkit");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(docs.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // One schedule id a line, each distinct.
        let ids: std::collections::HashSet<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(ids.len() as u64, n);
        before
    }

    /// Every id of `first..first + n` handled exactly once, none before `not_before`
    /// (ms), once the schedule is empty and the group holds nothing.
    fn all_once(
        workers: &[&Worker],
        c: &mut redis::Connection,
        stream: &str,
        first: u64,
        n: u64,
        not_before: u64,
    ) {
        eventually_blocking("every scheduled entry handled", WAIT, || {
            let mut seen = HashMap::new();
            for w in workers {
                handled_at(w, &mut seen);
            }
            (first..first + n).all(|id| seen.contains_key(&id))
        });
        eventually_blocking("schedule empty and nothing pending", WAIT, || {
            let left: u64 = redis::cmd("ZCARD")
                .arg(format!("{{{stream}}}:rillkit:scheduled:{stream}"))
                .query(c)
                .unwrap();
            let entries: u64 = redis::cmd("HLEN")
                .arg(format!("{{{stream}}}:rillkit:scheduled-entries:{stream}"))
                .query(c)
                .unwrap();
            left == 0 && entries == 0 && support::pending_count(c, stream, "workers") == 0
        });
        let mut seen = HashMap::new();
        for w in workers {
            handled_at(w, &mut seen);
        }
        for id in first..first + n {
            let at = &seen[&id];
            assert_eq!(at.len(), 1, "entry {id} handled {} times", at.len());
            assert!(
                at[0] >= not_before,
                "entry {id} handled at {} ms, before it was due ({not_before} ms)",
                at[0]
            );
        }
    }

    #[test]
    fn delayed_entries_run_once_and_not_early_when_a_worker_dies_or_redis_restarts() {
        let mut redis =
            RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
        let url = redis.url();
        let mut c = redis.conn();
        let env = [("RILLKIT_STREAM", "later"), ("RILLKIT_CONCURRENCY", "4")];
        let a = Worker::spawn(&url, &env);
        let b = Worker::spawn(&url, &env);
        eventually_blocking("one worker holds the mover lease", WAIT, || {
            mover_pid(&mut c, "later").is_some()
        });

        // 100 entries due in 3 s; the worker holding the mover lease is killed
        // after 1 s, so the other must take the lease over to add them.
        let published = schedule_with_cli(&url, "later", 0, 100);
        assert_eq!(stream_len(&mut c, "later"), 0, "added before due");
        std::thread::sleep(Duration::from_secs(1));
        let holder = mover_pid(&mut c, "later").expect("a mover");
        let (dead, alive) = if holder == a.pid() {
            (&a, &b)
        } else {
            (&b, &a)
        };
        assert_eq!(holder, dead.pid());
        dead.signal("KILL");
        all_once(&[&a, &b], &mut c, "later", 0, 100, published + 3000);
        assert_eq!(stream_len(&mut c, "later"), 100);
        assert_eq!(mover_pid(&mut c, "later"), Some(alive.pid()));

        // 100 more, then Redis is killed and started again from its AOF.
        let published = schedule_with_cli(&url, "later", 100, 100);
        redis.restart();
        let mut c = redis.conn();
        all_once(&[&a, &b], &mut c, "later", 100, 100, published + 3000);
        assert_eq!(stream_len(&mut c, "later"), 200);
    }
}

#[actix_rt::test]
async fn publish_after_at_and_cancel() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let s = Stream::new("reminders", "mailer").with_max_len(1000);
    let got: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let g = got.clone();
    let broker = Broker::builder(redis.url())
        .subscribe(
            &s,
            ConsumerOptions::default().with_consumer("c1"),
            move |text: String| {
                let g = g.clone();
                async move {
                    g.lock().unwrap().push((text, now_ms()));
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();

    let start = now_ms();
    let later = broker
        .publish_after(&s, "in 1.5 s", Duration::from_millis(1500))
        .await
        .unwrap();
    let cancelled = broker
        .publish_after(&s, "cancelled", Duration::from_secs(60))
        .await
        .unwrap();
    let at = broker
        .publish_at(&s, "at +1 s", SystemTime::now() + Duration::from_secs(1))
        .await
        .unwrap();
    let past = broker
        .publish_at(&s, "past", SystemTime::now() - Duration::from_secs(60))
        .await
        .unwrap();
    let batch = broker
        .publish_batch_after(&s, ["b1", "b2", "b3"], Duration::from_millis(500))
        .await
        .unwrap();
    assert_eq!(batch.len(), 3);
    let ids = [
        &later, &cancelled, &at, &past, &batch[0], &batch[1], &batch[2],
    ];
    let distinct: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len());
    assert_eq!(
        later.as_str().parse::<rillkit::ScheduleId>().unwrap(),
        later
    );
    assert!("no spaces".parse::<rillkit::ScheduleId>().is_err());

    let admin = Admin::connect(&redis.url()).await.unwrap();
    assert!(broker.cancel_scheduled(&s, &cancelled).await.unwrap());
    assert!(!broker.cancel_scheduled(&s, &cancelled).await.unwrap());

    eventually("the due entries handled", WAIT, || {
        got.lock().unwrap().len() == 6
    })
    .await;
    let got = got.lock().unwrap().clone();
    let when = |text: &str| {
        got.iter()
            .find(|(t, _)| t == text)
            .unwrap_or_else(|| panic!("{text} not handled: {got:?}"))
            .1
    };
    assert!(when("in 1.5 s") >= start + 1500, "{got:?}");
    assert!(when("at +1 s") >= start + 1000, "{got:?}");
    assert!(when("b1") >= start + 500, "{got:?}");
    // A batch is added in its order.
    let at = |text: &str| got.iter().position(|(t, _)| t == text).unwrap();
    assert!(at("b1") < at("b2") && at("b2") < at("b3"), "{got:?}");
    // The past one is due at once: it runs before the half-second batch.
    assert!(when("past") <= when("b1"), "{got:?}");
    assert!(!got.iter().any(|(t, _)| t == "cancelled"), "{got:?}");
    // A moved entry cannot be cancelled; the schedule is empty.
    assert!(!broker.cancel_scheduled(&s, &later).await.unwrap());
    let left = admin.scheduled("reminders").await.unwrap();
    assert_eq!(left.count, 0);
    assert_eq!(left.next_due_ms, None);

    // Seen from Admin, and cancelled there.
    let id = admin
        .schedule_after(
            "reminders",
            &[("data", "\"from admin\"")],
            Duration::from_secs(3600),
        )
        .await
        .unwrap();
    let one = admin.scheduled("reminders").await.unwrap();
    assert_eq!(one.count, 1);
    let due = one.next_due_ms.unwrap();
    assert!(
        due >= start + 3_590_000 && due <= now_ms() + 3_610_000,
        "{due}"
    );
    assert!(admin.cancel_scheduled("reminders", &id).await.unwrap());

    // An ordered stream takes no delayed publish; nothing is scheduled.
    let ordered = Stream::new("keyed", "g").ordered_by("k", 4);
    let e = broker
        .publish_after(&ordered, "x", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(e, rillkit::Error::Config(_)), "{e}");
    // Nor a delay past ten years.
    let e = broker
        .publish_after(&s, "x", Duration::from_secs(11 * 365 * 86_400))
        .await
        .unwrap_err();
    assert!(matches!(e, rillkit::Error::Config(_)), "{e}");

    // A stop gives the mover lease up at once.
    let lease = "{reminders}:rillkit:due-mover:reminders";
    let held: bool = redis::cmd("EXISTS").arg(lease).query(&mut c).unwrap();
    assert!(held);
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    let held: bool = redis::cmd("EXISTS").arg(lease).query(&mut c).unwrap();
    assert!(!held, "the mover lease outlived the broker");
}

/// Under a cluster every script's keys share the stream's slot: streams
/// with and without a hash tag, on different masters, each get their
/// scheduled entries, and a rate-limited group its permits.
#[actix_rt::test]
async fn scheduled_entries_and_a_rate_limit_in_a_cluster() {
    let cluster = support::RedisCluster::start();
    let topology = rillkit::Topology::cluster(cluster.seeds());
    let mut names: Vec<String> = vec!["jobs{tenant-7}".to_owned()];
    let mut owners = std::collections::HashSet::new();
    owners.insert(cluster.owner_of_slot(cluster.slot_of(&names[0])));
    for i in 0.. {
        let name = format!("jobs-{i}");
        if owners.insert(cluster.owner_of_slot(cluster.slot_of(&name))) {
            names.push(name);
        }
        if names.len() == 3 {
            break;
        }
    }
    let got: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut builder = Broker::with_topology(topology.clone());
    let streams: Vec<Stream> = names.iter().map(|n| Stream::new(n, "g")).collect();
    for s in &streams {
        let g = got.clone();
        builder = builder.subscribe(
            s,
            ConsumerOptions::default()
                .with_rate_limit(rillkit::RateLimit::per_second(50))
                .with_concurrency(4),
            move |text: String| {
                let g = g.clone();
                async move {
                    g.lock().unwrap().push(text);
                    HandlerResult::Ok(())
                }
            },
        );
    }
    let broker = builder.build().unwrap();
    broker.start().await.unwrap();
    let start = now_ms();
    for s in &streams {
        let ids = broker
            .publish_batch_after(
                s,
                (0..20).map(|i| format!("{}-{i}", s.name())),
                Duration::from_secs(1),
            )
            .await
            .unwrap();
        assert_eq!(ids.len(), 20);
    }
    eventually("every scheduled entry handled", WAIT, || {
        got.lock().unwrap().len() == 60
    })
    .await;
    assert!(now_ms() >= start + 1000);
    let admin = Admin::connect_topology(&topology, None).await.unwrap();
    for n in &names {
        assert_eq!(admin.scheduled(n).await.unwrap().count, 0, "{n}");
        let mut c = cluster.conn_for_key(n);
        assert_eq!(stream_len(&mut c, n), 20, "{n}");
    }
    let mut got = got.lock().unwrap().clone();
    got.sort();
    got.dedup();
    assert_eq!(got.len(), 60, "an entry ran twice");
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

/// A subscription added at run time gets its stream's due-mover too.
#[actix_rt::test]
async fn a_subscription_added_at_run_time_moves_due_entries() {
    let redis = RedisServer::start();
    let broker = Broker::builder(redis.url()).build().unwrap();
    broker.start().await.unwrap();
    let s = Stream::new("added-later", "g");
    let got: Arc<Mutex<Vec<String>>> = Arc::default();
    let g = got.clone();
    let _handle = broker
        .subscribe(&s, ConsumerOptions::default(), move |text: String| {
            let g = g.clone();
            async move {
                g.lock().unwrap().push(text);
                HandlerResult::Ok(())
            }
        })
        .await
        .unwrap();
    broker
        .publish_after(&s, "later", Duration::from_millis(200))
        .await
        .unwrap();
    eventually("the scheduled entry handled", WAIT, || {
        got.lock().unwrap().len() == 1
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    let mut c = redis.conn();
    let held: bool = redis::cmd("EXISTS")
        .arg("{added-later}:rillkit:due-mover:added-later")
        .query(&mut c)
        .unwrap();
    assert!(!held, "the mover lease outlived the broker");
}
