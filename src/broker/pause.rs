//! Pausing and resuming a subscription: in this process
//! ([`Broker::pause_local`], [`Broker::resume_local`], and the same on a
//! [`SubscriptionHandle`]), a flag on the subscription's status board that
//! every source's loop reads; or for the whole fleet
//! ([`Broker::pause_fleet`], [`Broker::resume_fleet`]), the group's (or
//! list's) control hash in Redis, which every process's fleet watch reads
//! onto the same board.
//!
//! [`SubscriptionHandle`]: crate::SubscriptionHandle

use crate::Broker;
use crate::error::Error;
use crate::fleet::control;
use crate::kind::SourceKind;
use crate::redis::Query;
use crate::status::{Board, SubscriptionId};

impl Broker {
    /// Pauses the subscription `id` names: its consumer starts no new read
    /// or pop (`XREADGROUP`, `BLMOVE`, `BRPOP`), and a stream consumer
    /// claims no entries from other consumers, until
    /// [`resume_local`](Self::resume_local). A read blocked at the time is cut short
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
    /// same group or list go on, and a new process reads from the start
    /// ([`pause_fleet`](Self::pause_fleet) pauses them all). A
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
    /// broker.pause_local(&id)?;
    /// assert!(broker.status().subscriptions[0].paused);
    /// broker.resume_local(&id)?;
    /// # Ok::<(), rillkit::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::NoSuchSubscription`] when the broker has no subscription
    /// `id` names; [`Error::NotPausable`] for a Pub/Sub subscription (the
    /// server keeps no messages for a subscriber that does not read).
    pub fn pause_local(&self, id: &SubscriptionId) -> Result<(), Error> {
        set_paused(&*self.find(id)?, true)
    }

    /// Resumes the subscription `id` names in this process: it reads again
    /// (at once; its state turns
    /// [`Running`](crate::SubscriptionState::Running)) unless the fleet-wide
    /// pause is on. Resuming one that is not paused does nothing.
    ///
    /// # Errors
    /// As [`pause_local`](Self::pause_local).
    pub fn resume_local(&self, id: &SubscriptionId) -> Result<(), Error> {
        set_paused(&*self.find(id)?, false)
    }

    /// Pauses the group (or list) of the subscription `id` names in every
    /// rillkit process that consumes it, this one at once and the others
    /// within a second: `HSET <control> paused_at_ms <now>` on its control
    /// hash (`{<stream>}:rillkit:control:<group>`, for a list
    /// `{<list>}:rillkit:control`), which every process reads every 500 ms
    /// and before its consumers start. What a pause does to a consumer is
    /// as for [`pause_local`](Self::pause_local). It holds, for processes
    /// started later and across restarts, until
    /// [`resume_fleet`](Self::resume_fleet) (or `rillkit resume`, the
    /// dashboard, [`Admin::resume_group`](crate::admin::Admin::resume_group)).
    /// [`SubscriptionStatus::fleet_paused`](crate::SubscriptionStatus::fleet_paused)
    /// shows it.
    ///
    /// # Errors
    /// As [`pause_local`](Self::pause_local); [`Error::NotStarted`] before
    /// `start()`; [`Error::Redis`] when the write fails (`NOPERM` without
    /// `+hset` on the control hash); a connection error.
    pub async fn pause_fleet(&self, id: &SubscriptionId) -> Result<(), Error> {
        self.set_fleet_paused(id, true).await
    }

    /// Resumes the group (or list) of the subscription `id` names in every
    /// process: `HDEL <control> paused_at_ms`. A process paused locally
    /// stays paused.
    ///
    /// # Errors
    /// As [`pause_fleet`](Self::pause_fleet).
    pub async fn resume_fleet(&self, id: &SubscriptionId) -> Result<(), Error> {
        self.set_fleet_paused(id, false).await
    }

    async fn set_fleet_paused(&self, id: &SubscriptionId, on: bool) -> Result<(), Error> {
        let board = self.find(id)?;
        refuse_channel(&board)?;
        let redis = self.redis_addr()?;
        let key = control::control_key(board.kind, &board.stream, &board.group);
        let verb = if on { "hset" } else { "hdel" };
        redis
            .send(Query(verb, control::pause_cmd(&key, on)))
            .await
            .map_err(|_| Error::ShutDown)??;
        // Every subscription of this process on the same group or list,
        // at once; the other processes on their next look.
        for b in self.boards().list() {
            if b.kind == board.kind && b.stream == board.stream && b.group == board.group {
                b.set_fleet_paused(on);
            }
        }
        Ok(())
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
    refuse_channel(board)?;
    board.set_paused(on);
    Ok(())
}

/// [`Error::NotPausable`] for a channel's board.
fn refuse_channel(board: &Board) -> Result<(), Error> {
    if board.kind == SourceKind::Channel {
        return Err(Error::NotPausable {
            kind: board.kind,
            key: board.stream.to_string(),
        });
    }
    Ok(())
}
