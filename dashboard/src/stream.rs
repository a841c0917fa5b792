//! A stream's page: per group its consumers (dead ones flagged, with a
//! hand-over) and its pending entries, 50 a page ("50 of 300 pending"),
//! then the stream's entries, newest first, 10 a page, with its length.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::{Ctx, actions, pages};
use rillkit::Error;
use rillkit::admin::{Admin, ConsumerInfo, GroupInfo, PendingEntry, StreamEntry};

/// Pending entries shown per group and page.
pub(super) const PENDING: usize = 50;
/// Entries shown per page of the newest-entries table.
pub(super) const NEWEST: usize = 10;
/// Pending ids read per `XPENDING` while looking for the page before one.
const WALK: usize = 1000;

#[derive(Deserialize)]
pub(super) struct StreamQuery {
    /// The group whose pending entries are paged (the others show their
    /// first page).
    group: Option<String>,
    /// That group's pending entries after this id…
    pending_after: Option<String>,
    /// …or before it.
    pending_before: Option<String>,
    /// The stream's entries older than this id…
    older_than: Option<String>,
    /// …or newer.
    newer_than: Option<String>,
    /// The last action (`handover`) and how many entries it moved.
    done: Option<String>,
    n: Option<u64>,
}

/// A page of something paged by id.
pub(super) struct Paged<T> {
    pub rows: Vec<T>,
    /// There is a page before (older; for the newest table: newer).
    pub prev: bool,
    /// There is a page after.
    pub next: bool,
}

/// One group on the stream page.
pub(super) struct Group {
    pub info: GroupInfo,
    /// Its consumers, each with whether it is flagged dead.
    pub consumers: Vec<(ConsumerInfo, bool)>,
    pub pending: Paged<PendingEntry>,
}

/// What the stream page shows.
pub(super) struct StreamPage<'a> {
    pub base: &'a str,
    pub stream: &'a str,
    pub dlq: &'a str,
    pub length: u64,
    pub groups: Vec<Group>,
    pub newest: Paged<StreamEntry>,
    /// The last hour, a minute a bucket, when the history is on.
    pub history: Option<Vec<super::history::Minute>>,
    pub done: Option<String>,
    /// The dead-consumer threshold, for the page's explanation.
    pub dead_after: std::time::Duration,
    /// The CSRF token; `None` in read-only mode (no hand-over).
    pub token: Option<&'a str>,
}

/// Whether a consumer is flagged dead: it holds pending entries and has
/// not read for longer than `after` (`inactive` where Redis gives it, else
/// `idle`).
pub(super) fn is_dead(c: &ConsumerInfo, after: std::time::Duration) -> bool {
    c.pending > 0 && c.inactive_ms.unwrap_or(c.idle_ms) > after.as_millis() as u64
}

fn bad_id() -> HttpResponse {
    HttpResponse::BadRequest().body("a paging id is not an entry id (<ms>-<seq>)")
}

