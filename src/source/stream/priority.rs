//! Streams read in priority order by one subscription: each stream is
//! consumed as usual (its own group, dead-letter stream, retention), and a
//! stream reads new entries only while every stream before it is clear —
//! its last read of new entries came back empty and nothing it read waits
//! to start. A stream before others reads without `BLOCK` until it finds
//! nothing, so the next ones learn at once that it is clear; then it
//! blocks as usual.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;

/// The levels of one prioritized subscription, shared by their loops.
#[derive(Debug)]
pub(crate) struct Priority {
    /// Per level, highest first: whether it is clear.
    clear: Vec<AtomicBool>,
    /// Bumped when a level's clear flag changes, to wake the lower ones.
    changed: watch::Sender<()>,
}

impl Priority {
    pub(crate) fn new(levels: usize) -> Arc<Self> {
        Arc::new(Priority {
            clear: (0..levels).map(|_| AtomicBool::new(false)).collect(),
            changed: watch::Sender::new(()),
        })
    }

    /// Says whether `level` is clear; wakes the lower levels on a change.
    pub(crate) fn set_clear(&self, level: usize, clear: bool) {
        if self.clear[level].swap(clear, Ordering::SeqCst) != clear {
            self.changed.send_replace(());
        }
    }

    /// Whether every level before `level` is clear.
    pub(crate) fn before_clear(&self, level: usize) -> bool {
        self.clear[..level].iter().all(|c| c.load(Ordering::SeqCst))
    }

    /// Whether levels come after `level`.
    pub(crate) fn has_after(&self, level: usize) -> bool {
        level + 1 < self.clear.len()
    }

    /// Wakes on every change.
    pub(crate) fn watch(&self) -> watch::Receiver<()> {
        self.changed.subscribe()
    }
}

/// One subscription's place in a [`Priority`]: the shared levels and its own
/// index (0 first).
#[derive(Debug, Clone)]
pub(crate) struct Level {
    pub priority: Arc<Priority>,
    pub index: usize,
}

#[cfg(test)]
mod tests;
