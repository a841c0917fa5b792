//! The newer stream commands, where the server has them: what each server
//! has is learned from it; idempotent publishes add each message once on
//! every server (`XADD … IDMP` or a script); a stream kept with
//! `retain_acked` loses its entries with their last ack (`XACKDEL`) and its
//! sweep trims exactly what every group acked (`XTRIM … ACKED`).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rillkit::admin::Admin;
use rillkit::prelude::*;
use rillkit::{MessageKey, ServerCommands, Topology};
use support::monitor::Monitor;
use support::server::has_command;
use support::{RedisServer, eventually, stream_len};

const WAIT: Duration = Duration::from_secs(60);

fn marker_keys(c: &mut redis::Connection) -> usize {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*rillkit:idmp:*").query(c).unwrap();
    keys.len()
}

/// Whether `XADD` on this server takes `IDMP` (asked by trying it).
fn has_idmp(c: &mut redis::Connection) -> bool {
    redis::cmd("XADD")
        .arg("probe:idmp")
        .arg("IDMP")
        .arg("p")
        .arg("1")
        .arg("*")
        .arg("f")
        .arg("v")
        .query::<String>(c)
        .is_ok()
}

/// Adds an entry with `data` = each of `values` to `stream`, creates
/// `group` from `0`, and has `consumer` read them all without acking: what
/// a consumer that died leaves.
fn strand(
    c: &mut redis::Connection,
    stream: &str,
    group: &str,
    consumer: &str,
    values: std::ops::Range<u64>,
) {
    for n in values {
        let _: String = redis::cmd("XADD")
            .arg(stream)
            .arg("*")
            .arg("data")
            .arg(n)
            .query(c)
            .unwrap();
    }
    let () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(group)
        .arg("0")
        .query(c)
        .unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(group)
        .arg(consumer)
        .arg("STREAMS")
        .arg(stream)
        .arg(">")
        .query(c)
        .unwrap();
}

#[actix_rt::test]
async fn what_each_server_has_is_asked_of_it() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let admin = Admin::connect(&redis.url()).await.unwrap();
    let rows = admin.server_commands().await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let found: ServerCommands = rows[0].1;
    assert_eq!(
        found.ack_and_delete(),
        has_command(&mut c, "XACKDEL"),
        "{found}"
    );
    assert_eq!(found.hand_back(), has_command(&mut c, "XNACK"), "{found}");
    assert_eq!(found.idempotent_add(), has_idmp(&mut c), "{found}");
    if !has_command(&mut c, "XACKDEL") {
        assert_eq!(found, ServerCommands::default(), "{found}");
        assert_eq!(found.to_string(), "none of the newer stream commands");
    }
}

#[actix_rt::test]
async fn the_same_500_documents_published_twice_leave_500_entries() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let idmp = has_idmp(&mut c);
    let broker = Broker::builder(redis.url()).build().unwrap();
    broker.start().await.unwrap();
    let orders = Stream::new("orders", "billing");
    let mut first = Vec::new();
    for n in 0..500u64 {
        let key = MessageKey::new("checkout", format!("order-{n}"));
        first.push(broker.publish_idempotent(&orders, &key, &n).await.unwrap());
    }
    for (n, id) in first.iter().enumerate() {
        let key = MessageKey::new("checkout", format!("order-{n}"));
        let again = broker
            .publish_idempotent(&orders, &key, &(n as u64))
            .await
            .unwrap();
        assert_eq!(&again, id, "a resend answers the first entry's id");
    }
    assert_eq!(stream_len(&mut c, "orders"), 500);
    // Another producer's ids are its own.
    let other = MessageKey::new("refunds", "order-0");
    broker
        .publish_idempotent(&orders, &other, &0u64)
        .await
        .unwrap();
    assert_eq!(stream_len(&mut c, "orders"), 501);
    if idmp {
        // The server's own history, kept long and large enough: no marker.
        assert_eq!(marker_keys(&mut c), 0);
        let info: Vec<redis::Value> = redis::cmd("XINFO")
            .arg("STREAM")
            .arg("orders")
            .query(&mut c)
            .unwrap();
        let at = info
            .iter()
            .position(|v| *v == redis::Value::BulkString(b"idmp-maxsize".to_vec()))
            .expect("idmp-maxsize");
        assert_eq!(
            info[at + 1],
            redis::Value::Int(10_000),
            "IDMP-MAXSIZE raised"
        );
        // A message added by the marker's path before the server was
        // upgraded is recognised by IDMP's path too.
        let () = redis::cmd("SET")
            .arg("{orders}:rillkit:idmp:checkout:order-legacy")
            .arg(first[0].as_str())
            .query(&mut c)
            .unwrap();
        let legacy = MessageKey::new("checkout", "order-legacy");
        let again = broker
            .publish_idempotent(&orders, &legacy, &0u64)
            .await
            .unwrap();
        assert_eq!(again, first[0]);
        assert_eq!(stream_len(&mut c, "orders"), 501);
    } else {
        assert_eq!(marker_keys(&mut c), 501, "one marker per message");
        let ttl: i64 = redis::cmd("PTTL")
            .arg("{orders}:rillkit:idmp:checkout:order-7")
            .query(&mut c)
            .unwrap();
        assert!(ttl > 3_000_000 && ttl <= 3_600_000, "a 1 h window: {ttl}");
    }
    let _ = broker.stop().await.unwrap();
}

