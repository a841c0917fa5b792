use super::{ListDeadLetter, glob};

#[test]
fn a_glob_matches_as_scan_does_for_star_and_question_mark() {
    assert!(glob("*", "jobs"));
    assert!(glob("jo?s", "jobs"));
    assert!(glob("j*s", "jobs"));
    assert!(!glob("j*x", "jobs"));
}

#[test]
fn a_dead_letter_reads_apart_and_a_foreign_one_keeps_its_bytes() {
    let d = ListDeadLetter::read(
        3,
        br#"{"list":"jobs","item":"{\"id\":1}","error":"boom","consumer":"c","attempts":4,"dead_lettered_at_ms":5}"#.to_vec(),
    );
    assert_eq!(d.item.as_deref(), Some(&br#"{"id":1}"#[..]));
    assert_eq!(
        (d.index, d.attempts, d.error.as_deref()),
        (3, Some(4), Some("boom"))
    );
    let f = ListDeadLetter::read(0, b"plain".to_vec());
    assert_eq!((f.list, f.raw), (None, b"plain".to_vec()));
}
