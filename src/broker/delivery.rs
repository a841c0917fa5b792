//! What a handler with context receives beside the decoded value: a
//! [`Delivery`] for a stream entry, an [`ItemDelivery`] for a list item or a
//! channel message. Both carry the [`Broker`] that delivered it.

use std::fmt;
use std::sync::Arc;

use crate::Broker;
use crate::handler::{ItemMeta, Message};
use crate::stream::EntryId;

/// What a typed handler subscribed with
/// [`subscribe_with_context`](crate::BrokerBuilder::subscribe_with_context)
/// learns about the delivery beside the decoded value: the entry id (key
/// idempotency on it), the server's delivery count (notice a retry), where it
/// came from, and a [`Broker`] handle to publish onward with.
///
/// ```
/// use rillkit::prelude::*;
/// use rillkit::Delivery;
///
/// let payments = Stream::new("payments", "ledger");
/// let receipts = Stream::new("receipts", "mailer");
/// let builder = Broker::builder("redis://127.0.0.1:6379").subscribe_with_context(
///     &payments,
///     ConsumerOptions::default(),
///     move |amount: u64, d: Delivery| {
///         let receipts = receipts.clone();
///         async move {
///             if d.is_redelivery() {
///                 println!("{} again (run {})", d.id(), d.delivery_count());
///             }
///             d.broker().publish(&receipts, &amount).await?;
///             HandlerResult::Ok(())
///         }
///     },
/// );
/// # let _ = builder;
/// ```
#[derive(Clone)]
pub struct Delivery {
    id: EntryId,
    stream: Arc<str>,
    group: Arc<str>,
    consumer: Arc<str>,
    delivery_count: u64,
    broker: Broker,
}

impl Delivery {
    /// The entry id.
    pub fn id(&self) -> &EntryId {
        &self.id
    }

    /// The stream key.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The consumer group the entry was read in.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The consumer that holds the entry in the pending entries list.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// How many times Redis has delivered the entry to a consumer of this
    /// group, counting this delivery (1 on the first run): the server's
    /// count (XPENDING), so it also counts deliveries to other processes.
    pub fn delivery_count(&self) -> u64 {
        self.delivery_count
    }

    /// The broker that delivered the entry, to publish onward with.
    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    /// `true` when this is not the first delivery of the entry.
    pub fn is_redelivery(&self) -> bool {
        self.delivery_count > 1
    }

    pub(crate) fn of(msg: &Message, broker: &Broker) -> Self {
        Delivery {
            id: msg.id.clone(),
            stream: msg.stream.clone(),
            group: msg.group.clone(),
            consumer: msg.consumer.clone(),
            delivery_count: msg.delivery_count,
            broker: broker.clone(),
        }
    }
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("id", &self.id)
            .field("stream", &self.stream)
            .field("group", &self.group)
            .field("consumer", &self.consumer)
            .field("delivery_count", &self.delivery_count)
            .finish_non_exhaustive()
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
///         println!("{} on {}", price, d.source());
///         HandlerResult::Ok(())
///     },
/// );
/// # let _ = builder;
/// ```
#[derive(Clone)]
pub struct ItemDelivery {
    source: Arc<str>,
    pattern: Option<Arc<str>>,
    consumer: Arc<str>,
    attempt: u64,
    broker: Broker,
}

impl ItemDelivery {
    pub(crate) fn of(meta: ItemMeta, broker: Broker) -> Self {
        ItemDelivery {
            source: meta.source,
            pattern: meta.pattern,
            consumer: meta.consumer,
            attempt: meta.attempt,
            broker,
        }
    }

    /// The list the item was popped from, or the channel the message was
    /// published on (for a pattern subscription, the matching channel).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The pattern that matched (`PSUBSCRIBE`), else `None`.
    pub fn pattern(&self) -> Option<&str> {
        self.pattern.as_deref()
    }

    /// This subscription's consumer name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Which run of the item this is (1 on the first), from the list's
    /// attempts hash (see the guide's Lists chapter for its limits); always
    /// 1 for a channel message or an item popped at most once.
    pub fn attempt(&self) -> u64 {
        self.attempt
    }

    /// The broker that delivered the item, to publish onward with.
    pub fn broker(&self) -> &Broker {
        &self.broker
    }

    /// `true` when this is not the item's first run.
    pub fn is_retry(&self) -> bool {
        self.attempt > 1
    }
}

impl fmt::Debug for ItemDelivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemDelivery")
            .field("source", &self.source)
            .field("pattern", &self.pattern)
            .field("consumer", &self.consumer)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}
