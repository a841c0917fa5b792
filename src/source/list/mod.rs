//! List subscriptions: [`List`] (a Redis list, described once for producers
//! and consumers) and [`ListOptions`].
//!
//! *Reliable* (the default): each item is moved atomically from the list
//! onto this consumer's processing list (`BLMOVE <list> <processing> RIGHT
//! LEFT`) and removed from there (`LREM`) once its handler succeeded. A
//! failed item stays on the processing list, waits out its backoff in this
//! consumer and runs again, up to `max_retries` more times; then it moves to
//! the dead-letter list. A consumer keeps a heartbeat key alive and is
//! registered beside the list; when its heartbeat lapses (the process died),
//! a surviving consumer of the list moves its processing list back onto the
//! list, in one script, once.
//!
//! *At most once* ([`ListOptions::with_at_most_once`]): `BRPOP`. An item is gone
//! from Redis once popped: a crash loses the items being handled.

mod run;
mod scripts;

pub(crate) use run::consume;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::delivery::{MAX_DURATION, RetryBackoff};
use crate::error::ConfigError;
use crate::status::Board;
use crate::stream::{Codec, Json};

use crate::handler::{BatchHandler, ItemHandler};
pub(crate) use crate::keys::ListKeys;
use crate::kind::SourceKind;

/// A Redis list as a source of work: its key, its dead-letter list and the
/// codec of its items. Producers and consumers share one description.
///
/// Items are the codec's bytes (JSON by default), so any client's `LPUSH`
/// produces for rillkit: `LPUSH jobs '{"id":7}'`. Consumers pop from the
/// right, so a list fed with `LPUSH` is handled in push order.
///
/// ```
/// use rillkit::List;
///
/// let jobs = List::new("jobs");
/// assert_eq!(jobs.dlq_name(), "jobs-dlq");
/// let jobs = jobs.with_dlq_name("jobs-failed");
/// assert_eq!(jobs.dlq_name(), "jobs-failed");
/// ```
#[derive(Debug, Clone)]
pub struct List<C: Codec = Json> {
    name: Arc<str>,
    dlq: Arc<str>,
    /// Whether `dlq` is the default (set per topology at build).
    dlq_default: bool,
    codec: C,
}

impl List<Json> {
    /// A list named `name`, items in JSON, dead letters in `<name>-dlq`.
    pub fn new(name: impl Into<String>) -> Self {
        let name: String = name.into();
        List {
            dlq: crate::keys::dead_letter_name(&name, false).into(),
            dlq_default: true,
            name: name.into(),
            codec: Json,
        }
    }
}

impl<C: Codec> List<C> {
    /// The list's key.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the dead-letter list (default `<name>-dlq`; under a cluster,
    /// `{<name>}-dlq` unless the name holds a hash tag, so that it shares
    /// the list's slot).
    #[must_use]
    pub fn with_dlq_name(mut self, name: impl Into<String>) -> Self {
        self.dlq = name.into().into();
        self.dlq_default = false;
        self
    }

    /// The dead-letter list's key for a standalone or Sentinel server: the
    /// name set with [`with_dlq_name`](Self::with_dlq_name), or
    /// `<name>-dlq`. Under a cluster the default is `{<name>}-dlq` (unless
    /// the name holds a hash tag).
    pub fn dlq_name(&self) -> &str {
        &self.dlq
    }

    /// Uses another codec for the items.
    #[must_use]
    pub fn with_codec<D: Codec>(self, codec: D) -> List<D> {
        List {
            name: self.name,
            dlq: self.dlq,
            dlq_default: self.dlq_default,
            codec,
        }
    }

    /// The codec, set with [`with_codec`](Self::with_codec).
    pub fn codec(&self) -> &C {
        &self.codec
    }

    pub(crate) fn dlq_or_default(&self, cluster: bool) -> Arc<str> {
        if self.dlq_default && cluster {
            crate::keys::dead_letter_name(&self.name, true).into()
        } else {
            self.dlq.clone()
        }
    }
}

