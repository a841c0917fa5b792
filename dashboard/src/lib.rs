//! A web dashboard for [rillkit](https://docs.rs/rillkit) that an
//! actix-web application mounts:
//! streams and groups at a glance, a group's consumers (dead ones flagged,
//! with a hand-over of their entries) and pending entries, each entry whole
//! on a page of its own, and dead letters, filtered, with redrive and purge.
//!
//! ```no_run
//! use actix_web::{App, HttpServer};
//! use rillkit::Broker;
//!
//! # async fn serve(broker: Broker) -> std::io::Result<()> {
//! let dashboard = rillkit_dashboard::Dashboard::new(broker.clone());
//! HttpServer::new(move || App::new().service(dashboard.scope("/rillkit")))
//!     .bind(("127.0.0.1", 8080))?
//!     .run()
//!     .await
//! # }
//! ```
//!
//! Pages are rendered on the server ([`maud`](https://docs.rs/maud), which
//! escapes everything it interpolates: a payload or error holding `<script>`
//! shows as text). Reads go through [`Admin`] on a connection of the
//! dashboard's own, made from the broker's topology; the overview sends
//! `XLEN`, `XINFO GROUPS` and one `XPENDING … 1` per group for each stream
//! it shows. Actions (`POST`) carry a signed double-submit token (see
//! `csrf.rs`) and are refused in [read-only](Dashboard::read_only) mode.
//!
//! **The dashboard has no login.** Mount it behind the application's own
//! authentication (a middleware or guard on the scope); never expose it
//! unauthenticated: it can redrive and delete dead letters and move
//! pending entries between consumers.

mod actions;
mod csrf;
mod dlq;
mod entry;
mod fleet;
mod handover;
mod history;
mod pages;
mod pause;
mod rates;
mod stream;

pub use actions::Operator;

use std::sync::Arc;
use std::time::Duration;

use actix_web::cookie::{Cookie, SameSite};
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use tokio::sync::Mutex;

use rillkit::admin::Admin;
use rillkit::{Broker, Error};

/// A dashboard over one broker's streams; cheap to clone (one per actix-web
/// worker shares the same state). See the [module docs](self).
///
/// ```no_run
/// use std::time::Duration;
/// use actix_web::{App, HttpServer};
/// use rillkit_dashboard::Dashboard;
///
/// # async fn serve(broker: rillkit::Broker, key: Vec<u8>) -> std::io::Result<()> {
/// let dashboard = Dashboard::new(broker)
///     // Also the streams this application only publishes to.
///     .streams(["invoices", "emails"])
///     // Flag consumers idle for 2 minutes with entries pending.
///     .dead_consumer_after(Duration::from_secs(120))
///     // One key for every replica behind the same address, so a form
///     // served by one is accepted by another.
///     .csrf_secret(key)
///     // Look, don't touch: no redrive, purge or hand-over.
///     .read_only(true);
/// HttpServer::new(move || App::new().service(dashboard.scope("/rillkit")))
///     .bind(("127.0.0.1", 8080))?
///     .run()
///     .await
/// # }
/// ```
///
/// Mount it behind the application's authentication (a guard or
/// middleware on the scope): it has no login of its own.
#[derive(Clone)]
pub struct Dashboard {
    broker: Broker,
    read_only: bool,
    declared: Vec<String>,
    all_streams: bool,
    dead_after: Duration,
    /// How often history rows are written; `None`: none.
    history: Option<Duration>,
    shared: Arc<Shared>,
}

struct Shared {
    /// The CSRF tokens' HMAC key.
    secret: Vec<u8>,
    /// The reading connection, made on first use and again after a
    /// connection error.
    admin: Mutex<Option<Admin>>,
    rates: Arc<rates::Rates>,
    /// Whether the history writer runs.
    history_started: std::sync::atomic::AtomicBool,
}

/// Returns the dashboard of `broker` as an actix-web scope mounted at
/// `path`, with the defaults of [`Dashboard::new`]:
/// `App::new().service(rillkit_dashboard::scope("/rillkit", broker.clone()))`.
pub fn scope(path: &str, broker: Broker) -> actix_web::Scope {
    Dashboard::new(broker).scope(path)
}

