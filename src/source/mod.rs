//! The kinds of source a subscription reads besides streams: Redis lists
//! ([`list`]) and Pub/Sub channels ([`channel`]), and what they share — the
//! typed handler they run, the slot a subscription takes in the supervisor,
//! and the handle of a subscription added at run time ([`runtime`]).
//!
//! Each kind reads on a dedicated connection of its own and runs the same
//! way as a stream's consumer: an actor whose loop reads, runs up to
//! `concurrency` handlers, drains on a stop within the deadline and reports a
//! `ConsumerReport` the supervisor tallies.

pub(crate) mod channel;
pub(crate) mod list;
pub(crate) mod runtime;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use redis::Value;
use serde::de::DeserializeOwned;

use crate::connection::Retry;
use crate::consumer::Subscription;
use crate::error::BoxError;
use crate::error::Error;
use crate::handler::HandlerResult;
use crate::redis::RedisActor;
use crate::status::Board;
use crate::stream::Codec;

/// What a subscription reads: a stream (consumer groups), a list, or a
/// Pub/Sub channel. See the README's "Sources" table for what each kind
/// guarantees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SourceKind {
    /// A stream read in a consumer group (`XREADGROUP`): at least once.
    Stream,
    /// A list popped onto a processing list (`BLMOVE`, `LREM` after
    /// success): at least once.
    List,
    /// A list popped with `BRPOP`: at most once.
    ListAtMostOnce,
    /// A Pub/Sub channel or pattern (`SUBSCRIBE`, `PSUBSCRIBE`): at most
    /// once.
    Channel,
}

/// One configured subscription of any kind.
#[derive(Clone)]
pub(crate) enum Source {
    Stream(Arc<Subscription>),
    List(Arc<list::ListSub>),
    Channel(Arc<channel::ChannelSub>),
}

impl Source {
    pub(crate) fn board(&self) -> &Arc<Board> {
        match self {
            Source::Stream(s) => &s.board,
            Source::List(s) => &s.board,
            Source::Channel(s) => &s.board,
        }
    }

    pub(crate) fn as_stream(&self) -> Option<&Arc<Subscription>> {
        match self {
            Source::Stream(s) => Some(s),
            _ => None,
        }
    }
}

/// What a handler subscribed with
/// [`subscribe_list_with_context`](crate::BrokerBuilder::subscribe_list_with_context)
/// or
/// [`subscribe_channel_with_context`](crate::BrokerBuilder::subscribe_channel_with_context)
/// learns beside the decoded value: where it came from (for a pattern
/// subscription, the channel that matched), which run this is, and a
/// [`Broker`](crate::Broker) handle to publish onward with.
///
/// ```
/// use rillkit::prelude::*;
/// use rillkit::ItemDelivery;
///
/// let builder = Broker::builder("redis://127.0.0.1:6379").subscribe_channel_with_context(
///     &Channel::pattern("prices.*"),
///     ChannelOptions::default(),
///     |price: f64, d: ItemDelivery| async move {
///         println!("{} on {}", price, d.source);
///         Ok(())
///     },
/// );
/// # let _ = builder;
/// ```
#[derive(Clone)]
pub struct ItemDelivery {
    /// The list the item was popped from, or the channel the message was
    /// published on (for a pattern subscription, the matching channel).
    pub source: Arc<str>,
    /// The pattern that matched (`PSUBSCRIBE`), else `None`.
    pub pattern: Option<Arc<str>>,
    /// This subscription's consumer name.
    pub consumer: Arc<str>,
    /// Which run of the item this is (1 on the first), from the list's
    /// attempts hash (see the README for its limits); always 1 for a
    /// channel message or an item popped at most once.
    pub attempt: u64,
    broker: crate::Broker,
}

impl ItemDelivery {
    pub(crate) fn new(
        source: Arc<str>,
        pattern: Option<Arc<str>>,
        consumer: Arc<str>,
        attempt: u64,
        broker: crate::Broker,
    ) -> Self {
        ItemDelivery {
            source,
            pattern,
            consumer,
            attempt,
            broker,
        }
    }

    /// The broker that delivered the item, to publish onward with.
    pub fn broker(&self) -> &crate::Broker {
        &self.broker
    }

    /// `true` when this is not the item's first run.
    pub fn is_retry(&self) -> bool {
        self.attempt > 1
    }
}

impl std::fmt::Debug for ItemDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ItemDelivery")
            .field("source", &self.source)
            .field("pattern", &self.pattern)
            .field("consumer", &self.consumer)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

