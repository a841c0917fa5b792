//! The pages, rendered with maud. Everything interpolated is escaped by
//! maud; entry data is untrusted (payloads, errors, names) and is only ever
//! interpolated, never written raw.

use std::time::Duration;

use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::StreamRow;
use super::dlq::Filter;
use super::stream::StreamPage;
use rillkit::admin::DeadLetter;
use rillkit::{Status, SubscriptionState};

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
form{display:inline}button{cursor:pointer}a.entry{white-space:nowrap}.bulk,.bulk-filter{margin:6px 0}.done{background:#e6f4ea;border:1px solid #a8dab5;padding:6px 10px}.done.failed{background:#fce8e6;border-color:#f4b4ae}
"#;

/// The confirmation before an action: a few lines of plain JavaScript.
pub(super) const CONFIRM: &str = "return confirm(this.dataset.confirm)";

pub(super) fn layout(base: &str, title: &str, refresh: bool, body: Markup) -> Markup {
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

pub(super) fn age(d: Option<Duration>) -> String {
    match d {
        None => "–".into(),
        Some(d) if d < Duration::from_secs(1) => format!("{} ms", d.as_millis()),
        Some(d) if d < Duration::from_secs(120) => format!("{} s", d.as_secs()),
        Some(d) if d < Duration::from_secs(7200) => format!("{} min", d.as_secs() / 60),
        Some(d) => format!("{} h", d.as_secs() / 3600),
    }
}

pub(super) fn ms(v: u64) -> String {
    age(Some(Duration::from_millis(v)))
}

/// A pending entry's idle time; an entry handed back to the group with
/// `XNACK` has none.
pub(super) fn idle(v: Option<u64>) -> String {
    v.map_or_else(|| "handed back".to_owned(), ms)
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
        SubscriptionState::Paused => "paused".into(),
        other => other.name().into(),
    }
}

/// The overview: `done` is the banner after an action, `token` the CSRF
/// token for the pause buttons (`None`: read-only, no buttons).
pub(super) fn overview(
    base: &str,
    status: &Status,
    rows: &[StreamRow],
    done: Option<&str>,
    token: Option<&str>,
) -> Markup {
    layout(
        base,
        "overview",
        true,
        html! {
            @if let Some(done) = done { p.done { (done) } }
            p.muted { "Broker " (format!("{:?}", status.phase).to_lowercase()) ". Refreshes every 5 s. " a #fleet-link href={ (base) "/fleet" } { "The fleet" } }
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
                table id="subscriptions" {
                    thead { tr {
                        th { "kind" } th { "key" } th { "group" } th { "consumer" } th { "state" } th { "handled" } th { "failed" } th { "dead-lettered" }
                        @if token.is_some() { th {} }
                    } }
                    tbody {
                        @for s in &status.subscriptions {
                            tr data-key=(s.key) data-consumer=(s.consumer) {
                                td { (kind(s.kind)) } td { (s.key) } td { (s.group) } td { (s.consumer) }
                                td.state {
                                    (state(&s.state))
                                    @if s.paused && s.state != SubscriptionState::Paused { " (pausing)" }
                                    @if s.fleet_paused { " (fleet pause)" }
                                }
                                td.n { (s.handled) } td.n { (s.failed) } td.n { (s.dead_lettered) }
                                @if let Some(token) = token { td { (super::pause::button(base, token, s)) } }
                            }
                        }
                    }
                }
            }
            @for s in status.subscriptions.iter().filter(|s| !s.partitions.is_empty()) {
                h3 { "Partitions of " (s.key) " (ordered by key), as " (s.consumer) " sees them" }
                table.partitions data-key=(s.key) {
                    thead { tr {
                        th { "partition" } th { "owner" } th { "state here" } th { "handled here" }
                        th { "lag" } th { "pending" } th { "dead letters" }
                    } }
                    tbody {
                        @for p in &s.partitions {
                            tr data-partition=(p.key) {
                                td { (p.key) }
                                td { @if p.owned { (s.consumer) } @else { span.muted { "another consumer" } } }
                                td.state { (state(&p.state)) }
                                td.n { (p.handled) }
                                td.n { (p.server.as_ref().and_then(|f| f.lag).map_or("?".to_string(), |l| l.to_string())) }
                                td.n { (p.server.as_ref().map_or(0, |f| f.pending)) }
                                td.n { (p.server.as_ref().map_or(0, |f| f.dead_letters)) }
                            }
                        }
                    }
                }
            }
            p.muted { "lag: entries not yet delivered to the group (XINFO GROUPS; \"?\" when Redis cannot tell, after deletions). oldest pending: age of the oldest entry delivered and not acked." }
        },
    )
}

fn kind(k: rillkit::SourceKind) -> &'static str {
    match k {
        rillkit::SourceKind::Stream => "stream",
        rillkit::SourceKind::List => "list",
        rillkit::SourceKind::ListAtMostOnce => "list (at most once)",
        rillkit::SourceKind::Channel => "channel",
        _ => "other",
    }
}

