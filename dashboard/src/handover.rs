//! Handing a dead consumer's pending entries to another consumer of its
//! group: the form on the stream page and its `POST`
//! (`{base}/stream/{stream}/handover`), admitted as every action is
//! (read-write, same origin, CSRF), counted (the consumer must still hold
//! the entries the page showed and still look dead), logged.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use maud::{Markup, html};
use serde::Deserialize;

use super::{Ctx, actions, pages, stream};
use rillkit::EntryId;
use rillkit::admin::ConsumerInfo;

/// Pending entries claimed per `XCLAIM`.
const BATCH: usize = 100;

/// The hand-over form of the dead consumer `c`: the other consumers of the
/// group to choose from (those not flagged first).
pub(super) fn form(
    base: &str,
    stream: &str,
    token: &str,
    group: &str,
    c: &ConsumerInfo,
    all: &[(ConsumerInfo, bool)],
) -> Markup {
    let mut others: Vec<&(ConsumerInfo, bool)> =
        all.iter().filter(|(o, _)| o.name != c.name).collect();
    others.sort_by_key(|(_, dead)| *dead);
    if others.is_empty() {
        return html! { span.muted { "no other consumer in the group to hand over to" } };
    }
    let count = c.pending.to_string();
    html! {
        form.handover method="post" action={ (base) "/stream/" (pages::path_segment(stream)) "/handover" }
            data-confirm=(format!("Hand the {count} pending entries of {} over to the consumer chosen?", c.name))
            onsubmit=(pages::CONFIRM) {
            input type="hidden" name="csrf" value=(token);
            input type="hidden" name="group" value=(group);
            input type="hidden" name="consumer" value=(c.name);
            input type="hidden" name="count" value=(count);
            select name="to" {
                @for (o, dead) in others {
                    option value=(o.name) { (o.name) @if *dead { " (dead?)" } }
                }
            }
            " "
            button type="submit" class="handover" { "hand over " (count) }
        }
    }
}

#[derive(Deserialize)]
pub(super) struct HandOver {
    csrf: String,
    group: String,
    /// The dead consumer.
    consumer: String,
    /// The consumer to hand its entries to.
    to: String,
    /// How many entries the page showed it holding.
    count: u64,
}

fn conflict(why: String) -> HttpResponse {
    HttpResponse::Conflict().body(format!("{why}; reload the page"))
}

/// `POST {base}/stream/{stream}/handover`: moves at most `count` pending
/// entries of `consumer` to `to` (`XPENDING … <consumer>`, then `XCLAIM
/// <to> <threshold> <ids> JUSTID`, 100 at a time: an entry idle for less
/// than the dead-consumer threshold stays). Refused with 409 when the
/// consumer no longer looks dead or holds another number of entries than
/// the page showed; 400 when `to` is not another consumer of the group.
pub(super) async fn handover(
    ctx: web::Data<Ctx>,
    req: HttpRequest,
    path: web::Path<String>,
    form: web::Form<HandOver>,
) -> HttpResponse {
    let stream = path.into_inner();
    if let Err(resp) = actions::admit_request(&ctx, &req, &form.csrf) {
        return resp;
    }
    let admin = match ctx.dash.admin().await {
        Ok(a) => a,
        Err(e) => return ctx.error(&e),
    };
    if let Err(resp) = ctx.check_listed(&admin, &stream).await {
        return resp;
    }
    let f = form.into_inner();
    let consumers = match admin.consumers(&stream, &f.group).await {
        Ok(c) => c,
        Err(e) => {
            ctx.dash.forget(&e).await;
            return ctx.error(&e);
        }
    };
    let Some(from) = consumers.iter().find(|c| c.name == f.consumer) else {
        return conflict(format!("the group has no consumer {:?} now", f.consumer));
    };
    if f.to == f.consumer || !consumers.iter().any(|c| c.name == f.to) {
        return HttpResponse::BadRequest().body("hand over to another consumer of the group");
    }
    if !stream::is_dead(from, ctx.dash.dead_after) {
        return conflict(format!("{:?} no longer looks dead", f.consumer));
    }
    if from.pending != f.count {
        return conflict(format!(
            "{:?} holds {} pending entries, the page showed {}",
            f.consumer, from.pending, f.count
        ));
    }
    let mut moved: Vec<EntryId> = Vec::new();
    let min_idle = ctx.dash.dead_after;
    let done = async {
        // Its entries in id order, at most the count shown; an entry it
        // touched again within the threshold (alive after all) stays.
        let mut start = "-".to_owned();
        let mut left = f.count as usize;
        while left > 0 {
            let rows = admin
                .pending_range(
                    &stream,
                    &f.group,
                    (&start, "+"),
                    left.min(BATCH),
                    Some(&f.consumer),
                )
                .await?;
            let Some(last) = rows.last() else { break };
            start = format!("({}", last.id);
            left -= rows.len();
            let ids: Vec<EntryId> = rows.into_iter().map(|r| r.id).collect();
            moved.extend(
                admin
                    .claim(&stream, &f.group, &f.to, min_idle, &ids)
                    .await?,
            );
        }
        Ok::<_, rillkit::Error>(())
    }
    .await;
    let (client, operator) = actions::who(&req);
    let ids: Vec<&str> = moved.iter().map(EntryId::as_str).collect();
    tracing::info!(
        target: "rillkit::dashboard::audit",
        action = "handover",
        client = %client,
        operator = operator.as_deref().unwrap_or("-"),
        stream = %stream,
        group = %f.group,
        from = %f.consumer,
        to = %f.to,
        selection = %format!("the {} pending entries of {} ({} shown)", from.pending, f.consumer, f.count),
        claimed = ?ids,
        "dashboard action: pending entries handed over"
    );
    if let Err(e) = done {
        ctx.dash.forget(&e).await;
        return ctx.error(&e);
    }
    let location = pages::with_query(
        &format!("{}/stream/{}", ctx.base, pages::path_segment(&stream)),
        &[("done", "handover"), ("n", &moved.len().to_string())],
    );
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, location))
        .finish()
}
