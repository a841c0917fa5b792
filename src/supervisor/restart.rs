//! How a failed consumer is restarted: [`RestartPolicy`].

use std::time::Duration;

/// How often a failed consumer may be restarted before its subscription is
/// marked failed: at most [`max_restarts`](Self::max_restarts) restarts
/// within [`window`](Self::window), the first after
/// [`min_backoff`](Self::min_backoff), each further one after twice the
/// previous delay, up to [`max_backoff`](Self::max_backoff).
///
/// ```
/// use std::time::Duration;
/// use rillkit::RestartPolicy;
///
/// let policy = RestartPolicy::default()
///     .with_max_restarts(3)
///     .with_window(Duration::from_secs(30));
/// assert_eq!(policy.max_restarts(), 3);
/// assert_eq!(policy.max_backoff(), Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    max_restarts: usize,
    window: Duration,
    min_backoff: Duration,
    max_backoff: Duration,
}

impl RestartPolicy {
    /// Sets how many restarts are allowed within the
    /// [`window`](Self::with_window) (default 5); 0 fails a subscription at
    /// its consumer's first error.
    #[must_use]
    pub fn with_max_restarts(mut self, restarts: usize) -> Self {
        self.max_restarts = restarts;
        self
    }

    /// Sets the window the restarts are counted in (default 60 s).
    #[must_use]
    pub fn with_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Sets the first restart delay (default 100 ms); it doubles per restart
    /// in the window, up to [`max_backoff`](Self::with_max_backoff).
    #[must_use]
    pub fn with_min_backoff(mut self, delay: Duration) -> Self {
        self.min_backoff = delay;
        self
    }

    /// Sets the longest restart delay (default 10 s).
    #[must_use]
    pub fn with_max_backoff(mut self, delay: Duration) -> Self {
        self.max_backoff = delay;
        self
    }

    /// The restart limit, set with
    /// [`with_max_restarts`](Self::with_max_restarts).
    pub fn max_restarts(&self) -> usize {
        self.max_restarts
    }

    /// The window, set with [`with_window`](Self::with_window).
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The first restart delay, set with
    /// [`with_min_backoff`](Self::with_min_backoff).
    pub fn min_backoff(&self) -> Duration {
        self.min_backoff
    }

    /// The longest restart delay, set with
    /// [`with_max_backoff`](Self::with_max_backoff).
    pub fn max_backoff(&self) -> Duration {
        self.max_backoff
    }
}

impl Default for RestartPolicy {
    /// 5 restarts in 60 s, backoff from 100 ms to 10 s.
    fn default() -> Self {
        RestartPolicy {
            max_restarts: 5,
            window: Duration::from_secs(60),
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
        }
    }
}