/// A link to `path` with the query `pairs`, each encoded.
pub(super) fn with_query(path: &str, pairs: &[(&str, &str)]) -> String {
    let query = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish();
    if query.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{query}")
    }
}

pub(super) fn stream(p: &StreamPage<'_>) -> Markup {
    let (base, stream) = (p.base, p.stream);
    let here = format!("{base}/stream/{}", path_segment(stream));
    layout(
        base,
        stream,
        false,
        html! {
            @if let Some(done) = &p.done { p.done { (done) } }
            p { a href={ (base) "/dlq/" (path_segment(stream)) } { "dead letters (" (p.dlq) ")" } }
            @if let Some(minutes) = &p.history { (super::history::chart(minutes)) }
            @if p.groups.is_empty() { p { "No consumer group." } }
            @for g in &p.groups {
                h3 { "group " (g.info.name) }
                p.muted { "last delivered " (g.info.last_delivered_id) ", lag " (g.info.lag.map_or("?".to_string(), |l| l.to_string())) ", pending " (g.info.pending) }
                table.consumers data-group=(g.info.name) {
                    thead { tr { th { "consumer" } th { "pending" } th { "idle" } th { "inactive" } th {} } }
                    tbody {
                        @for (c, dead) in &g.consumers {
                            tr data-consumer=(c.name) class=[dead.then_some("dead")] {
                                td { (c.name) @if *dead { " " span.warn.flag { "dead?" } } }
                                td.n { (c.pending) }
                                td.n { (ms(c.idle_ms)) }
                                td.n { (c.inactive_ms.map_or("–".to_string(), ms)) }
                                td { @if *dead { @if let Some(token) = p.token {
                                    (super::handover::form(base, stream, token, &g.info.name, c, &g.consumers))
                                } } }
                            }
                        }
                    }
                }
                @if g.consumers.iter().any(|(_, dead)| *dead) {
                    p.muted.dead-note {
                        "dead?: holds pending entries and has not read for over " (age(Some(p.dead_after))) ". "
                        "rillkit consumers take such entries over by themselves once an entry has been idle for their claim_idle (30 s by default): "
                        "if they are still here, no rillkit consumer of this group is running, or its claim_idle is longer. "
                        "Hand over moves them to another consumer of the group (XCLAIM … JUSTID: the delivery count stays, the idle time starts again; an entry touched within the threshold stays). "
                        "A rillkit consumer runs them once they have been idle for its claim_idle; another client when it re-reads its pending entries (XREADGROUP … 0)."
                    }
                }
                @if !g.pending.rows.is_empty() {
                    p.pending-count { (g.pending.rows.len()) " of " (g.info.pending) " pending" }
                    table.pending {
                        thead { tr { th { "entry id" } th { "consumer" } th { "idle" } th { "delivery count" } } }
                        tbody { @for e in &g.pending.rows { tr { td { (super::entry::link(base, "stream", stream, e.id.as_str())) } td { (e.consumer) } td.n { (idle(e.idle_ms)) } td.n { (e.delivery_count) } } } }
                    }
                    p.paging {
                        @if g.pending.prev { @if let Some(first) = g.pending.rows.first() {
                            a.prev href=(with_query(&here, &[("group", &g.info.name), ("pending_before", first.id.as_str())])) { "previous" } " "
                        } }
                        @if g.pending.next { @if let Some(last) = g.pending.rows.last() {
                            a.next href=(with_query(&here, &[("group", &g.info.name), ("pending_after", last.id.as_str())])) { "next" }
                        } }
                    }
                }
            }
            h3 { "entries" }
            p.entry-count { (p.newest.rows.len()) " of " (p.length) " entries, newest first" }
            table.newest {
                thead { tr { th { "entry id" } th { "fields" } } }
                tbody { @for e in &p.newest.rows { tr { td { (super::entry::link(base, "stream", stream, e.id.as_str())) } td { (fields(&e.fields)) } } } }
            }
            p.paging {
                @if p.newest.prev { @if let Some(first) = p.newest.rows.first() {
                    a.newer href=(with_query(&here, &[("newer_than", first.id.as_str())])) { "newer" } " "
                } }
                @if p.newest.next { @if let Some(last) = p.newest.rows.last() {
                    a.older href=(with_query(&here, &[("older_than", last.id.as_str())])) { "older" }
                } }
            }
        },
    )
}

