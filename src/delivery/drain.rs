//! The end of a drain that every source shares: running handlers get until
//! the deadline to finish, then are abandoned (`timed_out` in the report);
//! meanwhile a progress line every few seconds says how many still run.

use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;

/// Waits for `running` to finish, passing each result to `done`, until
/// `deadline`. Answers `true` when handlers were still running at the
/// deadline (they are dropped with `running`).
pub(crate) async fn finish_running<F: Future>(
    running: &mut FuturesUnordered<F>,
    deadline: Instant,
    progress: &mut Progress,
    mut done: impl FnMut(F::Output),
) -> bool {
    let until = tokio::time::Instant::from_std(deadline);
    while !running.is_empty() {
        tokio::select! {
            Some(out) = running.next() => done(out),
            () = tokio::time::sleep_until(progress.due()) => progress.tell(running.len(), deadline),
            () = tokio::time::sleep_until(until) => return true,
        }
    }
    false
}

/// How often a drain says what it still waits for.
pub(crate) const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// A drain's progress: every [`PROGRESS_EVERY`] while handlers still run,
/// one INFO line naming the source, how many handlers run and the time left
/// to the deadline, so a long drain is not a silence.
pub(crate) struct Progress {
    kind: &'static str,
    name: std::sync::Arc<str>,
    next: tokio::time::Instant,
}

impl Progress {
    /// For a drain that begins now; `kind` is `stream`, `list` or
    /// `channel`.
    pub(crate) fn new(kind: &'static str, name: std::sync::Arc<str>) -> Self {
        Progress {
            kind,
            name,
            next: tokio::time::Instant::now() + PROGRESS_EVERY,
        }
    }

    /// When the next line is due.
    pub(crate) fn due(&self) -> tokio::time::Instant {
        self.next
    }

    /// Says how many `handlers` still run (nothing when none does) and when
    /// the next line is due.
    pub(crate) fn tell(&mut self, handlers: usize, deadline: Instant) {
        self.next = tokio::time::Instant::now() + PROGRESS_EVERY;
        if handlers == 0 {
            return;
        }
        let left_ms = deadline
            .saturating_duration_since(Instant::now())
            .as_millis() as u64;
        tracing::info!(
            source = self.kind, name = %self.name, handlers, left_ms,
            "draining: handlers still running"
        );
    }
}
