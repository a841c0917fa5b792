//! Subscriptions added to a running broker, and their
//! [`SubscriptionHandle`]s.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;

use super::bind::{self, BrokerCell};
use super::delivery::ItemDelivery;
use crate::Broker;
use crate::broker::subscribe::{
    Pending, channel_source, channel_source_erased, list_source, list_source_erased, stream_source,
};
use crate::error::{ConfigError, Error};
use crate::handler::HandlerError;
use crate::lifecycle::Phase;
use crate::lifecycle::SupervisorOutcome;
use crate::redis::CreateGroup;
use crate::source::Source;
use crate::source::channel::{Channel, ChannelOptions};
use crate::source::list::{List, ListOptions};
use crate::source::stream::ConsumerOptions;
use crate::status::{Board, SubscriptionStatus};
use crate::stream::{Codec, Stream};
use crate::supervisor::{AddSource, RemoveSource};

/// A subscription added to a running broker with
/// [`Broker::subscribe`], [`Broker::subscribe_list`] or
/// [`Broker::subscribe_channel`]. Dropping it leaves the subscription
/// running until the broker stops; [`remove`](Self::remove) ends it before.
pub struct SubscriptionHandle {
    broker: Broker,
    index: usize,
    board: Arc<Board>,
}

/// What a removed subscription did: its share of the outcome (as the
/// broker's stop would have counted it) and its counts since it was added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Removed {
    /// `timed_out` when its handlers outlived the drain deadline, `errors`
    /// when it had ended with an error, `panics` for a panic of its loop.
    /// The broker's final outcome counts it too.
    pub outcome: SupervisorOutcome,
    /// Handler runs that returned `Ok`.
    pub handled: u64,
    /// Handler runs that failed.
    pub failed: u64,
    /// Entries or items it moved to a dead-letter stream or list.
    pub dead_lettered: u64,
}

impl std::fmt::Debug for SubscriptionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubscriptionHandle")
            .field("kind", &self.board.kind)
            .field("source", &self.board.stream)
            .field("consumer", &self.board.consumer)
            .finish_non_exhaustive()
    }
}

impl SubscriptionHandle {
    /// Its status now (as in [`Broker::status`]).
    pub fn status(&self) -> SubscriptionStatus {
        self.board.snapshot()
    }

    /// Pauses it, as [`Broker::pause_local`] does.
    ///
    /// # Errors
    /// [`Error::NotPausable`] for a Pub/Sub subscription.
    pub fn pause_local(&self) -> Result<(), Error> {
        super::pause::set_paused(&self.board, true)
    }

    /// Resumes it, as [`Broker::resume_local`] does.
    ///
    /// # Errors
    /// [`Error::NotPausable`] for a Pub/Sub subscription.
    pub fn resume_local(&self) -> Result<(), Error> {
        super::pause::set_paused(&self.board, false)
    }

    /// Removes the subscription, with the broker's `shutdown_timeout` as
    /// the drain deadline: see [`remove_with_timeout`](Self::remove_with_timeout).
    ///
    /// # Errors
    /// As [`remove_with_timeout`](Self::remove_with_timeout).
    pub async fn remove(self) -> Result<Removed, Error> {
        let timeout = self.broker.shutdown_timeout();
        self.remove_with_timeout(timeout).await
    }

    /// Removes the subscription: its reading stops at once (a blocked
    /// `XREADGROUP`, `BLMOVE` or `BRPOP` is cut short with `CLIENT
    /// UNBLOCK`, then its connection is closed with `QUIT`; a Pub/Sub
    /// connection is closed), an item a list pop returned after the stop
    /// goes back onto its list, and running handlers get `timeout` to
    /// finish, as at a broker's stop. Answers once it has ended; from the
    /// call on it is no longer listed in [`Broker::status`]. The broker
    /// keeps running, also when this was its last subscription.
    ///
    /// # Errors
    /// [`Error::ShutDown`] when the broker has stopped or is draining (the
    /// stop then drains this subscription with the others).
    pub async fn remove_with_timeout(self, timeout: Duration) -> Result<Removed, Error> {
        let sup = self.broker.supervisor().ok_or(Error::ShutDown)?;
        let rx = sup
            .send(RemoveSource(self.index, Instant::now() + timeout))
            .await
            .map_err(|_| Error::ShutDown)?
            .ok_or(Error::ShutDown)?;
        let report = rx.await.map_err(|_| Error::ShutDown)?;
        let s = self.board.snapshot();
        Ok(Removed {
            outcome: SupervisorOutcome {
                errors: usize::from(report.error.is_some()),
                panics: usize::from(report.panic.is_some()),
                timed_out: report.timed_out,
                closed_connections: 0,
            },
            handled: s.handled,
            failed: s.failed,
            dead_lettered: s.dead_lettered,
        })
    }
}