/// How a list subscription reads and retries.
///
/// | option | default |
/// |--------|---------|
/// | [`with_consumer`](Self::with_consumer) | `<list>-<hostname>-<pid>` |
/// | [`with_concurrency`](Self::with_concurrency) | 1 handler at a time |
/// | [`with_max_retries`](Self::with_max_retries) | 3 runs after the first; then the dead-letter list |
/// | [`with_retry_backoff`](Self::with_retry_backoff) | 1 s doubling, at most 60 s, with jitter |
/// | [`with_block`](Self::with_block) | 5 s |
/// | [`with_heartbeat_ttl`](Self::with_heartbeat_ttl) | 10 s |
/// | [`with_at_most_once`](Self::with_at_most_once) | off: reliable |
#[derive(Debug, Clone)]
pub struct ListOptions {
    pub(crate) consumer: Option<String>,
    pub(crate) concurrency: usize,
    pub(crate) max_retries: u64,
    pub(crate) retry_backoff: RetryBackoff,
    pub(crate) block: Duration,
    pub(crate) heartbeat_ttl: Duration,
    pub(crate) at_most_once: bool,
}

impl Default for ListOptions {
    fn default() -> Self {
        ListOptions {
            consumer: None,
            concurrency: 1,
            max_retries: 3,
            retry_backoff: RetryBackoff::default(),
            block: Duration::from_secs(5),
            heartbeat_ttl: Duration::from_secs(10),
            at_most_once: false,
        }
    }
}

/// The longest wait between two runs of a failed item.
pub(crate) const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);

impl ListOptions {
    /// The consumer's name: it names the processing list
    /// (`{<list>}:rillkit:processing:<consumer>`) and the heartbeat key.
    /// Two live processes must not share one.
    #[must_use]
    pub fn with_consumer(mut self, name: impl Into<String>) -> Self {
        self.consumer = Some(name.into());
        self
    }

    /// How many handlers run at once (default 1). Each pops its own item.
    #[must_use]
    pub fn with_concurrency(mut self, handlers: usize) -> Self {
        self.concurrency = handlers;
        self
    }

    /// How many times a failed item runs again before it goes to the
    /// dead-letter list: a handler runs at most `max_retries + 1` times per
    /// item (default 3).
    #[must_use]
    pub fn with_max_retries(mut self, retries: u64) -> Self {
        self.max_retries = retries;
        self
    }

    /// How long a failed item waits before it runs again (default 1 s
    /// doubling, capped at 60 s, with jitter). The item waits on this
    /// consumer's processing list.
    #[must_use]
    pub fn with_retry_backoff(mut self, backoff: RetryBackoff) -> Self {
        self.retry_backoff = backoff;
        self
    }

    /// How long one blocking pop (`BLMOVE`, `BRPOP`) waits for an item
    /// before it is sent again (default 5 s, at least 10 ms). A stop or a
    /// removal cuts it short with `CLIENT UNBLOCK`.
    #[must_use]
    pub fn with_block(mut self, block: Duration) -> Self {
        self.block = block;
        self
    }

    /// The TTL of this consumer's heartbeat key (default 10 s, at least
    /// 100 ms), renewed every `ttl / 3`. Once it has lapsed, the other
    /// consumers of the list take this consumer for dead and move its
    /// processing list back onto the list: a crash costs a redelivery of
    /// what it held after at most about this long.
    #[must_use]
    pub fn with_heartbeat_ttl(mut self, ttl: Duration) -> Self {
        self.heartbeat_ttl = ttl;
        self
    }

    /// With `true`, pops with `BRPOP` instead (default `false`: reliable):
    /// no processing list, no retries, no
    /// heartbeat. An item is gone from Redis once popped; one that fails, or
    /// does not decode, is written to the dead-letter list for the record,
    /// and one being handled when the process dies is lost.
    #[must_use]
    pub fn with_at_most_once(mut self, on: bool) -> Self {
        self.at_most_once = on;
        self
    }

