use std::time::Duration;

use super::{Retry, backoff};

#[test]
fn backoff_stays_within_100ms_and_10s_with_jitter() {
    let delays: Vec<Duration> = backoff().take(200).collect();
    assert!(
        delays
            .iter()
            .all(|d| *d >= Duration::from_millis(100) && *d <= Duration::from_secs(10))
    );
    assert!(delays[199] > Duration::from_secs(5), "it does grow");
}

#[test]
fn a_retry_logs_the_first_failure_and_each_doubling_then_starts_over() {
    let mut r = Retry::default();
    let logged: Vec<u32> = (1..=20).filter(|_| r.failed().1).collect();
    assert_eq!(logged, vec![1, 2, 4, 8, 16]);
    assert_eq!(r.succeeded(), 20);
    assert_eq!(r.failures(), 0);
    let (first_delay, log) = r.failed();
    assert!(
        log && first_delay <= Duration::from_millis(200),
        "{first_delay:?}"
    );
}
