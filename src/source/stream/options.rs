use std::time::Duration;

use crate::delivery::{MAX_DURATION, RetryBackoff};
use crate::error::ConfigError;
use crate::kind::SourceKind;
use crate::order::OnKeyFailure;
use crate::traceparent::TraceLinking;

/// How one subscription reads and retries. Each option, mostly a Redis
/// argument, is set with `with_<option>` and read back with `<option>()`.
///
/// | option | default | Redis / meaning |
/// |--------|---------|-----------------|
/// | [`with_consumer`](Self::with_consumer) | `<group>-<hostname>-<pid>` | consumer name in `XREADGROUP GROUP <group> <consumer>` |
/// | [`with_block`](Self::with_block) | 5 s | `XREADGROUP … BLOCK <ms>` |
/// | [`with_count`](Self::with_count) | 10 entries | `XREADGROUP … COUNT <n>`, the most one read fetches |
/// | [`with_concurrency`](Self::with_concurrency) | 1 handler | handlers running at once |
/// | [`with_autoscale`](Self::with_autoscale) | off | concurrency grown and shrunk between bounds on the group's backlog |
/// | [`with_rate_limit`](Self::with_rate_limit) | off | at most N entries a second or minute for the whole group (a token bucket in Redis) |
/// | [`with_max_retries`](Self::with_max_retries) | 3 | runs after the first; then the dead-letter stream |
/// | [`with_max_failed_sends`](Self::with_max_failed_sends) | 3 | times the server may drop the read connection while sending one entry (read in pieces after the first); then it is dead-lettered by id |
/// | [`with_claim_idle`](Self::with_claim_idle) | 30 s | min idle time before XCLAIM takes an entry over: crash recovery |
/// | [`with_retry_backoff`](Self::with_retry_backoff) | 1 s doubling, up to `claim_idle`, jittered | the wait before a failed entry runs again |
/// | [`with_start_id`](Self::with_start_id) | `0` | `XGROUP CREATE <stream> <group> <id>` for a new group |
/// | [`with_lease_ttl`](Self::with_lease_ttl) | 10 s | the consumer name's lease (`SET … PX`), renewed every third of it |
/// | [`with_prune_idle`](Self::with_prune_idle) | off | delete the group's consumers idle longer than this and holding nothing (`XGROUP DELCONSUMER`) |
/// | [`with_on_key_failure`](Self::with_on_key_failure) | skip | an [ordered stream](crate::Stream::ordered_by)'s key after one of its entries is dead-lettered |
/// | [`with_trace_linking`](Self::with_trace_linking) | link | feature `otel`: the handler's span links to the producer's span, or is its child |
///
/// ```
/// use std::time::Duration;
/// use rillkit::ConsumerOptions;
///
/// let opts = ConsumerOptions::default()
///     .with_consumer("billing-1")
///     .with_block(Duration::from_millis(200))
///     .with_count(50)
///     .with_max_retries(5);
/// assert_eq!(opts.count(), 50);
/// assert_eq!(opts.consumer(), Some("billing-1"));
/// ```
#[derive(Debug, Clone)]
pub struct ConsumerOptions {
    pub(crate) consumer: Option<String>,
    pub(crate) block: Duration,
    pub(crate) count: usize,
    pub(crate) concurrency: usize,
    pub(crate) max_retries: u64,
    pub(crate) max_failed_sends: u32,
    pub(crate) claim_idle: Duration,
    pub(crate) start_id: String,
    pub(crate) retry_backoff: RetryBackoff,
    pub(crate) lease_ttl: Option<Duration>,
    pub(crate) prune_idle: Option<Duration>,
    pub(crate) on_key_failure: OnKeyFailure,
    pub(crate) trace_linking: TraceLinking,
    pub(crate) autoscale: Option<(usize, usize)>,
    pub(crate) rate_limit: Option<crate::rate_limit::RateLimit>,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            consumer: None,
            block: Duration::from_secs(5),
            count: 10,
            concurrency: 1,
            max_retries: 3,
            max_failed_sends: 3,
            claim_idle: Duration::from_secs(30),
            start_id: "0".to_owned(),
            retry_backoff: RetryBackoff::default(),
            lease_ttl: Some(Duration::from_secs(10)),
            prune_idle: None,
            autoscale: None,
            rate_limit: None,
            on_key_failure: OnKeyFailure::Skip,
            trace_linking: TraceLinking::Link,
        }
    }
}

