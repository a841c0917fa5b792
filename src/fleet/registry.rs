//! The fleet view: every live rillkit process with subscriptions keeps a
//! record of itself in Redis, renewed by its fleet watch and gone when it
//! stops or dies.
//!
//! `{rillkit:fleet}:process:<token>` holds the record as JSON (`SET … PX`,
//! [`RECORD_TTL`]); the sorted set `{rillkit:fleet}:processes` holds every
//! token, scored by when its record lapses, so a reader finds the records
//! without `SCAN` and a writer drops the tokens of processes long dead. One
//! hash tag: under a cluster the records and the set share a slot.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::kind::SourceKind;
use crate::status::Board;

/// How long a record outlives its last renewal: a process that died leaves
/// the view within this.
pub(crate) const RECORD_TTL: Duration = Duration::from_secs(5);

/// The sorted set of the live processes' tokens.
pub(crate) const PROCESSES: &str = "{rillkit:fleet}:processes";

/// The key of the record of the process `token`.
pub(crate) fn record_key(token: &str) -> String {
    format!("{{rillkit:fleet}}:process:{token}")
}

/// One rillkit process, as its fleet record says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FleetProcess {
    /// What names the process in the fleet (`<host>-<pid>-<random>`).
    pub id: String,
    /// Its first subscription's consumer name.
    pub consumer: String,
    /// Its host name.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Its rillkit version.
    pub version: String,
    /// When its broker started, in ms since the Unix epoch.
    pub started_at_ms: u64,
    /// When it last renewed its record, in ms since the Unix epoch.
    pub seen_at_ms: u64,
    /// Its stream and list subscriptions.
    pub subscriptions: Vec<FleetSubscription>,
}

/// One subscription of a [`FleetProcess`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FleetSubscription {
    /// `stream`, `list` or `list_at_most_once`.
    pub kind: String,
    /// The stream or list it reads.
    pub stream: String,
    /// Its consumer group (empty for a list).
    pub group: String,
    /// Its consumer name.
    pub consumer: String,
    /// Handlers it may run at once now.
    pub concurrency: usize,
    /// Its concurrency as built.
    pub configured_concurrency: usize,
    /// Whether its concurrency follows `rillkit scale` (not a batch
    /// subscription's, nor an ordered stream's).
    pub scalable: bool,
    /// Handlers running now.
    pub in_flight: usize,
    /// Its state (`running`, `paused`, `reconnecting`…).
    pub state: String,
    /// A pause is on, here or for the fleet.
    pub paused: bool,
    /// The fleet-wide pause is on.
    pub fleet_paused: bool,
    /// Its autoscaler, when it has one.
    #[serde(default)]
    pub autoscale: Option<FleetAutoscale>,
    /// Its group's rate limit, as text (`100/s`), when it has one.
    #[serde(default)]
    pub rate_limit: Option<String>,
}

/// What a subscription's autoscaler saw and decided last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FleetAutoscale {
    /// Its bounds, in handlers.
    pub min: usize,
    /// Its upper bound.
    pub max: usize,
    /// The concurrency it asks for now (a fleet-wide one overrides it).
    pub current: usize,
    /// The group's lag at its last look (`None`: Redis could not tell).
    pub backlog: Option<u64>,
    /// Its last change: when (ms since the Unix epoch), from, to.
    pub last_change: Option<(u64, usize, usize)>,
}

/// The name of `kind` in a record; `None` for a channel, which has no place
/// in the fleet view (nothing to pause, scale or lag).
pub(crate) fn kind_name(kind: SourceKind) -> Option<&'static str> {
    match kind {
        SourceKind::Stream => Some("stream"),
        SourceKind::List => Some("list"),
        SourceKind::ListAtMostOnce => Some("list_at_most_once"),
        _ => None,
    }
}

/// What does not change while a process runs.
pub(crate) struct Identity {
    pub token: String,
    pub started_at_ms: u64,
}

pub(crate) use crate::util::now_ms;

/// The process's record now, from its subscriptions' boards; `None` when
/// it has no stream or list subscription.
pub(crate) fn record(me: &Identity, boards: &[Arc<Board>]) -> Option<FleetProcess> {
    let subscriptions: Vec<FleetSubscription> = boards
        .iter()
        .filter_map(|b| {
            let kind = kind_name(b.kind)?;
            let s = b.snapshot();
            Some(FleetSubscription {
                kind: kind.to_owned(),
                stream: s.key,
                group: s.group,
                consumer: s.consumer,
                concurrency: s.concurrency,
                configured_concurrency: b.scale().configured(),
                scalable: b.scale().scalable(),
                in_flight: s.in_flight,
                state: s.state.name().to_owned(),
                paused: s.paused,
                fleet_paused: s.fleet_paused,
                autoscale: b.scale().autoscaler().map(|a| FleetAutoscale {
                    min: a.min,
                    max: a.max,
                    current: a.current,
                    backlog: a.backlog,
                    last_change: a.last_change,
                }),
                rate_limit: s.rate_limit.map(|l| l.to_string()),
            })
        })
        .collect();
    let first = subscriptions.first()?;
    Some(FleetProcess {
        id: me.token.clone(),
        consumer: first.consumer.clone(),
        host: gethostname::gethostname().to_string_lossy().into_owned(),
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        started_at_ms: me.started_at_ms,
        seen_at_ms: now_ms(),
        subscriptions,
    })
}

/// KEYS: the record, the set of processes. ARGV: the record's JSON, its
/// TTL in ms, now in ms. Writes the record with its TTL, scores its token by
/// when it lapses, and drops the tokens that lapsed a minute ago.
const RENEW_LUA: &str = r#"
local ttl, now = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZADD', KEYS[2], now + ttl, KEYS[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 60000)
return 1
"#;

pub(crate) static RENEW: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RENEW_LUA));

/// Reads the records an `MGET` of the live tokens' keys answered, skipping
/// those gone meanwhile and any that do not parse.
pub(crate) fn parse(records: Vec<Option<String>>) -> Vec<FleetProcess> {
    records
        .into_iter()
        .flatten()
        .filter_map(|r| serde_json::from_str(&r).ok())
        .collect()
}
