//! The pause ([`Broker::pause`](crate::Broker::pause)): while the board
//! asks for it, no pop starts (`maybe_start`); handlers, retries of held
//! items, settling and the heartbeat go on.

use super::Loop;
use crate::delivery::reader::UNBLOCK_EVERY;

impl Loop {
    /// The pause at a turn of the loop: when asked for, a pop in flight is
    /// cut short with `CLIENT UNBLOCK`, sent again every 50 ms while it
    /// lasts (the pop itself is never dropped: a reply lost on the way
    /// would leave its item on the processing list unrun); the board shows
    /// `Paused` once no pop is in flight, `Running` again once the pause
    /// is undone. `unblock_at` is when to send `CLIENT UNBLOCK` again.
    pub(super) fn pause_turn(&mut self, unblock_at: &mut Option<tokio::time::Instant>) {
        let now = tokio::time::Instant::now();
        if self.sub.board.paused() && self.read.is_some() {
            if unblock_at.is_none_or(|at| at <= now) {
                if let Some(sent) = self.reader.unblock(&self.redis) {
                    self.side.push(sent);
                }
                *unblock_at = (!self.reader.unblock_refused()).then(|| now + UNBLOCK_EVERY);
            }
        } else {
            *unblock_at = None;
        }
        self.sub.board.settle_pause(self.read.is_some());
    }
}
