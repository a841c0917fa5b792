//! The loop of one Pub/Sub subscription: a reader that keeps its own
//! connection subscribed (again after every reconnect) and moves each
//! message into a bounded buffer, and up to `concurrency` handlers fed from
//! that buffer.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::LocalBoxFuture;
use futures::stream::FuturesUnordered;
use tokio::sync::{Notify, oneshot, watch};

use super::ChannelSub;
use crate::connection::Connector;
use crate::delivery::ConsumerReport;
use crate::delivery::consumer;
use crate::delivery::handler::{self, Ran, Run};
use crate::error::Error;
use crate::handler::ItemMeta;
use crate::status::SubscriptionState;
use crate::telemetry::ConsumerMetrics;
use crate::util::Retry;

/// Messages dropped because the buffer was full.
pub(crate) const DROPPED: &str = "rillkit_channel_dropped_total";

/// How often, at most, dropping messages is logged (with the count since
/// the last line).
const DROP_LOG_EVERY: Duration = Duration::from_secs(5);

/// A message as received: the channel it was published on and its payload.
struct Received {
    channel: Arc<str>,
    payload: Vec<u8>,
}

/// Received messages waiting for a handler.
struct Buffer {
    messages: VecDeque<Received>,
    /// The payload bytes of `messages`.
    bytes: usize,
    capacity: usize,
    capacity_bytes: usize,
    dropped_unlogged: u64,
    last_log: Option<Instant>,
}

impl Buffer {
    /// Adds a message, first dropping the oldest waiting ones while it
    /// would not fit (by count or by bytes).
    fn push(&mut self, sub: &ChannelSub, message: Received) {
        while !self.messages.is_empty()
            && (self.messages.len() >= self.capacity
                || self.bytes + message.payload.len() > self.capacity_bytes)
        {
            if let Some(old) = self.messages.pop_front() {
                self.bytes -= old.payload.len();
            }
            self.dropped_unlogged += 1;
            sub.board.dropped();
            metrics::counter!(DROPPED, "stream" => sub.name.to_string(), "group" => "")
                .increment(1);
            if self.last_log.is_none_or(|t| t.elapsed() >= DROP_LOG_EVERY) {
                self.log_drops(sub);
            }
        }
        self.bytes += message.payload.len();
        self.messages.push_back(message);
    }

    /// The oldest waiting message, if any.
    fn pop(&mut self) -> Option<Received> {
        let message = self.messages.pop_front()?;
        self.bytes -= message.payload.len();
        Some(message)
    }

    /// Logs the drops not logged yet (called on a drop at most every
    /// `DROP_LOG_EVERY`, by a tick of the same period, and at the stop, so
    /// the last burst is told too).
    fn log_drops(&mut self, sub: &ChannelSub) {
        if self.dropped_unlogged == 0 {
            return;
        }
        tracing::warn!(
            channel = %sub.name,
            dropped = self.dropped_unlogged,
            buffer = self.capacity,
            buffer_bytes = self.capacity_bytes,
            "the handlers do not keep up with the channel; dropped the oldest buffered messages"
        );
        self.dropped_unlogged = 0;
        self.last_log = Some(Instant::now());
    }
}

