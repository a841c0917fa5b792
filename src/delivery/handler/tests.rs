use super::{Ran, Verdict, Why, out_of_runs};

fn failed(reject: bool) -> Ran {
    Ran::Failed {
        error: "boom".into(),
        reject,
        panicked: false,
    }
}

fn why(v: Verdict) -> Option<Why> {
    match v {
        Verdict::DeadLetter { why, .. } => Some(why),
        _ => None,
    }
}

#[test]
fn a_failure_runs_again_until_its_last_run() {
    // max_retries = 2: runs 1 and 2 retry, run 3 is the last.
    assert!(matches!(
        failed(false).verdict(1, 2, true),
        Verdict::Retry { .. }
    ));
    assert!(matches!(
        failed(false).verdict(2, 2, true),
        Verdict::Retry { .. }
    ));
    assert_eq!(why(failed(false).verdict(3, 2, true)), Some(Why::LastRun));
    // Redelivered past its runs (a crash each time): still the last.
    assert_eq!(why(failed(false).verdict(7, 2, true)), Some(Why::LastRun));
}

#[test]
fn a_rejection_or_an_undecodable_value_never_runs_again() {
    assert_eq!(why(failed(true).verdict(1, 5, true)), Some(Why::Rejected));
    let undecodable = Ran::Undecodable("not JSON".into());
    assert_eq!(why(undecodable.verdict(1, 5, true)), Some(Why::Undecodable));
}

#[test]
fn without_retries_a_failure_is_a_dead_letter() {
    assert_eq!(why(failed(false).verdict(1, 5, false)), Some(Why::NoRetry));
    assert!(matches!(Ran::Ok.verdict(1, 5, false), Verdict::Settle));
}

#[test]
fn the_error_reaches_the_dead_letter() {
    let Verdict::DeadLetter { error, .. } = failed(true).verdict(1, 0, true) else {
        panic!("a dead letter");
    };
    assert_eq!(error, "boom");
}

#[test]
fn an_entry_out_of_runs_is_named_before_it_runs() {
    assert_eq!(out_of_runs(3, 2), None);
    let why = out_of_runs(4, 2).expect("out of runs");
    assert!(why.contains("delivered 4 times"), "{why}");
    assert_eq!(out_of_runs(u64::MAX, u64::MAX), None);
}
