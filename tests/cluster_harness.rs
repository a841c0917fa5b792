mod support;

use std::time::{Duration, Instant};

use support::{RedisCluster, eventually_blocking, stream_len, xadd};

fn owner_other_than(c: &RedisCluster, slot: u16) -> usize {
    (c.owner_of_slot(slot) + 1) % c.nodes().len()
}

#[test]
fn harness_smoke() {
    let t = Instant::now();
    let c = RedisCluster::start();
    eprintln!("start took {:?}", t.elapsed());
    assert_eq!(c.seeds().len(), 3);
    assert_eq!(c.slot_of("foo"), 12182);
    assert_eq!(c.slot_of("{tasks}:x"), c.slot_of("tasks"));

    let key = "tasks";
    let slot = c.slot_of(key);
    let before = c.owner_of_slot(slot);
    let mut conn = c.conn_for_key(key);
    for i in 0..10 {
        xadd(&mut conn, key, &format!(r#"{{"id":{i}}}"#));
    }
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(key)
        .arg("g")
        .arg("0")
        .query(&mut conn)
        .unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("g")
        .arg("c1")
        .arg("COUNT")
        .arg(3)
        .arg("STREAMS")
        .arg(key)
        .arg(">")
        .query(&mut conn)
        .unwrap();
    let to = owner_other_than(&c, slot);
    let t = Instant::now();
    c.migrate_slot(slot, to);
    eprintln!("migrate_slot took {:?}", t.elapsed());
    assert_eq!(c.owner_of_slot(slot), to);
    assert_ne!(before, to);
    let mut conn = c.conn_for_key(key);
    assert_eq!(stream_len(&mut conn, key), 10);
    assert_eq!(support::pending_count(&mut conn, key, "g"), 3);
    // The old owner redirects.
    let err = redis::cmd("XLEN")
        .arg(key)
        .query::<usize>(&mut c.nodes()[before].conn())
        .unwrap_err();
    eprintln!("old owner after migration: {err:?} / {err}");

    // Step by step, looking in the middle.
    let to2 = owner_other_than(&c, slot);
    let m = c.begin_migration(slot, to2);
    assert_eq!(c.owner_of_slot(slot), to);
    let mut src = c.nodes()[m.from()].conn();
    assert_eq!(stream_len(&mut src, key), 10);
    let n = m.move_keys(&c);
    assert_eq!(n, 1);
    let err = redis::cmd("XLEN")
        .arg(key)
        .query::<usize>(&mut src)
        .unwrap_err();
    eprintln!("source mid-migration, key moved: {err:?} / {err}");
    let err = redis::cmd("XLEN")
        .arg(key)
        .query::<usize>(&mut c.nodes()[m.to()].conn())
        .unwrap_err();
    eprintln!("target mid-migration without ASKING: {err:?} / {err}");
    let mut tgt = c.nodes()[m.to()].conn();
    let _: () = redis::cmd("ASKING").query(&mut tgt).unwrap();
    assert_eq!(stream_len(&mut tgt, key), 10);
    m.finish(&c);
    assert_eq!(c.owner_of_slot(slot), to2);
    assert_eq!(stream_len(&mut c.conn_for_key(key), key), 10);
    assert!(c.command_calls_total("xadd") >= 10);
    assert!(c.command_calls_total("migrate") >= 1);
    eprintln!(
        "xadd calls {}, migrate calls {}",
        c.command_calls_total("xadd"),
        c.command_calls_total("migrate")
    );
}

/// What a blocked XREADGROUP gets when its key's slot moves away.
#[test]
fn blocked_xreadgroup_on_migration() {
    let c = RedisCluster::start();
    for variant in ["whole", "steps"] {
        let key = format!("blocked-{variant}");
        let slot = c.slot_of(&key);
        let from = c.owner_of_slot(slot);
        let mut conn = c.conn_for_key(&key);
        xadd(&mut conn, &key, "{}");
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&key)
            .arg("g")
            .arg("$")
            .query(&mut conn)
            .unwrap();
        let url = c.nodes()[from].url();
        let k = key.clone();
        let reader = std::thread::spawn(move || {
            let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
            let r: redis::RedisResult<redis::Value> = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg("g")
                .arg("c")
                .arg("BLOCK")
                .arg(60_000)
                .arg("STREAMS")
                .arg(&k)
                .arg(">")
                .query(&mut conn);
            (r, Instant::now())
        });
        eventually_blocking("reader blocked", Duration::from_secs(10), || {
            c.nodes()[from].blocked_clients() == 1
        });
        let to = owner_other_than(&c, slot);
        let t = Instant::now();
        let done_at = if variant == "whole" {
            c.migrate_slot(slot, to);
            Instant::now()
        } else {
            let m = c.begin_migration(slot, to);
            m.move_keys(&c);
            let moved_at = Instant::now();
            std::thread::sleep(Duration::from_millis(1500));
            eprintln!(
                "[steps] after move_keys + 1.5 s: reader finished = {}, blocked_clients on source = {}",
                reader.is_finished(),
                c.nodes()[from].blocked_clients()
            );
            m.finish(&c);
            eprintln!(
                "[steps] finish at +{:?} after move_keys",
                moved_at.elapsed()
            );
            moved_at
        };
        let (r, at) = reader.join().unwrap();
        eprintln!(
            "[{variant}] step took {:?}; reader returned {:?} after the migration began; result: {:?}",
            done_at - t,
            at.duration_since(t),
            r
        );
        if let Err(e) = &r {
            eprintln!(
                "[{variant}] error: Display `{e}` code {:?} kind {:?} detail {:?} redirect {:?}",
                e.code(),
                e.kind(),
                e.detail(),
                e.redirect_node()
            );
        }
        assert_eq!(c.owner_of_slot(slot), to);
        assert_eq!(stream_len(&mut c.conn_for_key(&key), &key), 1);
    }
}
