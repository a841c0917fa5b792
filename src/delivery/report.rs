//! What a consumer loop tells the supervisor when it ends.

use crate::error::Error;

/// How a consumer loop ended.
#[derive(Debug, Default)]
pub(crate) struct ConsumerReport {
    /// The unrecoverable error that ended it, if any.
    pub error: Option<Error>,
    /// Set when the loop itself panicked (caught at the actor boundary).
    pub panic: Option<String>,
    /// The drain deadline passed with handlers still running.
    pub timed_out: bool,
    /// A partition's loop gave its partition up: its lease lapsed here or
    /// another consumer holds it. Not an error: the partition is taken
    /// again if it is still this consumer's share.
    pub lease_lost: bool,
}

impl ConsumerReport {
    pub(crate) fn panicked(what: String) -> Self {
        ConsumerReport {
            panic: Some(what),
            ..Default::default()
        }
    }
}
