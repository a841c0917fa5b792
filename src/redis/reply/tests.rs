use redis::Value;

use super::{read_reply, read_reply_counted};

fn bs(s: &[u8]) -> Value {
    Value::BulkString(s.to_vec())
}

#[test]
fn parses_resp2_reply_with_binary_values_and_nil_bodies() {
    let v = Value::Array(vec![Value::Array(vec![
        bs(b"s"),
        Value::Array(vec![
            Value::Array(vec![
                bs(b"1-0"),
                Value::Array(vec![bs(b"data"), bs(b"\xff\xfe"), bs(b"x"), bs(b"y")]),
            ]),
            Value::Array(vec![bs(b"2-0"), Value::Nil]),
        ]),
    ])]);
    let e = read_reply(v).unwrap();
    assert_eq!(e.len(), 2);
    assert_eq!(e[0].id.as_str(), "1-0");
    let f = e[0].fields.as_ref().unwrap();
    assert_eq!(f[0], (b"data".to_vec(), b"\xff\xfe".to_vec()));
    assert_eq!(f[1], (b"x".to_vec(), b"y".to_vec()));
    assert!(e[1].fields.is_none());
}

#[test]
fn nil_is_an_empty_read() {
    assert!(read_reply(Value::Nil).unwrap().is_empty());
}

#[test]
fn parses_resp3_map() {
    let v = Value::Map(vec![(
        bs(b"s"),
        Value::Array(vec![Value::Array(vec![
            bs(b"3-1"),
            Value::Array(vec![bs(b"data"), bs(b"{}")]),
        ])]),
    )]);
    let e = read_reply(v).unwrap();
    assert_eq!(e[0].id.as_str(), "3-1");
}

#[test]
fn garbage_is_an_error() {
    assert!(read_reply(Value::Int(3)).is_err());
}

#[test]
fn a_read_with_claim_gives_each_entry_its_count_before_this_delivery() {
    // XREADGROUP … CLAIM: `[id, fields, idle-ms, count]`, claimed ones first.
    let v = Value::Array(vec![Value::Array(vec![
        bs(b"s"),
        Value::Array(vec![
            Value::Array(vec![
                bs(b"1-0"),
                Value::Array(vec![bs(b"data"), bs(b"1")]),
                Value::Int(5047),
                Value::Int(2),
            ]),
            Value::Array(vec![
                bs(b"9-0"),
                Value::Array(vec![bs(b"data"), bs(b"9")]),
                Value::Int(0),
                Value::Int(0),
            ]),
        ]),
    ])]);
    let e = read_reply_counted(v).unwrap();
    let counts: Vec<(&str, Option<u64>)> = e.iter().map(|(r, c)| (r.id.as_str(), *c)).collect();
    assert_eq!(counts, [("1-0", Some(2)), ("9-0", Some(0))]);
    // A plain read gives none.
    let plain = Value::Array(vec![Value::Array(vec![
        bs(b"s"),
        Value::Array(vec![Value::Array(vec![
            bs(b"3-0"),
            Value::Array(vec![bs(b"data"), bs(b"3")]),
        ])]),
    ])]);
    assert_eq!(read_reply_counted(plain).unwrap()[0].1, None);
}
