use super::SupervisorOutcome;

fn outcome(errors: usize, panics: usize, timed_out: bool) -> SupervisorOutcome {
    SupervisorOutcome {
        errors,
        panics,
        timed_out,
        closed_connections: 0,
    }
}

#[test]
fn exit_code_priority() {
    assert_eq!(outcome(0, 0, false).exit_code(), 0);
    assert!(outcome(0, 0, false).is_clean());
    assert_eq!(outcome(1, 0, false).exit_code(), 1);
    assert_eq!(outcome(5, 1, false).exit_code(), 2);
    assert_eq!(outcome(5, 1, true).exit_code(), 3);
    assert_eq!(outcome(0, 0, true).exit_code(), 3);
    assert!(!outcome(0, 1, false).is_clean());
}

#[test]
fn merge_takes_the_max() {
    let a = outcome(1, 0, false);
    let b = outcome(0, 1, false);
    assert_eq!(a.merge(b).exit_code(), 2);
    assert_eq!(a.merge(outcome(0, 0, true)).exit_code(), 3);
    assert_eq!(outcome(0, 0, false).merge(a).exit_code(), 1);
}
