//! The result of a drain: what operators read as the process exit status.

/// What happened to the consumers of a broker, tallied when it stops.
///
/// Returned by [`Broker::stop`](crate::Broker::stop) and
/// [`Broker::run`](crate::Broker::run). Turn it into the process exit status
/// with [`exit_code`](Self::exit_code):
///
/// | code | meaning | what the operator does |
/// |------|---------|------------------------|
/// | 0 | clean: every handler that started finished and its entry was acked or dead-lettered | nothing |
/// | 1 | `errors > 0`: a consumer ended with an unrecoverable error | look at the logs; the process manager restarts it |
/// | 2 | `panics > 0`: rillkit's own actor code panicked | file a bug; entries stay pending and are redelivered |
/// | 3 | `timed_out`: the drain deadline passed with handlers still running, or with XACKs (or dead-letter moves) the server had not accepted yet | raise `shutdown_timeout` or speed up handlers, or see why Redis refused writes; those entries are redelivered |
///
/// A handler's error, panic or rejected entry is normal operation (retry or
/// dead-letter stream) and never counts here.
#[must_use = "turn the outcome into the process exit status with exit_code()"]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SupervisorOutcome {
    /// Consumers that ended with an unrecoverable error.
    pub errors: usize,
    /// Panics in rillkit's own actor code that escaped it.
    pub panics: usize,
    /// `true` when the drain deadline passed with handlers still running, or
    /// with acks of succeeded entries (or dead-letter moves) not yet accepted
    /// by the server (a failover, `READONLY`, a revoked ACL); those handlers
    /// were abandoned and those entries stay pending for redelivery.
    pub timed_out: bool,
    /// How many shared (pool) connections the stop closed (summed by
    /// [`merge`](Self::merge)); it never counts in the exit code.
    pub closed_connections: usize,
}

impl SupervisorOutcome {
    /// The process exit status: `timed_out` → 3, else `panics > 0` → 2, else
    /// `errors > 0` → 1, else 0.
    pub fn exit_code(&self) -> i32 {
        if self.timed_out {
            3
        } else if self.panics > 0 {
            2
        } else if self.errors > 0 {
            1
        } else {
            0
        }
    }

    /// `true` exactly when [`exit_code`](Self::exit_code) is 0.
    pub fn is_clean(&self) -> bool {
        self.exit_code() == 0
    }

    /// Combines two outcomes (for example of two brokers in one process): counts
    /// add up and `timed_out` is true if either timed out, so the exit code of the
    /// result is the larger of the two.
    pub fn merge(self, other: SupervisorOutcome) -> SupervisorOutcome {
        SupervisorOutcome {
            errors: self.errors + other.errors,
            panics: self.panics + other.panics,
            timed_out: self.timed_out || other.timed_out,
            closed_connections: self.closed_connections + other.closed_connections,
        }
    }
}

#[cfg(test)]
mod tests;
