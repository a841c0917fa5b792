use std::time::Duration;

use super::parse;
use redis::Value;

#[test]
fn a_take_reply() {
    let v = Value::Array(vec![Value::Int(3), Value::Int(70)]);
    assert_eq!(parse(&v), Some((3, Duration::from_millis(70))));
    assert_eq!(
        parse(&Value::Array(vec![Value::Int(-1), Value::Int(0)])),
        None
    );
    assert_eq!(parse(&Value::Nil), None);
}
