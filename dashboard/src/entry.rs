//! One entry's page: a stream entry with every field whole (up to
//! [`ENTRY_BYTES`] a value; JSON pretty-printed) and where it is pending,
//! or a dead letter with its origin, error and actions.

use actix_web::{HttpRequest, HttpResponse, web};
use maud::{Markup, html};

use super::{Ctx, actions, pages};
use rillkit::Error;
use rillkit::admin::{Admin, DeadLetter, PendingEntry, StreamEntry};

/// Longest value an entry's page shows, in bytes: values are whole up to
/// here (a page holding a larger one would be too large for a browser);
/// beyond it the server cuts them and notes their length.
pub(super) const ENTRY_BYTES: usize = 1 << 20;

/// The link to an entry's page (`kind`: `stream` or `dlq`).
pub(super) fn href(base: &str, kind: &str, stream: &str, id: &str) -> String {
    format!(
        "{base}/{kind}/{}/entry/{}",
        pages::path_segment(stream),
        pages::path_segment(id)
    )
}

/// An entry id linked to its page.
pub(super) fn link(base: &str, kind: &str, stream: &str, id: &str) -> Markup {
    html! { a.entry href=(href(base, kind, stream, id)) { (id) } }
}

/// The entry `id` of `stream`, cut to [`ENTRY_BYTES`] a value.
async fn read(admin: &Admin, stream: &str, id: &str) -> Result<Option<StreamEntry>, Error> {
    Ok(admin
        .preview(stream, (id, id), 1, false, ENTRY_BYTES)
        .await?
        .pop())
}

/// The checks both pages start with: a well-formed id, a connection, a
/// stream the dashboard shows.
async fn open(ctx: &Ctx, stream: &str, id: &str) -> Result<Admin, HttpResponse> {
    if !actions::is_entry_id(id) {
        return Err(HttpResponse::BadRequest().body("not an entry id (<ms>-<seq>)"));
    }
    let admin = ctx.dash.admin().await.map_err(|e| ctx.error(&e))?;
    ctx.check_listed(&admin, stream).await?;
    Ok(admin)
}

fn missing(ctx: &Ctx, stream: &str, id: &str) -> HttpResponse {
    HttpResponse::NotFound()
        .content_type("text/html; charset=utf-8")
        .body(
            pages::layout(
                &ctx.base,
                "no such entry",
                false,
                html! { p.warn { (stream) " holds no entry " (id) " (acked and trimmed, redriven, purged or deleted)." } },
            )
            .into_string(),
        )
}

/// `GET {base}/stream/{stream}/entry/{id}`.
pub(super) async fn stream_entry(
    ctx: web::Data<Ctx>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    let (stream, id) = path.into_inner();
    let admin = match open(&ctx, &stream, &id).await {
        Ok(a) => a,
        Err(resp) => return resp,
    };
    let data = async {
        let Some(entry) = read(&admin, &stream, &id).await? else {
            return Ok(None);
        };
        // Where it is pending: XPENDING with the id as start and end, per group.
        let mut pending = Vec::new();
        for g in admin.groups(&stream).await.unwrap_or_default() {
            let rows = admin
                .pending_range(&stream, &g.name, (&id, &id), 1, None)
                .await?;
            pending.push((g.name, rows.into_iter().next()));
        }
        Ok::<_, Error>(Some((entry, pending)))
    }
    .await;
    match data {
        Ok(Some((entry, pending))) => {
            ctx.page(&req, |_| stream_page(&ctx.base, &stream, &entry, &pending))
        }
        Ok(None) => missing(&ctx, &stream, &id),
        Err(e) => {
            ctx.dash.forget(&e).await;
            ctx.error(&e)
        }
    }
}

/// `GET {base}/dlq/{stream}/entry/{id}`: one dead letter of `stream`.
pub(super) async fn dead_letter(
    ctx: web::Data<Ctx>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    let (stream, id) = path.into_inner();
    let admin = match open(&ctx, &stream, &id).await {
        Ok(a) => a,
        Err(resp) => return resp,
    };
    let dlq = ctx.dash.dlq_of(&admin, &stream);
    match read(&admin, &dlq, &id).await {
        Ok(Some(e)) => {
            let dl = rillkit::admin::DeadLetter::from_entry(e.id, e.fields);
            let read_only = ctx.dash.read_only;
            ctx.page(&req, |token| {
                dead_letter_page(&ctx.base, &stream, &dlq, &dl, (!read_only).then_some(token))
            })
        }
        Ok(None) => missing(&ctx, &dlq, &id),
        Err(e) => {
            ctx.dash.forget(&e).await;
            ctx.error(&e)
        }
    }
}

