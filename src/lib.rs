//! rillkit: supervised Redis Streams consumers on the actix actor framework.
//!
//! A [`Broker`] runs one consumer per subscription, each in a consumer group,
//! with lifecycle hooks, at-least-once delivery (XACK after the handler
//! succeeds), retries through the pending entries list, a dead-letter stream
//! per stream, and a graceful drain that ends in a [`SupervisorOutcome`] whose
//! [`exit_code`](SupervisorOutcome::exit_code) the process can exit with.
//!
//! ```no_run
//! use rillkit::prelude::*;
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Order { id: u64, total: f64 }
//!
//! #[actix::main]
//! async fn main() -> Result<(), rillkit::Error> {
//!     let orders = Stream::new("orders", "billing");
//!     let broker = Broker::builder("redis://127.0.0.1:6379")
//!         .subscribe(&orders, ConsumerOptions::default(), |o: Order| async move {
//!             println!("order {} for {}", o.id, o.total);
//!             HandlerResult::Ok(())
//!         })
//!         .build()?;
//!     broker.start().await?;
//!     broker.publish(&orders, &Order { id: 1, total: 49.5 }).await?;
//!     let outcome = broker.stop().await?;
//!     std::process::exit(outcome.exit_code());
//! }
//! ```
//!
//! Options are set with methods named `with_<option>`, which take the value
//! and return it changed (`ConsumerOptions::default().with_count(100)`,
//! `Stream::new("orders", "billing").with_max_len(10_000)`,
//! `with_retain_acked(true)`), and read back with the option's plain name
//! (`count()`, `max_len()`, `retain_acked()`), on every option type:
//! [`ConsumerOptions`], [`RetryBackoff`], [`Stream`], [`List`],
//! [`ListOptions`], [`Channel`], [`ChannelOptions`], [`RestartPolicy`] and
//! [`admin::DeadLetterFilter`]. Values given to a constructor read back by
//! their plain name too (`name()`, `group()`, `is_pattern()`). Builders that
//! are only written, never read back ([`BrokerBuilder`], [`Topology`],
//! [`Tls`]), take methods named after the option alone (`pool_size(4)`).
//!
//! The wire format is one field `data` holding a JSON document, so any Redis
//! client can produce for rillkit or read what it publishes.
//!
//! # What is where
//!
//! | to … | use | Redis |
//! |---|---|---|
//! | consume a stream in a consumer group, at least once | [`Stream`], [`ConsumerOptions`], [`BrokerBuilder::subscribe`]; the entry's details with [`subscribe_with_context`](BrokerBuilder::subscribe_with_context) ([`Delivery`]) or [`subscribe_message`](BrokerBuilder::subscribe_message) ([`Message`]) | `XREADGROUP`, `XACK` |
//! | consume a list (reliable or at most once) | [`List`], [`ListOptions`], [`subscribe_list`](BrokerBuilder::subscribe_list), [`ItemDelivery`] | `BLMOVE`, `LREM` / `BRPOP` |
//! | receive Pub/Sub messages | [`Channel`], [`ChannelOptions`], [`subscribe_channel`](BrokerBuilder::subscribe_channel) | `SUBSCRIBE`, `PSUBSCRIBE` |
//! | handle entries in batches | [`BatchOptions`], [`subscribe_batch`](BrokerBuilder::subscribe_batch), [`subscribe_list_batch`](BrokerBuilder::subscribe_list_batch), [`BatchEntry`], [`BatchOutcome`] | one `XREADGROUP … COUNT` per batch |
//! | keep each key's entries in order | [`Stream::ordered_by`], [`Broker::publish_keyed`], [`OnKeyFailure`], [`partition_of`] | a stream per partition, leased |
//! | retry, reject, dead-letter | [`HandlerResult`], [`HandlerError`], [`Reject`], [`RetryBackoff`], [`ConsumerOptions::with_max_retries`] | the PEL's delivery count, `XADD` to `<stream>-dlq` |
//! | publish | [`Broker::publish`], [`publish_batch`](Broker::publish_batch), [`publish_list`](Broker::publish_list), [`publish_channel`](Broker::publish_channel), [`TraceParent`] | `XADD`, `LPUSH`, `PUBLISH` |
//! | start, drain, exit with a code | [`Broker::run`], [`Broker::stop`], [`SupervisorOutcome::exit_code`], [`shutdown_signal`], [`Phase`], [`Stage`] (lifecycle hooks), [`RestartPolicy`] | |
//! | add and remove subscriptions at run time | [`Broker::subscribe`], [`SubscriptionHandle`], [`Removed`] | |
//! | health, readiness, pause | [`Broker::status`], [`Status`], [`SubscriptionId`], [`Broker::pause_local`] | `PING`, `XINFO GROUPS` |
//! | TLS, Sentinel, Cluster | [`Topology`], [`Tls`], [`Broker::with_topology`], [`BrokerBuilder::tls`] | |
//! | inspect and repair: pending entries, claims, dead letters, redrive | [`admin::Admin`] | `XPENDING`, `XCLAIM`, `XRANGE` |
//! | a web dashboard | the package `rillkit-dashboard`: an actix-web scope over [`admin`] | |
//! | the `rillkit` command-line tool | the package `rillkit-cli` (`cargo install --path cli` from a clone, `cargo install rillkit-cli` once published): status, pending entries, dead letters, publish, tail, metrics | |
//! | trace context across Redis (feature `otel`) | [`TraceParent`], [`TraceLinking`]: `send` and `process` spans by the OpenTelemetry messaging conventions, through `tracing-opentelemetry` | a `traceparent` field |
//! | metrics | the [`metrics`](https://docs.rs/metrics) facade: install any recorder (Prometheus, StatsD, …) | |
//! | test handlers without Redis, or with a throwaway server (feature `test-util`) | `test_util` | |
//!
//! Errors are [`Error`] (with [`Error::is_retryable`] and
//! [`Error::exit_code`]); a bad configuration fails
//! [`BrokerBuilder::build`] with a [`ConfigError`] naming the option.
//!
//! The guide (`docs/guide/` in the repository) explains each of these at
//! length: delivery guarantees, the shutdown contract, production Redis
//! (TLS, Sentinel, Cluster, ACLs), operating (CLI, dashboard, metrics), and
//! performance; `ARCHITECTURE.md` there describes the actors.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admin;
mod broker;
mod connection;
mod delivery;
mod error;
mod fleet;
mod handler;
mod keys;
mod kind;
mod lifecycle;
mod order;
#[cfg(feature = "otel")]
mod otel;
mod rate_limit;
mod reclaimer;
mod redis;
mod retention;
mod schedule;
mod source;
mod status;
mod stream;
mod supervisor;
mod telemetry;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod test_util;
mod traceparent;
mod util;

