use super::*;

#[test]
fn an_entry_id_names_its_time_in_utc() {
    let at = id_time;
    assert_eq!(
        at("1700000000123-4").as_deref(),
        Some("2023-11-14T22:13:20.123Z")
    );
    assert_eq!(at("0-1").as_deref(), Some("1970-01-01T00:00:00.000Z"));
    assert_eq!(at("18446744073709551615-0"), None, "past the year 9999");
    assert_eq!(at("not-an-id"), None);
}

#[test]
fn durations_read_as_people_read_them() {
    assert_eq!(duration(850), "850ms");
    assert_eq!(duration(12_345), "12.3s");
    assert_eq!(duration(302_000), "5m02s");
    assert_eq!(duration(7_500_000), "2h05m");
    assert_eq!(duration(3 * 86_400_000 + 4 * 3_600_000), "3d04h");
}

#[test]
fn tables_align_and_values_stay_on_one_line() {
    let t = table(
        &["A", "LONGER"],
        &[vec!["xyz".into(), "1".into()], vec!["q".into(), "".into()]],
        Some(CELL_CAP),
    );
    assert_eq!(t, "A    LONGER\nxyz  1\nq\n");
    assert_eq!(text(b"a\nb\x01"), "a\\nb\\u{1}");
    assert_eq!(fit("abcdef", 4), "abc…");
}

#[test]
fn bidi_and_invisible_characters_are_escaped() {
    assert_eq!(text("a\u{202e}b".as_bytes()), "a\\u{202e}b");
    for c in [
        '\u{200b}',
        '\u{200e}',
        '\u{200f}',
        '\u{202a}',
        '\u{2066}',
        '\u{2069}',
        '\u{61c}',
        '\u{feff}',
        '\u{2028}',
        '\u{3164}',
        '\u{e0041}',
    ] {
        let t = text(c.to_string().as_bytes());
        assert_eq!(t, format!("\\u{{{:x}}}", c as u32), "{c:?}");
    }
    assert_eq!(
        text("注文 🚀 é".as_bytes()),
        "注文 🚀 é",
        "printable text stays"
    );
    let v = json!({ "k\u{202e}": "a\u{200b}b\u{e0041}\u{1b}注" });
    let t = json_text(&v, false);
    assert_eq!(t, r#"{"k\u202e":"a\u200bb\udb40\udc41\u001b注"}"#);
    assert_eq!(
        serde_json::from_str::<Value>(&t).unwrap(),
        v,
        "the same strings"
    );
    assert!(json_text(&v, true).contains("\\u202e"));
}

#[test]
fn columns_are_display_columns_and_long_cells_are_cut() {
    let t = table(
        &["NAME", "N"],
        &[
            vec!["注文".into(), "1".into()],
            vec!["abcd".into(), "2".into()],
        ],
        Some(CELL_CAP),
    );
    assert_eq!(t, "NAME  N\n注文  1\nabcd  2\n");
    let long = "x".repeat(300);
    let t = table(&["NAME", "N"], &[vec![long.clone(), "1".into()]], Some(10));
    assert_eq!(t.lines().nth(1), Some("xxxxxxxxx…  1"));
    let t = table(&["NAME"], &[vec![long.clone()]], None);
    assert_eq!(t.lines().nth(1), Some(long.as_str()), "--wide: whole");
    assert_eq!(fit("漢字漢字", 6), "漢字…", "a wide character is not split");
    assert_eq!(fit("ab\\u{202e}cdef", 6), "ab…", "nor an escape");
}
