//! Pausing and resuming a subscription of the dashboard's broker from the
//! overview: the button on each stream or list subscription's row and its
//! `POST` (`{base}/subscription/pause`, `{base}/subscription/resume`),
//! admitted as every action is (read-write, same origin, CSRF), logged,
//! answered with a fixed banner.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use maud::{Markup, html};
use serde::Deserialize;

use super::{Ctx, actions, pages};
use rillkit::Error;
use rillkit::SourceKind;
use rillkit::SubscriptionStatus;

/// The name of `kind` in a form (`stream`, `list`, `list_at_most_once`);
/// `None` for a channel, which cannot be paused.
fn form_kind(kind: SourceKind) -> Option<&'static str> {
    match kind {
        SourceKind::Stream => Some("stream"),
        SourceKind::List => Some("list"),
        SourceKind::ListAtMostOnce => Some("list_at_most_once"),
        _ => None,
    }
}

fn parse_kind(name: &str) -> Option<SourceKind> {
    [
        SourceKind::Stream,
        SourceKind::List,
        SourceKind::ListAtMostOnce,
    ]
    .into_iter()
    .find(|k| form_kind(*k) == Some(name))
}

/// The Pause (or Resume, when a pause is asked for) button of one
/// subscription's row; nothing for a channel.
pub(super) fn button(base: &str, token: &str, s: &SubscriptionStatus) -> Markup {
    let Some(kind) = form_kind(s.kind) else {
        return html! { span.muted title="a Pub/Sub subscription cannot be paused" { "–" } };
    };
    let (verb, label) = if s.paused {
        ("resume", "Resume")
    } else {
        ("pause", "Pause")
    };
    html! {
        form method="post" action={ (base) "/subscription/" (verb) } {
            input type="hidden" name="csrf" value=(token);
            input type="hidden" name="kind" value=(kind);
            input type="hidden" name="key" value=(s.key);
            input type="hidden" name="group" value=(s.group);
            input type="hidden" name="consumer" value=(s.consumer);
            button type="submit" class=(verb) { (label) }
        }
    }
}

#[derive(Deserialize)]
pub(super) struct Pick {
    csrf: String,
    kind: String,
    key: String,
    #[serde(default)]
    group: String,
    consumer: String,
}

pub(super) async fn pause(
    ctx: web::Data<Ctx>,
    req: HttpRequest,
    form: web::Form<Pick>,
) -> HttpResponse {
    act(true, &ctx, &req, &form).await
}

pub(super) async fn resume(
    ctx: web::Data<Ctx>,
    req: HttpRequest,
    form: web::Form<Pick>,
) -> HttpResponse {
    act(false, &ctx, &req, &form).await
}

/// Checks the `POST`, pauses or resumes the subscription the form names,
/// and sends the browser back to the overview with a fixed banner. 404 for
/// a subscription the broker does not have, 400 for a channel.
async fn act(pause: bool, ctx: &Ctx, req: &HttpRequest, form: &Pick) -> HttpResponse {
    if let Err(resp) = actions::admit_request(ctx, req, &form.csrf) {
        return resp;
    }
    let Some(kind) = parse_kind(&form.kind) else {
        return HttpResponse::BadRequest()
            .body("kind must be stream, list or list_at_most_once (a channel cannot be paused)");
    };
    let broker = &ctx.dash.broker;
    let found = broker.status().subscriptions.into_iter().find(|s| {
        s.kind == kind && s.key == form.key && s.group == form.group && s.consumer == form.consumer
    });
    let Some(id) = found.as_ref().map(SubscriptionStatus::id) else {
        return HttpResponse::NotFound().body(format!(
            "the broker has no {} subscription {:?} (group {:?}, consumer {:?})",
            form.kind, form.key, form.group, form.consumer
        ));
    };
    // For the whole fleet; a resume also undoes a pause of this process.
    let done = if pause {
        broker.pause_fleet(&id).await
    } else {
        match broker.resume_fleet(&id).await {
            Ok(()) => broker.resume_local(&id),
            e => e,
        }
    };
    let verb = if pause { "pause" } else { "resume" };
    match done {
        Ok(()) => {}
        Err(e @ Error::NoSuchSubscription { .. }) => {
            return HttpResponse::NotFound().body(e.to_string());
        }
        Err(e @ Error::NotPausable { .. }) => {
            return HttpResponse::BadRequest().body(e.to_string());
        }
        Err(e) => return ctx.error(&e),
    }
    let (client, operator) = actions::who(req);
    tracing::info!(
        target: "rillkit::dashboard::audit",
        action = verb,
        client = %client,
        operator = operator.as_deref().unwrap_or("-"),
        kind = form.kind,
        key = %id.key,
        group = %id.group,
        consumer = %id.consumer,
        "dashboard action: subscription {}d",
        verb
    );
    let location = pages::with_query(&format!("{}/", ctx.base), &[("done", verb)]);
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, location))
        .finish()
}
