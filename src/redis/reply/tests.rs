use redis::Value;

use super::read_reply;

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