pub(super) fn fields(fields: &[(Vec<u8>, Vec<u8>)]) -> Markup {
    html! {
        @for (k, v) in fields {
            div { b { (String::from_utf8_lossy(k)) } " " pre { (shown(v)) } }
        }
    }
}

/// A value as text: lossy UTF-8, control characters (but newlines and
/// tabs) shown as `\u{..}`. The server already cut it to `SHOWN_BYTES`.
pub(super) fn shown(v: &[u8]) -> String {
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
    /// How many dead letters the filter selects (all: the stream's length).
    pub total: u64,
    pub list: &'a [DeadLetter],
    /// There is a page before this one.
    pub prev: bool,
    /// There is a page after this one.
    pub more: bool,
    pub filter: &'a Filter,
    pub done: Option<&'a str>,
    /// The banner reports an action that did nothing (styled apart).
    pub failed: bool,
    /// The CSRF token; `None` in read-only mode (no buttons).
    pub token: Option<&'a str>,
}

pub(super) fn action(
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
    let here = format!("{base}/dlq/{}", path_segment(stream));
    let range = p
        .list
        .first()
        .zip(p.list.last())
        .map(|(a, b)| (a.id.as_str(), b.id.as_str()));
    let filtered = !p.filter.is_empty();
    let described = p.filter.describe();
    let total = p.total.to_string();
    let mut bulk = p.filter.pairs();
    bulk.push(("count", &total));
    let page_link = |key: &str, id: &str| {
        let mut pairs = p.filter.pairs();
        pairs.push((key, id));
        with_query(&here, &pairs)
    };
    layout(
        base,
        &format!("dead letters of {stream}"),
        false,
        html! {
            @if let Some(done) = p.done {
                p class=(if p.failed { "done failed" } else { "done" }) { (done) }
            }
            p.count {
                (p.list.len()) " of " (p.total) " dead letters"
                @if filtered { " " (described) } " (" (p.dlq) "). "
                a href={ (base) "/stream/" (path_segment(stream)) } { "the stream" }
            }
            form.filter method="get" action=(here) {
                label { "error contains " input type="text" name="error" value=[p.filter.error.as_deref()]; }
                " "
                label { "from " input type="text" name="from" size="16" placeholder="id or ms" value=[p.filter.from.as_deref()]; }
                " "
                label { "to " input type="text" name="to" size="16" placeholder="id or ms" value=[p.filter.to.as_deref()]; }
                " "
                button type="submit" class="filter" { "filter" }
                @if filtered { " " a href=(here) { "clear" } }
            }
            @if let Some(token) = p.token {
                @if filtered && p.total > 0 {
                    // The whole filtered set, counted now; the server
                    // counts again and refuses when it changed.
                    @let count = &total;
                    div.bulk-filter {
                        (action(base, stream, "redrive", token, &bulk,
                            &format!("Redrive the {count} dead letters {described}, each back to its origin stream?")))
                        " Redrive the " (count) " dead letters " (described) ". "
                        (action(base, stream, "purge", token, &bulk,
                            &format!("Delete the {count} dead letters {described} for good?")))
                    }
                } @else if let Some((first, last)) = range.filter(|_| p.filter.error.is_none()) {
                    @let count = p.list.len().to_string();
                    div.bulk {
                        "All " (count) " shown: "
                        (action(base, stream, "redrive", token, &[("start", first), ("end", last), ("count", &count)],
                            &format!("Redrive the {count} dead letters shown, each back to its origin stream?")))
                        " "
                        (action(base, stream, "purge", token, &[("start", first), ("end", last), ("count", &count)],
                            &format!("Delete the {count} dead letters shown for good?")))
                    }
                }
            }
            table id="dead-letters" {
                thead { tr { th { "id" } th { "origin" } th { "error" } th { "fields" } @if p.token.is_some() { th {} } } }
                tbody {
                    @for d in p.list {
                        tr data-id=(d.id) {
                            td { (super::entry::link(base, "dlq", stream, d.id.as_str())) }
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
            p.paging {
                @if p.prev {
                    a href=(with_query(&here, &p.filter.pairs())) { "first page" } " "
                    @if let Some((first, _)) = range {
                        a.prev href=(page_link("before", first)) { "previous page" } " "
                    }
                }
                @if p.more { @if let Some((_, last)) = range {
                    a.next href=(page_link("after", last)) { "next page" }
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
