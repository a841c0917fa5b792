//! The dashboard's actions on dead letters (redrive, purge): what a
//! `POST` must carry to be admitted (read-write mode, this site's `Origin`,
//! a valid CSRF token, a selection of one id or a counted range), the action
//! itself with its audit log line, and the fixed banner it leads to.

use actix_web::http::header;
use actix_web::{HttpMessage as _, HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::dlq::Filter;
use super::{Ctx, csrf, pages};
use rillkit::admin::DeadLetterFilter;

/// The banner after an action, from the page's query (`done`, `n`,
/// `skipped`): one of a fixed set of sentences with its counts; `None` for
/// anything else, so the URL never paints text of its own. A redrive that
/// skipped every selected dead letter did nothing: its banner says so
/// ([`failed`]), not "Redriven: 0.".
pub(super) fn banner(done: Option<&str>, n: u64, skipped: u64) -> Option<String> {
    if failed(done, n, skipped) {
        return Some(format!(
            "Nothing redriven: every one of the {skipped} selected dead letters was skipped \
             and left in place (the application's log says why)."
        ));
    }
    let mut text = match done? {
        "redrive" => format!("Redriven: {n}."),
        "purge" => format!("Purged: {n}."),
        "handover" => format!("Handed over: {n} pending entries."),
        "pause" => {
            "Paused in every process: the group (or list) reads nothing new until it is resumed."
                .to_owned()
        }
        "resume" => "Resumed in every process: the group (or list) reads again.".to_owned(),
        _ => return None,
    };
    if skipped > 0 {
        text.push_str(&format!(
            " Skipped: {skipped} (left in place; the application's log says why)."
        ));
    }
    Some(text)
}

/// Whether the banner reports an action that did nothing: a redrive whose
/// every selected dead letter was skipped.
pub(super) fn failed(done: Option<&str>, n: u64, skipped: u64) -> bool {
    done == Some("redrive") && n == 0 && skipped > 0
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
    /// Or a filter (any of the three) with the count the page showed of
    /// what it selects: none when that count changed.
    error: Option<String>,
    from: Option<String>,
    to: Option<String>,
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
    /// What a filter of the dead-letter page selects, and the count the
    /// page showed.
    Filter {
        filter: Filter,
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
            Selected::Filter { filter, count } => {
                let (start, end) = filter.range();
                let f = DeadLetterFilter::new()
                    .with_start(start)
                    .with_end(end)
                    .with_count(*count);
                match &filter.error {
                    Some(text) => f.with_error_contains(text.clone()),
                    None => f,
                }
            }
        }
    }
}

impl Action {
    /// The selection: one id, or a range between two entry ids (never `-`
    /// or `+`) with its count.
    fn selected(&self) -> Option<Selected> {
        let filter = Filter::new(
            self.error.as_deref(),
            self.from.as_deref(),
            self.to.as_deref(),
        )?;
        if !filter.is_empty() {
            return match (&self.id, &self.start, &self.end, self.count) {
                (None, None, None, Some(count)) if count > 0 => {
                    Some(Selected::Filter { filter, count })
                }
                _ => None,
            };
        }
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
pub(super) fn is_entry_id(id: &str) -> bool {
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

/// Checks any action's `POST`: not read-only, from a page of this site, a
/// valid CSRF token (`csrf`, the form's).
pub(super) fn admit_request(ctx: &Ctx, req: &HttpRequest, csrf: &str) -> Result<(), HttpResponse> {
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
        csrf,
        csrf::now(),
    ) {
        return Err(HttpResponse::Forbidden()
            .body("missing, invalid or expired CSRF token; reload the page"));
    }
    Ok(())
}

/// Checks a `POST` on dead letters: [`admit_request`], and a selection.
fn admit(ctx: &Ctx, req: &HttpRequest, form: &Action) -> Result<Selected, HttpResponse> {
    admit_request(ctx, req, &form.csrf)?;
    form.selected().ok_or_else(|| {
        HttpResponse::BadRequest().body(
            "give id, or start and end (entry ids) with the count the page showed, \
             or a filter (error, from, to) with the count the page showed",
        )
    })
}

/// Who sent an action: the client's address and the operator, if the
/// application's authentication named one.
pub(super) fn who(req: &HttpRequest) -> (String, Option<String>) {
    let client = req
        .connection_info()
        .realip_remote_addr()
        .unwrap_or("unknown")
        .to_owned();
    let operator = req
        .extensions()
        .get::<Operator>()
        .map(|o| o.name().to_owned());
    (client, operator)
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
/// use rillkit_dashboard::Operator;
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
    if let Selected::Filter { filter, count } = &selected {
        // What the filter selects now must be what the page counted.
        match admin
            .count_dead_letters(&dlq, filter.range(), filter.error_text())
            .await
        {
            Ok(now) if now != *count as u64 => {
                return HttpResponse::Conflict().body(format!(
                    "the filter selects {now} dead letters now, not the {count} the page counted; reload the page"
                ));
            }
            Ok(_) => {}
            Err(e) => {
                ctx.dash.forget(&e).await;
                return ctx.error(&e);
            }
        }
    }
    let (client, operator) = who(req);
    let selection = match &selected {
        Selected::One(id) => id.clone(),
        Selected::Range { start, end, count } => format!("{start}..={end} ({count} shown)"),
        Selected::Filter { filter, count } => {
            format!("those {} ({count} counted)", filter.describe())
        }
    };
    let done = match verb {
        Verb::Redrive => admin.redrive(&dlq, &filter).await.map(|report| {
            let ids: Vec<&str> = report
                .redriven
                .iter()
                .map(|r| r.dead_letter.as_str())
                .collect();
            let lifted: Vec<String> = report
                .redriven
                .iter()
                .filter_map(|r| r.lifted_mark.as_deref())
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect();
            if report.all_skipped() {
                tracing::warn!(
                    target: "rillkit::dashboard::audit",
                    action = "redrive",
                    client = %client,
                    operator = operator.as_deref().unwrap_or("-"),
                    stream = %stream,
                    dlq = %dlq,
                    selection = %selection,
                    skipped = report.skipped.len(),
                    "dashboard action: nothing redriven, every selected dead letter was skipped"
                );
            } else {
                tracing::info!(
                    target: "rillkit::dashboard::audit",
                    action = "redrive",
                    client = %client,
                    operator = operator.as_deref().unwrap_or("-"),
                    stream = %stream,
                    dlq = %dlq,
                    selection = %selection,
                    redriven = ?ids,
                    fail_rest_marks_deleted = ?lifted,
                    "dashboard action: dead letters redriven"
                );
            }
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
            // The ids first: the log names what is deleted, and exactly
            // those are deleted.
            let ids = match &selected {
                Selected::Filter { filter, count } => admin
                    .dead_letters_filtered(
                        &dlq,
                        filter.range(),
                        false,
                        filter.error_text(),
                        *count,
                        0,
                    )
                    .await
                    .map(|(list, _)| list.into_iter().map(|d| d.id).collect::<Vec<_>>()),
                _ => admin
                    .dead_letters(&dlq, &filter)
                    .await
                    .map(|list| list.into_iter().map(|d| d.id).collect::<Vec<_>>()),
            };
            let ids = match ids {
                Ok(ids) => ids,
                Err(e) => {
                    ctx.dash.forget(&e).await;
                    return ctx.error(&e);
                }
            };
            admin.delete(&dlq, &ids).await.map(|n| {
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
            })
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