impl Dashboard {
    /// A dashboard showing the streams `broker` subscribes to, with actions
    /// on, and a CSRF key drawn from the operating system's random source
    /// (so tokens are valid in this process only; see
    /// [`csrf_secret`](Self::csrf_secret) for several replicas behind one
    /// address).
    pub fn new(broker: Broker) -> Self {
        Dashboard {
            broker,
            read_only: false,
            declared: Vec::new(),
            all_streams: false,
            dead_after: Duration::from_secs(300),
            history: None,
            shared: Arc::new(Shared {
                secret: csrf::random_secret().to_vec(),
                admin: Mutex::new(None),
                rates: Arc::default(),
                history_started: Default::default(),
            }),
        }
    }

    /// Read-only mode: no redrive or purge buttons, and a `POST` to them is
    /// refused with 403.
    pub fn read_only(mut self, on: bool) -> Self {
        self.read_only = on;
        self
    }

    /// Streams to show beside the subscribed ones: a producer-only
    /// application declares the streams it publishes to.
    pub fn streams<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.declared.extend(names.into_iter().map(Into::into));
        self
    }

    /// Shows every stream on the server too (`SCAN … TYPE stream`, on every
    /// master under a cluster), except default dead-letter streams. Off by
    /// default: a scan walks the whole keyspace on every refresh.
    pub fn all_streams(mut self, on: bool) -> Self {
        self.all_streams = on;
        self
    }

    /// How long a consumer that holds pending entries may go without
    /// reading before the stream page flags it as dead and offers to hand
    /// its entries over (default 5 minutes). The time is `XINFO CONSUMERS`'
    /// `inactive` (since its last read or claim that got entries, Redis 7.2
    /// and later), else its `idle`.
    pub fn dead_consumer_after(mut self, after: Duration) -> Self {
        self.dead_after = after;
        self
    }

    /// Keeps a history of each shown stream in Redis and charts its last
    /// hour on the stream page: per minute, the entries this process (and
    /// every other with history on) handled, failed and dead-lettered, and
    /// the stream's lag. Each process appends a row per stream every
    /// minute to the stream `rillkit:history:<stream>` (`XADD … MAXLEN ~
    /// 1440`), so the ACL user needs `+xadd` on `rillkit:history:*`. A
    /// [read-only](Self::read_only) dashboard writes no rows; it charts
    /// those others wrote. Off by default.
    pub fn history(mut self, on: bool) -> Self {
        self.history = on.then_some(Duration::from_secs(60));
        self
    }

    /// Turns the [`history`](Self::history) on with a row every `every`
    /// instead of every minute (the chart still sums per minute).
    pub fn history_period(mut self, every: Duration) -> Self {
        self.history = Some(every);
        self
    }

    /// Sets the key the CSRF tokens are signed with (at least 32 bytes), so
    /// that several replicas behind one address accept each other's
    /// tokens.
    ///
    /// # Panics
    /// When `key` is shorter than 32 bytes.
    pub fn csrf_secret(mut self, key: impl Into<Vec<u8>>) -> Self {
        let key = key.into();
        assert!(key.len() >= 32, "a CSRF key needs at least 32 bytes");
        let shared = Arc::get_mut(&mut self.shared).map(|s| {
            s.secret = key.clone();
        });
        if shared.is_none() {
            self.shared = Arc::new(Shared {
                secret: key,
                admin: Mutex::new(None),
                rates: self.shared.rates.clone(),
                history_started: Default::default(),
            });
        }
        self
    }

    /// The dashboard as an actix-web scope at `path` (`"/rillkit"`):
    ///
    /// | route | what |
    /// |---|---|
    /// | `GET {path}/` | overview: streams, groups, lag, pending, oldest pending, consumers, dead letters, handled/s |
    /// | `GET {path}/stream/{stream}` | its groups' consumers (dead ones flagged) and pending entries, its entries, each paged |
    /// | `GET {path}/stream/{stream}/entry/{id}` | one entry, whole, and where it is pending |
    /// | `GET {path}/dlq/{stream}` | its dead letters, 20 a page (`?after=`, `?before=`), filtered (`?error=`, `?from=`, `?to=`) |
    /// | `GET {path}/dlq/{stream}/entry/{id}` | one dead letter, whole, with its origin and actions |
    /// | `POST {path}/dlq/{stream}/redrive` | redrive one (`id`), a range (`start`, `end`, `count`) or what a filter selects (`error`, `from`, `to`, `count`) |
    /// | `POST {path}/dlq/{stream}/purge` | delete one, a range or a filter's selection |
    /// | `POST {path}/stream/{stream}/handover` | hand a dead consumer's pending entries to another consumer (`group`, `consumer`, `to`, `count`) |
    /// | `POST {path}/subscription/pause` | pause the group (or list) of a stream or list subscription of the broker in every process (`kind`: `stream`, `list` or `list_at_most_once`; `key`, `group`, `consumer`): see [`Broker::pause_fleet`] |
    /// | `POST {path}/subscription/resume` | resume it in every process ([`Broker::resume_fleet`]), and in this one ([`Broker::resume_local`]) |
    /// | `GET {path}/fleet` | the live rillkit processes ([`Admin::fleet`]): per subscription its concurrency, handlers in flight, state |
    /// | `POST {path}/fleet/scale` | set a group's (or list's) concurrency in every process (`kind`, `key`, `group`, `concurrency`, empty for each its own): [`Admin::scale_group`] |
    pub fn scope(&self, path: &str) -> actix_web::Scope {
        let base = path.trim_end_matches('/').to_owned();
        web::scope(path)
            .app_data(web::Data::new(Ctx {
                dash: self.clone(),
                base,
            }))
            .route("", web::get().to(overview))
            .route("/", web::get().to(overview))
            .route("/stream/{stream}", web::get().to(stream::page))
            .route(
                "/stream/{stream}/entry/{id}",
                web::get().to(entry::stream_entry),
            )
            .route("/dlq/{stream}", web::get().to(dlq::page))
            .route(
                "/dlq/{stream}/entry/{id}",
                web::get().to(entry::dead_letter),
            )
            .route("/dlq/{stream}/redrive", web::post().to(actions::redrive))
            .route("/dlq/{stream}/purge", web::post().to(actions::purge))
            .route(
                "/stream/{stream}/handover",
                web::post().to(handover::handover),
            )
            .route("/subscription/pause", web::post().to(pause::pause))
            .route("/subscription/resume", web::post().to(pause::resume))
            .route("/fleet", web::get().to(fleet::page))
            .route("/fleet/scale", web::post().to(fleet::scale))
    }

    async fn admin(&self) -> Result<Admin, Error> {
        let mut slot = self.shared.admin.lock().await;
        if let Some(a) = slot.as_ref() {
            return Ok(a.clone());
        }
        let a = Admin::for_broker(&self.broker).await?;
        *slot = Some(a.clone());
        Ok(a)
    }

    /// Forgets the connection after a connection error, so the next
    /// request connects again.
    async fn forget(&self, e: &Error) {
        if e.is_connection() {
            *self.shared.admin.lock().await = None;
        }
    }

    /// The streams to show, each once, in order: subscribed, declared, then
    /// (optionally) discovered.
    async fn stream_names(&self, admin: &Admin) -> Result<Vec<Shown>, Error> {
        let mut out: Vec<Shown> = Vec::new();
        let push = |out: &mut Vec<Shown>, name: String, dlq: String| {
            if !out.iter().any(|s| s.name == name) {
                out.push(Shown { name, dlq });
            }
        };
        // Lists and channels are not streams: the subscriptions table shows them.
        for s in self.broker.status().subscriptions {
            if s.kind != rillkit::SourceKind::Stream {
                continue;
            }
            let dlq = self.dlq_of(admin, &s.key);
            push(&mut out, s.key, dlq);
        }
        for name in &self.declared {
            push(&mut out, name.clone(), self.dlq_of(admin, name));
        }
        if self.all_streams {
            for name in admin.origin_streams().await? {
                if !out.iter().any(|s| s.dlq == name) {
                    let dlq = self.dlq_of(admin, &name);
                    push(&mut out, name, dlq);
                }
            }
        }
        Ok(out)
    }

    /// Whether the dashboard shows `stream`: subscribed or declared, or
    /// with [`all_streams`](Self::all_streams) any stream on the server, or
    /// whose dead-letter stream is.
    /// Pages and actions on any other key answer 404.
    async fn shows(&self, admin: &Admin, stream: &str) -> Result<bool, Error> {
        let listed = self
            .broker
            .status()
            .subscriptions
            .iter()
            .any(|s| s.kind == rillkit::SourceKind::Stream && s.key == stream)
            || self.declared.iter().any(|d| d == stream);
        if listed {
            return Ok(true);
        }
        if !self.all_streams {
            return Ok(false);
        }
        // Discovered: the stream, or only its dead letters (a stream
        // deleted since).
        let found = admin.streams("*").await?;
        let dlq = self.dlq_of(admin, stream);
        Ok(found.iter().any(|f| f == stream || *f == dlq))
    }

    /// The dead-letter stream of `stream`: the subscription's (it may be
    /// named), else the default for the topology.
    fn dlq_of(&self, admin: &Admin, stream: &str) -> String {
        self.broker
            .status()
            .subscriptions
            .into_iter()
            .find(|s| s.kind == rillkit::SourceKind::Stream && s.key == stream)
            .map(|s| s.dlq)
            .unwrap_or_else(|| admin.dlq_of(stream))
    }
}

