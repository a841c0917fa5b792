use super::{DeadLetterFilter, split};
use crate::stream::EntryId;

fn pairs(items: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
    items
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

fn appended(error: &str) -> Vec<(&'static str, String)> {
    vec![
        ("origin_stream", "jobs".into()),
        ("origin_id", "1-0".into()),
        ("origin_group", "g".into()),
        ("origin_consumer", "c1".into()),
        ("delivery_count", "3".into()),
        ("error", error.into()),
        ("failed_at_ms", "1700000000000".into()),
    ]
}

#[test]
fn the_last_seven_pairs_are_the_appended_ones_even_with_an_original_error_field() {
    let mut fields = pairs(&[("data", "{}"), ("error", "original"), ("origin_id", "x")]);
    for (k, v) in appended("boom") {
        fields.push((k.as_bytes().to_vec(), v.into_bytes()));
    }
    let dl = split(EntryId("9-0".into()), fields);
    assert_eq!(
        dl.fields,
        pairs(&[("data", "{}"), ("error", "original"), ("origin_id", "x")])
    );
    assert_eq!(dl.field("error"), Some(&b"original"[..]));
    let o = dl.origin.expect("laid out");
    assert_eq!((o.stream.as_str(), o.id.as_str()), ("jobs", "1-0"));
    assert_eq!((o.delivery_count, o.error.as_str()), (3, "boom"));
    assert_eq!(o.failed_at_ms, 1_700_000_000_000);
    assert!(
        DeadLetterFilter::new()
            .with_error_contains("oo")
            .matches(&split(
                EntryId("9-1".into()),
                appended("boom")
                    .into_iter()
                    .map(|(k, v)| (k.as_bytes().to_vec(), v.into_bytes()))
                    .collect()
            ))
    );
}

#[test]
fn an_entry_not_laid_out_as_a_dead_letter_keeps_every_field_and_no_origin() {
    let fields = pairs(&[("data", "{}"), ("error", "x")]);
    let dl = split(EntryId("1-0".into()), fields.clone());
    assert_eq!((dl.fields, dl.origin), (fields, None));
    let mut bad_count: Vec<(Vec<u8>, Vec<u8>)> = appended("e")
        .into_iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.into_bytes()))
        .collect();
    bad_count[4].1 = b"three".to_vec();
    let dl = split(EntryId("1-0".into()), bad_count.clone());
    assert_eq!((dl.fields, dl.origin), (bad_count, None));
    let no_origin = split(EntryId("1-0".into()), pairs(&[("error", "boom")]));
    assert!(
        !DeadLetterFilter::new()
            .with_error_contains("boom")
            .matches(&no_origin),
        "an original error field is never matched"
    );
}

#[test]
fn the_failed_runs_are_read_apart_between_the_seven_and_the_order_pairs() {
    let mut fields = pairs(&[("data", "{}"), ("attempts", "an original field")]);
    for (k, v) in appended("boom") {
        fields.push((k.as_bytes().to_vec(), v.into_bytes()));
    }
    fields.push((
        b"attempts".to_vec(),
        br#"[{"delivery_count":1,"at_ms":5,"error":"a"},{"delivery_count":2,"at_ms":6,"error":"b"}]"#
            .to_vec(),
    ));
    fields.push((b"order_key".to_vec(), b"k".to_vec()));
    fields.push((b"on_key_failure".to_vec(), b"skip".to_vec()));
    let dl = split(EntryId("9-0".into()), fields);
    assert_eq!(
        dl.fields,
        pairs(&[("data", "{}"), ("attempts", "an original field")])
    );
    let o = dl.origin.expect("laid out");
    let runs: Vec<(u64, &str)> = o
        .attempts
        .iter()
        .map(|a| (a.delivery_count, a.error.as_str()))
        .collect();
    assert_eq!(runs, [(1, "a"), (2, "b")]);
    assert_eq!(o.order_key.as_deref(), Some(&b"k"[..]));
}
