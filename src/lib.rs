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
//! client can produce for rillkit or read what it publishes. See the README for
//! delivery guarantees and the shutdown contract, and `ARCHITECTURE.md` for the
//! actors.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admin;
mod broker;
mod connection;
#[cfg(feature = "dashboard")]
pub mod dashboard;
mod delivery;
mod error;
mod handler;
mod keys;
mod kind;
mod lifecycle;
mod order;
#[cfg(feature = "otel")]
mod otel;
mod reclaimer;
mod redis;
mod retention;
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

pub use broker::{BatchOptions, Broker, BrokerBuilder};
pub use broker::{Delivery, ItemDelivery, Removed, SubscriptionHandle};
pub use connection::{Tls, Topology};
pub use delivery::RetryBackoff;
pub use error::{BoxError, ConfigError, Error, HookError, HookFailures};
pub use handler::{BatchEntry, BatchOutcome, HandlerError, HandlerResult, Message, Reject};
pub use kind::SourceKind;
pub use lifecycle::{Phase, Stage, SupervisorOutcome, shutdown_signal};
pub use order::{MAX_PARTITIONS, OnKeyFailure, json_key, partition_of};
pub use source::channel::{Channel, ChannelOptions};
pub use source::list::{List, ListOptions};
pub use source::stream::ConsumerOptions;
pub use status::{
    PartitionStatus, ServerFigures, Status, SubscriptionId, SubscriptionState, SubscriptionStatus,
};
pub use stream::{Codec, EntryId, Json, Stream};
pub use supervisor::RestartPolicy;
pub use traceparent::{InvalidTraceParent, TRACEPARENT_FIELD, TraceParent};

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
    /// The dashboard chapter's blocks need the `dashboard` feature.
    #[cfg(feature = "dashboard")]
    #[doc = include_str!("../docs/guide/src/dashboard.md")]
    pub struct Dashboard;
}