/// Runs one Pub/Sub subscription until it is told to drain.
pub(crate) async fn consume(
    sub: Arc<ChannelSub>,
    connector: Connector,
    mut stop: watch::Receiver<Option<Instant>>,
    ready: Option<oneshot::Sender<()>>,
) -> ConsumerReport {
    let buffer = Rc::new(RefCell::new(Buffer {
        messages: VecDeque::new(),
        bytes: 0,
        capacity: sub.opts.buffer,
        capacity_bytes: sub.opts.buffer_bytes,
        dropped_unlogged: 0,
        last_log: None,
    }));
    let arrived = Rc::new(Notify::new());
    let (subscribed_tx, mut subscribed) = oneshot::channel();
    let mut reader: LocalBoxFuture<'static, ()> = Box::pin(read(
        sub.clone(),
        connector,
        buffer.clone(),
        arrived.clone(),
        subscribed_tx,
    ));
    // Ready once subscribed the first time (or stopped): a message published
    // after start() returned is then seen. The reader never ends; it is
    // polled here to subscribe.
    let first = std::future::poll_fn(|cx| {
        let _ = reader.as_mut().poll(cx);
        Pin::new(&mut subscribed).poll(cx).map(|_| ())
    });
    consumer::unless_stopped(&mut stop, first).await;
    tracing::info!(channel = %sub.name, pattern = sub.pattern, consumer = %sub.consumer, "channel consumer started");
    if let Some(tx) = ready {
        let _ = tx.send(());
    }
    let mut tell_drops = tokio::time::interval(DROP_LOG_EVERY);
    tell_drops.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut l = Loop {
        metrics: ConsumerMetrics::for_items(&sub.name),
        sub,
        buffer,
        arrived,
        reader: Some(reader),
        running: FuturesUnordered::new(),
        tell_drops,
        draining: false,
        timed_out: false,
    };
    consumer::run(&mut l, stop, None).await;
    l.sub.board.set_state(SubscriptionState::Stopped);
    ConsumerReport {
        error: None,
        panic: None,
        timed_out: l.timed_out,
        lease_lost: false,
    }
}

/// A Pub/Sub subscription's part in the consumer loop.
struct Loop {
    sub: Arc<ChannelSub>,
    metrics: ConsumerMetrics,
    buffer: Rc<RefCell<Buffer>>,
    /// Told when a message was buffered.
    arrived: Rc<Notify>,
    /// The reader (see [`read`]); gone once draining.
    reader: Option<LocalBoxFuture<'static, ()>>,
    running: FuturesUnordered<LocalBoxFuture<'static, Run>>,
    /// When to log the drops not logged yet.
    tell_drops: tokio::time::Interval,
    draining: bool,
    /// Handlers still ran at the drain deadline.
    timed_out: bool,
}

impl consumer::Source for Loop {
    fn names(&self) -> (&'static str, Arc<str>) {
        ("channel", self.sub.name.clone())
    }

    async fn turn(&mut self) -> bool {
        if self.draining {
            return self.running.is_empty();
        }
        while self.running.len() < self.sub.opts.concurrency {
            let Some(message) = self.buffer.borrow_mut().pop() else {
                break;
            };
            self.running.push(start(&self.sub, message));
        }
        false
    }

    async fn step(&mut self) {
        let (mut done, mut tick) = (None, false);
        {
            let (running, reader) = (&mut self.running, &mut self.reader);
            let mut arrived = std::pin::pin!(self.arrived.notified());
            let tell_drops = &mut self.tell_drops;
            std::future::poll_fn(|cx| {
                let mut ready = consumer::Ready::default();
                if !running.is_empty() {
                    done = ready.poll(Pin::new(&mut running.next()), cx).flatten();
                }
                ready.poll(arrived.as_mut(), cx);
                if let Some(reader) = reader.as_mut() {
                    ready.poll(reader.as_mut(), cx);
                }
                tick = tell_drops.poll_tick(cx).is_ready();
                if tick {
                    return std::task::Poll::Ready(());
                }
                ready.any()
            })
            .await;
        }
        if let Some(done) = done {
            finished(&self.sub, &self.metrics, done);
        }
        if tick {
            self.buffer.borrow_mut().log_drops(&self.sub);
        }
    }

    fn drain_asked(&self) -> Option<Instant> {
        None
    }

    /// Stops reading (dropping the connection ends the subscription); what
    /// is buffered is dropped: at most once.
    fn begin_drain(&mut self, _deadline: Instant) {
        self.draining = true;
        self.reader = None;
        let mut buffer = self.buffer.borrow_mut();
        buffer.log_drops(&self.sub);
        let left = buffer.messages.len();
        buffer.messages.clear();
        buffer.bytes = 0;
        if left > 0 {
            tracing::info!(channel = %self.sub.name, messages = left, "dropping buffered messages not yet handled (Pub/Sub is at most once)");
        }
    }

    fn running(&self) -> usize {
        self.running.len()
    }

    fn abandon(&mut self) {
        if !self.running.is_empty() {
            tracing::warn!(channel = %self.sub.name, handlers = self.running.len(), "drain deadline passed with channel handlers still running");
            self.timed_out = true;
        }
        self.running.clear();
    }
}

