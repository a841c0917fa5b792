#[test]
fn the_eviction_settings_are_read_from_info_memory() {
    let info = "# Memory\r\nused_memory:1000\r\nmaxmemory:1048576\r\nmaxmemory_human:1.00M\r\nmaxmemory_policy:volatile-lru\r\n";
    assert_eq!(eviction(info), Some((1_048_576, "volatile-lru".to_owned())));
    assert_eq!(eviction("# Memory\r\nused_memory:1\r\n"), None);
}

use redis::Value;

use super::{ConsumerInfo, cluster_masters, consumers, eviction, groups, pending, scan};

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

#[test]
fn groups_parse_from_resp2_and_resp3_with_nil_lag() {
    let resp2 = Value::Array(vec![Value::Array(vec![
        bulk("name"),
        bulk("g"),
        bulk("consumers"),
        Value::Int(2),
        bulk("pending"),
        Value::Int(3),
        bulk("last-delivered-id"),
        bulk("5-0"),
        bulk("entries-read"),
        Value::Int(5),
        bulk("lag"),
        Value::Nil,
    ])]);
    let g = &groups(resp2).unwrap()[0];
    assert_eq!(
        (g.name.as_str(), g.consumers, g.pending, g.lag),
        ("g", 2, 3, None)
    );
    assert_eq!(g.last_delivered_id.as_str(), "5-0");
    assert_eq!(g.entries_read, Some(5));
    let resp3 = Value::Array(vec![Value::Map(vec![
        (bulk("name"), bulk("h")),
        (bulk("consumers"), Value::Int(0)),
        (bulk("pending"), Value::Int(0)),
        (bulk("last-delivered-id"), bulk("0-0")),
        (bulk("lag"), Value::Int(7)),
    ])]);
    let h = &groups(resp3).unwrap()[0];
    assert_eq!((h.lag, h.entries_read), (Some(7), None));
    assert!(groups(Value::Int(1)).is_err());
}

/// `XINFO CONSUMERS` as each server sends it: Redis 7.0 (no
/// `inactive`), Redis 7.2+ and Valkey 8/9 (`inactive`, `-1` for a
/// consumer that never read), in RESP2 and RESP3, and a field a later
/// server may add.
#[test]
fn consumers_parse_from_redis_7_0_7_2_and_valkey() {
    let resp2 = |fields: Vec<(&str, Value)>| {
        Value::Array(fields.into_iter().flat_map(|(k, v)| [bulk(k), v]).collect())
    };
    let resp3 = |fields: Vec<(&str, Value)>| {
        Value::Map(fields.into_iter().map(|(k, v)| (bulk(k), v)).collect())
    };
    let redis_7_0 = |name: &str| {
        vec![
            ("name", bulk(name)),
            ("pending", Value::Int(1)),
            ("idle", Value::Int(250)),
        ]
    };
    // Redis 7.2+, Valkey 8 and 9: `inactive`, -1 when it never read.
    let redis_7_2 = |name: &str, inactive: i64| {
        let mut f = redis_7_0(name);
        f.push(("inactive", Value::Int(inactive)));
        f
    };
    let shape = |c: &ConsumerInfo| (c.name.clone(), c.pending, c.idle_ms, c.inactive_ms);
    for record in [resp2, resp3] {
        let parsed = consumers(Value::Array(vec![
            record(redis_7_0("old")),
            record(redis_7_2("read", 40)),
            record(redis_7_2("never", -1)),
            record({
                let mut f = redis_7_2("later", 7);
                f.push(("seen-at", Value::Int(1_700_000_000_000)));
                f.push(("flags", Value::Array(vec![bulk("x")])));
                f
            }),
        ]))
        .unwrap();
        assert_eq!(
            parsed.iter().map(shape).collect::<Vec<_>>(),
            [
                ("old".to_owned(), 1, 250, None),
                ("read".to_owned(), 1, 250, Some(40)),
                ("never".to_owned(), 1, 250, None),
                ("later".to_owned(), 1, 250, Some(7)),
            ]
        );
    }
    // A group without consumers.
    assert!(consumers(Value::Array(vec![])).unwrap().is_empty());
    // What is not a number stays an error.
    let bad = resp2(vec![
        ("name", bulk("c")),
        ("pending", Value::Int(0)),
        ("idle", Value::Int(1)),
        ("inactive", bulk("soon")),
    ]);
    assert!(consumers(Value::Array(vec![bad])).is_err());
}

#[test]
fn pending_rows_and_scan_replies_parse() {
    let p = pending(Value::Array(vec![
        Value::Array(vec![
            bulk("1-0"),
            bulk("c1"),
            Value::Int(1500),
            Value::Int(2),
        ]),
        // Handed back with XNACK (Redis 8.8+): no holder, idle -1.
        Value::Array(vec![bulk("2-0"), bulk(""), Value::Int(-1), Value::Int(1)]),
    ]))
    .unwrap();
    assert_eq!(
        (p[0].id.as_str(), p[0].consumer.as_str(), p[0].idle_ms),
        ("1-0", "c1", Some(1500))
    );
    assert_eq!(p[0].delivery_count, 2);
    assert_eq!(
        (p[1].id.as_str(), p[1].consumer.as_str(), p[1].idle_ms),
        ("2-0", "", None)
    );
    assert!(
        pending(Value::Array(vec![Value::Array(vec![
            bulk("1-0"),
            bulk("c1"),
            bulk("soon"),
            Value::Int(1),
        ])]))
        .is_err(),
        "an idle time that is no number stays an error"
    );
    let (cursor, keys) = scan(Value::Array(vec![
        bulk("17"),
        Value::Array(vec![bulk("a")]),
    ]))
    .unwrap();
    assert_eq!((cursor, keys), (17, vec!["a".to_owned()]));
}

#[test]
fn cluster_masters_are_listed_once() {
    let node = |h: &str, p: i64| Value::Array(vec![bulk(h), Value::Int(p), bulk("id")]);
    let v = Value::Array(vec![
        Value::Array(vec![Value::Int(0), Value::Int(10), node("10.0.0.1", 7000)]),
        Value::Array(vec![
            Value::Int(11),
            Value::Int(20),
            node("10.0.0.1", 7000),
            node("10.0.0.2", 7001),
        ]),
        Value::Array(vec![Value::Int(21), Value::Int(30), node("10.0.0.3", 7002)]),
    ]);
    assert_eq!(
        cluster_masters(v).unwrap(),
        ["10.0.0.1:7000", "10.0.0.3:7002"]
    );
}
