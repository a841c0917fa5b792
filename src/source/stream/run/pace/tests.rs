use std::sync::Arc;

use super::Pace;
use crate::source::stream::priority::{Level, Priority};

fn level(p: &Arc<Priority>, index: usize) -> Pace {
    Pace::new(
        None,
        Some(Level {
            priority: p.clone(),
            index,
        }),
    )
}

#[test]
fn a_stream_is_clear_once_a_read_found_none_and_nothing_waits() {
    let p = Priority::new(3);
    let (mut hi, mut mid, lo) = (level(&p, 0), level(&p, 1), level(&p, 2));
    assert!(hi.may_read_new());
    assert!(!mid.may_read_new(), "nothing is known of hi yet");
    // hi probes (no BLOCK) until it finds its stream empty.
    assert!(hi.probes());
    hi.admit(10, true);
    hi.read_ended(Some(10), true);
    hi.show(true, false);
    assert!(!mid.may_read_new(), "hi found entries");
    hi.read_ended(Some(0), true);
    hi.show(false, false);
    assert!(!mid.may_read_new(), "what hi read still waits");
    hi.show(true, false);
    assert!(mid.may_read_new());
    assert!(!hi.probes(), "found none: its next read blocks");
    // mid has found nothing either, but was held back: lo waits until mid
    // has read again.
    mid.read_ended(Some(0), true);
    mid.held_back();
    mid.show(true, false);
    assert!(!lo.may_read_new());
    mid.read_ended(Some(0), true);
    mid.show(true, false);
    assert!(lo.may_read_new());
    // A failed read of hi counts as finding none; a paused stream is clear.
    hi.read_ended(Some(3), true);
    hi.show(true, false);
    assert!(!mid.may_read_new());
    hi.read_ended(None, true);
    hi.show(true, false);
    assert!(mid.may_read_new());
    hi.read_ended(Some(3), true);
    hi.show(false, true);
    assert!(mid.may_read_new());
}

#[test]
fn a_loop_that_ends_holds_no_stream_back() {
    let p = Priority::new(2);
    let lo = level(&p, 1);
    {
        let hi = level(&p, 0);
        hi.show(false, false);
        assert!(!lo.may_read_new());
    }
    assert!(lo.may_read_new(), "dropped: clear");
}

#[test]
fn without_a_limit_a_read_fetches_what_it_wants() {
    let mut p = Pace::new(None, None);
    assert_eq!(p.admit(10, true), Some(10));
    p.read_ended(Some(0), true);
    assert_eq!(p.admit(10, true), Some(10), "no limit: no short-read cap");
    assert!(p.may_read_new() && !p.probes());
}
