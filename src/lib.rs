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
//!             Ok(())
//!         })
//!         .build()?;
//!     broker.start().await?;
//!     broker.publish(&orders, &Order { id: 1, total: 49.5 }).await?;
//!     let outcome = broker.stop().await?;
//!     std::process::exit(outcome.exit_code());
//! }
//! ```
//!
//! Configuration is set with builder methods named after the option
//! (`count(100)`, `max_len(10_000)`) and read back with the same name
//! prefixed by `get_` (`get_count()`, `get_max_len()`), on every type; values
//! given to a constructor (`Stream::new`'s name and group) read back by their
//! plain name (`name()`, `group()`).
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
mod lifecycle;
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

pub use broker::{Broker, BrokerBuilder};
pub use broker::{Delivery, ItemDelivery, Removed, SubscriptionHandle};
pub use connection::{Tls, Topology};
pub use error::{BoxError, ConfigError, Error, HookError, HookFailures};
pub use handler::{HandlerError, HandlerResult, Message};
pub use lifecycle::{Phase, Stage, SupervisorOutcome};
pub use source::channel::{Channel, ChannelOptions};
pub use source::list::{List, ListOptions};
pub use source::stream::{ConsumerOptions, RetryBackoff};
pub use status::{ServerFigures, SourceKind, Status, SubscriptionState, SubscriptionStatus};
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
