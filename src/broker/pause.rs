//! Pausing and resuming a subscription ([`Broker::pause`],
//! [`Broker::resume`], and the same on a [`SubscriptionHandle`]): a flag on
//! the subscription's status board that every source's loop reads.
//!
//! [`SubscriptionHandle`]: crate::SubscriptionHandle

use crate::Broker;
use crate::error::Error;
use crate::kind::SourceKind;
use crate::status::{Board, SubscriptionId};

impl Broker {
    /// Pauses the subscription `id` names: its consumer starts no new read
    /// or pop (`XREADGROUP`, `BLMOVE`, `BRPOP`), and a stream consumer
    /// claims no entries from other consumers, until
    /// [`resume`](Self::resume). A read blocked at the time is cut short
    /// with `CLIENT UNBLOCK` (where the server allows it, else it ends
    /// within its `block`); what it brought still runs. Everything the
    /// consumer already holds goes on as usual: running handlers finish,
    /// retries wait out their backoff and run, entries are acked or
    /// dead-lettered, items settled, and the lease or heartbeat and the
    /// refresh of held entries keep going, so nobody takes its work for a
    /// dead consumer's. Its state turns
    /// [`Paused`](crate::SubscriptionState::Paused) once no read of its
    /// own is in flight; until then
    /// [`SubscriptionStatus::paused`](crate::SubscriptionStatus::paused)
    /// says a pause was asked for. A stop (or a removal) drains a paused
    /// subscription as any other.
    ///
    /// The pause lives in this process only: other processes consuming the
    /// same group or list go on, and a new process reads from the start. A
    /// consumer the supervisor restarts stays paused. Pausing a paused
    /// subscription does nothing. A pause asked for before
    /// [`start`](Self::start) holds from the first read.
    ///
    /// ```
    /// use rillkit::SubscriptionId;
    /// # let broker = rillkit::Broker::builder("redis://127.0.0.1")
    /// #     .subscribe(&rillkit::Stream::new("orders", "billing"),
    /// #         rillkit::ConsumerOptions::default().with_consumer("worker-1"),
    /// #         |_: u64| async { rillkit::HandlerResult::Ok(()) })
    /// #     .build().unwrap();
    /// let id = SubscriptionId::stream("orders", "billing", "worker-1");
    /// broker.pause(&id)?;
    /// assert!(broker.status().subscriptions[0].paused);
    /// broker.resume(&id)?;
    /// # Ok::<(), rillkit::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::NoSuchSubscription`] when the broker has no subscription
    /// `id` names; [`Error::NotPausable`] for a Pub/Sub subscription (the
    /// server keeps no messages for a subscriber that does not read).
    pub fn pause(&self, id: &SubscriptionId) -> Result<(), Error> {
        set_paused(&*self.find(id)?, true)
    }

    /// Resumes the subscription `id` names: it reads again (at once; its
    /// state turns [`Running`](crate::SubscriptionState::Running)).
    /// Resuming one that is not paused does nothing.
    ///
    /// # Errors
    /// As [`pause`](Self::pause).
    pub fn resume(&self, id: &SubscriptionId) -> Result<(), Error> {
        set_paused(&*self.find(id)?, false)
    }

    /// The live board `id` names.
    fn find(&self, id: &SubscriptionId) -> Result<std::sync::Arc<Board>, Error> {
        self.boards()
            .list()
            .into_iter()
            .find(|b| b.is(id))
            .ok_or_else(|| Error::NoSuchSubscription {
                kind: id.kind,
                key: id.key.clone(),
                group: id.group.clone(),
                consumer: id.consumer.clone(),
            })
    }
}

/// Sets the pause flag of a stream or list subscription's board; refuses a
/// channel's.
pub(super) fn set_paused(board: &Board, on: bool) -> Result<(), Error> {
    if board.kind == SourceKind::Channel {
        return Err(Error::NotPausable {
            kind: board.kind,
            key: board.stream.to_string(),
        });
    }
    board.set_paused(on);
    Ok(())
}