fn start(sub: &ChannelSub, message: Received) -> LocalBoxFuture<'static, Run> {
    let meta = ItemMeta {
        source: message.channel,
        pattern: sub.pattern.then(|| sub.name.clone()),
        consumer: sub.consumer.clone(),
        attempt: 1,
    };
    // For a pattern, the OpenTelemetry name carries the pattern (few
    // distinct names) and the destination the channel the message came on.
    let span = crate::telemetry::process_span!(
        "rillkit.handle",
        destination = sub.name,
        client = sub.consumer,
        base { channel = %sub.name, consumer = %sub.consumer, },
        otel {
            "messaging.destination.name" = %meta.source,
            "messaging.destination.template" = tracing::field::Empty,
        },
    );
    #[cfg(feature = "otel")]
    if sub.pattern {
        span.record(
            "messaging.destination.template",
            tracing::field::display(&sub.name),
        );
    }
    let handler = sub.handler.clone();
    match handler::start(span, move || {
        handler(&message.payload, meta).map_err(|e| format!("message does not decode: {e}"))
    }) {
        Ok(running) => Box::pin(running),
        Err(at_once) => Box::pin(async move { at_once }),
    }
}

fn finished(sub: &ChannelSub, metrics: &ConsumerMetrics, run: Run) {
    handler::tally(metrics, &sub.board, &run);
    match run.ran {
        Ran::Ok => {}
        Ran::Undecodable(error) => {
            tracing::warn!(channel = %sub.name, error = %error, "channel message dropped (Pub/Sub is at most once)");
        }
        Ran::Failed { error, .. } => {
            tracing::warn!(channel = %sub.name, error = %error, "channel message failed; it is not retried (Pub/Sub is at most once)");
        }
    }
}

/// Keeps a connection subscribed and moves every message into the buffer;
/// a closed connection (a restart, a failover, or Redis closing it at its
/// `client-output-buffer-limit pubsub`) is opened and subscribed again with
/// backoff. Never ends.
async fn read(
    sub: Arc<ChannelSub>,
    connector: Connector,
    buffer: Rc<RefCell<Buffer>>,
    arrived: Rc<Notify>,
    subscribed: oneshot::Sender<()>,
) {
    let mut subscribed = Some(subscribed);
    let mut retry = Retry::default();
    let mut was_subscribed = false;
    loop {
        let pubsub = async {
            let mut ps = connector.pubsub(&sub.name).await?;
            if sub.pattern {
                ps.psubscribe(&*sub.name).await
            } else {
                ps.subscribe(&*sub.name).await
            }
            .map_err(Error::from_redis)?;
            Ok::<_, Error>(ps)
        }
        .await;
        let ps = match pubsub {
            Ok(ps) => ps,
            Err(e) => {
                sub.board.read_failed(&e.to_string());
                let (delay, log) = retry.failed();
                if log {
                    tracing::warn!(channel = %sub.name, error = %e, retry_in_ms = delay.as_millis() as u64, failures = retry.failures(), "subscribing failed; retrying");
                }
                tokio::time::sleep(delay).await;
                continue;
            }
        };
        if std::mem::replace(&mut was_subscribed, true) {
            tracing::info!(channel = %sub.name, "subscribed again after the connection closed; messages published meanwhile were not received");
        }
        retry.succeeded();
        sub.board.read_ok();
        if let Some(tx) = subscribed.take() {
            let _ = tx.send(());
        }
        let mut messages = ps.into_on_message();
        while let Some(msg) = messages.next().await {
            let channel: Arc<str> = if sub.pattern {
                msg.get_channel_name().into()
            } else {
                sub.name.clone()
            };
            buffer.borrow_mut().push(
                &sub,
                Received {
                    channel,
                    payload: msg.get_payload_bytes().to_vec(),
                },
            );
            arrived.notify_one();
        }
        let e = "the Pub/Sub connection closed (a restart or failover, or Redis's client-output-buffer-limit for pubsub)";
        tracing::warn!(channel = %sub.name, "{e}; subscribing again");
        sub.board.read_failed(e);
        crate::telemetry::reconnected(&sub.name, "");
        tokio::time::sleep(retry.failed().0).await;
    }
}
