//! The dashboard's actions on dead letters (redrive, purge): what a
//! `POST` must carry to be admitted (read-write mode, this site's `Origin`,
//! a valid CSRF token, a selection of one id or a counted range), the action
//! itself with its audit log line, and the fixed banner it leads to.

use actix_web::http::header;
use actix_web::{HttpMessage as _, HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::{Ctx, csrf, pages};
use crate::admin::DeadLetterFilter;

/// The banner after an action, from the page's query (`done`, `n`,
/// `skipped`): one of a fixed set of sentences with its counts; `None` for
/// anything else, so the URL never paints text of its own.
pub(super) fn banner(done: Option<&str>, n: u64, skipped: u64) -> Option<String> {
    let mut text = match done? {
        "redrive" => format!("Redriven: {n}."),
        "purge" => format!("Purged: {n}."),
        _ => return None,
    };
    if skipped > 0 {
        text.push_str(&format!(
            " Skipped: {skipped} (left in place; the application's log says why)."
        ));
    }
    Some(text)
}

#[derive(Deserialize)]
pub(super) struct Action {
    csrf: String,
    /// One dead letter…
    id: Option<String>,
    /// …or an inclusive range of ids (the page shown)…
    start: Option<String>,
    end: Option<String>,
    /// …with the number of dead letters the page showed in it: the action
    /// touches at most that many, and none when the range holds more now.
    count: Option<usize>,
}

/// What an action selects.
enum Selected {
    One(String),
    /// An inclusive range of ids and the count the page showed.
    Range {
        start: String,
        end: String,
        count: usize,
    },
}

impl Selected {
    fn filter(&self) -> DeadLetterFilter {
        match self {
            Selected::One(id) => DeadLetterFilter::new().with_id(id.clone()),
            Selected::Range { start, end, count } => DeadLetterFilter::new()
                .with_start(start.clone())
                .with_end(end.clone())
                .with_count(*count),
        }
    }
}

impl Action {
    /// The selection: one id, or a range between two entry ids (never `-`
    /// or `+`) with its count.
    fn selected(&self) -> Option<Selected> {
        match (&self.id, &self.start, &self.end, self.count) {
            (Some(id), None, None, None) if is_entry_id(id) => Some(Selected::One(id.clone())),
            (None, Some(start), Some(end), Some(count))
                if is_entry_id(start) && is_entry_id(end) && count > 0 =>
            {
                Some(Selected::Range {
                    start: start.clone(),
                    end: end.clone(),
                    count,
                })
            }
            _ => None,
        }
    }
}

/// `<ms>-<seq>`, both decimal: an entry id, not a range bound like `-`.
fn is_entry_id(id: &str) -> bool {
    id.split_once('-').is_some_and(|(ms, seq)| {
        [ms, seq]
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// Whether the request comes from a page of this site: its `Origin` (or,
/// without one, its `Referer`) names the host the request was sent to.
/// Browsers send `Origin` with every `POST`; a request with neither is
/// refused.
fn same_origin(req: &HttpRequest) -> bool {
    let from = req
        .headers()
        .get(header::ORIGIN)
        .or_else(|| req.headers().get(header::REFERER))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| url::Url::parse(v).ok());
    let Some(from) = from else {
        return false;
    };
    let Some(host) = from.host_str() else {
        return false;
    };
    let authority = match from.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    authority.eq_ignore_ascii_case(req.connection_info().host())
}

/// Checks a `POST`: not read-only, from a page of this site, a valid CSRF
/// token, a selection.
fn admit(ctx: &Ctx, req: &HttpRequest, form: &Action) -> Result<Selected, HttpResponse> {
    if ctx.dash.read_only {
        return Err(HttpResponse::Forbidden().body("the dashboard is read-only"));
    }
    if !same_origin(req) {
        return Err(HttpResponse::Forbidden()
            .body("the request does not come from this dashboard's pages (Origin)"));
    }
    let cookie = req.cookie(csrf::COOKIE);
    if !csrf::accepts(
        &ctx.dash.shared.secret,
        cookie.as_ref().map(|c| c.value()),
        &form.csrf,
        csrf::now(),
    ) {
        return Err(HttpResponse::Forbidden()
            .body("missing, invalid or expired CSRF token; reload the page"));
    }
    form.selected().ok_or_else(|| {
        HttpResponse::BadRequest()
            .body("give id, or start and end (entry ids) with the count the page showed")
    })
}

fn back(ctx: &Ctx, stream: &str, verb: Verb, n: u64, skipped: u64) -> HttpResponse {
    let query = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("done", verb.as_str())
        .append_pair("n", &n.to_string())
        .append_pair("skipped", &skipped.to_string())
        .finish();
    HttpResponse::SeeOther()
        .insert_header((
            header::LOCATION,
            format!("{}/dlq/{}?{query}", ctx.base, pages::path_segment(stream)),
        ))
        .finish()
}

/// The two actions on dead letters.
#[derive(Clone, Copy)]
enum Verb {
    Redrive,
    Purge,
}

impl Verb {
    fn as_str(self) -> &'static str {
        match self {
            Verb::Redrive => "redrive",
            Verb::Purge => "purge",
        }
    }
}

/// Who asked for an action, as the application's own authentication knows
/// them: put one into the request's extensions (a middleware or guard on the
/// scope) and each action's audit log line names it.
///
/// ```
/// use actix_web::HttpMessage as _;
/// use rillkit::dashboard::Operator;
///
/// # fn auth(req: &actix_web::dev::ServiceRequest) {
/// // In the application's authentication middleware, once it knows the user:
/// req.extensions_mut().insert(Operator::new("alice@example.com"));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator(String);

impl Operator {
    /// The operator known as `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Operator(name.into())
    }

    /// The name given.
    pub fn name(&self) -> &str {
        &self.0
    }
}

pub(super) async fn redrive(
    ctx: web::Data<Ctx>,
    req: HttpRequest,
    path: web::Path<String>,
    form: web::Form<Action>,
) -> HttpResponse {
    act(Verb::Redrive, &ctx, &req, path.into_inner(), &form).await
}

pub(super) async fn purge(
    ctx: web::Data<Ctx>,
    req: HttpRequest,
    path: web::Path<String>,
    form: web::Form<Action>,
) -> HttpResponse {
    act(Verb::Purge, &ctx, &req, path.into_inner(), &form).await
}

/// Checks the POST, runs the action on the stream's dead-letter stream, and
/// sends the browser back to its page with what was done.
async fn act(
    verb: Verb,
    ctx: &Ctx,
    req: &HttpRequest,
    stream: String,
    form: &Action,
) -> HttpResponse {
    let selected = match admit(ctx, req, form) {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let admin = match ctx.dash.admin().await {
        Ok(a) => a,
        Err(e) => return ctx.error(&e),
    };
    if let Err(resp) = ctx.check_listed(&admin, &stream).await {
        return resp;
    }
    let dlq = ctx.dash.dlq_of(&admin, &stream);
    let filter = selected.filter();
    if let Selected::Range { count, .. } = &selected {
        // The range holds more than the page showed (dead letters written
        // since, or a hand-made form): do nothing.
        match admin
            .dead_letters(&dlq, &filter.clone().with_count(count + 1))
            .await
        {
            Ok(now) if now.len() > *count => {
                return HttpResponse::Conflict().body(format!(
                    "the range holds more dead letters than the {count} the page showed; reload the page"
                ));
            }
            Ok(_) => {}
            Err(e) => {
                ctx.dash.forget(&e).await;
                return ctx.error(&e);
            }
        }
    }
    let client = req
        .connection_info()
        .realip_remote_addr()
        .unwrap_or("unknown")
        .to_owned();
    let operator = req
        .extensions()
        .get::<Operator>()
        .map(|o| o.name().to_owned());
    let selection = match &selected {
        Selected::One(id) => id.clone(),
        Selected::Range { start, end, count } => format!("{start}..={end} ({count} shown)"),
    };
    let done = match verb {
        Verb::Redrive => admin.redrive(&dlq, &filter).await.map(|report| {
            let ids: Vec<&str> = report
                .redriven
                .iter()
                .map(|r| r.dead_letter.as_str())
                .collect();
            tracing::info!(
                target: "rillkit::dashboard::audit",
                action = "redrive",
                client = %client,
                operator = operator.as_deref().unwrap_or("-"),
                stream = %stream,
                dlq = %dlq,
                selection = %selection,
                redriven = ?ids,
                "dashboard action: dead letters redriven"
            );
            for s in &report.skipped {
                tracing::warn!(
                    target: "rillkit::dashboard::audit",
                    dlq = %dlq,
                    id = %s.id,
                    reason = %s.reason,
                    "dashboard action: a dead letter was not redriven"
                );
            }
            (report.redriven.len() as u64, report.skipped.len() as u64)
        }),
        Verb::Purge => {
            // The ids first: the log names what is deleted.
            let ids = match admin.dead_letters(&dlq, &filter).await {
                Ok(list) => list.into_iter().map(|d| d.id).collect::<Vec<_>>(),
                Err(e) => {
                    ctx.dash.forget(&e).await;
                    return ctx.error(&e);
                }
            };
            let only = match ids.as_slice() {
                [] => None,
                [first, ..] => Some(
                    DeadLetterFilter::new()
                        .with_start(first.clone())
                        .with_end(ids[ids.len() - 1].clone())
                        .with_count(ids.len()),
                ),
            };
            match only {
                None => Ok((0, 0)),
                Some(only) => admin.purge(&dlq, &only).await.map(|n| {
                    tracing::info!(
                        target: "rillkit::dashboard::audit",
                        action = "purge",
                        client = %client,
                        operator = operator.as_deref().unwrap_or("-"),
                        stream = %stream,
                        dlq = %dlq,
                        selection = %selection,
                        purged = ?ids,
                        "dashboard action: dead letters purged"
                    );
                    (n, 0)
                }),
            }
        }
    };
    match done {
        Ok((n, skipped)) => back(ctx, &stream, verb, n, skipped),
        Err(e) => {
            ctx.dash.forget(&e).await;
            ctx.error(&e)
        }
    }
}