pub use crate::redis::commands::ServerCommands;
pub use broker::{BatchOptions, Broker, BrokerBuilder};
pub use broker::{Delivery, ItemDelivery, Removed, SubscriptionHandle};
pub use connection::{Tls, Topology};
pub use delivery::RetryBackoff;
pub use error::{BoxError, ConfigError, Error, HookError, HookFailures};
pub use handler::{BatchEntry, BatchOutcome, HandlerError, HandlerResult, Message, Reject};
pub use kind::SourceKind;
pub use lifecycle::{Phase, Stage, SupervisorOutcome, shutdown_signal};
pub use order::{MAX_PARTITIONS, OnKeyFailure, json_key, partition_of};
pub use rate_limit::{InvalidRateLimit, RateLimit};
pub use schedule::{InvalidScheduleId, ScheduleId, Scheduled};
pub use source::channel::{Channel, ChannelOptions};
pub use source::list::{List, ListOptions};
pub use source::stream::ConsumerOptions;
pub use status::{
    PartitionStatus, ServerFigures, Status, SubscriptionId, SubscriptionState, SubscriptionStatus,
};
pub use stream::{Codec, EntryId, Json, MessageKey, Stream};
pub use supervisor::RestartPolicy;
pub use traceparent::{InvalidTraceParent, TRACEPARENT_FIELD, TraceLinking, TraceParent};

/// The names most programs need: `use rillkit::prelude::*;`.
pub mod prelude {
    pub use crate::{
        Broker, Channel, ChannelOptions, ConsumerOptions, Delivery, HandlerError, HandlerResult,
        Json, List, ListOptions, Message, Phase, Stream, SupervisorOutcome,
    };
}

/// The README's code blocks, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The guide's code blocks (`docs/guide/src/`), compiled as doctests: one
/// item per chapter.
#[cfg(doctest)]
pub mod guide {
    #[doc = include_str!("../docs/guide/src/introduction.md")]
    pub struct Introduction;
    #[doc = include_str!("../docs/guide/src/getting-started.md")]
    pub struct GettingStarted;
    #[doc = include_str!("../docs/guide/src/concepts.md")]
    pub struct Concepts;
    #[doc = include_str!("../docs/guide/src/sources.md")]
    pub struct Sources;
    #[doc = include_str!("../docs/guide/src/streams.md")]
    pub struct Streams;
    #[doc = include_str!("../docs/guide/src/lists.md")]
    pub struct Lists;
    #[doc = include_str!("../docs/guide/src/channels.md")]
    pub struct Channels;
    #[doc = include_str!("../docs/guide/src/retries.md")]
    pub struct Retries;
    #[doc = include_str!("../docs/guide/src/ordering.md")]
    pub struct Ordering;
    #[doc = include_str!("../docs/guide/src/batches.md")]
    pub struct Batches;
    #[doc = include_str!("../docs/guide/src/scheduling.md")]
    pub struct Scheduling;
    #[doc = include_str!("../docs/guide/src/shutdown.md")]
    pub struct Shutdown;
    #[doc = include_str!("../docs/guide/src/production.md")]
    pub struct Production;
    #[doc = include_str!("../docs/guide/src/operating.md")]
    pub struct Operating;
    #[doc = include_str!("../docs/guide/src/cli.md")]
    pub struct Cli;
    #[doc = include_str!("../docs/guide/src/tracing.md")]
    pub struct Tracing;
    #[doc = include_str!("../docs/guide/src/testing.md")]
    pub struct Testing;
    #[doc = include_str!("../docs/guide/src/performance.md")]
    pub struct Performance;
    #[doc = include_str!("../docs/guide/src/migrating.md")]
    pub struct Migrating;
    #[doc = include_str!("../docs/guide/src/contributing.md")]
    pub struct Contributing;
}
