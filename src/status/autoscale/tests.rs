use std::time::Instant;

use super::{Autoscaler, QUIET};

#[test]
fn a_backlog_doubles_a_busy_consumer_up_to_max() {
    let t = Instant::now();
    let mut a = Autoscaler::new(1, 32);
    assert_eq!(a.tick(t, Some(2000), 1), Some(2));
    assert_eq!(a.tick(t, Some(2000), 2), Some(4));
    assert_eq!(a.tick(t, Some(2000), 3), None, "a free slot: no growth");
    for want in [8, 16, 32] {
        assert_eq!(a.tick(t, Some(2000), a.current), Some(want));
    }
    assert_eq!(a.tick(t, Some(2000), 32), None, "never above max");
    assert_eq!(a.tick(t, None, 32), None, "an unknown lag changes nothing");
}

#[test]
fn idle_halves_after_the_quiet_time_never_below_min_or_twice_what_ran() {
    let t = Instant::now();
    let mut a = Autoscaler::new(2, 64);
    a.current = 32;
    assert_eq!(a.tick(t, Some(0), 0), None, "quiet starts");
    assert_eq!(a.tick(t + QUIET / 2, Some(0), 0), None, "hysteresis");
    assert_eq!(a.tick(t + QUIET, Some(0), 0), Some(16));
    assert_eq!(
        a.tick(t + QUIET + QUIET / 2, Some(0), 0),
        None,
        "one halving per quiet time"
    );
    assert_eq!(
        a.tick(t + QUIET * 2, Some(0), 5),
        Some(10),
        "not below twice what ran"
    );
    assert_eq!(a.tick(t + QUIET * 3, Some(0), 5), None, "half busy: kept");
    for (i, want) in [(4, 5), (5, 2)] {
        assert_eq!(a.tick(t + QUIET * i, Some(0), 0), Some(want));
    }
    assert_eq!(a.tick(t + QUIET * 6, Some(0), 0), None, "never below min");
    // A backlog again ends the quiet time.
    assert_eq!(a.tick(t + QUIET * 7, Some(1), 2), Some(4));
    assert_eq!(a.tick(t + QUIET * 8, Some(0), 0), None);
}
