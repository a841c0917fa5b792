//! The fleet page (`{base}/fleet`): every live rillkit process, from the
//! records they keep in Redis ([`Admin::fleet`]), with each subscription's
//! concurrency, handlers in flight and state; and the Scale form of each
//! group or list, `POST {base}/fleet/scale`, admitted as every action is
//! (read-write, same origin, CSRF), logged.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use maud::{Markup, html};
use serde::Deserialize;

use super::{Ctx, actions, pages};
use rillkit::admin::{FleetProcess, FleetSubscription, MAX_CONCURRENCY};

#[derive(Deserialize)]
pub(super) struct FleetQuery {
    done: Option<String>,
}

pub(super) async fn page(
    ctx: web::Data<Ctx>,
    req: HttpRequest,
    q: web::Query<FleetQuery>,
) -> HttpResponse {
    let dash = &ctx.dash;
    let admin = match dash.admin().await {
        Ok(a) => a,
        Err(e) => return ctx.error(&e),
    };
    let fleet = match admin.fleet().await {
        Ok(f) => f,
        Err(e) => {
            dash.forget(&e).await;
            return ctx.error(&e);
        }
    };
    let done = q.done.as_deref().and_then(|d| match d {
        "scale" => Some("Scaled: every process follows within a second."),
        _ => None,
    });
    let read_only = dash.read_only;
    ctx.page(&req, |token| {
        render(&ctx.base, &fleet, done, (!read_only).then_some(token))
    })
}

fn render(base: &str, fleet: &[FleetProcess], done: Option<&str>, token: Option<&str>) -> Markup {
    pages::layout(
        base,
        "fleet",
        true,
        html! {
            @if let Some(done) = done { p.done { (done) } }
            p.muted { "Live rillkit processes, as their records in Redis say (renewed every 500 ms; a dead one leaves within 5 s). Refreshes every 5 s." }
            @if fleet.is_empty() { p { "No live rillkit process." } }
            table id="fleet" {
                thead { tr {
                    th { "consumer" } th { "host" } th { "pid" } th { "version" } th { "source" } th { "group" }
                    th { "concurrency" } th { "in flight" } th { "state" }
                    @if token.is_some() { th { "scale (every process)" } }
                } }
                tbody {
                    @for p in fleet {
                        @for s in &p.subscriptions {
                            tr data-consumer=(s.consumer) data-key=(s.stream) {
                                td { (s.consumer) } td { (p.host) } td.n { (p.pid) } td { (p.version) }
                                td { (s.stream) } td { (s.group) }
                                td.n.concurrency {
                                    (s.concurrency)
                                    @if s.concurrency != s.configured_concurrency {
                                        span.muted { " (built " (s.configured_concurrency) ")" }
                                    }
                                    @if let Some(limit) = &s.rate_limit {
                                        span.muted.rate-limit { ", at most " (limit) }
                                    }
                                }
                                td.n.in-flight { (s.in_flight) }
                                td.state { (s.state) @if s.fleet_paused { " (fleet pause)" } }
                                @if let Some(token) = token { td { (scale_form(base, token, s)) } }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// The Scale form of one subscription's group (or list); a note where its
/// concurrency cannot change.
fn scale_form(base: &str, token: &str, s: &FleetSubscription) -> Markup {
    if !s.scalable {
        return html! { span.muted title="a batch subscription's or an ordered stream's concurrency stays as built" { "fixed" } };
    }
    html! {
        form.scale method="post" action={ (base) "/fleet/scale" } {
            input type="hidden" name="csrf" value=(token);
            input type="hidden" name="kind" value=(s.kind);
            input type="hidden" name="key" value=(s.stream);
            input type="hidden" name="group" value=(s.group);
            input type="number" name="concurrency" min="1" max=(MAX_CONCURRENCY) value=(s.concurrency) title="empty: each process its own";
            " "
            button type="submit" class="scale" { "Scale" }
        }
    }
}

#[derive(Deserialize)]
pub(super) struct Scale {
    csrf: String,
    kind: String,
    key: String,
    #[serde(default)]
    group: String,
    /// Empty: each process back to its own.
    #[serde(default)]
    concurrency: String,
}

pub(super) async fn scale(
    ctx: web::Data<Ctx>,
    req: HttpRequest,
    form: web::Form<Scale>,
) -> HttpResponse {
    if let Err(resp) = actions::admit_request(&ctx, &req, &form.csrf) {
        return resp;
    }
    let concurrency = match form.concurrency.trim() {
        "" => None,
        n => match n.parse::<usize>() {
            Ok(n) => Some(n),
            Err(_) => {
                return HttpResponse::BadRequest().body(format!(
                    "concurrency must be a number within 1 and {MAX_CONCURRENCY}"
                ));
            }
        },
    };
    let admin = match ctx.dash.admin().await {
        Ok(a) => a,
        Err(e) => return ctx.error(&e),
    };
    let done = match form.kind.as_str() {
        "stream" => admin.scale_group(&form.key, &form.group, concurrency).await,
        "list" | "list_at_most_once" => admin.scale_list(&form.key, concurrency).await,
        _ => return HttpResponse::BadRequest().body("kind must be stream or list"),
    };
    if let Err(e) = done {
        ctx.dash.forget(&e).await;
        return ctx.error(&e);
    }
    let (client, operator) = actions::who(&req);
    tracing::info!(
        target: "rillkit::dashboard::audit",
        action = "scale",
        client = %client,
        operator = operator.as_deref().unwrap_or("-"),
        key = %form.key,
        group = %form.group,
        concurrency = ?concurrency,
        "dashboard action: fleet scaled"
    );
    let location = pages::with_query(&format!("{}/fleet", ctx.base), &[("done", "scale")]);
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, location))
        .finish()
}
