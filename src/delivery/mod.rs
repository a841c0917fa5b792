//! The delivery core: what every source (stream, list, channel) shares
//! between reading an item and settling it.
//!
//! * [`ConsumerActor`] runs any source's loop and reports its end
//!   ([`ConsumerReport`]) to the supervisor; a loop that shares work out
//!   (an ordered stream's partitions) has the supervisor run each part's
//!   loop through [`parts`];
//! * [`consumer`] is that loop: what a source plugs in
//!   ([`consumer::Source`]), and the stop, pause and drain every source
//!   shares ([`drain`]);
//! * [`handler`] runs a handler the same way for every source: made and
//!   run with its panic caught, in the source's span, timed, tallied; a
//!   batch handler's run likewise, its batches formed by one rule
//!   ([`batch::Gathering`]);
//! * [`reader`] is the read connection's life: open, `CLIENT ID`,
//!   `CLIENT UNBLOCK`, `QUIT`;
//! * [`retry`] holds failed items while they wait out their
//!   [`RetryBackoff`], and [`liveness`] is the one rule by which a consumer
//!   keeps its claim to its work (a lease, a heartbeat);
//! * [`until_accepted`] sends every settling write (a stream's `XACK` batch
//!   or dead-letter move, a list item's settling script) until Redis
//!   accepts it, and [`until_done`] and [`until_stopped`] retry the other
//!   steps a loop needs done, through the same loop and backoff.

mod actor;
pub(crate) mod batch;
pub(crate) mod claim;
pub(crate) mod consumer;
pub(crate) mod drain;
pub(crate) mod handler;
pub(crate) mod limit;
pub(crate) mod liveness;
mod options;
pub(crate) mod parts;
pub(crate) mod reader;
mod report;
pub(crate) mod retry;
mod settle;

pub(crate) use actor::{ConsumerActor, ConsumerExited, Drain};
pub use options::RetryBackoff;
pub(crate) use options::{MAX_DURATION, default_consumer_name};
pub(crate) use report::ConsumerReport;
pub(crate) use settle::{until_accepted, until_done, until_stopped};
