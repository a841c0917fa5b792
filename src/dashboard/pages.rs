//! The pages, rendered with maud. Everything interpolated is escaped by
//! maud; entry data is untrusted (payloads, errors, names) and is only ever
//! interpolated, never written raw.

use std::time::Duration;

use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::StreamRow;
use crate::admin::{ConsumerInfo, DeadLetter, GroupInfo, PendingEntry, StreamEntry};
use crate::{Status, SubscriptionState};

/// Longest value shown, in bytes: the server cuts longer ones (see
/// `Admin::preview`) and notes their full length.
pub(super) const SHOWN_BYTES: usize = 2048;

const STYLE: &str = r#"
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2430;background:#f6f7f9}
header{background:#1d2430;color:#fff;padding:10px 20px}header a{color:#fff;text-decoration:none;font-weight:600}
main{padding:16px 20px}table{border-collapse:collapse;background:#fff;margin:8px 0 20px;min-width:60%}
th,td{border:1px solid #dde1e6;padding:4px 8px;text-align:left;vertical-align:top}th{background:#eef0f3}
td.n{text-align:right;font-variant-numeric:tabular-nums}.warn{color:#b3261e;font-weight:600}
pre{margin:0;white-space:pre-wrap;word-break:break-all;max-width:60em}.muted{color:#6b7280}
form{display:inline}button{cursor:pointer}.done{background:#e6f4ea;border:1px solid #a8dab5;padding:6px 10px}
"#;

/// The confirmation before an action: a few lines of plain JavaScript.
const CONFIRM: &str = "return confirm(this.dataset.confirm)";

fn layout(base: &str, title: &str, refresh: bool, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                @if refresh { meta http-equiv="refresh" content="5"; }
                title { (title) " · rillkit" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header { a href={ (base) "/" } { "rillkit" } " · " (title) }
                main { (body) }
            }
        }
    }
}

/// A path segment, percent-encoded (stream names may hold anything).
pub(super) fn path_segment(s: &str) -> String {
    // Dots too: a browser resolves a segment `.` or `..` away.
    url::form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
        .replace('.', "%2E")
}

fn age(d: Option<Duration>) -> String {
    match d {
        None => "–".into(),
        Some(d) if d < Duration::from_secs(1) => format!("{} ms", d.as_millis()),
        Some(d) if d < Duration::from_secs(120) => format!("{} s", d.as_secs()),
        Some(d) if d < Duration::from_secs(7200) => format!("{} min", d.as_secs() / 60),
        Some(d) => format!("{} h", d.as_secs() / 3600),
    }
}

fn ms(v: u64) -> String {
    age(Some(Duration::from_millis(v)))
}

/// An inline SVG sparkline of `rates` (entries/s), with the last value.
fn sparkline(rates: &[f64]) -> Markup {
    if rates.len() < 2 {
        return html! { span.muted { "sampling…" } };
    }
    let (w, h) = (120.0, 24.0);
    let max = rates.iter().copied().fold(1e-9, f64::max);
    let step = w / (rates.len() - 1) as f64;
    let points: Vec<String> = rates
        .iter()
        .enumerate()
        .map(|(i, r)| {
            format!(
                "{:.1},{:.1}",
                i as f64 * step,
                h - r / max * (h - 2.0) - 1.0
            )
        })
        .collect();
    let last = rates.last().copied().unwrap_or_default();
    html! {
        svg width="120" height="24" viewBox="0 0 120 24" role="img" aria-label="entries handled per second" {
            polyline fill="none" stroke="#2563eb" stroke-width="1.5" points=(points.join(" ")) {}
        }
        " " (format!("{last:.1}/s"))
    }
}

fn state(s: &SubscriptionState) -> String {
    match s {
        SubscriptionState::Starting => "starting".into(),
        SubscriptionState::Running => "running".into(),
        SubscriptionState::Reconnecting { last_error, .. } => format!("reconnecting: {last_error}"),
        SubscriptionState::Restarting { restarts } => format!("restarting ({restarts})"),
        SubscriptionState::WaitingForLease { holder, .. } => {
            format!("waiting: its consumer name is held by {holder}")
        }
        SubscriptionState::Failed => "failed".into(),
        SubscriptionState::Stopped => "stopped".into(),
    }
}

pub(super) fn overview(base: &str, status: &Status, rows: &[StreamRow]) -> Markup {
    layout(
        base,
        "overview",
        true,
        html! {
            p.muted { "Broker " (format!("{:?}", status.phase).to_lowercase()) ". Refreshes every 5 s." }
            @if rows.is_empty() {
                p { "No streams: the broker subscribes to none, and none were declared." }
            }
            table id="streams" {
                thead { tr {
                    th { "stream" } th { "length" } th { "group" } th { "lag" } th { "pending" }
                    th { "oldest pending" } th { "consumers" } th { "dead letters" } th { "handled/s" }
                } }
                tbody {
                    @for r in rows {
                        @if let Some(err) = &r.error {
                            tr data-stream=(r.name) {
                                td { (r.name) }
                                td.warn colspan="8" { (err) }
                            }
                        }
                        @let span = r.groups.len().max(1);
                        @for (i, g) in r.groups.iter().map(Some).chain((r.groups.is_empty() && r.error.is_none()).then_some(None)).enumerate() {
                            tr data-stream=(r.name) {
                                @if i == 0 {
                                    td rowspan=(span) { a href={ (base) "/stream/" (path_segment(&r.name)) } { (r.name) } }
                                    td.n rowspan=(span) { (r.length) }
                                }
                                @match g {
                                    Some(g) => {
                                        td { (g.info.name) }
                                        td.n.lag { (g.info.lag.map_or("?".to_string(), |l| l.to_string())) }
                                        td.n.pending { (g.info.pending) }
                                        td.n { (age(g.oldest_pending_age)) }
                                        td.n { (g.info.consumers) }
                                    }
                                    None => { td.muted colspan="5" { "no group" } }
                                }
                                @if i == 0 {
                                    td.n rowspan=(span) {
                                        a class={ "dlq" @if r.dead_letters > 0 { " warn" } } title=(r.dlq) href={ (base) "/dlq/" (path_segment(&r.name)) } { (r.dead_letters) }
                                    }
                                    td rowspan=(span) {
                                        @if r.consumed_here { (sparkline(&r.rates)) }
                                        @else { span.muted title="not consumed by this process" { "–" } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if !status.subscriptions.is_empty() {
                h3 { "Subscriptions of this process" }
                table {
                    thead { tr { th { "kind" } th { "key" } th { "group" } th { "consumer" } th { "state" } th { "handled" } th { "failed" } th { "dead-lettered" } } }
                    tbody {
                        @for s in &status.subscriptions {
                            tr {
                                td { (kind(s.kind)) } td { (s.key) } td { (s.group) } td { (s.consumer) } td { (state(&s.state)) }
                                td.n { (s.handled) } td.n { (s.failed) } td.n { (s.dead_lettered) }
                            }
                        }
                    }
                }
            }
            p.muted { "lag: entries not yet delivered to the group (XINFO GROUPS; \"?\" when Redis cannot tell, after deletions). oldest pending: age of the oldest entry delivered and not acked." }
        },
    )
}

fn kind(k: crate::SourceKind) -> &'static str {
    match k {
        crate::SourceKind::Stream => "stream",
        crate::SourceKind::List => "list",
        crate::SourceKind::ListAtMostOnce => "list (at most once)",
        crate::SourceKind::Channel => "channel",
    }
}

pub(super) fn stream(
    base: &str,
    stream: &str,
    dlq: &str,
    groups: &[(GroupInfo, Vec<ConsumerInfo>, Vec<PendingEntry>)],
    newest: &[StreamEntry],
) -> Markup {
    layout(
        base,
        stream,
        false,
        html! {
            p { a href={ (base) "/dlq/" (path_segment(stream)) } { "dead letters (" (dlq) ")" } }
            @if groups.is_empty() { p { "No consumer group." } }
            @for (g, consumers, pending) in groups {
                h3 { "group " (g.name) }
                p.muted { "last delivered " (g.last_delivered_id) ", lag " (g.lag.map_or("?".to_string(), |l| l.to_string())) ", pending " (g.pending) }
                table.consumers {
                    thead { tr { th { "consumer" } th { "pending" } th { "idle" } } }
                    tbody { @for c in consumers { tr { td { (c.name) } td.n { (c.pending) } td.n { (ms(c.idle_ms)) } } } }
                }
                @if !pending.is_empty() {
                    table.pending {
                        thead { tr { th { "entry id" } th { "consumer" } th { "idle" } th { "delivery count" } } }
                        tbody { @for p in pending { tr { td { (p.id) } td { (p.consumer) } td.n { (ms(p.idle_ms)) } td.n { (p.delivery_count) } } } }
                    }
                }
            }
            h3 { "newest entries" }
            table.newest {
                thead { tr { th { "entry id" } th { "fields" } } }
                tbody { @for e in newest { tr { td { (e.id) } td { (fields(&e.fields)) } } } }
            }
        },
    )
}

fn fields(fields: &[(Vec<u8>, Vec<u8>)]) -> Markup {
    html! {
        @for (k, v) in fields {
            div { b { (String::from_utf8_lossy(k)) } " " pre { (shown(v)) } }
        }
    }
}

/// A value as text: lossy UTF-8, control characters (but newlines and
/// tabs) shown as `\u{..}`. The server already cut it to `SHOWN_BYTES`.
fn shown(v: &[u8]) -> String {
    String::from_utf8_lossy(v)
        .chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                format!("\\u{{{:x}}}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// What the dead-letter page shows.
pub(super) struct DlqPage<'a> {
    pub base: &'a str,
    pub stream: &'a str,
    pub dlq: &'a str,
    pub total: u64,
    pub list: &'a [DeadLetter],
    pub more: bool,
    pub after: Option<&'a str>,
    pub done: Option<&'a str>,
    /// The CSRF token; `None` in read-only mode (no buttons).
    pub token: Option<&'a str>,
}

fn action(
    base: &str,
    stream: &str,
    verb: &str,
    token: &str,
    sel: &[(&str, &str)],
    confirm: &str,
) -> Markup {
    html! {
        form method="post" action={ (base) "/dlq/" (path_segment(stream)) "/" (verb) } data-confirm=(confirm) onsubmit=(CONFIRM) {
            input type="hidden" name="csrf" value=(token);
            @for (k, v) in sel { input type="hidden" name=(k) value=(v); }
            button type="submit" class=(verb) { (verb) }
        }
    }
}

pub(super) fn dead_letters(p: &DlqPage<'_>) -> Markup {
    let (base, stream) = (p.base, p.stream);
    let range = p
        .list
        .first()
        .zip(p.list.last())
        .map(|(a, b)| (a.id.as_str(), b.id.as_str()));
    layout(
        base,
        &format!("dead letters of {stream}"),
        false,
        html! {
            @if let Some(done) = p.done { p.done { (done) } }
            p { (p.dlq) ": " (p.total) " dead letters." " " a href={ (base) "/stream/" (path_segment(stream)) } { "the stream" } }
            @if let (Some(token), Some((first, last))) = (p.token, range) {
                @let count = p.list.len().to_string();
                p.bulk {
                    (action(base, stream, "redrive", token, &[("start", first), ("end", last), ("count", &count)],
                        &format!("Redrive the {count} dead letters shown, each back to its origin stream?")))
                    " "
                    (action(base, stream, "purge", token, &[("start", first), ("end", last), ("count", &count)],
                        &format!("Delete the {count} dead letters shown for good?")))
                }
            }
            table id="dead-letters" {
                thead { tr { th { "id" } th { "origin" } th { "error" } th { "fields" } @if p.token.is_some() { th {} } } }
                tbody {
                    @for d in p.list {
                        tr data-id=(d.id) {
                            td { (d.id) }
                            @match &d.origin {
                                Some(o) => {
                                    td { (o.stream) " " (o.id) br; span.muted { "group " (o.group) ", consumer " (o.consumer) ", delivery " (o.delivery_count) } }
                                    td.error { pre { (o.error) } }
                                }
                                None => { td.muted colspan="2" { "not written by rillkit" } }
                            }
                            td.payload { (fields(&d.fields)) }
                            @if let Some(token) = p.token {
                                td {
                                    (action(base, stream, "redrive", token, &[("id", d.id.as_str())], &format!("Redrive {} back to its origin stream?", d.id)))
                                    " "
                                    (action(base, stream, "purge", token, &[("id", d.id.as_str())], &format!("Delete {} for good?", d.id)))
                                }
                            }
                        }
                    }
                }
            }
            p {
                @if p.after.is_some() { a href={ (base) "/dlq/" (path_segment(stream)) } { "first page" } " " }
                @if p.more { @if let Some((_, last)) = range {
                    a.next href={ (base) "/dlq/" (path_segment(stream)) "?after=" (last) } { "next page" }
                } }
            }
        },
    )
}

pub(super) fn error(base: &str, message: &str, unreachable: bool) -> Markup {
    layout(
        base,
        "error",
        unreachable,
        html! {
            @if unreachable {
                p.warn { "Redis could not be reached: " (message) }
                p.muted { "The page tries again every 5 s." }
            } @else {
                p.warn { "Redis refused the request: " (message) }
                p { a href={ (base) "/" } { "back to the overview" } }
            }
        },
    )
}