/// A value whole: JSON pretty-printed when it parses as JSON, else as
/// text (escaped by maud like everything else).
fn value(v: &[u8]) -> Markup {
    match serde_json::from_slice::<serde_json::Value>(v) {
        Ok(json @ (serde_json::Value::Object(_) | serde_json::Value::Array(_))) => html! {
            pre.json { (serde_json::to_string_pretty(&json).unwrap_or_default()) }
        },
        _ => html! { pre.text { (pages::shown(v)) } },
    }
}

fn field_table(fields: &[(Vec<u8>, Vec<u8>)]) -> Markup {
    html! {
        table id="fields" {
            thead { tr { th { "field" } th { "value" } } }
            tbody {
                @for (k, v) in fields {
                    tr {
                        td { b { (pages::shown(k)) } br; span.muted { (v.len()) " bytes" } }
                        td.value { (value(v)) }
                    }
                }
            }
        }
    }
}

fn stream_page(
    base: &str,
    stream: &str,
    entry: &StreamEntry,
    pending: &[(String, Option<PendingEntry>)],
) -> Markup {
    pages::layout(
        base,
        &format!("{stream} · {}", entry.id),
        false,
        html! {
            p { a href={ (base) "/stream/" (pages::path_segment(stream)) } { "the stream " (stream) } }
            h3 { "entry " (entry.id) }
            (field_table(&entry.fields))
            h3 { "pending" }
            @if pending.is_empty() { p.muted { "The stream has no consumer group." } }
            @else {
                table id="pending" {
                    thead { tr { th { "group" } th { "consumer" } th { "idle" } th { "delivery count" } } }
                    tbody {
                        @for (group, p) in pending {
                            tr {
                                td { (group) }
                                @match p {
                                    Some(p) => { td.consumer { (p.consumer) } td.n { (pages::idle(p.idle_ms)) } td.n.deliveries { (p.delivery_count) } }
                                    None => { td.muted colspan="3" { "not pending (acked, or not delivered yet)" } }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

fn dead_letter_page(
    base: &str,
    stream: &str,
    dlq: &str,
    dl: &DeadLetter,
    token: Option<&str>,
) -> Markup {
    let id = dl.id.as_str();
    pages::layout(
        base,
        &format!("dead letter {id}"),
        false,
        html! {
            p { a href={ (base) "/dlq/" (pages::path_segment(stream)) } { "the dead letters of " (stream) } " (" (dlq) ")" }
            h3 { "dead letter " (id) }
            @match &dl.origin {
                Some(o) => {
                    table id="origin" {
                        tbody {
                            tr { th { "origin" } td { (o.stream) " " (link(base, "stream", &o.stream, o.id.as_str())) } }
                            tr { th { "group" } td { (o.group) } }
                            tr { th { "consumer" } td { (o.consumer) } }
                            tr { th { "delivery count" } td.n { (o.delivery_count) } }
                            tr { th { "dead-lettered" } td { (pages::age(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok().map(|now| now.saturating_sub(std::time::Duration::from_millis(o.failed_at_ms))))) " ago (" (o.failed_at_ms) " ms)" } }
                            tr { th { "error" } td.error { pre { (o.error) } } }
                        }
                    }
                    @if !o.attempts.is_empty() {
                        h3 { "failed runs" }
                        table id="attempts" {
                            thead { tr { th { "delivery count" } th { "at (ms)" } th { "error" } } }
                            tbody {
                                @for a in &o.attempts {
                                    tr { td.n { (a.delivery_count) } td.n { (a.at_ms) } td { pre { (a.error) } } }
                                }
                            }
                        }
                    }
                }
                None => { p.muted { "Not written by rillkit: no origin." } }
            }
            @if let Some(token) = token {
                div.actions {
                    (pages::action(base, stream, "redrive", token, &[("id", id)], &format!("Redrive {id} back to its origin stream?")))
                    " "
                    (pages::action(base, stream, "purge", token, &[("id", id)], &format!("Delete {id} for good?")))
                }
            }
            h3 { "fields" }
            (field_table(&dl.fields))
        },
    )
}
