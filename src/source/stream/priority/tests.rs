use super::Priority;

#[tokio::test]
async fn a_level_reads_while_every_one_before_it_is_clear() {
    let p = Priority::new(3);
    let mut w = p.watch();
    assert!(p.before_clear(0), "the first level never waits");
    assert!(!p.before_clear(1), "nothing is known at first");
    p.set_clear(0, true);
    assert!(w.has_changed().unwrap());
    w.borrow_and_update();
    assert!(p.before_clear(1));
    assert!(!p.before_clear(2));
    p.set_clear(1, true);
    assert!(p.before_clear(2));
    // No change, no wake-up.
    w.borrow_and_update();
    p.set_clear(1, true);
    assert!(!w.has_changed().unwrap());
    p.set_clear(0, false);
    assert!(w.has_changed().unwrap());
    assert!(!p.before_clear(1) && !p.before_clear(2));
    assert!(p.has_after(1) && !p.has_after(2));
}