#[actix_rt::test]
async fn a_message_is_added_again_once_its_window_is_over() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let admin = Admin::connect(&redis.url()).await.unwrap();
    let key = MessageKey::new("importer", "row-1");
    // Long enough for the resend to land inside it on a loaded machine.
    let window = Duration::from_secs(5);
    let fields = [("data", "1")];
    let first = admin
        .add_idempotent("rows", &key, &fields, window, true)
        .await
        .unwrap()
        .expect("created");
    let again = admin
        .add_idempotent("rows", &key, &fields, window, true)
        .await
        .unwrap();
    assert_eq!(again.as_ref(), Some(&first));
    assert_eq!(stream_len(&mut c, "rows"), 1);
    // Past the window (plus the server's expiry cycle), it is new again.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let id = admin
            .add_idempotent("rows", &key, &fields, window, true)
            .await
            .unwrap()
            .unwrap();
        if id != first {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never added again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(stream_len(&mut c, "rows"), 2);
    // Without `create`, a missing stream is not made.
    let none = admin
        .add_idempotent("missing", &key, &fields, window, false)
        .await
        .unwrap();
    assert_eq!(none, None);
    assert_eq!(stream_len(&mut c, "missing"), 0);
    let exists: bool = redis::cmd("EXISTS").arg("missing").query(&mut c).unwrap();
    assert!(!exists);
}

/// A broker with two groups on `orders`, kept with `retain_acked`, each
/// counting what it handled.
fn two_groups(redis: &RedisServer, period: Duration) -> (Broker, Arc<AtomicU64>) {
    let handled = Arc::new(AtomicU64::new(0));
    let mut builder = Broker::builder(redis.url()).retention_period(period);
    for group in ["billing", "audit"] {
        let h = handled.clone();
        let s = Stream::new("orders", group).with_retain_acked(true);
        builder = builder.subscribe(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_claim_idle(Duration::from_secs(3600))
                .with_block(Duration::from_millis(100)),
            move |_: u64| {
                let h = h.clone();
                async move {
                    h.fetch_add(1, Ordering::SeqCst);
                    HandlerResult::Ok(())
                }
            },
        );
    }
    (builder.build().unwrap(), handled)
}

#[actix_rt::test]
async fn acked_entries_leave_the_stream_with_their_last_ack() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    if !support::server::command_or_skip(
        &mut c,
        "XACKDEL",
        "Redis 8.2+",
        "acked_entries_leave_the_stream_with_their_last_ack",
    ) {
        return;
    }
    // The sweep runs once at start, then only after an hour: what leaves
    // the stream leaves with the acks.
    let (broker, handled) = two_groups(&redis, Duration::from_secs(3600));
    broker.start().await.unwrap();
    let orders = Stream::new("orders", "billing");
    broker.publish_batch(&orders, 0..300u64).await.unwrap();
    eventually("both groups handled all 300", WAIT, || {
        handled.load(Ordering::SeqCst) == 600
    })
    .await;
    eventually("every entry gone with its last ack", WAIT, || {
        stream_len(&mut c, "orders") == 0
    })
    .await;
    assert!(redis.command_calls("xackdel") > 0);
    let _ = broker.stop().await.unwrap();
}

#[actix_rt::test]
async fn the_sweep_trims_exactly_what_every_group_acked() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    if !support::server::command_or_skip(
        &mut c,
        "XACKDEL",
        "Redis 8.2+",
        "the_sweep_trims_exactly_what_every_group_acked",
    ) {
        return;
    }
    // 50 entries both groups read and acked with a plain XACK (another
    // client), and one `audit` still holds.
    for n in 0..51u64 {
        let _: String = redis::cmd("XADD")
            .arg("orders")
            .arg("*")
            .arg("data")
            .arg(n)
            .query(&mut c)
            .unwrap();
    }
    for group in ["billing", "audit"] {
        let () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg("orders")
            .arg(group)
            .arg("0")
            .query(&mut c)
            .unwrap();
        let read: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(group)
            .arg("other")
            .arg("COUNT")
            .arg(100)
            .arg("STREAMS")
            .arg("orders")
            .arg(">")
            .query(&mut c)
            .unwrap();
        let mut ids: Vec<String> = read.keys[0].ids.iter().map(|e| e.id.clone()).collect();
        if group == "audit" {
            ids.remove(10);
        }
        let _: u64 = redis::cmd("XACK")
            .arg("orders")
            .arg(group)
            .arg(&ids)
            .query(&mut c)
            .unwrap();
    }
    let (broker, _) = two_groups(&redis, Duration::from_millis(100));
    broker.start().await.unwrap();
    // A sweep by macro node (`MINID ~`) would leave these 50 in their
    // node; `XTRIM … ACKED` takes each acked one, the held one stays.
    eventually("every acked entry trimmed", WAIT, || {
        stream_len(&mut c, "orders") == 1
    })
    .await;
    let _ = broker.stop().await.unwrap();
}

