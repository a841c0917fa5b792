use std::time::Duration;

use tokio::time::Instant;

use super::{RetryBackoff, RetryQueue, jitter_seed};

#[tokio::test(start_paused = true)]
async fn items_come_due_in_order_and_only_when_due() {
    let fixed = RetryBackoff::fixed(Duration::from_millis(100));
    let mut q = RetryQueue::default();
    q.schedule(&fixed, 1, Duration::from_secs(30), "a");
    tokio::time::advance(Duration::from_millis(10)).await;
    q.schedule(&fixed, 1, Duration::from_secs(30), "b");
    let now = Instant::now();
    assert!(q.take_due(now).is_empty(), "nothing is due yet");
    assert!(q.take_one_due(now).is_none());
    tokio::time::advance(Duration::from_millis(95)).await;
    assert_eq!(q.take_one_due(Instant::now()), Some("a"));
    assert_eq!(q.take_one_due(Instant::now()), None, "b is due 5 ms later");
    tokio::time::advance(Duration::from_millis(10)).await;
    assert_eq!(q.take_due(Instant::now()), vec!["b"]);
    assert_eq!(q.next_due(), None);
}

#[test]
fn items_of_the_same_length_and_run_draw_different_jitter() {
    // Equal inputs must not give equal waits: the seed is random per item.
    let backoff = RetryBackoff::exponential(Duration::from_secs(10));
    let waits: std::collections::BTreeSet<Duration> = (0..50)
        .map(|_| backoff.wait(1, Duration::from_secs(60), jitter_seed()))
        .collect();
    assert!(waits.len() > 40, "{} distinct waits of 50", waits.len());
}
