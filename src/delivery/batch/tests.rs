use std::time::Duration;

use tokio::time::Instant;

use super::Gathering;

const WAIT: Duration = Duration::from_millis(50);

#[test]
fn a_full_queue_starts_at_once_and_a_short_one_after_its_wait() {
    let mut g = Gathering::default();
    let t0 = Instant::now();
    assert!(g.ready(3, 3, WAIT, t0), "full");
    assert!(!g.ready(2, 3, WAIT, t0), "short, and nothing waited yet");
    g.after(false, false, t0);
    assert_eq!(g.due(WAIT), Some(t0 + WAIT));
    assert!(!g.ready(2, 3, WAIT, t0 + WAIT / 2));
    assert!(g.ready(2, 3, WAIT, t0 + WAIT), "waited max_wait");
}

#[test]
fn the_first_entrys_wait_goes_on_until_a_batch_starts() {
    let mut g = Gathering::default();
    let t0 = Instant::now();
    g.after(false, false, t0);
    // More arrives later: still counted from the first.
    g.after(false, false, t0 + WAIT / 2);
    assert_eq!(g.due(WAIT), Some(t0 + WAIT));
    // A batch started with entries left: they count from then.
    let t1 = t0 + WAIT;
    g.after(false, true, t1);
    assert_eq!(g.due(WAIT), Some(t1 + WAIT));
    // Nothing queued: nothing gathers.
    g.after(true, false, t1);
    assert_eq!(g.due(WAIT), None);
}

#[test]
fn no_wait_starts_whatever_is_queued() {
    let g = Gathering::default();
    let t0 = Instant::now();
    assert!(g.waited(Duration::ZERO, t0));
    assert!(g.ready(1, 100, Duration::ZERO, t0));
}

#[test]
fn a_batch_due_after_the_last_look_is_awaited_and_one_due_at_it_is_not() {
    let mut g = Gathering::default();
    let t0 = Instant::now();
    g.after(false, false, t0);
    // Not due at the look: awaited, even once its time has passed.
    assert_eq!(g.due_after_look(WAIT), Some(t0 + WAIT));
    // Due at the look and not started (it waits for something else).
    g.after(false, false, t0 + WAIT);
    assert_eq!(g.due_after_look(WAIT), None);
    assert_eq!(g.due(WAIT), Some(t0 + WAIT));
}
