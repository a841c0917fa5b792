//! The capped backoff every wait on the server uses, and how such waits log.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// Logs a failed wait on the server: at ERROR when its class is a
/// configuration problem (credentials, ACL, TLS) an operator must fix, else
/// at WARN. `log_wait!(class, fields…, "message")`.
macro_rules! log_wait {
    ($class:expr, $($arg:tt)+) => {
        if $class.is_configuration() {
            tracing::error!($($arg)+)
        } else {
            tracing::warn!($($arg)+)
        }
    };
}
pub(crate) use log_wait;

/// 100 ms doubling up to 10 s, with jitter, never above 10 s (backon adds its
/// jitter on top of the capped delay). Every wait on the server uses it.
fn backoff() -> impl Iterator<Item = Duration> + Send {
    const MAX: Duration = Duration::from_secs(10);
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(MAX)
        .with_jitter()
        .without_max_times()
        .build()
        .map(|d| d.min(MAX))
}

/// A run of failed tries at one thing: the next delay of the capped backoff,
/// and whether this failure is one to log (the first, then each doubling of
/// the count), so a long outage logs a handful of lines, not one per try.
pub(crate) struct Retry {
    delays: Box<dyn Iterator<Item = Duration> + Send>,
    failures: u32,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            delays: Box::new(backoff()),
            failures: 0,
        }
    }
}

impl Retry {
    /// One more failure: how long to wait, and whether to log it.
    pub(crate) fn failed(&mut self) -> (Duration, bool) {
        self.failures += 1;
        let delay = self.delays.next().unwrap_or(Duration::from_secs(10));
        (delay, self.failures.is_power_of_two())
    }

    /// Failures in a row so far.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    /// It worked: start over. Answers the failures there were.
    pub(crate) fn succeeded(&mut self) -> u32 {
        std::mem::take(self).failures
    }
}

#[cfg(test)]
mod tests;