/// One stream the overview shows.
struct Shown {
    name: String,
    dlq: String,
}

/// What every handler gets.
struct Ctx {
    dash: Dashboard,
    /// The scope's path without a trailing slash, for links.
    base: String,
}

impl Ctx {
    /// The CSRF token of this browser (the cookie's, when it verifies) and
    /// whether it must be set.
    fn token(&self, req: &HttpRequest) -> (String, bool) {
        let now = csrf::now();
        match req.cookie(csrf::COOKIE) {
            // Still good for the next hour: a form on this page can be sent.
            Some(c) if csrf::valid(&self.dash.shared.secret, c.value(), now + 3600) => {
                (c.value().to_owned(), false)
            }
            _ => (csrf::issue(&self.dash.shared.secret, now), true),
        }
    }

    /// A page, with the CSRF cookie set when it is new.
    fn page(&self, req: &HttpRequest, render: impl FnOnce(&str) -> maud::Markup) -> HttpResponse {
        let (token, fresh) = self.token(req);
        let mut resp = HttpResponse::Ok();
        resp.content_type("text/html; charset=utf-8")
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .insert_header(("X-Content-Type-Options", "nosniff"))
            .insert_header(("X-Frame-Options", "DENY"))
            .insert_header((
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'",
            ));
        if fresh {
            let path = if self.base.is_empty() {
                "/"
            } else {
                &self.base
            };
            resp.cookie(
                Cookie::build(csrf::COOKIE, token.clone())
                    .path(path.to_owned())
                    .same_site(SameSite::Strict)
                    .http_only(true)
                    // Served over TLS (directly, or behind a proxy that says
                    // so in `Forwarded`/`X-Forwarded-Proto`): never sent in
                    // the clear.
                    .secure(req.connection_info().scheme() == "https")
                    .max_age(actix_web::cookie::time::Duration::seconds(
                        csrf::TTL.as_secs() as i64,
                    ))
                    .finish(),
            );
        }
        resp.body(render(&token).into_string())
    }