/// `GET {base}/stream/{stream}`.
pub(super) async fn page(
    ctx: web::Data<Ctx>,
    req: HttpRequest,
    path: web::Path<String>,
    q: web::Query<StreamQuery>,
) -> HttpResponse {
    let stream = path.into_inner();
    let ids = [
        &q.pending_after,
        &q.pending_before,
        &q.older_than,
        &q.newer_than,
    ];
    if ids
        .iter()
        .any(|id| id.as_deref().is_some_and(|id| !actions::is_entry_id(id)))
    {
        return bad_id();
    }
    let admin = match ctx.dash.admin().await {
        Ok(a) => a,
        Err(e) => return ctx.error(&e),
    };
    if let Err(resp) = ctx.check_listed(&admin, &stream).await {
        return resp;
    }
    let dead_after = ctx.dash.dead_after;
    super::history::start(&ctx.dash);
    let data = async {
        let mut groups = Vec::new();
        for g in admin.groups(&stream).await.unwrap_or_default() {
            let consumers = admin
                .consumers(&stream, &g.name)
                .await?
                .into_iter()
                .map(|c| {
                    let dead = is_dead(&c, dead_after);
                    (c, dead)
                })
                .collect();
            let paged = q.group.as_deref() == Some(g.name.as_str());
            let pending = pending_page(
                &admin,
                &stream,
                &g.name,
                paged.then_some(q.pending_after.as_deref()).flatten(),
                paged.then_some(q.pending_before.as_deref()).flatten(),
            )
            .await?;
            groups.push(Group {
                info: g,
                consumers,
                pending,
            });
        }
        let newest = newest_page(
            &admin,
            &stream,
            q.older_than.as_deref(),
            q.newer_than.as_deref(),
        )
        .await?;
        let length = admin.stream_len(&stream).await?;
        let history = match ctx.dash.history {
            Some(_) => Some(super::history::read(&admin, &stream).await?),
            None => None,
        };
        Ok::<_, Error>((groups, newest, length, history))
    }
    .await;
    let (groups, newest, length, history) = match data {
        Ok(d) => d,
        Err(e) => {
            ctx.dash.forget(&e).await;
            return ctx.error(&e);
        }
    };
    let dlq = ctx.dash.dlq_of(&admin, &stream);
    let read_only = ctx.dash.read_only;
    let done = actions::banner(q.done.as_deref(), q.n.unwrap_or(0), 0);
    ctx.page(&req, |token| {
        pages::stream(&StreamPage {
            base: &ctx.base,
            stream: &stream,
            dlq: &dlq,
            length,
            groups,
            newest,
            history,
            done,
            dead_after,
            token: (!read_only).then_some(token),
        })
    })
}

/// A page of `group`'s pending entries: the first, the one after `after`
/// (`XPENDING … (<after> + 51`), or the one before `before` (the last 50
/// ids below it, read forward 1000 ids a call: `XPENDING` reads only
/// forward).
async fn pending_page(
    admin: &Admin,
    stream: &str,
    group: &str,
    after: Option<&str>,
    before: Option<&str>,
) -> Result<Paged<PendingEntry>, Error> {
    if let Some(before) = before {
        let end = format!("({before}");
        let mut start = "-".to_owned();
        let mut kept: std::collections::VecDeque<PendingEntry> = Default::default();
        loop {
            let rows = admin
                .pending_range(stream, group, (&start, &end), WALK, None)
                .await?;
            let full = rows.len() == WALK;
            if let Some(last) = rows.last() {
                start = format!("({}", last.id);
            }
            for r in rows {
                kept.push_back(r);
                if kept.len() > PENDING + 1 {
                    kept.pop_front();
                }
            }
            if !full {
                break;
            }
        }
        let prev = kept.len() > PENDING;
        if prev {
            kept.pop_front();
        }
        return Ok(Paged {
            rows: kept.into(),
            prev,
            next: true,
        });
    }
    let start = after.map_or_else(|| "-".to_owned(), |a| format!("({a}"));
    let mut rows = admin
        .pending_range(stream, group, (&start, "+"), PENDING + 1, None)
        .await?;
    let next = rows.len() > PENDING;
    rows.truncate(PENDING);
    Ok(Paged {
        rows,
        prev: after.is_some(),
        next,
    })
}

/// A page of the stream's entries, newest first: the newest, those older
/// than `older` (`XREVRANGE … (<older> - COUNT 11`), or those newer than
/// `newer` (`XRANGE … (<newer> + COUNT 11`, turned around).
async fn newest_page(
    admin: &Admin,
    stream: &str,
    older: Option<&str>,
    newer: Option<&str>,
) -> Result<Paged<StreamEntry>, Error> {
    let cut = pages::SHOWN_BYTES;
    if let Some(newer) = newer {
        let mut rows = admin
            .preview(stream, (&format!("({newer}"), "+"), NEWEST + 1, false, cut)
            .await?;
        let prev = rows.len() > NEWEST;
        rows.truncate(NEWEST);
        rows.reverse();
        return Ok(Paged {
            rows,
            prev,
            next: true,
        });
    }
    let top = older.map_or_else(|| "+".to_owned(), |o| format!("({o}"));
    let mut rows = admin
        .preview(stream, (&top, "-"), NEWEST + 1, true, cut)
        .await?;
    let next = rows.len() > NEWEST;
    rows.truncate(NEWEST);
    Ok(Paged {
        rows,
        prev: older.is_some(),
        next,
    })
}