    /// The consumer name, if set with [`with_consumer`](Self::with_consumer).
    pub fn consumer(&self) -> Option<&str> {
        self.consumer.as_deref()
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

    /// The blocking pop's wait, set with [`with_block`](Self::with_block).
    pub fn block(&self) -> Duration {
        self.block
    }

    /// The heartbeat key's TTL, set with
    /// [`with_heartbeat_ttl`](Self::with_heartbeat_ttl).
    pub fn heartbeat_ttl(&self) -> Duration {
        self.heartbeat_ttl
    }

    /// The retry backoff, set with
    /// [`with_retry_backoff`](Self::with_retry_backoff).
    pub fn retry_backoff(&self) -> RetryBackoff {
        self.retry_backoff
    }

    /// Whether items are popped at most once, set with
    /// [`with_at_most_once`](Self::with_at_most_once).
    pub fn at_most_once(&self) -> bool {
        self.at_most_once
    }

    pub(crate) fn validate(&self, list: &str) -> Result<(), ConfigError> {
        let bad = |option: &'static str, reason: &str| {
            Err(ConfigError::Invalid {
                kind: Some(if self.at_most_once {
                    SourceKind::ListAtMostOnce
                } else {
                    SourceKind::List
                }),
                key: list.to_owned(),
                option,
                reason: reason.to_owned(),
            })
        };
        if list.is_empty() {
            return bad("name", "a list needs a name");
        }
        if self.concurrency == 0 {
            return bad("concurrency", "must be at least 1");
        }
        if self.block < Duration::from_millis(10) || self.block > MAX_DURATION {
            return bad("block", "must be at least 10 ms and at most 365 days");
        }
        if self.heartbeat_ttl < Duration::from_millis(100) || self.heartbeat_ttl > MAX_DURATION {
            return bad(
                "heartbeat_ttl",
                "must be at least 100 ms and at most 365 days",
            );
        }
        if self.consumer.as_deref().is_some_and(str::is_empty) {
            return bad("consumer", "must not be empty");
        }
        Ok(())
    }
}

/// One list subscription as configured.
pub(crate) struct ListSub {
    pub keys: ListKeys,
    pub consumer: Arc<str>,
    pub opts: ListOptions,
    pub handler: ListHandler,
    pub drain_timeout: Duration,
    pub board: Arc<Board>,
}

/// A list subscription's handler: one item per run, or batches its loop
/// runs natively (`concurrency` then counts batches).
pub(crate) enum ListHandler {
    Each(ItemHandler),
    Batch(BatchHandler),
}

impl From<ItemHandler> for ListHandler {
    fn from(h: ItemHandler) -> Self {
        ListHandler::Each(h)
    }
}

impl ListSub {
    /// Checks a list subscription and builds it.
    pub(crate) fn build<C: Codec>(
        list: &List<C>,
        opts: ListOptions,
        handler: ListHandler,
        cluster: bool,
        drain_timeout: Duration,
    ) -> Result<Self, ConfigError> {
        opts.validate(list.name())?;
        let dlq = list.dlq_or_default(cluster);
        let consumer: Arc<str> = match &opts.consumer {
            Some(c) => c.as_str().into(),
            None => crate::delivery::default_consumer_name(list.name()).into(),
        };
        let keys = ListKeys::new(list.name.clone(), dlq.clone(), &consumer);
        if cluster {
            use crate::keys::key_slot;
            let slot = key_slot(list.name().as_bytes());
            for (option, key) in [("dlq_name", &*dlq), ("name", keys.processing.as_str())] {
                if key_slot(key.as_bytes()) != slot {
                    return Err(ConfigError::Invalid {
                        kind: Some(if opts.at_most_once {
                            SourceKind::ListAtMostOnce
                        } else {
                            SourceKind::List
                        }),
                        key: list.name().to_owned(),
                        option,
                        reason: format!(
                            "{key:?} hashes to another cluster slot than the list; give the list a hash tag, like {{{}}}",
                            list.name()
                        ),
                    });
                }
            }
        }
        let kind = if opts.at_most_once {
            super::SourceKind::ListAtMostOnce
        } else {
            super::SourceKind::List
        };
        let board = Board::new(kind, list.name.clone(), "".into(), consumer.clone(), dlq);
        board.scale().configure(opts.concurrency, true);
        Ok(ListSub {
            board: Arc::new(board),
            keys,
            consumer,
            opts,
            handler,
            drain_timeout,
        })
    }
}

/// The JSON document a dead letter of a list is: the item (as text when it
/// is UTF-8, else its bytes as an array of numbers), why it failed, and
/// where.
#[derive(Serialize)]
pub(crate) struct ListDeadLetter<'a> {
    pub list: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item_bytes: Option<&'a [u8]>,
    pub error: &'a str,
    pub consumer: &'a str,
    pub attempts: u64,
    pub dead_lettered_at_ms: u64,
}

impl<'a> ListDeadLetter<'a> {
    pub(crate) fn encode(
        list: &'a str,
        item: &'a [u8],
        error: &'a str,
        consumer: &'a str,
        attempts: u64,
    ) -> Vec<u8> {
        let text = std::str::from_utf8(item).ok();
        let letter = ListDeadLetter {
            list,
            item: text,
            item_bytes: if text.is_some() { None } else { Some(item) },
            error,
            consumer,
            attempts,
            dead_lettered_at_ms: crate::util::now_ms(),
        };
        serde_json::to_vec(&letter).unwrap_or_default()
    }
}