impl Broker {
    /// Adds a stream subscription to the running broker, as
    /// [`BrokerBuilder::subscribe`](crate::BrokerBuilder::subscribe) would
    /// have: creates the group when missing (`XGROUP CREATE … MKSTREAM`),
    /// takes the consumer name's lease, and starts its consumer. Answers
    /// once it reads.
    ///
    /// # Errors
    /// [`Error::Config`] for invalid options or a consumer name already
    /// subscribed here; [`Error::NotStarted`] before `start()` has finished;
    /// [`Error::ShutDown`] once a stop began; an error of `XGROUP CREATE`.
    pub async fn subscribe<T, C, F, Fut, E>(
        &self,
        stream: &Stream<C>,
        options: ConsumerOptions,
        handler: F,
    ) -> Result<SubscriptionHandle, Error>
    where
        T: DeserializeOwned + 'static,
        C: Codec,
        F: Fn(T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<HandlerError> + 'static,
    {
        let h = bind::typed(stream.codec().clone(), handler);
        self.add(stream_source(stream.names(), options, h)).await
    }

    /// Adds a list subscription to the running broker, as
    /// [`BrokerBuilder::subscribe_list`](crate::BrokerBuilder::subscribe_list)
    /// would have. Answers once it pops.
    ///
    /// # Errors
    /// As [`subscribe`](Self::subscribe).
    pub async fn subscribe_list<T, C, F, Fut, E>(
        &self,
        list: &List<C>,
        options: ListOptions,
        handler: F,
    ) -> Result<SubscriptionHandle, Error>
    where
        T: DeserializeOwned + 'static,
        C: Codec,
        F: Fn(T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<HandlerError> + 'static,
    {
        self.add(list_source(list, options, handler)).await
    }

    /// Adds a Pub/Sub subscription to the running broker, as
    /// [`BrokerBuilder::subscribe_channel`](crate::BrokerBuilder::subscribe_channel)
    /// would have. Answers once subscribed.
    ///
    /// # Errors
    /// As [`subscribe`](Self::subscribe).
    pub async fn subscribe_channel<T, C, F, Fut, E>(
        &self,
        channel: &Channel<C>,
        options: ChannelOptions,
        handler: F,
    ) -> Result<SubscriptionHandle, Error>
    where
        T: DeserializeOwned + 'static,
        C: Codec,
        F: Fn(T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<HandlerError> + 'static,
    {
        self.add(channel_source(channel, options, handler)).await
    }

    /// As [`subscribe_list`](Self::subscribe_list), with an
    /// [`ItemDelivery`](crate::ItemDelivery) for the handler.
    ///
    /// # Errors
    /// As [`subscribe`](Self::subscribe).
    pub async fn subscribe_list_with_context<T, C, F, Fut, E>(
        &self,
        list: &List<C>,
        options: ListOptions,
        handler: F,
    ) -> Result<SubscriptionHandle, Error>
    where
        T: DeserializeOwned + 'static,
        C: Codec,
        F: Fn(T, ItemDelivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<HandlerError> + 'static,
    {
        let h = bind::typed_item_with_context(list.codec().clone(), handler, BrokerCell::of(self));
        self.add(list_source_erased(list, options, h)).await
    }

    /// As [`subscribe_channel`](Self::subscribe_channel), with an
    /// [`ItemDelivery`](crate::ItemDelivery) for the handler.
    ///
    /// # Errors
    /// As [`subscribe`](Self::subscribe).
    pub async fn subscribe_channel_with_context<T, C, F, Fut, E>(
        &self,
        channel: &Channel<C>,
        options: ChannelOptions,
        handler: F,
    ) -> Result<SubscriptionHandle, Error>
    where
        T: DeserializeOwned + 'static,
        C: Codec,
        F: Fn(T, ItemDelivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + 'static,
        E: Into<HandlerError> + 'static,
    {
        let h =
            bind::typed_item_with_context(channel.codec().clone(), handler, BrokerCell::of(self));
        self.add(channel_source_erased(channel, options, h)).await
    }

    async fn add(&self, pending: Pending) -> Result<SubscriptionHandle, Error> {
        match self.phase() {
            Phase::Running => {}
            Phase::Configured | Phase::Starting => return Err(Error::NotStarted),
            Phase::Draining | Phase::Stopped => return Err(Error::ShutDown),
        }
        let source = pending(self.connector().is_cluster(), self.shutdown_timeout())
            .map_err(Error::Config)?;
        check_live(&self.boards().list(), source.board()).map_err(Error::Config)?;
        if let Source::Stream(sub) = &source {
            for reader in sub.readers() {
                self.redis_addr()?
                    .send(CreateGroup {
                        stream: reader.names.name.clone(),
                        group: reader.names.group.clone(),
                        start_id: reader.opts.start_id.as_str().into(),
                    })
                    .await
                    .map_err(|_| Error::ShutDown)??;
            }
        }
        let sup = self.supervisor().ok_or(Error::NotStarted)?;
        let board = source.board().clone();
        self.boards().add(board.clone());
        // Paused from its first read if its fleet is.
        let fleet = crate::fleet::control::look(self.redis_addr()?, self.boards(), |b| {
            std::ptr::eq(b, &*board)
        })
        .await;
        if let Err(e) = fleet {
            tracing::warn!(error = %e, "could not read the fleet-wide pause and concurrency; reading them again every 500 ms");
        }
        match sup.send(AddSource(source)).await {
            Ok(Ok(index)) => Ok(SubscriptionHandle {
                broker: self.clone(),
                index,
                board,
            }),
            Ok(Err(e)) => {
                self.boards().forget(&board);
                Err(e)
            }
            Err(_) => {
                self.boards().forget(&board);
                Err(Error::ShutDown)
            }
        }
    }
}

/// A subscription added at run time must not read as a consumer that
/// already reads here.
fn check_live(boards: &[Arc<Board>], new: &Board) -> Result<(), ConfigError> {
    let same = |b: &Arc<Board>| {
        b.kind == new.kind
            && b.kind != crate::kind::SourceKind::Channel
            && b.stream == new.stream
            && b.group == new.group
            && b.consumer == new.consumer
    };
    if boards.iter().any(same) {
        return Err(ConfigError::DuplicateConsumer {
            kind: new.kind,
            key: new.stream.to_string(),
            group: new.group.to_string(),
            consumer: new.consumer.to_string(),
        });
    }
    Ok(())
}
