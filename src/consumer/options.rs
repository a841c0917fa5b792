use std::time::Duration;

use crate::error::ConfigError;

/// How one subscription reads and retries. Setters are named after what they
/// set, mostly a Redis argument.
///
/// | option | default | Redis / meaning |
/// |--------|---------|-----------------|
/// | [`consumer`](Self::consumer) | `<group>-<hostname>-<pid>` | consumer name in `XREADGROUP GROUP <group> <consumer>` |
/// | [`block`](Self::block) | 5 s | `XREADGROUP … BLOCK <ms>` |
/// | [`count`](Self::count) | 10 entries | `XREADGROUP … COUNT <n>`, the most one read fetches |
/// | [`concurrency`](Self::concurrency) | 1 handler | handlers running at once |
/// | [`max_retries`](Self::max_retries) | 3 | runs after the first; then the dead-letter stream |
/// | [`claim_idle`](Self::claim_idle) | 30 s | min idle time before XCLAIM takes an entry over |
/// | [`start_id`](Self::start_id) | `0` | `XGROUP CREATE <stream> <group> <id>` for a new group |
///
/// ```
/// use std::time::Duration;
/// use rillkit::ConsumerOptions;
///
/// let opts = ConsumerOptions::default()
///     .consumer("billing-1")
///     .block(Duration::from_millis(200))
///     .count(50)
///     .max_retries(5);
/// assert_eq!(opts.get_count(), 50);
/// ```
#[derive(Debug, Clone)]
pub struct ConsumerOptions {
    pub(crate) consumer: Option<String>,
    pub(crate) block: Duration,
    pub(crate) count: usize,
    pub(crate) concurrency: usize,
    pub(crate) max_retries: u64,
    pub(crate) claim_idle: Duration,
    pub(crate) start_id: String,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            consumer: None,
            block: Duration::from_secs(5),
            count: 10,
            concurrency: 1,
            max_retries: 3,
            claim_idle: Duration::from_secs(30),
            start_id: "0".to_owned(),
        }
    }
}

impl ConsumerOptions {
    /// Sets the consumer name (default `<group>-<hostname>-<pid>`, unique per
    /// process and machine). Set it yourself when containers share a hostname
    /// and PID, or when a restarted worker should resume its own pending
    /// entries under the same name.
    pub fn consumer(mut self, name: impl Into<String>) -> Self {
        self.consumer = Some(name.into());
        self
    }

    /// Sets how long one XREADGROUP waits for new entries (`BLOCK`, in ms on
    /// the wire; at least 1 ms, at most 24 h). Stopping never waits for it: the blocked read
    /// is interrupted with CLIENT UNBLOCK.
    pub fn block(mut self, block: Duration) -> Self {
        self.block = block;
        self
    }

    /// Sets how many entries one XREADGROUP fetches at most (`COUNT`).
    ///
    /// rillkit fetches no faster than its handlers start entries: a read asks
    /// for the free handler slots plus what the handlers get through in one
    /// Redis round trip (measured), never more than `count`. So with fast
    /// handlers reads come in batches of `count`, and with slow ones a worker
    /// never holds entries another idle worker could be running.
    pub fn count(mut self, entries: usize) -> Self {
        self.count = entries;
        self
    }

    /// Sets how many handlers of this subscription run at once (default 1:
    /// one entry at a time, in stream order). A redelivered entry (delivery
    /// count above 1: a retry, or an entry of a crashed worker) always runs
    /// alone, so an entry that kills its process costs only its own delivery
    /// count, never its neighbours'.
    pub fn concurrency(mut self, handlers: usize) -> Self {
        self.concurrency = handlers;
        self
    }

    /// Sets how many times a failed entry is handled again before it goes to
    /// the dead-letter stream: a handler runs at most `max_retries + 1` times
    /// for one entry, counted by the server's delivery count.
    pub fn max_retries(mut self, retries: u64) -> Self {
        self.max_retries = retries;
        self
    }

    /// Sets how long an entry must have been idle in the pending entries list
    /// before it is taken over (XCLAIM min-idle-time) and handled again: the
    /// retry delay, and how soon a crashed consumer's entries are recovered.
    /// At least 1 ms, at most 365 days.
    pub fn claim_idle(mut self, idle: Duration) -> Self {
        self.claim_idle = idle;
        self
    }

    /// Sets where a group created by this subscription starts: `0` (default,
    /// every entry already in the stream) or `$` (only entries added from now
    /// on), or any entry id. An existing group keeps its position.
    pub fn start_id(mut self, id: impl Into<String>) -> Self {
        self.start_id = id.into();
        self
    }

    /// The consumer name, if set with [`consumer`](Self::consumer).
    pub fn get_consumer(&self) -> Option<&str> {
        self.consumer.as_deref()
    }

    /// The XREADGROUP block time, set with [`block`](Self::block).
    pub fn get_block(&self) -> Duration {
        self.block
    }

    /// The XREADGROUP count, in entries, set with [`count`](Self::count).
    pub fn get_count(&self) -> usize {
        self.count
    }

    /// How many handlers run at once, set with
    /// [`concurrency`](Self::concurrency).
    pub fn get_concurrency(&self) -> usize {
        self.concurrency
    }

    /// The retry limit, in runs after the first, set with
    /// [`max_retries`](Self::max_retries).
    pub fn get_max_retries(&self) -> u64 {
        self.max_retries
    }

    /// The claim idle time, set with [`claim_idle`](Self::claim_idle).
    pub fn get_claim_idle(&self) -> Duration {
        self.claim_idle
    }

    /// The start id for a new group, set with [`start_id`](Self::start_id).
    pub fn get_start_id(&self) -> &str {
        &self.start_id
    }

    /// Checks every option.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] when `block` is under 1 ms, `count` or
    /// `concurrency` is 0, `claim_idle` is under 1 ms, `start_id` or
    /// `consumer` is empty.
    pub(crate) fn validate(&self, stream: &str) -> Result<(), ConfigError> {
        let bad = |option: &'static str, reason: &str| {
            Err(ConfigError::Invalid {
                stream: stream.to_owned(),
                option,
                reason: reason.to_owned(),
            })
        };
        if self.block < Duration::from_millis(1) {
            return bad("block", "must be at least 1 ms");
        }
        if self.block > MAX_BLOCK {
            return bad("block", "must be at most 24 h (86 400 000 ms)");
        }
        if self.count == 0 {
            return bad("count", "must be at least 1 entry");
        }
        if self.concurrency == 0 {
            return bad("concurrency", "must be at least 1");
        }
        if self.claim_idle < Duration::from_millis(1) {
            return bad("claim_idle", "must be at least 1 ms");
        }
        if self.claim_idle > MAX_DURATION {
            return bad("claim_idle", "must be at most 365 days");
        }
        if self.start_id.is_empty() {
            return bad("start_id", "must not be empty");
        }
        if self.consumer.as_deref() == Some("") {
            return bad("consumer", "must not be empty");
        }
        Ok(())
    }
}

/// The longest `block`: a day. Longer reads only delay the moments a
/// blocked read is renewed, and `block` plus the read's response margin must
/// stay far from overflowing.
const MAX_BLOCK: Duration = Duration::from_secs(86_400);

/// The longest duration any option takes (365 days): deadlines are computed
/// as now + the option, which must not overflow.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(365 * 86_400);

/// `<group>-<hostname>-<pid>`.
pub(crate) fn default_consumer_name(group: &str) -> String {
    let host = gethostname::gethostname();
    format!("{group}-{}-{}", host.to_string_lossy(), std::process::id())
}
