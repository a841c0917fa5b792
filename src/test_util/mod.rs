//! Testing aids (feature `test-util`, as in tokio): build a [`Message`] or a
//! [`Delivery`] to unit-test a handler without Redis, and start a throwaway
//! `redis-server` for integration tests.
//!
//! ```
//! use rillkit::test_util;
//! use rillkit::{Broker, HandlerResult, Json, Message};
//!
//! async fn handler(msg: Message) -> HandlerResult {
//!     let amount: u64 = msg.decode(&Json)?;
//!     assert_eq!(amount, 42);
//!     Ok(())
//! }
//!
//! # actix::System::new().block_on(async {
//! let msg = test_util::message("payments", "1-0", br#"42"#).delivery_count(2).build();
//! assert!(msg.is_redelivery());
//! handler(msg).await.unwrap();
//!
//! // A Delivery needs a Broker handle: building one does no I/O.
//! let broker = Broker::builder("redis://127.0.0.1:6379").build().unwrap();
//! let d = test_util::message("payments", "1-0", b"42").delivery(&broker);
//! assert_eq!(d.delivery_count(), 1);
//! # });
//! ```

mod server;

pub use server::RedisServer;

use std::sync::Arc;

use crate::handler::Message;
use crate::stream::EntryId;
use crate::{Broker, Delivery};

/// Starts building a [`Message`] of `stream` with entry id `id` whose data
/// field (`data`) holds `data`; group `test-group`, consumer `test-consumer`,
/// delivery count 1 unless set.
pub fn message(stream: &str, id: &str, data: &[u8]) -> MessageBuilder {
    MessageBuilder {
        stream: stream.into(),
        id: EntryId(id.to_owned()),
        group: "test-group".into(),
        consumer: "test-consumer".into(),
        delivery_count: 1,
        fields: vec![(b"data".to_vec(), data.to_vec())],
        data_field: "data".into(),
    }
}

/// A [`Message`] (or [`Delivery`]) under construction. See [`message`].
#[derive(Debug, Clone)]
pub struct MessageBuilder {
    stream: Arc<str>,
    id: EntryId,
    group: Arc<str>,
    consumer: Arc<str>,
    delivery_count: u64,
    fields: Vec<(Vec<u8>, Vec<u8>)>,
    data_field: Arc<str>,
}

impl MessageBuilder {
    /// The consumer group (default `test-group`).
    pub fn group(mut self, group: &str) -> Self {
        self.group = group.into();
        self
    }

    /// The consumer (default `test-consumer`).
    pub fn consumer(mut self, consumer: &str) -> Self {
        self.consumer = consumer.into();
        self
    }

    /// The server's delivery count (default 1, a first delivery).
    pub fn delivery_count(mut self, n: u64) -> Self {
        self.delivery_count = n;
        self
    }

    /// Adds another field after the data field.
    pub fn field(mut self, name: &str, value: &[u8]) -> Self {
        self.fields.push((name.as_bytes().to_vec(), value.to_vec()));
        self
    }

    /// Names the data field (default `data`), as
    /// [`Stream::with_data_field`](crate::Stream::with_data_field) does.
    pub fn data_field(mut self, name: &str) -> Self {
        if let Some(f) = self.fields.first_mut() {
            f.0 = name.as_bytes().to_vec();
        }
        self.data_field = name.into();
        self
    }

    /// The message a whole-message handler would receive.
    pub fn build(self) -> Message {
        Message {
            id: self.id,
            stream: self.stream,
            group: self.group,
            consumer: self.consumer,
            delivery_count: self.delivery_count,
            fields: self.fields.into(),
            data_field: self.data_field,
        }
    }

    /// The context a handler subscribed with
    /// [`subscribe_with_context`](crate::BrokerBuilder::subscribe_with_context)
    /// would receive, with `broker` as its handle.
    pub fn delivery(self, broker: &Broker) -> Delivery {
        Delivery::of(&self.build(), broker)
    }
}