#[actix_rt::test]
async fn on_a_cluster_each_stream_takes_its_masters_path() {
    let cluster = support::RedisCluster::start();
    let topology = Topology::cluster(cluster.seeds());
    // A stream on each master.
    let mut names: Vec<String> = Vec::new();
    let mut owners = std::collections::HashSet::new();
    for i in 0.. {
        let name = format!("orders-{i}");
        if owners.insert(cluster.owner_of_slot(cluster.slot_of(&name))) {
            names.push(name);
        }
        if names.len() == 3 {
            break;
        }
    }
    let mut c = cluster.conn_for_key(&names[0]);
    let xackdel = has_command(&mut c, "XACKDEL");
    let admin = Admin::connect_topology(&topology, None).await.unwrap();
    let rows = admin.server_commands().await.unwrap();
    assert_eq!(rows.len(), 3, "one row per master: {rows:?}");
    assert!(rows.iter().all(|(_, f)| f.ack_and_delete() == xackdel));

    let handled = Arc::new(AtomicU64::new(0));
    let mut builder = Broker::with_topology(topology).retention_period(Duration::from_secs(3600));
    let streams: Vec<Stream> = names
        .iter()
        .map(|n| Stream::new(n, "billing").with_retain_acked(true))
        .collect();
    for s in &streams {
        let h = handled.clone();
        builder = builder.subscribe(
            s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(Duration::from_millis(200)),
            move |_: u64| {
                let h = h.clone();
                async move {
                    h.fetch_add(1, Ordering::SeqCst);
                    HandlerResult::Ok(())
                }
            },
        );
    }
    let broker = builder.build().unwrap();
    broker.start().await.unwrap();
    for _ in 0..2 {
        for s in &streams {
            for n in 0..100u64 {
                let key = MessageKey::new("importer", n.to_string());
                broker.publish_idempotent(s, &key, &n).await.unwrap();
            }
        }
    }
    eventually("each message handled once", WAIT, || {
        handled.load(Ordering::SeqCst) == 300
    })
    .await;
    for name in &names {
        let mut conn = cluster.conn_for_key(name);
        if xackdel {
            eventually("acked entries gone with their ack", WAIT, || {
                stream_len(&mut conn, name) == 0
            })
            .await;
        } else {
            assert_eq!(stream_len(&mut conn, name), 100, "{name}: each once");
        }
    }
    let _ = broker.stop().await.unwrap();
    assert_eq!(handled.load(Ordering::SeqCst), 300, "nothing ran twice");
}

/// The `redis-server` on the `PATH` (Debian's 7.0 in CI) when the suite's
/// has `XACKDEL` and it has not: the two versions of an upgrade.
fn older_server() -> Option<&'static str> {
    let suites = RedisServer::start();
    if !has_command(&mut suites.conn(), "XACKDEL") {
        return None;
    }
    let older = RedisServer::start_binary("redis-server", &[]);
    (!has_command(&mut older.conn(), "XACKDEL")).then_some("redis-server")
}

