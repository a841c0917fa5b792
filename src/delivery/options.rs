//! What every source's options share: the retry backoff, the longest
//! duration an option takes, and the default consumer name.

use std::time::Duration;

/// The longest duration any option takes (365 days): deadlines are computed
/// as now + the option, which must not overflow.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(365 * 86_400);

/// `<group>-<hostname>-<pid>`.
pub(crate) fn default_consumer_name(group: &str) -> String {
    let host = gethostname::gethostname();
    format!("{group}-{}-{}", host.to_string_lossy(), std::process::id())
}

/// How long a failed entry waits before it runs again, from the server's
/// delivery count of the run that failed: `initial × factor^(n − 1)`, capped
/// (by default at the subscription's `claim_idle`), and with jitter (a
/// random point in the upper half of that wait, so entries that failed
/// together do not all come back at once).
///
/// The wait happens in the consumer that saw the failure: the entry stays
/// held there (refreshed, so no other consumer takes it over), then runs again
/// beside other entries, with its delivery count raised by `XCLAIM …
/// RETRYCOUNT`. If the process dies meanwhile, the entry is recovered like
/// any other after `claim_idle`. At a drain, a waiting entry is handed back to
/// the group so that another consumer takes it once the rest of its wait is
/// over (`XCLAIM … IDLE <claim_idle − remaining> JUSTID`).
///
/// ```
/// use std::time::Duration;
/// use rillkit::RetryBackoff;
///
/// let b = RetryBackoff::exponential(Duration::from_millis(200))
///     .with_factor(3)
///     .with_max(Duration::from_secs(5))
///     .with_jitter(false);
/// assert_eq!(b.factor(), 3);
/// assert_eq!(b.delay(1, Duration::from_secs(30)), Duration::from_millis(200));
/// assert_eq!(b.delay(3, Duration::from_secs(30)), Duration::from_millis(1800));
/// assert_eq!(b.delay(9, Duration::from_secs(30)), Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryBackoff {
    initial: Duration,
    factor: u32,
    max: Option<Duration>,
    jitter: bool,
}

impl Default for RetryBackoff {
    /// 1 s doubling, capped at `claim_idle`, with jitter.
    fn default() -> Self {
        RetryBackoff::exponential(Duration::from_secs(1))
    }
}

impl RetryBackoff {
    /// `initial` after the first failed run, doubling after each further one,
    /// capped at `claim_idle`, with jitter.
    pub fn exponential(initial: Duration) -> Self {
        RetryBackoff {
            initial,
            factor: 2,
            max: None,
            jitter: true,
        }
    }

    /// The same wait after every failed run.
    pub fn fixed(delay: Duration) -> Self {
        RetryBackoff {
            initial: delay,
            factor: 1,
            max: None,
            jitter: false,
        }
    }

    /// No wait: a failed entry runs again at once.
    pub fn none() -> Self {
        RetryBackoff::fixed(Duration::ZERO)
    }

    /// The factor each further failed run multiplies the wait by (default 2).
    #[must_use]
    pub fn with_factor(mut self, factor: u32) -> Self {
        self.factor = factor;
        self
    }

    /// The longest wait (default: the subscription's `claim_idle`, which it
    /// may not exceed; for a list subscription, 60 s).
    #[must_use]
    pub fn with_max(mut self, max: Duration) -> Self {
        self.max = Some(max);
        self
    }

    /// Whether each wait is a random point in the upper half of the computed
    /// one (default: on for [`exponential`](Self::exponential)).
    #[must_use]
    pub fn with_jitter(mut self, on: bool) -> Self {
        self.jitter = on;
        self
    }

    /// The wait after the first failed run, given to the constructor.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The factor, set with [`with_factor`](Self::with_factor).
    pub fn factor(&self) -> u32 {
        self.factor
    }

    /// The longest wait, if set with [`with_max`](Self::with_max) (`None`:
    /// the subscription's `claim_idle`).
    pub fn max(&self) -> Option<Duration> {
        self.max
    }

    /// Whether jitter is on, set with [`with_jitter`](Self::with_jitter).
    pub fn jitter(&self) -> bool {
        self.jitter
    }

    /// The wait, without jitter, after the run with delivery count
    /// `delivery_count` failed, for a subscription whose `claim_idle` is
    /// `claim_idle` (the default cap).
    pub fn delay(&self, delivery_count: u64, claim_idle: Duration) -> Duration {
        let cap = self.max.unwrap_or(claim_idle).min(claim_idle);
        let exp = u32::try_from(delivery_count.saturating_sub(1)).unwrap_or(u32::MAX);
        let mult = self.factor.checked_pow(exp).unwrap_or(u32::MAX);
        self.initial.checked_mul(mult).unwrap_or(cap).min(cap)
    }

    /// [`delay`](Self::delay) with the jitter applied, `seed` standing in for
    /// a random number.
    pub(crate) fn wait(&self, delivery_count: u64, claim_idle: Duration, seed: u64) -> Duration {
        let d = self.delay(delivery_count, claim_idle);
        if !self.jitter || d.is_zero() {
            return d;
        }
        let half = d / 2;
        let span = u64::try_from((d - half).as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        half + Duration::from_nanos(seed % span)
    }
}
