//! How the `rillkit` tool prints: aligned tables, durations, field values,
//! and the JSON shapes of `--json`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rillkit::admin::{DeadLetter, StreamEntry};
use serde_json::{Map, Value, json};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// How wide a table cell may be, in terminal columns, unless `--wide`.
pub const CELL_CAP: usize = 48;

/// Columns left-aligned, two spaces apart, one header line. Every cell is
/// escaped ([`text`]): names come from the server, and a stream, group or
/// consumer name may hold terminal control sequences. Widths are display
/// widths (a CJK character or an emoji takes two columns), and a cell wider
/// than `cap` columns is cut ([`fit`]), so one long name does not push every
/// row off the screen.
pub fn table(headers: &[&str], rows: &[Vec<String>], cap: Option<usize>) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|c| {
                    let t = text(c.as_bytes());
                    match cap {
                        Some(cap) => fit(&t, cap),
                        None => t,
                    }
                })
                .collect()
        })
        .collect();
    let rows = rows.as_slice();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.width()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.width());
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
            l.extend(std::iter::repeat_n(' ', w.saturating_sub(cell.width())));
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

/// `s` (already escaped) in at most `max` terminal columns: whole when it
/// fits, else its start and `…`. An escape (`\u{202e}`) is not cut in the
/// middle: it goes whole or not at all.
pub fn fit(s: &str, max: usize) -> String {
    if s.width() <= max {
        return s.to_owned();
    }
    let room = max.saturating_sub(1);
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > room {
            break;
        }
        used += w;
        out.push(c);
    }
    if let Some(at) = out.rfind("\\u{").filter(|&at| !out[at..].contains('}')) {
        out.truncate(at);
    }
    out.push('…');
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

/// When an entry was added, from its id (`<ms>-<seq>`, ms since the Unix
/// epoch), as RFC 3339 in UTC with milliseconds: `2026-12-03T13:41:01.403Z`.
/// `None` for an id not in that form, or past the year 9999.
pub fn id_time(id: &str) -> Option<String> {
    /// The first second of the year 10000, which RFC 3339 cannot write.
    const YEAR_10000_S: u64 = 253_402_300_800;
    let (ms, seq) = id.split_once('-')?;
    let (ms, _) = (ms.parse::<u64>().ok()?, seq.parse::<u64>().ok()?);
    if ms / 1000 >= YEAR_10000_S {
        return None;
    }
    let at = UNIX_EPOCH.checked_add(Duration::from_millis(ms))?;
    Some(humantime::format_rfc3339_millis(at).to_string())
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A name, field or value as text to print: UTF-8 (lossy), with control
/// characters, Unicode format characters (bidi controls such as U+202E,
/// zero-width characters, U+FEFF…), line and paragraph separators and
/// other invisible fillers escaped (`\n`, `\u{1b}`, `\u{202e}`…), so one
/// entry stays on one line, nothing read from the server can drive the
/// terminal, and no text is reordered or hidden.
pub fn text(bytes: &[u8]) -> String {
    let mut out = String::new();
    for c in String::from_utf8_lossy(bytes).chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if hidden(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Whether `c` is a character a terminal does not show as itself: a control
/// (Cc), a format character (Cf: bidi controls, zero-width space and
/// joiners, U+FEFF, tags…), a line or paragraph separator, or one of the
/// letters and marks that print as nothing (Hangul fillers, the combining
/// grapheme joiner, Khmer inherent vowels).
fn hidden(c: char) -> bool {
    use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
    c.is_control()
        || matches!(
            c.general_category(),
            GeneralCategory::Format
                | GeneralCategory::LineSeparator
                | GeneralCategory::ParagraphSeparator
        )
        || matches!(
            c,
            '\u{34f}' | '\u{115f}' | '\u{1160}' | '\u{17b4}' | '\u{17b5}' | '\u{3164}' | '\u{ffa0}'
        )
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

/// `{"id", "time", "fields"}`: `time` is [`id_time`] (null when the id
/// names none).
pub fn entry_json(e: &StreamEntry) -> Value {
    json!({ "id": e.id.as_str(), "time": id_time(e.id.as_str()), "fields": fields_json(&e.fields) })
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
            "attempts": o.attempts,
        })
    });
    json!({ "id": d.id.as_str(), "fields": fields_json(&d.fields), "origin": origin })
}

/// The JSON document, pretty-printed, with the characters [`text`] escapes
/// written as JSON escapes (`\u202e`): the same strings to a JSON parser,
/// nothing raw on a terminal.
pub fn print_json(v: &Value) {
    say!("{}", json_text(v, true));
}

/// The exit code when stdout's reader went away (128 + SIGPIPE), as a
/// tool killed by SIGPIPE ends.
const EXIT_PIPE: i32 = 141;

/// Writes to stdout. A reader that went away (`| head`) ends the program
/// at once with [`EXIT_PIPE`] and no message; any other write error ends it
/// with status 1 and says so.
pub fn write_out(args: std::fmt::Arguments) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(EXIT_PIPE);
        }
        eprintln!("rillkit: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// `v` as JSON text (pretty or on one line), invisible characters escaped.
pub fn json_text(v: &Value, pretty: bool) -> String {
    use serde::Serialize;
    let mut out = Vec::new();
    let written = if pretty {
        let mut ser = serde_json::Serializer::with_formatter(
            &mut out,
            Escaping(serde_json::ser::PrettyFormatter::new()),
        );
        v.serialize(&mut ser)
    } else {
        let mut ser = serde_json::Serializer::with_formatter(
            &mut out,
            Escaping(serde_json::ser::CompactFormatter),
        );
        v.serialize(&mut ser)
    };
    written.expect("a JSON value prints");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// A JSON formatter that writes hidden characters of strings as `\uXXXX`
/// escapes (a surrogate pair above U+FFFF); serde_json escapes only the
/// controls below U+0020.
struct Escaping<F>(F);

impl<F: serde_json::ser::Formatter> serde_json::ser::Formatter for Escaping<F> {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut plain = 0;
        for (at, c) in fragment.char_indices() {
            if !hidden(c) {
                continue;
            }
            writer.write_all(&fragment.as_bytes()[plain..at])?;
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(writer, "\\u{unit:04x}")?;
            }
            plain = at + c.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[plain..])
    }

    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(w)
    }
}

#[cfg(test)]
mod tests;
