use redis::Value;

use super::parse_slots;

#[test]
fn cluster_slots_replies_are_parsed() {
    let node = |h: &str, p: i64| {
        Value::Array(vec![
            Value::BulkString(h.as_bytes().to_vec()),
            Value::Int(p),
            Value::BulkString(b"id".to_vec()),
        ])
    };
    let v = Value::Array(vec![
        Value::Array(vec![
            Value::Int(0),
            Value::Int(5460),
            node("10.0.0.1", 7000),
        ]),
        Value::Array(vec![
            Value::Int(5461),
            Value::Int(16383),
            node("", 7001),
            node("10.0.0.3", 7002),
        ]),
    ]);
    let ranges = parse_slots(v, "10.0.0.9").expect("parses");
    assert_eq!(ranges[0].master, ("10.0.0.1".into(), 7000));
    assert_eq!(ranges[1].master, ("10.0.0.9".into(), 7001), "empty host");
    assert_eq!((ranges[1].start, ranges[1].end), (5461, 16383));
    assert!(parse_slots(Value::Int(1), "x").is_err());
}
