//! Pub/Sub subscriptions: [`Channel`] (a channel name, or a pattern for
//! `PSUBSCRIBE`) and [`ChannelOptions`].
//!
//! At most once: Redis sends a message to the subscribers connected at that
//! moment and keeps nothing. A message published while the subscriber is
//! disconnected (a restart, a reconnect) is not seen; messages received and
//! not yet handled at a stop are dropped. The subscriber reads its
//! connection all the time into a bounded buffer, so a slow handler never
//! makes Redis's output buffer for it grow: when the buffer is full the
//! oldest message is dropped, counted (`rillkit_channel_dropped_total`) and
//! logged at WARN.

mod run;

pub(crate) use run::consume;

use std::sync::Arc;

use crate::error::ConfigError;
use crate::status::Board;
use crate::stream::{Codec, Json};

use super::SourceKind;
use crate::handler::ItemHandler;

/// A Pub/Sub channel, or a pattern of channels, and the codec of its
/// messages.
///
/// ```
/// use rillkit::Channel;
///
/// let events = Channel::new("events");
/// let all = Channel::pattern("events.*");
/// assert!(!events.is_pattern() && all.is_pattern());
/// ```
#[derive(Debug, Clone)]
pub struct Channel<C: Codec = Json> {
    name: Arc<str>,
    pattern: bool,
    codec: C,
}

impl Channel<Json> {
    /// The channel `name` (`SUBSCRIBE`), messages in JSON.
    pub fn new(name: impl Into<String>) -> Self {
        Channel {
            name: name.into().into(),
            pattern: false,
            codec: Json,
        }
    }

    /// Every channel matching the glob-style `pattern` (`PSUBSCRIBE`),
    /// messages in JSON. Publishing to a pattern publishes to the channel
    /// spelled like it.
    pub fn pattern(pattern: impl Into<String>) -> Self {
        Channel {
            name: pattern.into().into(),
            pattern: true,
            codec: Json,
        }
    }
}

impl<C: Codec> Channel<C> {
    /// The channel name, or the pattern.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether this is a pattern (`PSUBSCRIBE`).
    pub fn is_pattern(&self) -> bool {
        self.pattern
    }

    /// Uses another codec for the messages.
    pub fn codec<D: Codec>(self, codec: D) -> Channel<D> {
        Channel {
            name: self.name,
            pattern: self.pattern,
            codec,
        }
    }

    /// The codec.
    pub fn get_codec(&self) -> &C {
        &self.codec
    }
}

/// How a Pub/Sub subscription buffers and runs its handler.
///
/// | option | default |
/// |--------|---------|
/// | [`concurrency`](Self::concurrency) | 1 handler at a time |
/// | [`buffer`](Self::buffer) | 1 024 messages |
/// | [`consumer`](Self::consumer) | `<channel>-<hostname>-<pid>` (for status and logs) |
#[derive(Debug, Clone)]
pub struct ChannelOptions {
    pub(crate) concurrency: usize,
    pub(crate) buffer: usize,
    pub(crate) consumer: Option<String>,
}

impl Default for ChannelOptions {
    fn default() -> Self {
        ChannelOptions {
            concurrency: 1,
            buffer: 1024,
            consumer: None,
        }
    }
}

impl ChannelOptions {
    /// How many handlers run at once (default 1).
    pub fn concurrency(mut self, handlers: usize) -> Self {
        self.concurrency = handlers;
        self
    }

    /// How many received messages may wait for a handler (default 1 024).
    /// When a message arrives with the buffer full, the oldest waiting one
    /// is dropped and counted.
    pub fn buffer(mut self, messages: usize) -> Self {
        self.buffer = messages;
        self
    }

    /// The subscriber's name in [`Broker::status`] and logs.
    pub fn consumer(mut self, name: impl Into<String>) -> Self {
        self.consumer = Some(name.into());
        self
    }

    /// [`concurrency`](Self::concurrency).
    pub fn get_concurrency(&self) -> usize {
        self.concurrency
    }

    /// [`buffer`](Self::buffer).
    pub fn get_buffer(&self) -> usize {
        self.buffer
    }
}

/// One Pub/Sub subscription as configured.
pub(crate) struct ChannelSub {
    pub name: Arc<str>,
    pub pattern: bool,
    pub consumer: Arc<str>,
    pub opts: ChannelOptions,
    pub handler: ItemHandler,
    pub board: Arc<Board>,
}

impl ChannelSub {
    pub(crate) fn build<C: Codec>(
        channel: &Channel<C>,
        opts: ChannelOptions,
        handler: ItemHandler,
    ) -> Result<Self, ConfigError> {
        let bad = |option: &'static str, reason: &str| {
            Err(ConfigError::Invalid {
                stream: channel.name().to_owned(),
                option,
                reason: reason.to_owned(),
            })
        };
        if channel.name().is_empty() {
            return bad("name", "a channel needs a name");
        }
        if opts.concurrency == 0 {
            return bad("concurrency", "must be at least 1");
        }
        if opts.buffer == 0 {
            return bad("buffer", "must be at least 1 message");
        }
        let consumer: Arc<str> = match &opts.consumer {
            Some(c) => c.as_str().into(),
            None => crate::source::stream::default_consumer_name(channel.name()).into(),
        };
        Ok(ChannelSub {
            board: Arc::new(Board::new(
                SourceKind::Channel,
                channel.name.clone(),
                "".into(),
                consumer.clone(),
                "".into(),
            )),
            name: channel.name.clone(),
            pattern: channel.pattern,
            consumer,
            opts,
            handler,
        })
    }
}
