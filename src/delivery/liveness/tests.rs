use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;

use super::{HeldUntil, Liveness, Stall, WhileHeld};

#[tokio::test(start_paused = true)]
async fn the_claim_lapses_a_ttl_after_the_last_confirmed_renewal_was_sent() {
    let ttl = Duration::from_secs(9);
    let mut l = Liveness::new(ttl, Some(Instant::now()), Stall::new(ttl));
    assert!(l.holds());
    assert_eq!(l.due(), Some(Instant::now() + Duration::from_secs(3)));
    tokio::time::advance(Duration::from_secs(3)).await;
    l.sending();
    assert_eq!(l.due(), None, "one renewal at a time");
    // The reply comes late: the claim counts from when it was sent.
    tokio::time::advance(Duration::from_secs(2)).await;
    let r = l.confirmed();
    assert!(!r.lapsed);
    tokio::time::advance(Duration::from_millis(6_999)).await;
    assert!(l.holds(), "3 s + 9 s after the start, less 1 ms");
    // Renewals fail from here on: the claim lapses, nothing may start.
    l.sending();
    let f = l.failed();
    assert!(f.log && !f.lapsed);
    tokio::time::advance(Duration::from_millis(2)).await;
    assert!(!l.holds());
    l.sending();
    assert!(l.failed().lapsed);
    l.sending();
    let r = l.confirmed();
    assert!(r.lapsed, "it had lapsed before this renewal");
    assert_eq!(r.after_failures, 2);
    assert!(l.holds());
}

#[tokio::test(start_paused = true)]
async fn a_failed_renewal_is_tried_again_promptly_and_a_stall_blocks_judging_for_a_ttl() {
    let ttl = Duration::from_secs(3);
    let mut l = Liveness::new(ttl, Some(Instant::now()), Stall::new(ttl));
    assert!(l.may_judge_others(), "no trouble yet");
    tokio::time::advance(Duration::from_secs(1)).await;
    l.sending();
    l.failed();
    let due = l.due().expect("due again");
    assert!(
        due <= Instant::now() + Duration::from_millis(200),
        "retried within the first backoff step, not a third of the TTL later"
    );
    assert!(!l.may_judge_others(), "trouble just now");
    // The server answers again 5 s later: a whole TTL of quiet from then.
    tokio::time::advance(Duration::from_secs(5)).await;
    assert!(!l.may_judge_others(), "silence is no answer");
    l.sending();
    assert!(l.confirmed().lapsed);
    assert!(
        !l.may_judge_others(),
        "the window starts when it answers again"
    );
    tokio::time::advance(ttl - Duration::from_millis(1)).await;
    assert!(!l.may_judge_others());
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(l.may_judge_others());
    // A trouble seen elsewhere (a failed read) counts the same.
    l.stall().trouble();
    assert!(!l.may_judge_others());
}

#[tokio::test(start_paused = true)]
async fn work_guarded_by_a_claim_is_not_polled_past_its_lapse() {
    use std::future::Future;
    use std::task::{Context, Poll};
    let polls = Rc::new(Cell::new(0));
    let counted = polls.clone();
    let inner = Box::pin(std::future::poll_fn(move |_| {
        counted.set(counted.get() + 1);
        Poll::<()>::Pending
    }));
    let until: HeldUntil = Rc::new(Cell::new(Some(Instant::now() + Duration::from_secs(1))));
    let mut guarded = WhileHeld::new(inner, until.clone());
    let mut cx = Context::from_waker(std::task::Waker::noop());
    assert!(std::pin::Pin::new(&mut guarded).poll(&mut cx).is_pending());
    assert_eq!(polls.get(), 1);
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(std::pin::Pin::new(&mut guarded).poll(&mut cx).is_pending());
    assert_eq!(polls.get(), 1, "not polled at the lapse");
    // A renewal confirmed meanwhile: polled again.
    until.set(Some(Instant::now() + Duration::from_secs(1)));
    assert!(std::pin::Pin::new(&mut guarded).poll(&mut cx).is_pending());
    assert_eq!(polls.get(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_claim_not_yet_confirmed_holds_and_is_renewed_at_once() {
    let l = Liveness::new(Duration::from_secs(9), None, Stall::new(Duration::ZERO));
    assert!(l.holds());
    assert_eq!(l.due(), Some(Instant::now()));
}