    /// 404 for a stream the dashboard does not show.
    fn not_listed(&self, stream: &str) -> HttpResponse {
        HttpResponse::NotFound()
            .content_type("text/html; charset=utf-8")
            .body(
                pages::error(
                    &self.base,
                    &format!("the dashboard does not show a stream named {stream:?}"),
                    false,
                )
                .into_string(),
            )
    }

    /// Whether the dashboard shows `stream`; else the response to send
    /// (404, or the error that kept it from telling).
    async fn check_listed(&self, admin: &Admin, stream: &str) -> Result<(), HttpResponse> {
        match self.dash.shows(admin, stream).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(self.not_listed(stream)),
            Err(e) => {
                self.dash.forget(&e).await;
                Err(self.error(&e))
            }
        }
    }

    /// A page for an error: 503 (refreshing) when Redis could not be
    /// reached, 400 when it refused what was asked (a key of another type,
    /// a malformed id).
    fn error(&self, e: &Error) -> HttpResponse {
        let mut resp = if e.is_connection() {
            HttpResponse::ServiceUnavailable()
        } else {
            HttpResponse::BadRequest()
        };
        resp.content_type("text/html; charset=utf-8")
            .body(pages::error(&self.base, &e.to_string(), e.is_connection()).into_string())
    }
}