impl ConsumerOptions {
    /// Sets the consumer name (default `<group>-<hostname>-<pid>`, unique per
    /// process and machine). Set it yourself when containers share a hostname
    /// and PID, or when a restarted worker should resume its own pending
    /// entries under the same name.
    #[must_use]
    pub fn with_consumer(mut self, name: impl Into<String>) -> Self {
        self.consumer = Some(name.into());
        self
    }

    /// Sets how long one XREADGROUP waits for new entries (`BLOCK`, in ms on
    /// the wire; at least 1 ms, at most 24 h). Stopping never waits for it: the blocked read
    /// is interrupted with CLIENT UNBLOCK.
    #[must_use]
    pub fn with_block(mut self, block: Duration) -> Self {
        self.block = block;
        self
    }

    /// Sets how many entries one XREADGROUP fetches at most (`COUNT`).
    ///
    /// rillkit fetches no faster than its handlers start entries: a read asks
    /// for the free handler slots plus what the handlers get through in one
    /// Redis round trip (measured) or in 2 ms, whichever is longer, never
    /// more than `count`. So with fast handlers reads come in batches of
    /// `count`, and a worker with slow ones holds no more entries than it
    /// starts within about 2 ms: none another idle worker would start
    /// sooner.
    #[must_use]
    pub fn with_count(mut self, entries: usize) -> Self {
        self.count = entries;
        self
    }

    /// Sets how many handlers of this subscription run at once (default 1:
    /// one entry at a time, in stream order). A redelivered entry (delivery
    /// count above 1: a retry, or an entry of a crashed worker) always runs
    /// alone, so an entry that kills its process costs only its own delivery
    /// count, never its neighbours'. For a stream [ordered by
    /// key](crate::Stream::ordered_by) it is the consumer's total over the
    /// partitions it owns, and entries of one key never run side by side.
    #[must_use]
    pub fn with_concurrency(mut self, handlers: usize) -> Self {
        self.concurrency = handlers;
        self
    }

    /// Grows and shrinks this subscription's concurrency between `min` and
    /// `max` handlers (inclusive) on the group's backlog, starting at `min`
    /// (replacing [`with_concurrency`](Self::with_concurrency)). Every 500 ms
    /// the process reads the group's lag (`XINFO GROUPS`) and the handlers
    /// it ran at most since the last look: while entries wait (a backlog,
    /// growing or not) and every slot was busy, it doubles, up to `max`;
    /// once nothing has waited for 5 s and fewer than half the slots were
    /// busy, it halves, never below `min` nor below twice what ran. Each
    /// change is logged (`autoscaled`) and counted
    /// (`rillkit_autoscale_changes_total`, label `direction`); the value in
    /// effect is the gauge `rillkit_concurrency`, the status's
    /// [`concurrency`](crate::SubscriptionStatus::concurrency) and the fleet
    /// view's. A fleet-wide concurrency (`rillkit scale`) overrides it while
    /// set. Not for a batch subscription or a stream ordered by key (its
    /// `build()` fails).
    ///
    /// ```
    /// use rillkit::ConsumerOptions;
    ///
    /// let opts = ConsumerOptions::default().with_autoscale(1..=32);
    /// assert_eq!(opts.autoscale(), Some((1, 32)));
    /// assert_eq!(opts.concurrency(), 1);
    /// ```
    #[must_use]
    pub fn with_autoscale(mut self, handlers: std::ops::RangeInclusive<usize>) -> Self {
        let (min, max) = handlers.into_inner();
        self.autoscale = Some((min, max));
        self.concurrency = min.max(1);
        self
    }

    /// The autoscaling bounds `(min, max)` in handlers, set with
    /// [`with_autoscale`](Self::with_autoscale).
    pub fn autoscale(&self) -> Option<(usize, usize)> {
        self.autoscale
    }

