use redis::Value;

use super::{FleetControl, control_key};
use crate::kind::SourceKind;

#[test]
fn keys_share_the_sources_slot_and_tell_groups_apart() {
    assert_eq!(
        control_key(SourceKind::Stream, "orders", "billing"),
        "{orders}:rillkit:control:billing"
    );
    assert_eq!(
        control_key(SourceKind::Stream, "x", "a:b"),
        "{x}:rillkit:control:a%3Ab"
    );
    assert_eq!(
        control_key(SourceKind::List, "{jobs}", ""),
        "{jobs}:rillkit:control"
    );
}

#[test]
fn a_reply_with_nothing_set_asks_for_nothing_and_bounds_are_kept() {
    let nil = Value::Array(vec![Value::Nil, Value::Nil]);
    assert_eq!(FleetControl::from_reply(&nil), FleetControl::default());
    let set = Value::Array(vec![
        Value::BulkString(b"1700000000000".to_vec()),
        Value::BulkString(b"8".to_vec()),
    ]);
    let c = FleetControl::from_reply(&set);
    assert!(c.paused());
    assert_eq!(c.concurrency, Some(8));
    let zero = Value::Array(vec![Value::Nil, Value::BulkString(b"0".to_vec())]);
    assert_eq!(FleetControl::from_reply(&zero).concurrency, None);
}
