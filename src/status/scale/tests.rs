use super::Scale;

#[test]
fn a_fleet_value_counts_only_where_the_concurrency_may_change() {
    let s = Scale::default();
    s.configure(4, true);
    assert_eq!(s.concurrency(), 4);
    assert!(s.set_fleet(Some(8)));
    assert_eq!(s.concurrency(), 8);
    assert!(!s.set_fleet(Some(8)), "no change");
    assert!(s.set_fleet(None));
    assert_eq!(s.concurrency(), 4);
    let fixed = Scale::default();
    fixed.configure(3, false);
    assert!(!fixed.set_fleet(Some(8)));
    assert_eq!((fixed.concurrency(), fixed.fleet()), (3, Some(8)));
}
