//! The delivery core: what every source (stream, list, channel) shares
//! between reading an item and settling it.
//!
//! * [`ConsumerActor`] runs any source's loop and reports its end
//!   ([`ConsumerReport`]) to the supervisor;
//! * [`run_guarded`] runs a handler with its panic caught and answers how
//!   it ended ([`Ran`]);
//! * [`until_done`] retries a settling write (an ack, a dead-letter move, a
//!   put-back) until Redis has run it.

mod actor;
mod handler;
mod report;
mod settle;

pub(crate) use actor::{ConsumerActor, ConsumerExited, Drain};
pub(crate) use handler::{Ran, run_guarded};
pub(crate) use report::ConsumerReport;
pub(crate) use settle::until_done;