    /// Limits the group to `limit` (say `RateLimit::per_second(100)`):
    /// every consumer of the group, in every process, takes permits from
    /// one token bucket in Redis (`<stream slot>:rillkit:rate:<stream>:<group>`, one
    /// script per take), and reads no more new entries than it holds
    /// permits for, so it holds nothing it may not start and leaves the
    /// rest to other consumers and the drain. A consumer short of permits
    /// asks again when a batch has built up (up to
    /// [`burst`](crate::RateLimit::burst)), not once per entry. The limit
    /// counts entries read (new ones, those claimed with the read, and its
    /// own pending entries re-read after a reconnect); a failed entry's
    /// retry and an entry taken over from a dead consumer run without a
    /// permit. Entries held back are counted by
    /// `rillkit_entries_rate_limited_total`; the limit in effect is the
    /// status's [`rate_limit`](crate::SubscriptionStatus::rate_limit). Every
    /// consumer of a group should be given the same limit (the bucket fills
    /// at the rate of whoever asked last). Not for a stream ordered by key
    /// (its `build()` fails).
    ///
    /// ```
    /// use rillkit::{ConsumerOptions, RateLimit};
    ///
    /// let opts = ConsumerOptions::default()
    ///     .with_concurrency(8)
    ///     .with_rate_limit(RateLimit::per_second(100));
    /// assert_eq!(opts.rate_limit(), Some(RateLimit::per_second(100)));
    /// ```
    #[must_use]
    pub fn with_rate_limit(mut self, limit: crate::rate_limit::RateLimit) -> Self {
        self.rate_limit = Some(limit);
        self
    }

    /// The group's rate limit, set with
    /// [`with_rate_limit`](Self::with_rate_limit).
    pub fn rate_limit(&self) -> Option<crate::rate_limit::RateLimit> {
        self.rate_limit
    }

    /// Sets how many times a failed entry is handled again before it goes to
    /// the dead-letter stream: a handler runs at most `max_retries + 1` times
    /// for one entry, counted by the server's delivery count.
    #[must_use]
    pub fn with_max_retries(mut self, retries: u64) -> Self {
        self.max_retries = retries;
        self
    }

    /// Sets how many times the server may drop the read connection while
    /// sending one entry before that entry goes to the dead-letter stream.
    ///
    /// A server closes a client whose reply outgrows its output buffer
    /// (`client-output-buffer-limit normal`, or `maxmemory-clients`), so an
    /// entry larger than that cannot be read whole. After a read connection
    /// is dropped, the consumer re-reads its own pending entries one at a
    /// time (`XPENDING`, then `XCLAIM` of one id), so such an entry fails
    /// alone and is named; from then on it is claimed without its body
    /// (`XCLAIM … JUSTID`) and read in pieces of 128 KiB by a script
    /// (`EVALSHA`), then handled as any other entry. If the connection drops
    /// this many times in all while the entry is on the wire, the entry is
    /// moved to the dead-letter stream by id: a script copies its fields on
    /// the server (its `error` names the cause and the entry's size) and
    /// acks it. A dropped connection charges no delivery, so
    /// [`with_max_retries`](Self::with_max_retries) alone would never end
    /// it. At least 1 (0 counts as 1).
    #[must_use]
    pub fn with_max_failed_sends(mut self, times: u32) -> Self {
        self.max_failed_sends = times.max(1);
        self
    }

    /// Sets how long an entry must have been idle in the pending entries list
    /// before it is taken over (XCLAIM min-idle-time) and handled again: the
    /// retry delay, and how soon a crashed consumer's entries are recovered.
    /// At least 1 ms, at most 365 days.
    #[must_use]
    pub fn with_claim_idle(mut self, idle: Duration) -> Self {
        self.claim_idle = idle;
        self
    }

    /// Sets where a group created by this subscription starts: `0` (default,
    /// every entry already in the stream) or `$` (only entries added from now
    /// on), or any entry id. An existing group keeps its position.
    #[must_use]
    pub fn with_start_id(mut self, id: impl Into<String>) -> Self {
        self.start_id = id.into();
        self
    }

    /// Sets how long a failed entry waits before it runs again (see
    /// [`RetryBackoff`]; default: 1 s doubling up to `claim_idle`, with
    /// jitter). Its cap may not exceed [`with_claim_idle`](Self::with_claim_idle),
    /// which stays the crash-recovery time.
    #[must_use]
    pub fn with_retry_backoff(mut self, backoff: RetryBackoff) -> Self {
        self.retry_backoff = backoff;
        self
    }

