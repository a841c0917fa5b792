//! The delivery core: what every source (stream, list, channel) shares
//! between reading an item and settling it.
//!
//! * [`ConsumerActor`] runs any source's loop and reports its end
//!   ([`ConsumerReport`]) to the supervisor;
//! * [`handler`] runs a handler the same way for every source: made and
//!   run with its panic caught, in the source's span, timed, tallied;
//! * [`reader`] is the read connection's life: open, `CLIENT ID`,
//!   `CLIENT UNBLOCK`, `QUIT`;
//! * [`until_done`] retries a settling write (an ack, a dead-letter move, a
//!   put-back) until Redis has run it.

mod actor;
pub(crate) mod handler;
pub(crate) mod reader;
mod report;
mod settle;

pub(crate) use actor::{ConsumerActor, ConsumerExited, Drain};
pub(crate) use report::ConsumerReport;
pub(crate) use settle::until_done;
