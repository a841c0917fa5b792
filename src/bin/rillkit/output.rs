//! How the `rillkit` tool prints: aligned tables, durations, field values,
//! and the JSON shapes of `--json`.

use std::time::{SystemTime, UNIX_EPOCH};

use rillkit::admin::{DeadLetter, StreamEntry};
use serde_json::{Map, Value, json};

/// Columns left-aligned, two spaces apart, one header line. Every cell is
/// escaped ([`text`]): names come from the server, and a stream, group or
/// consumer name may hold terminal control sequences.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| text(c.as_bytes())).collect())
        .collect();
    let rows = rows.as_slice();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            if i > 0 {
                l.push_str("  ");
            }
            l.push_str(cell);
            l.extend(std::iter::repeat_n(' ', w - cell.chars().count()));
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// A duration in ms as people read it: `850ms`, `12.3s`, `5m02s`, `2h05m`,
/// `3d04h`.
pub fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{}.{}s", s, (ms % 1000) / 100),
        60_000..3_600_000 => format!("{}m{:02}s", s / 60, s % 60),
        3_600_000..86_400_000 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A name, field or value as text to print: UTF-8 (lossy), control
/// characters escaped (`\n`, `\u{1b}`…), so one entry stays on one line and
/// nothing read from the server can drive the terminal.
pub fn text(bytes: &[u8]) -> String {
    let mut out = String::new();
    for c in String::from_utf8_lossy(bytes).chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// At most `max` characters, with `…` when cut.
pub fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// `name=value  name=value`.
pub fn fields_line(fields: &[(Vec<u8>, Vec<u8>)]) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("{}={}", text(k), text(v)))
        .collect::<Vec<_>>()
        .join("  ")
}

/// Field/value pairs as a JSON object of strings (UTF-8, lossy); of a
/// repeated name the first value is kept.
pub fn fields_json(fields: &[(Vec<u8>, Vec<u8>)]) -> Value {
    let mut m = Map::new();
    for (k, v) in fields {
        m.entry(String::from_utf8_lossy(k).into_owned())
            .or_insert_with(|| Value::String(String::from_utf8_lossy(v).into_owned()));
    }
    Value::Object(m)
}

/// `{"id", "fields"}`.
pub fn entry_json(e: &StreamEntry) -> Value {
    json!({ "id": e.id.as_str(), "fields": fields_json(&e.fields) })
}

/// `{"id", "fields", "origin": {…} | null}`.
pub fn dead_letter_json(d: &DeadLetter) -> Value {
    let origin = d.origin.as_ref().map(|o| {
        json!({
            "stream": o.stream,
            "id": o.id.as_str(),
            "group": o.group,
            "consumer": o.consumer,
            "delivery_count": o.delivery_count,
            "error": o.error,
            "failed_at_ms": o.failed_at_ms,
        })
    });
    json!({ "id": d.id.as_str(), "fields": fields_json(&d.fields), "origin": origin })
}

/// The JSON document, pretty-printed.
pub fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("a JSON value prints")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

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
        );
        assert_eq!(t, "A    LONGER\nxyz  1\nq\n");
        assert_eq!(text(b"a\nb\x01"), "a\\nb\\u{1}");
        assert_eq!(cut("abcdef", 4), "abc…");
    }
}