/// The overview's query: the banner after an action.
#[derive(serde::Deserialize)]
struct OverviewQuery {
    done: Option<String>,
}

async fn overview(
    ctx: web::Data<Ctx>,
    req: HttpRequest,
    q: web::Query<OverviewQuery>,
) -> HttpResponse {
    let dash = &ctx.dash;
    dash.shared.rates.start(&dash.broker);
    history::start(dash);
    let admin = match dash.admin().await {
        Ok(a) => a,
        Err(e) => return ctx.error(&e),
    };
    let rows = match gather(dash, &admin).await {
        Ok(r) => r,
        Err(e) => {
            dash.forget(&e).await;
            return ctx.error(&e);
        }
    };
    let status = dash.broker.status();
    let done = actions::banner(q.done.as_deref(), 0, 0);
    let read_only = dash.read_only;
    ctx.page(&req, |token| {
        pages::overview(
            &ctx.base,
            &status,
            &rows,
            done.as_deref(),
            (!read_only).then_some(token),
        )
    })
}

/// What the overview shows of one stream.
pub(crate) struct StreamRow {
    pub name: String,
    pub length: u64,
    pub dlq: String,
    pub dead_letters: u64,
    pub groups: Vec<GroupRow>,
    /// Entries handled per second, oldest first (subscribed streams).
    pub rates: Vec<f64>,
    /// This process subscribes to it (else there is no handled rate).
    pub consumed_here: bool,
    /// What Redis answered instead of the figures (a key of another type).
    pub error: Option<String>,
}

impl StreamRow {
    fn failed(name: String, error: String) -> Self {
        StreamRow {
            name,
            length: 0,
            dlq: String::new(),
            dead_letters: 0,
            groups: Vec::new(),
            rates: Vec::new(),
            consumed_here: false,
            error: Some(error),
        }
    }
}

pub(crate) struct GroupRow {
    pub info: rillkit::admin::GroupInfo,
    pub oldest_pending_age: Option<Duration>,
}

async fn gather(dash: &Dashboard, admin: &Admin) -> Result<Vec<StreamRow>, Error> {
    let shown = dash.stream_names(admin).await?;
    let rows = futures::future::join_all(shown.into_iter().map(|s| async move {
        let name = s.name.clone();
        match row(dash, admin, s).await {
            // A key of another type (WRONGTYPE) spoils its own row only.
            Err(e) if !e.is_connection() => Ok(StreamRow::failed(name, e.to_string())),
            other => other,
        }
    }))
    .await
    .into_iter()
    .collect::<Result<Vec<_>, Error>>()?;
    Ok(rows)
}

async fn row(dash: &Dashboard, admin: &Admin, s: Shown) -> Result<StreamRow, Error> {
    {
        let length = admin.stream_len(&s.name).await?;
        let groups = if length > 0 || exists(admin, &s.name).await? {
            admin.groups(&s.name).await.unwrap_or_default()
        } else {
            Vec::new()
        };
        let groups = futures::future::try_join_all(groups.into_iter().map(|g| async {
            let oldest = if g.pending > 0 {
                admin
                    .pending(&s.name, &g.name, 1)
                    .await?
                    .first()
                    .and_then(|p| p.id.age())
            } else {
                None
            };
            Ok::<_, Error>(GroupRow {
                info: g,
                oldest_pending_age: oldest,
            })
        }))
        .await?;
        let dead_letters = admin.stream_len(&s.dlq).await?;
        Ok::<_, Error>(StreamRow {
            rates: dash.shared.rates.of(&s.name),
            consumed_here: dash
                .broker
                .status()
                .subscriptions
                .iter()
                .any(|b| b.key == s.name),
            name: s.name,
            length,
            dlq: s.dlq,
            dead_letters,
            groups,
            error: None,
        })
    }
}

/// Whether the key exists (an empty stream has length 0 and may still
/// have groups).
async fn exists(admin: &Admin, key: &str) -> Result<bool, Error> {
    Ok(!admin.groups(key).await.unwrap_or_default().is_empty())
}

/// The guide's dashboard chapter, whose Rust blocks run as this crate's doc
/// tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/src/dashboard.md")]
pub struct GuideChapter;