    /// Sets the TTL of the consumer name's lease (default 10 s; at least
    /// 100 ms, at most 365 days).
    ///
    /// While a consumer runs it holds the key
    /// `rillkit:lease:<stream>:<group>:<consumer>` (`SET … PX <ttl>` in a Lua
    /// script, renewed every `ttl / 3`; deleted on stop), so two live
    /// processes never run one consumer's pending entries at once. A process
    /// started under a name whose lease is live elsewhere waits for it to
    /// lapse, up to
    /// [`startup_timeout`](crate::BrokerBuilder::startup_timeout), then
    /// `start()` fails with
    /// [`Error::ConsumerNameInUse`](crate::Error::ConsumerNameInUse). After
    /// a crash, a successor under the same name (a StatefulSet pod) waits at
    /// most one TTL. A consumer whose renewal finds the lease held elsewhere
    /// (it could not renew for longer than the TTL, and another process took
    /// the name) stops reading, drains and ends with that error; its
    /// supervisor restarts it, and it waits for the lease again.
    ///
    /// In a stream [ordered by key](crate::Stream::ordered_by) the same TTL
    /// is that of the group's membership and of each partition's lease
    /// (`<partition's slot>:rillkit:owner:<group>`). A partition's lease is
    /// a fence: the owner's reads and claims check it on the server, and an
    /// owner whose lease lapses on its own clock (no renewal confirmed for a
    /// TTL) gives the partition up at once, dropping its running handlers
    /// (their entries stay pending for the next owner). Keep blocking work
    /// in a handler, which cannot be cancelled, shorter than the TTL.
    ///
    /// The ACL user needs `+eval +evalsha +get +set +pttl +del` on keys
    /// `rillkit:lease:*`.
    #[must_use]
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = Some(ttl);
        self
    }

    /// Runs without the consumer name's lease (see
    /// [`with_lease_ttl`](Self::with_lease_ttl)): for an ACL user that may not write
    /// `rillkit:lease:*`. Two processes under one name then run its entries
    /// side by side.
    #[must_use]
    pub fn without_lease(mut self) -> Self {
        self.lease_ttl = None;
        self
    }

    /// Deletes, every `ttl / 2` (at most every 60 s), the group's consumers
    /// that hold no pending entry and whose idle time (`XINFO CONSUMERS`
    /// `idle`: since their last read or claim) is above `ttl`: consumers
    /// left behind by processes that crashed or were killed (a clean stop
    /// leaves the group by itself). Check and delete run in one Lua script
    /// (`XGROUP DELCONSUMER`), so a consumer holding entries is never
    /// deleted. `ttl` must be at least 3 × [`with_block`](Self::with_block) and 1 s:
    /// a live consumer reads at least every `block`. Off by default.
    #[must_use]
    pub fn with_prune_idle(mut self, ttl: Duration) -> Self {
        self.prune_idle = Some(ttl);
        self
    }

    /// For a stream [ordered by key](crate::Stream::ordered_by): what
    /// happens to a key's later entries once one of its entries is
    /// dead-lettered: [`OnKeyFailure::Skip`] (the default) runs them,
    /// [`OnKeyFailure::FailRest`] dead-letters them after it. Until then a
    /// failing entry holds up only its own key, for its retries and their
    /// backoff. Streams that are not ordered ignore it.
    #[must_use]
    pub fn with_on_key_failure(mut self, on_failure: OnKeyFailure) -> Self {
        self.on_key_failure = on_failure;
        self
    }

    /// What a dead-lettered entry means for its key's later entries, set
    /// with [`with_on_key_failure`](Self::with_on_key_failure).
    pub fn on_key_failure(&self) -> OnKeyFailure {
        self.on_key_failure
    }

    /// Sets how the handler's span relates to the producer's span named by
    /// an entry's `traceparent` field (default [`TraceLinking::Link`]: a
    /// span link; [`TraceLinking::Parent`]: a child of it). Takes effect
    /// with feature `otel` and the application's `tracing-opentelemetry`
    /// layer; without them it changes nothing. Lists and channels carry no
    /// `traceparent` and have no such option.
    #[must_use]
    pub fn with_trace_linking(mut self, linking: TraceLinking) -> Self {
        self.trace_linking = linking;
        self
    }

    /// How the handler's span relates to the producer's span, set with
    /// [`with_trace_linking`](Self::with_trace_linking).
    pub fn trace_linking(&self) -> TraceLinking {
        self.trace_linking
    }

    /// The lease TTL (`None`: [`without_lease`](Self::without_lease)), set
    /// with [`with_lease_ttl`](Self::with_lease_ttl).
    pub fn lease_ttl(&self) -> Option<Duration> {
        self.lease_ttl
    }

    /// The idle time past which empty consumers are pruned, if set with
    /// [`with_prune_idle`](Self::with_prune_idle).
    pub fn prune_idle(&self) -> Option<Duration> {
        self.prune_idle
    }

    /// The retry backoff, set with [`with_retry_backoff`](Self::with_retry_backoff).
    pub fn retry_backoff(&self) -> RetryBackoff {
        self.retry_backoff
    }

    /// The consumer name, if set with [`with_consumer`](Self::with_consumer).
    pub fn consumer(&self) -> Option<&str> {
        self.consumer.as_deref()
    }

    /// The XREADGROUP block time, set with [`with_block`](Self::with_block).
    pub fn block(&self) -> Duration {
        self.block
    }

    /// The XREADGROUP count, in entries, set with [`with_count`](Self::with_count).
    pub fn count(&self) -> usize {
        self.count
    }

    /// How many handlers run at once, set with
    /// [`with_concurrency`](Self::with_concurrency).
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// The retry limit, in runs after the first, set with
    /// [`with_max_retries`](Self::with_max_retries).
    pub fn max_retries(&self) -> u64 {
        self.max_retries
    }

    /// How many dropped sends of one entry end in the dead-letter stream, set
    /// with [`with_max_failed_sends`](Self::with_max_failed_sends).
    pub fn max_failed_sends(&self) -> u32 {
        self.max_failed_sends
    }

    /// The claim idle time, set with [`with_claim_idle`](Self::with_claim_idle).
    pub fn claim_idle(&self) -> Duration {
        self.claim_idle
    }

    /// The start id for a new group, set with [`with_start_id`](Self::with_start_id).
    pub fn start_id(&self) -> &str {
        &self.start_id
    }

    /// Checks every option.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] when `block` is under 1 ms, `count` or
    /// `concurrency` is 0, `claim_idle` is under 1 ms, `start_id` or
    /// `consumer` is empty, `lease_ttl` is under 100 ms, `prune_idle` is
    /// under 3 × `block` or 1 s.
    pub(crate) fn validate(&self, stream: &str) -> Result<(), ConfigError> {
        let bad = |option: &'static str, reason: &str| {
            Err(ConfigError::Invalid {
                kind: Some(SourceKind::Stream),
                key: stream.to_owned(),
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
        if let Some((min, max)) = self.autoscale {
            if min == 0 || min > max || max > crate::status::MAX_CONCURRENCY {
                return Err(ConfigError::Invalid {
                    kind: Some(SourceKind::Stream),
                    key: stream.to_owned(),
                    option: "autoscale",
                    reason: format!(
                        "needs 1 <= min <= max <= {}, not {min}..={max}",
                        crate::status::MAX_CONCURRENCY
                    ),
                });
            }
        }
        if let Some(Err(reason)) = self.rate_limit.map(|l| l.validate()) {
            return bad("rate_limit", reason);
        }
        if self.claim_idle < Duration::from_millis(1) {
            return bad("claim_idle", "must be at least 1 ms");
        }
        if self.claim_idle > MAX_DURATION {
            return bad("claim_idle", "must be at most 365 days");
        }
        if self.retry_backoff.initial().is_zero() && self.retry_backoff.factor() != 1 {
            return bad(
                "retry_backoff",
                "an exponential backoff must start above 0 ms (use RetryBackoff::none() for no wait)",
            );
        }
        if self.retry_backoff.factor() == 0 {
            return bad("retry_backoff", "the factor must be at least 1");
        }
        if let Some(max) = self.retry_backoff.max() {
            if max > self.claim_idle {
                return Err(ConfigError::Invalid {
                    kind: Some(SourceKind::Stream),
                    key: stream.to_owned(),
                    option: "retry_backoff",
                    reason: format!(
                        "its cap ({} ms) must not exceed claim_idle ({} ms), the crash-recovery time",
                        max.as_millis(),
                        self.claim_idle.as_millis()
                    ),
                });
            }
        }
        if let Some(ttl) = self.lease_ttl {
            if ttl < Duration::from_millis(100) {
                return bad("lease_ttl", "must be at least 100 ms");
            }
            if ttl > MAX_DURATION {
                return bad("lease_ttl", "must be at most 365 days");
            }
        }
        if let Some(ttl) = self.prune_idle {
            let min = super::hygiene::min_prune_ttl(self.block);
            if ttl < min {
                return Err(ConfigError::Invalid {
                    kind: Some(SourceKind::Stream),
                    key: stream.to_owned(),
                    option: "prune_idle",
                    reason: format!(
                        "must be at least {} ms (3 × block and 1 s): a live consumer is idle up to block between reads",
                        min.as_millis()
                    ),
                });
            }
            if ttl > MAX_DURATION {
                return bad("prune_idle", "must be at most 365 days");
            }
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
