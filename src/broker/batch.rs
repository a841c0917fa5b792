//! Batch handlers' options: how big a batch gets and how long it gathers.
//! The consumer loops run the batches themselves.

use std::time::Duration;

/// How a batch handler's batches are made: at most
/// [`max_entries`](Self::max_entries) entries, and a batch starts when it is
/// full or when its first entry has waited [`max_wait`](Self::max_wait),
/// whichever comes first.
///
/// ```
/// use std::time::Duration;
/// use rillkit::BatchOptions;
///
/// // Up to 500 entries per batch; a batch starts at the latest 200 ms after
/// // its first entry arrived.
/// let batches = BatchOptions::new()
///     .with_max_entries(500)
///     .with_max_wait(Duration::from_millis(200));
/// assert_eq!(batches.max_entries(), 500);
/// assert_eq!(batches.max_wait(), Duration::from_millis(200));
/// ```
///
/// It is given to [`BrokerBuilder::subscribe_batch`](crate::BrokerBuilder::subscribe_batch)
/// (and the list and context variants), which shows a whole batch handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOptions {
    max_entries: usize,
    max_wait: Duration,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            max_entries: 100,
            max_wait: Duration::from_millis(50),
        }
    }
}

impl BatchOptions {
    /// Batches of up to 100 entries, started after at most 50 ms.
    pub fn new() -> Self {
        Self::default()
    }

    /// The most entries in one batch (default 100; at least 1).
    #[must_use]
    pub fn with_max_entries(mut self, entries: usize) -> Self {
        self.max_entries = entries.max(1);
        self
    }

    /// How long a batch's first entry waits for more before the batch
    /// starts anyway (default 50 ms).
    #[must_use]
    pub fn with_max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }

    /// The most entries in one batch, set with
    /// [`with_max_entries`](Self::with_max_entries).
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// The wait, set with [`with_max_wait`](Self::with_max_wait).
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }
}
