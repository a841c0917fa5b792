use super::share;

#[test]
fn partitions_are_shared_out_by_place_in_name_order() {
    let members = vec!["b".to_owned(), "a".to_owned(), "c".to_owned()];
    assert_eq!(
        share(&members, "a", 7).into_iter().collect::<Vec<_>>(),
        [0, 3, 6]
    );
    assert_eq!(
        share(&members, "b", 7).into_iter().collect::<Vec<_>>(),
        [1, 4]
    );
    assert_eq!(
        share(&members, "c", 7).into_iter().collect::<Vec<_>>(),
        [2, 5]
    );
    assert!(share(&members, "d", 7).is_empty());
    assert_eq!(share(&["a".to_owned()], "a", 3).len(), 3);
}
