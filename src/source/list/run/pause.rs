//! Cutting a blocked pop short, for the pause
//! ([`Broker::pause_local`](crate::Broker::pause_local)), the drain, and a
//! retry that comes due while a pop blocks: while the board asks for a
//! pause no pop starts (`maybe_start`); handlers, retries of held items,
//! settling and the heartbeat go on.

use super::{Loop, Phase};
use crate::delivery::reader::UNBLOCK_EVERY;
use crate::util::Alarm;

/// When to send `CLIENT UNBLOCK` again, and its alarm.
pub(super) struct Unblock {
    pub(super) at: Option<tokio::time::Instant>,
    pub(super) alarm: Alarm,
}

impl Default for Unblock {
    fn default() -> Self {
        Unblock {
            at: None,
            alarm: Alarm::new(),
        }
    }
}

impl Loop {
    /// At a turn of the loop, when paused or draining, or when an item's
    /// retry is due with a handler slot free (a pop takes it only after the
    /// pop in flight: a blocking one could keep it waiting for its whole
    /// `block`): a pop in flight is cut short with `CLIENT UNBLOCK`, sent
    /// again every 50 ms while it lasts (the pop itself is never dropped: a
    /// reply lost on the way would leave its item on the processing list
    /// unrun). Until the drain, the board shows `Paused` once no pop is in
    /// flight, `Running` again once the pause is undone.
    pub(super) fn unblock_turn(&mut self) {
        let now = tokio::time::Instant::now();
        let consuming = self.phase == Phase::Consuming;
        let retry_due = consuming
            && self.retry_waits_for_pop()
            && self.waiting.next_due().is_some_and(|due| due <= now)
            && (!self.reliable() || self.liveness.holds());
        if (!consuming || self.sub.board.paused() || retry_due) && self.read.is_some() {
            if self.unblock.at.is_none_or(|at| at <= now) {
                if let Some(sent) = self.reader.unblock(&self.redis) {
                    self.side.push(sent);
                }
                self.unblock.at = (!self.reader.unblock_refused()).then(|| now + UNBLOCK_EVERY);
            }
        } else {
            self.unblock.at = None;
        }
        if consuming {
            self.sub.board.settle_pause(self.read.is_some());
        }
    }
}
