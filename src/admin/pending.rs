//! A group's pending entries, selected ([`PendingFilter`]), and the two
//! repairs of entries stuck there: handing them to another consumer
//! ([`Admin::claim`]) and acknowledging them ([`Admin::ack`]).

use std::time::Duration;

use super::Admin;
use crate::error::Error;
use crate::redis::info as reply;
use crate::redis::info::PendingEntry;
use crate::stream::EntryId;

/// Which pending entries [`Admin::pending_matching`] lists: the oldest
/// `count` (by id) of those held by one consumer and idle for at least a
/// time, as `XPENDING <stream> <group> [IDLE <ms>] - + <count> [<consumer>]`
/// selects them. Without a consumer or an idle time, every consumer's
/// entries, however idle.
///
/// ```
/// use std::time::Duration;
/// use rillkit::admin::PendingFilter;
///
/// let stuck = PendingFilter::new(100)
///     .with_consumer("worker-7")
///     .with_min_idle(Duration::from_secs(600));
/// assert_eq!(stuck.count(), 100);
/// assert_eq!(stuck.consumer(), Some("worker-7"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingFilter {
    count: usize,
    consumer: Option<String>,
    min_idle: Option<Duration>,
}

impl PendingFilter {
    /// At most `count` entries, oldest id first.
    pub fn new(count: usize) -> Self {
        PendingFilter {
            count,
            consumer: None,
            min_idle: None,
        }
    }

    /// Only entries held by `consumer`.
    #[must_use]
    pub fn with_consumer(mut self, consumer: impl Into<String>) -> Self {
        self.consumer = Some(consumer.into());
        self
    }

    /// Only entries not delivered (read, claimed) for at least `idle`
    /// (`XPENDING … IDLE`, in whole milliseconds).
    #[must_use]
    pub fn with_min_idle(mut self, idle: Duration) -> Self {
        self.min_idle = Some(idle);
        self
    }

    /// The cap, in entries.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The consumer, set with [`with_consumer`](Self::with_consumer).
    pub fn consumer(&self) -> Option<&str> {
        self.consumer.as_deref()
    }

    /// The idle time, set with [`with_min_idle`](Self::with_min_idle).
    pub fn min_idle(&self) -> Option<Duration> {
        self.min_idle
    }
}

impl Admin {
    /// The pending entries of `group` that `filter` selects, oldest id
    /// first (`XPENDING <stream> <group> [IDLE <ms>] - + <count>
    /// [<consumer>]`): who holds each, for how long (ms), delivered how many
    /// times.
    ///
    /// # Errors
    /// [`Error::Redis`] when the key does not exist, is not a stream, or has
    /// no such group (`NOGROUP`); a connection error.
    pub async fn pending_matching(
        &self,
        stream: &str,
        group: &str,
        filter: &PendingFilter,
    ) -> Result<Vec<PendingEntry>, Error> {
        let mut cmd = redis::cmd("XPENDING");
        cmd.arg(stream).arg(group);
        if let Some(idle) = filter.min_idle {
            cmd.arg("IDLE").arg(idle.as_millis() as u64);
        }
        cmd.arg("-").arg("+").arg(filter.count);
        if let Some(c) = &filter.consumer {
            cmd.arg(c);
        }
        reply::pending(self.query(&cmd).await?).map_err(|m| Error::unparsable("XPENDING reply", m))
    }

    /// Hands the pending entries `ids` of `group` to `consumer` (`XCLAIM
    /// <stream> <group> <consumer> <min_idle ms> <id>… JUSTID`) and answers
    /// the ids it now holds. An entry delivered again within `min_idle`
    /// (someone is working on it), one no longer pending, and one deleted
    /// from the stream are not claimed. `JUSTID`: the delivery count is not
    /// raised, since nothing was delivered; the entry's idle time restarts.
    /// `consumer` is created in the group if needed.
    ///
    /// # Errors
    /// [`Error::Redis`] when the key does not exist, is not a stream, has no
    /// such group (`NOGROUP`), or an id is malformed; a connection error.
    pub async fn claim(
        &self,
        stream: &str,
        group: &str,
        consumer: &str,
        min_idle: Duration,
        ids: &[EntryId],
    ) -> Result<Vec<EntryId>, Error> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("XCLAIM");
        cmd.arg(stream)
            .arg(group)
            .arg(consumer)
            .arg(min_idle.as_millis() as u64);
        for id in ids {
            cmd.arg(id);
        }
        cmd.arg("JUSTID");
        let claimed: Vec<String> = redis::from_redis_value(self.query(&cmd).await?)
            .map_err(|e| Error::unparsable("XCLAIM reply", e.to_string()))?;
        Ok(claimed.into_iter().map(EntryId).collect())
    }

    /// Acknowledges the pending entries `ids` of `group` (`XACK <stream>
    /// <group> <id>…`), removing them from its pending entries list without
    /// running them; the entries stay in the stream. Answers how many were
    /// pending (and are acknowledged now).
    ///
    /// # Errors
    /// [`Error::Redis`] when the key is not a stream, or an id is malformed;
    /// a connection error.
    pub async fn ack(&self, stream: &str, group: &str, ids: &[EntryId]) -> Result<u64, Error> {
        if ids.is_empty() {
            return Ok(0);
        }
        let mut cmd = redis::cmd("XACK");
        cmd.arg(stream).arg(group);
        for id in ids {
            cmd.arg(id);
        }
        redis::from_redis_value(self.query(&cmd).await?)
            .map_err(|e| Error::unparsable("XACK reply", e.to_string()))
    }
}
