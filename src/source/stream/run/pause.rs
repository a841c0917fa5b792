//! The pause ([`Broker::pause_local`](crate::Broker::pause_local)): while the board
//! asks for it, no read starts (`read_count`) and nothing is claimed from
//! other consumers (`may_reclaim`); everything else goes on.

use super::Loop;

impl Loop {
    /// The pause at a turn of the loop: when asked for, a read not yet on
    /// the wire (connecting, backing off) is dropped and one on the wire
    /// cut short (`CLIENT UNBLOCK`, again every 50 ms while it lasts);
    /// the board shows `Paused` once no read is in flight, `Running` again
    /// once the pause is undone.
    pub(super) fn pause_turn(&mut self) {
        if self.sub.board.paused() && !self.reading.unblocking() {
            self.stop_read();
        }
        self.sub.board.settle_pause(self.reading.is_reading());
    }
}