#[actix_rt::test]
async fn a_cluster_of_two_versions_consumes_reclaims_and_retains() {
    let test = "a_cluster_of_two_versions_consumes_reclaims_and_retains";
    let Some(older) = older_server() else {
        support::server::print_skip(
            test,
            "and the redis-server on the PATH do not differ in XACKDEL (run it with RILLKIT_REDIS_SERVER set to Redis 8.2+ and Redis 7 on the PATH)",
        );
        return;
    };
    let cluster = support::RedisCluster::start_mixed(older);
    // A stream on each master: the first on the older one.
    let mut names: Vec<Option<String>> = vec![None; 3];
    for i in 0.. {
        let name = format!("orders-{i}");
        let owner = cluster.owner_of_slot(cluster.slot_of(&name));
        names[owner].get_or_insert(name);
        if names.iter().all(Option::is_some) {
            break;
        }
    }
    let names: Vec<String> = names.into_iter().flatten().collect();
    // 50 entries each that a consumer which then died had read.
    for name in &names {
        strand(
            &mut cluster.conn_for_key(name),
            name,
            "billing",
            "ghost",
            1000..1050,
        );
    }
    let topology = Topology::cluster(cluster.seeds());
    let admin = Admin::connect_topology(&topology, None).await.unwrap();
    let rows = admin.server_commands().await.unwrap();
    assert_eq!(
        rows.iter().filter(|(_, f)| f.ack_and_delete()).count(),
        2,
        "two masters of the newer version: {rows:?}"
    );
    let handled = Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
    let mut builder = Broker::with_topology(topology).retention_period(Duration::from_millis(200));
    let streams: Vec<Stream> = names
        .iter()
        .map(|n| Stream::new(n, "billing").with_retain_acked(true))
        .collect();
    for s in &streams {
        let (h, name) = (handled.clone(), s.name().to_owned());
        builder = builder.subscribe(
            s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_claim_idle(Duration::from_secs(1))
                .with_block(Duration::from_millis(200)),
            move |n: u64| {
                *h.lock().unwrap().entry((name.clone(), n)).or_insert(0u32) += 1;
                std::future::ready(HandlerResult::Ok(()))
            },
        );
    }
    let broker = builder.build().unwrap();
    broker.start().await.unwrap();
    for s in &streams {
        for n in 0..100u64 {
            let key = MessageKey::new("importer", n.to_string());
            broker.publish_idempotent(s, &key, &n).await.unwrap();
            broker.publish_idempotent(s, &key, &n).await.unwrap();
        }
    }
    eventually("150 entries of each stream handled", WAIT, || {
        handled.lock().unwrap().len() == 450
    })
    .await;
    for name in &names[1..] {
        let mut conn = cluster.conn_for_key(name);
        eventually("the newer masters' streams emptied", WAIT, || {
            stream_len(&mut conn, name) == 0
        })
        .await;
    }
    // The older master's stream: acked with XACK, trimmed by the script
    // (whole macro nodes), nothing pending.
    let mut conn = cluster.conn_for_key(&names[0]);
    eventually("the older master's stream trimmed", WAIT, || {
        stream_len(&mut conn, &names[0]) < 150
    })
    .await;
    let _ = broker.stop().await.unwrap();
    assert!(
        handled.lock().unwrap().values().all(|n| *n == 1),
        "each entry ran once"
    );
}

#[actix_rt::test]
async fn a_dead_consumers_entries_come_with_the_reads_of_another() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let test = "a_dead_consumers_entries_come_with_the_reads_of_another";
    // XNACK (8.8) comes after XREADGROUP's CLAIM (8.4): a server with it
    // has both.
    if !support::server::command_or_skip(&mut c, "XNACK", "Redis 8.8+", test) {
        return;
    }
    // 20 entries a consumer read and then died with.
    strand(&mut c, "jobs", "workers", "ghost", 0..20);
    let monitor = Monitor::start(&redis.url());
    let runs = Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
    let r = runs.clone();
    let broker = Broker::builder(redis.url())
        .subscribe(
            &Stream::new("jobs", "workers"),
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_claim_idle(Duration::from_secs(1))
                .with_block(Duration::from_millis(200)),
            move |n: u64| {
                let r = r.clone();
                async move {
                    // Long enough for refreshes of held entries to run.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    *r.lock().unwrap().entry(n).or_insert(0u32) += 1;
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker
        .publish_batch(&Stream::new("jobs", "workers"), 20..30u64)
        .await
        .unwrap();
    eventually(
        "the dead consumer's 20 and 10 new entries handled",
        WAIT,
        || runs.lock().unwrap().len() == 30,
    )
    .await;
    eventually("every entry acked", WAIT, || {
        let pending: (u64, redis::Value, redis::Value, redis::Value) = redis::cmd("XPENDING")
            .arg("jobs")
            .arg("workers")
            .query(&mut c)
            .unwrap();
        pending.0 == 0
    })
    .await;
    let _ = broker.stop().await.unwrap();
    assert!(
        runs.lock().unwrap().values().all(|n| *n == 1),
        "each ran once"
    );
    let reads = monitor.calls("XREADGROUP");
    assert!(
        reads
            .iter()
            .any(|r| r.iter().any(|w| w.eq_ignore_ascii_case("CLAIM"))
                && r.contains(&"c1".to_owned())),
        "c1's reads carry CLAIM: {reads:?}"
    );
    assert!(monitor.calls("XAUTOCLAIM").is_empty());
    // XCLAIM only as a refresh of held entries: to itself, at min-idle 0.
    for claim in monitor.calls("XCLAIM") {
        assert!(
            claim.get(3).is_some_and(|w| w == "c1") && claim.get(4).is_some_and(|w| w == "0"),
            "{claim:?}"
        );
        assert!(
            claim.iter().any(|w| w.eq_ignore_ascii_case("JUSTID")),
            "{claim:?}"
        );
    }
}
