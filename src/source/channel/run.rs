//! The loop of one Pub/Sub subscription: a reader that keeps its own
//! connection subscribed (again after every reconnect) and moves each
//! message into a bounded buffer, and up to `concurrency` handlers fed from
//! that buffer.

use std::cell::RefCell;
use std::collections::VecDeque;
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
use crate::delivery::drain;
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
    let (subscribed_tx, subscribed) = oneshot::channel();
    let mut reader: LocalBoxFuture<'static, ()> = Box::pin(read(
        sub.clone(),
        connector,
        buffer.clone(),
        arrived.clone(),
        subscribed_tx,
    ));
    // Ready once subscribed the first time (or stopped): a message published
    // after start() returned is then seen.
    tokio::select! {
        () = &mut reader => {}
        _ = subscribed => {}
        _ = stop.wait_for(Option::is_some) => {}
    }
    tracing::info!(channel = %sub.name, pattern = sub.pattern, consumer = %sub.consumer, "channel consumer started");
    if let Some(tx) = ready {
        let _ = tx.send(());
    }
    let metrics = ConsumerMetrics::for_items(&sub.name);
    let mut running: FuturesUnordered<LocalBoxFuture<'static, Run>> = FuturesUnordered::new();
    let mut tell_drops = tokio::time::interval(DROP_LOG_EVERY);
    tell_drops.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let deadline = loop {
        if let Some(d) = *stop.borrow() {
            break d;
        }
        while running.len() < sub.opts.concurrency {
            let Some(message) = buffer.borrow_mut().pop() else {
                break;
            };
            running.push(start(&sub, message));
        }
        tokio::select! {
            biased;
            _ = stop.changed() => {}
            Some(done) = running.next(), if !running.is_empty() => finished(&sub, &metrics, done),
            () = arrived.notified() => {}
            () = &mut reader => {}
            _ = tell_drops.tick() => buffer.borrow_mut().log_drops(&sub),
        }
    };
    // Stop reading (dropping the connection ends the subscription); what
    // is buffered is dropped: at most once.
    drop(reader);
    buffer.borrow_mut().log_drops(&sub);
    let left = buffer.borrow().messages.len();
    if left > 0 {
        tracing::info!(channel = %sub.name, messages = left, "dropping buffered messages not yet handled (Pub/Sub is at most once)");
    }
    let mut drain = drain::Draining::new("channel", sub.name.clone(), deadline);
    let timed_out = drain
        .finish_running(&mut running, |done| finished(&sub, &metrics, done))
        .await;
    if timed_out {
        tracing::warn!(channel = %sub.name, handlers = running.len(), "drain deadline passed with channel handlers still running");
    }
    sub.board.set_state(SubscriptionState::Stopped);
    ConsumerReport {
        error: None,
        panic: None,
        timed_out,
        lease_lost: false,
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
