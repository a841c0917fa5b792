use super::{Answer, PER_RUN, POLL, WATCH, next_run, parse};
use redis::Value;
use std::time::Duration;

#[test]
fn answers_and_when_to_run_again() {
    let held = Value::Array(vec![Value::Int(0), Value::Int(0), Value::Int(120)]);
    assert_eq!(parse(&held), Some(Answer::Held(120)));
    assert_eq!(next_run(&Answer::Held(120)), Duration::from_millis(120));
    assert_eq!(next_run(&Answer::Held(4000)), WATCH);
    assert_eq!(next_run(&Answer::Held(-2)), WATCH);
    let moved = Value::Array(vec![Value::Int(1), Value::Int(3), Value::Int(-1)]);
    assert_eq!(parse(&moved), Some(Answer::Moved(3, None)));
    assert_eq!(next_run(&Answer::Moved(3, None)), POLL);
    assert_eq!(
        next_run(&Answer::Moved(0, Some(7))),
        Duration::from_millis(7)
    );
    assert_eq!(
        next_run(&Answer::Moved(PER_RUN as i64, Some(0))),
        Duration::ZERO
    );
    assert_eq!(parse(&Value::Nil), None);
}
