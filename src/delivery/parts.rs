//! How a loop that shares work out (an ordered stream's partitions) asks the
//! supervisor to start or stop a part's loop, each in a
//! [`ConsumerActor`](super::ConsumerActor) of its own, and learns its end.

use std::time::Instant;

use futures::StreamExt;
use futures::channel::mpsc;

use super::ConsumerReport;

/// What a loop asks of the supervisor about one of its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PartCommand {
    /// Start the part's loop (its end is told as for any part).
    Start(u16),
    /// Drain the part's loop by the deadline.
    Stop(u16, Instant),
}

/// The loop's side: asks, and learns the ends.
pub(crate) struct Parts {
    commands: mpsc::UnboundedSender<PartCommand>,
    ended: mpsc::UnboundedReceiver<(u16, ConsumerReport)>,
}

/// The supervisor's side: the asks, in order, and where each end is told.
pub(crate) struct PartsLink {
    pub commands: mpsc::UnboundedReceiver<PartCommand>,
    pub ended: mpsc::UnboundedSender<(u16, ConsumerReport)>,
}

/// A new link between a loop and the supervisor.
pub(crate) fn link() -> (Parts, PartsLink) {
    let (commands, asked) = mpsc::unbounded();
    let (told, ended) = mpsc::unbounded();
    (
        Parts { commands, ended },
        PartsLink {
            commands: asked,
            ended: told,
        },
    )
}

impl Parts {
    /// Asks for part `index`'s loop to start. Once asked, its end is
    /// always told, even when the supervisor starts nothing (it drains).
    pub(crate) fn start(&self, index: u16) {
        let _ = self.commands.unbounded_send(PartCommand::Start(index));
    }

    /// Asks for part `index`'s loop to drain by `deadline`.
    pub(crate) fn stop(&self, index: u16, deadline: Instant) {
        let _ = self
            .commands
            .unbounded_send(PartCommand::Stop(index, deadline));
    }

    /// The next part whose loop ended, with its report; `None` once the
    /// supervisor is gone. Cancel-safe.
    pub(crate) async fn ended(&mut self) -> Option<(u16, ConsumerReport)> {
        self.ended.next().await
    }
}
