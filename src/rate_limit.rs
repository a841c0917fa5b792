//! [`RateLimit`]: at most so many entries a second or a minute for a
//! consumer group (the consumers take permits from a token bucket in Redis:
//! `delivery::limit`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// At most `count` entries per `per`, for a whole consumer group: every
/// consumer of the group, in every process, takes its permits from one
/// token bucket in Redis. Set with
/// [`ConsumerOptions::with_rate_limit`](crate::ConsumerOptions::with_rate_limit).
///
/// The bucket fills smoothly (`count / per`) and holds at most
/// [`burst`](Self::burst) permits, 1/10 s of the rate by default (at least
/// 1): over any window the group starts at most `rate × window + burst`
/// entries.
///
/// Parsed from `<count>/s`, `<count>/min` (also `/sec`, `/m`, `/second`,
/// `/minute`), optionally followed by ` burst <n>`, as the worker example's
/// `RILLKIT_RATE_LIMIT=100/s`; written back the same way (and so
/// serialized with serde).
///
/// ```
/// use rillkit::RateLimit;
///
/// let limit: RateLimit = "100/s".parse()?;
/// assert_eq!(limit, RateLimit::per_second(100));
/// assert_eq!(limit.burst(), 10);
/// assert_eq!(RateLimit::per_minute(30).to_string(), "30/min");
/// # Ok::<(), rillkit::InvalidRateLimit>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateLimit {
    count: u32,
    per: Duration,
    burst: Option<u32>,
}

impl RateLimit {
    /// At most `count` entries a second. A `count` of 0 fails
    /// [`build`](crate::BrokerBuilder::build).
    pub fn per_second(count: u32) -> Self {
        RateLimit {
            count,
            per: Duration::from_secs(1),
            burst: None,
        }
    }

    /// At most `count` entries a minute. A `count` of 0 fails
    /// [`build`](crate::BrokerBuilder::build).
    pub fn per_minute(count: u32) -> Self {
        RateLimit {
            count,
            per: Duration::from_secs(60),
            burst: None,
        }
    }

    /// The most permits the bucket holds (entries that may start at once
    /// after a quiet spell). A burst of 0 fails
    /// [`build`](crate::BrokerBuilder::build).
    #[must_use]
    pub fn with_burst(mut self, burst: u32) -> Self {
        self.burst = Some(burst);
        self
    }

    /// Entries per [`per`](Self::per).
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The period the count is for: 1 s or 1 min.
    pub fn per(&self) -> Duration {
        self.per
    }

    /// The most permits the bucket holds: as set, or 1/10 s of the rate
    /// (at least 1).
    pub fn burst(&self) -> u32 {
        self.burst.unwrap_or_else(|| {
            let tenth = f64::from(self.count) / self.per.as_secs_f64() / 10.0;
            (tenth.ceil() as u32).max(1)
        })
    }

    /// Permits per ms.
    pub(crate) fn per_ms(&self) -> f64 {
        f64::from(self.count) / self.per.as_secs_f64() / 1000.0
    }

    pub(crate) fn validate(&self) -> Result<(), &'static str> {
        if self.count == 0 {
            return Err("a rate limit's count must be at least 1");
        }
        if self.burst == Some(0) {
            return Err("a rate limit's burst must be at least 1");
        }
        Ok(())
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = if self.per == Duration::from_secs(60) {
            "min"
        } else {
            "s"
        };
        write!(f, "{}/{unit}", self.count)?;
        match self.burst {
            Some(burst) => write!(f, " burst {burst}"),
            None => Ok(()),
        }
    }
}

/// A rate limit that is not `<count>/s` or `<count>/min`, with an optional
/// ` burst <n>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a rate limit is <count>/s or <count>/min (optionally then ' burst <n>'), the count and burst at least 1: {0:?}"
)]
pub struct InvalidRateLimit(String);

impl FromStr for RateLimit {
    type Err = InvalidRateLimit;

    /// Reads `<count>/s` or `<count>/min` (also `/sec`, `/second`, `/m`,
    /// `/minute`), optionally followed by ` burst <n>`: what
    /// [`Display`](fmt::Display) writes.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || InvalidRateLimit(s.to_owned());
        let (rate, burst) = match s.trim().split_once(" burst ") {
            Some((rate, burst)) => {
                let burst: u32 = burst.trim().parse().map_err(|_| bad())?;
                (rate, Some(burst))
            }
            None => (s, None),
        };
        let (count, unit) = rate.trim().split_once('/').ok_or_else(bad)?;
        let count: u32 = count.trim().parse().map_err(|_| bad())?;
        let limit = match unit.trim() {
            "s" | "sec" | "second" => RateLimit::per_second(count),
            "m" | "min" | "minute" => RateLimit::per_minute(count),
            _ => return Err(bad()),
        };
        let limit = match burst {
            Some(b) => limit.with_burst(b),
            None => limit,
        };
        limit.validate().map_err(|_| bad())?;
        Ok(limit)
    }
}

impl serde::Serialize for RateLimit {
    /// As its text (`100/s`, `30/min burst 5`).
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for RateLimit {
    /// From its text, as [`FromStr`] reads it.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests;
