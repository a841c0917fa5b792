//! The dead-letter page: 20 a page ("20 of N"), next and previous,
//! filtered by error text (`?error=`) and by id or time range (`?from=`,
//! `?to=`: entry ids or ms timestamps, as `XRANGE` takes them), with the
//! bulk actions on what a filter selects, counted first.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::{Ctx, actions, pages};
use rillkit::Error;

/// Dead letters per page.
pub(super) const PAGE: usize = 20;

#[derive(Deserialize)]
pub(super) struct DlqQuery {
    /// Show dead letters after this id (exclusive)…
    after: Option<String>,
    /// …or before it.
    before: Option<String>,
    /// Only those whose appended error contains this text.
    error: Option<String>,
    /// Only those from this id or ms timestamp…
    from: Option<String>,
    /// …to this one (inclusive).
    to: Option<String>,
    /// What the last action did (`redrive`, `purge`): the banner is one of
    /// a fixed set of sentences, never text from the URL (anything else
    /// shows none).
    done: Option<String>,
    /// How many dead letters it moved or deleted.
    n: Option<u64>,
    /// How many it left in place.
    skipped: Option<u64>,
}

/// What a filter on the dead-letter page selects: every criterion given
/// is non-empty.
#[derive(Default, Clone)]
pub(super) struct Filter {
    pub error: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
}

impl Filter {
    /// The filter of a page's query or an action's form: empty fields are
    /// none given; `None` when a bound is neither an entry id nor a ms
    /// timestamp.
    pub(super) fn new(error: Option<&str>, from: Option<&str>, to: Option<&str>) -> Option<Self> {
        let given = |v: Option<&str>| {
            v.map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        let f = Filter {
            error: error.filter(|e| !e.is_empty()).map(str::to_owned),
            from: given(from),
            to: given(to),
        };
        [&f.from, &f.to]
            .iter()
            .all(|b| b.as_deref().is_none_or(is_bound))
            .then_some(f)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.error.is_none() && self.from.is_none() && self.to.is_none()
    }

    /// The `XRANGE` bounds.
    pub(super) fn range(&self) -> (&str, &str) {
        (
            self.from.as_deref().unwrap_or("-"),
            self.to.as_deref().unwrap_or("+"),
        )
    }

    pub(super) fn error_text(&self) -> &str {
        self.error.as_deref().unwrap_or("")
    }

    /// The filter as query pairs (for links and forms).
    pub(super) fn pairs(&self) -> Vec<(&'static str, &str)> {
        [
            ("error", &self.error),
            ("from", &self.from),
            ("to", &self.to),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_deref().map(|v| (k, v)))
        .collect()
    }

    /// In words: "whose error contains "x", from 1-0 to 2-0".
    pub(super) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(e) = &self.error {
            parts.push(format!("whose error contains {e:?}"));
        }
        if let Some(f) = &self.from {
            parts.push(format!("from {f}"));
        }
        if let Some(t) = &self.to {
            parts.push(format!("to {t}"));
        }
        parts.join(", ")
    }
}

/// An `XRANGE` bound a filter takes: an entry id, or ms since the epoch.
fn is_bound(b: &str) -> bool {
    actions::is_entry_id(b)
        || (!b.is_empty() && b.len() <= 20 && b.bytes().all(|c| c.is_ascii_digit()))
}

/// `GET {base}/dlq/{stream}`.
pub(super) async fn page(
    ctx: web::Data<Ctx>,
    req: HttpRequest,
    path: web::Path<String>,
    q: web::Query<DlqQuery>,
) -> HttpResponse {
    let stream = path.into_inner();
    let Some(filter) = Filter::new(q.error.as_deref(), q.from.as_deref(), q.to.as_deref()) else {
        return HttpResponse::BadRequest()
            .body("from and to take an entry id or ms since the epoch");
    };
    if [&q.after, &q.before]
        .iter()
        .any(|id| id.as_deref().is_some_and(|id| !actions::is_entry_id(id)))
    {
        return HttpResponse::BadRequest().body("a paging id is not an entry id (<ms>-<seq>)");
    }
    let admin = match ctx.dash.admin().await {
        Ok(a) => a,
        Err(e) => return ctx.error(&e),
    };
    if let Err(resp) = ctx.check_listed(&admin, &stream).await {
        return resp;
    }
    let dlq = ctx.dash.dlq_of(&admin, &stream);
    let (lo, hi) = filter.range();
    let text = filter.error_text();
    let read = async {
        let (list, prev, more) = if let Some(before) = &q.before {
            let (mut list, _) = admin
                .dead_letters_filtered(
                    &dlq,
                    (&format!("({before}"), lo),
                    true,
                    text,
                    PAGE + 1,
                    pages::SHOWN_BYTES,
                )
                .await?;
            let prev = list.len() > PAGE;
            list.truncate(PAGE);
            list.reverse();
            (list, prev, true)
        } else {
            // After the largest id there is nothing.
            let start = match q.after.as_deref().map(next_id) {
                None => Some(lo.to_owned()),
                Some(next) => next,
            };
            let mut list = match start {
                Some(start) => {
                    admin
                        .dead_letters_filtered(
                            &dlq,
                            (&start, hi),
                            false,
                            text,
                            PAGE + 1,
                            pages::SHOWN_BYTES,
                        )
                        .await?
                        .0
                }
                None => Vec::new(),
            };
            let more = list.len() > PAGE;
            list.truncate(PAGE);
            (list, q.after.is_some(), more)
        };
        let total = if filter.is_empty() {
            admin.stream_len(&dlq).await?
        } else {
            admin.count_dead_letters(&dlq, (lo, hi), text).await?
        };
        Ok::<_, Error>((list, prev, more, total))
    }
    .await;
    let (list, prev, more, total) = match read {
        Ok(v) => v,
        Err(e) => {
            ctx.dash.forget(&e).await;
            return ctx.error(&e);
        }
    };
    let read_only = ctx.dash.read_only;
    let done = actions::banner(q.done.as_deref(), q.n.unwrap_or(0), q.skipped.unwrap_or(0));
    ctx.page(&req, |token| {
        pages::dead_letters(&pages::DlqPage {
            base: &ctx.base,
            stream: &stream,
            dlq: &dlq,
            total,
            list: &list,
            prev,
            more,
            filter: &filter,
            done: done.as_deref(),
            failed: actions::failed(q.done.as_deref(), q.n.unwrap_or(0), q.skipped.unwrap_or(0)),
            token: (!read_only).then_some(token),
        })
    })
}

/// The id right after `id` (`<ms>-<seq + 1>`), as an inclusive start;
/// `None` after the largest id.
fn next_id(id: &str) -> Option<String> {
    let (ms, seq) = id.split_once('-')?;
    let (ms, seq): (u64, u64) = (ms.parse().ok()?, seq.parse().ok()?);
    Some(match seq.checked_add(1) {
        Some(s) => format!("{ms}-{s}"),
        None => format!("{}-0", ms.checked_add(1)?),
    })
}