/// A handler of a list item or a channel message: the item's bytes decoded
/// with the source's codec into the handler's type, then the future to run;
/// `Err` when the bytes do not decode (the handler is not called).
pub(crate) type ItemHandler = Arc<
    dyn Fn(&[u8], ItemDelivery) -> Result<LocalBoxFuture<'static, HandlerResult>, BoxError>
        + Send
        + Sync,
>;

fn decode_item<T: DeserializeOwned, C: Codec>(codec: &C, bytes: &[u8]) -> Result<T, BoxError> {
    if bytes.is_empty() {
        return Err("empty item".into());
    }
    codec.decode::<T>(bytes)
}

pub(crate) fn typed_item<T, C, F, Fut>(codec: C, f: F) -> ItemHandler
where
    T: DeserializeOwned + 'static,
    C: Codec,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + 'static,
{
    Arc::new(move |bytes: &[u8], _| {
        let value = decode_item::<T, C>(&codec, bytes)?;
        Ok(Box::pin(f(value)) as LocalBoxFuture<'static, HandlerResult>)
    })
}

pub(crate) fn typed_item_with_context<T, C, F, Fut>(codec: C, f: F) -> ItemHandler
where
    T: DeserializeOwned + 'static,
    C: Codec,
    F: Fn(T, ItemDelivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + 'static,
{
    Arc::new(move |bytes: &[u8], d| {
        let value = decode_item::<T, C>(&codec, bytes)?;
        Ok(Box::pin(f(value, d)) as LocalBoxFuture<'static, HandlerResult>)
    })
}

/// Runs a script ([`Eval`]) or a command ([`Query`](crate::redis::Query))
/// on a shared connection until Redis has run it, waiting out transient
/// errors with backoff (until `deadline`, when given).
///
/// # Errors
/// An error nothing fixes by waiting, [`Error::ShutDown`], or the last
/// transient one once `deadline` has passed.
pub(crate) async fn until_done<M>(
    redis: &Addr<RedisActor>,
    msg: M,
    deadline: Option<std::time::Instant>,
) -> Result<Value, Error>
where
    M: actix::Message<Result = Result<Value, Error>> + Clone + Send + 'static,
    RedisActor: actix::Handler<M>,
{
    let mut retry = Retry::default();
    loop {
        let e = match redis.send(msg.clone()).await {
            Err(_) => return Err(Error::ShutDown),
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => e,
        };
        if matches!(e, Error::ShutDown) || !e.class().is_transient() {
            return Err(e);
        }
        let (delay, log) = retry.failed();
        if deadline.is_some_and(|d| std::time::Instant::now() + delay > d) {
            return Err(e);
        }
        if log {
            tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "a list or channel write failed; retrying");
        }
        tokio::time::sleep(delay).await;
    }
}

/// How one handler run ended.
pub(crate) enum Ran {
    Ok,
    Failed {
        error: String,
        reject: bool,
    },
    /// The item did not decode: the handler was not called.
    Undecodable(String),
}

/// Runs a prepared handler future, catching a panic (counted as a failed
/// run), and answers how it ended and how long it took.
pub(crate) async fn run_guarded(fut: LocalBoxFuture<'static, HandlerResult>) -> (Ran, Duration) {
    let started = std::time::Instant::now();
    let ran = match AssertUnwindSafe(fut).catch_unwind().await {
        Ok(Ok(())) => Ran::Ok,
        Ok(Err(e)) => Ran::Failed {
            reject: e.is_reject(),
            error: e.to_string(),
        },
        Err(payload) => Ran::Failed {
            error: format!("handler panicked: {}", crate::panic_message(&*payload)),
            reject: false,
        },
    };
    (ran, started.elapsed())
}

/// The sibling keys of a list under one hash slot: `<name>` when the name
/// holds a hash tag (they then hash like it), else `{<name>}`; rillkit's own
/// keys for the list are `<that>:rillkit:<what>`, so every script over the
/// list and them works in a cluster too.
pub(crate) fn slot_prefix(name: &str) -> String {
    let tagged = name
        .find('{')
        .and_then(|open| name[open + 1..].find('}'))
        .is_some_and(|close| close > 0);
    if tagged {
        name.to_owned()
    } else {
        format!("{{{name}}}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::key_slot;

    #[test]
    fn sibling_keys_share_the_slot_of_the_name() {
        for name in ["jobs", "{tenant}.jobs", "a:b"] {
            let p = slot_prefix(name);
            let sibling = format!("{p}:rillkit:processing:c1");
            assert_eq!(
                key_slot(sibling.as_bytes()),
                key_slot(name.as_bytes()),
                "{name} -> {sibling}"
            );
        }
    }
}
