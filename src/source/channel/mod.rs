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

use crate::handler::ItemHandler;
use crate::kind::SourceKind;

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
    #[must_use]
    pub fn with_codec<D: Codec>(self, codec: D) -> Channel<D> {
        Channel {
            name: self.name,
            pattern: self.pattern,
            codec,
        }
    }

    /// The codec, set with [`with_codec`](Self::with_codec).
    pub fn codec(&self) -> &C {
        &self.codec
    }
}

/// How a Pub/Sub subscription buffers and runs its handler.
///
/// | option | default |
/// |--------|---------|
/// | [`with_concurrency`](Self::with_concurrency) | 1 handler at a time |
/// | [`with_buffer`](Self::with_buffer) | 1 024 messages |
/// | [`with_buffer_bytes`](Self::with_buffer_bytes) | 32 MiB of payloads |
/// | [`with_consumer`](Self::with_consumer) | `<channel>-<hostname>-<pid>` (for status and logs) |
#[derive(Debug, Clone)]
pub struct ChannelOptions {
    pub(crate) concurrency: usize,
    pub(crate) buffer: usize,
    pub(crate) buffer_bytes: usize,
    pub(crate) consumer: Option<String>,
}

/// The default bound of a channel's buffer in bytes: with the default of
/// 1 024 messages it holds messages of up to 32 KiB each in full, and keeps
/// a worker's memory for one subscription near 32 MiB whatever their size.
const DEFAULT_BUFFER_BYTES: usize = 32 * 1024 * 1024;

impl Default for ChannelOptions {
    fn default() -> Self {
        ChannelOptions {
            concurrency: 1,
            buffer: 1024,
            buffer_bytes: DEFAULT_BUFFER_BYTES,
            consumer: None,
        }
    }
}

impl ChannelOptions {
    /// How many handlers run at once (default 1).
    #[must_use]
    pub fn with_concurrency(mut self, handlers: usize) -> Self {
        self.concurrency = handlers;
        self
    }

    /// How many received messages may wait for a handler (default 1 024).
    /// When a message arrives with the buffer full, the oldest waiting one
    /// is dropped and counted.
    #[must_use]
    pub fn with_buffer(mut self, messages: usize) -> Self {
        self.buffer = messages;
        self
    }

    /// How many bytes of payloads may wait for a handler (default 32 MiB),
    /// beside [`with_buffer`](Self::with_buffer)'s count: when a message
    /// arrives that would take the buffer past either bound, the oldest
    /// waiting ones are dropped and counted until it fits. A message larger
    /// than the whole bound is still taken when nothing else waits (it is
    /// what the handler gets next).
    #[must_use]
    pub fn with_buffer_bytes(mut self, bytes: usize) -> Self {
        self.buffer_bytes = bytes;
        self
    }

    /// The subscriber's name in [`Broker::status`](crate::Broker::status) and logs.
    #[must_use]
    pub fn with_consumer(mut self, name: impl Into<String>) -> Self {
        self.consumer = Some(name.into());
        self
    }

    /// How many handlers run at once, set with
    /// [`with_concurrency`](Self::with_concurrency).
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// The buffer's size, in messages, set with
    /// [`with_buffer`](Self::with_buffer).
    pub fn buffer(&self) -> usize {
        self.buffer
    }

    /// The buffer's bound in bytes of payloads, set with
    /// [`with_buffer_bytes`](Self::with_buffer_bytes).
    pub fn buffer_bytes(&self) -> usize {
        self.buffer_bytes
    }

    /// The subscriber's name, if set with
    /// [`with_consumer`](Self::with_consumer).
    pub fn consumer(&self) -> Option<&str> {
        self.consumer.as_deref()
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
                kind: Some(SourceKind::Channel),
                key: channel.name().to_owned(),
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
        if opts.buffer_bytes == 0 {
            return bad("buffer_bytes", "must be at least 1 byte");
        }
        let consumer: Arc<str> = match &opts.consumer {
            Some(c) => c.as_str().into(),
            None => crate::delivery::default_consumer_name(channel.name()).into(),
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
