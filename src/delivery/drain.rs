//! The drain every source shares ([`Draining`]): running handlers get until
//! the deadline to finish, then are abandoned (`timed_out` in the report);
//! meanwhile a progress line every few seconds says how many still run.

use std::time::{Duration, Instant};

/// A drain under way: its deadline and its progress line. The consumer
/// loop ([`run`](super::consumer::run)) keeps one from the stop on; while
/// it exists, nothing new is read.
pub(crate) struct Draining {
    deadline: Instant,
    progress: Progress,
}

impl Draining {
    /// A drain of the `kind` source `name` that begins now, ending at
    /// `deadline` at the latest.
    pub(crate) fn new(kind: &'static str, name: std::sync::Arc<str>, deadline: Instant) -> Self {
        Draining {
            deadline,
            progress: Progress::new(kind, name),
        }
    }

    /// When running handlers are abandoned, on tokio's clock.
    pub(crate) fn until(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.deadline)
    }

    /// When the next progress line is due.
    pub(crate) fn progress_due(&self) -> tokio::time::Instant {
        self.progress.due()
    }

    /// The progress line: `handlers` still run (nothing is said when none
    /// does).
    pub(crate) fn tell(&mut self, handlers: usize) {
        self.progress.tell(handlers, self.deadline);
    }
}

/// How often a drain says what it still waits for.
pub(crate) const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// A drain's progress: every [`PROGRESS_EVERY`] while handlers still run,
/// one INFO line naming the source, how many handlers run and the time left
/// to the deadline, so a long drain is not a silence.
struct Progress {
    kind: &'static str,
    name: std::sync::Arc<str>,
    next: tokio::time::Instant,
}

impl Progress {
    /// For a drain that begins now; `kind` is `stream`, `list` or
    /// `channel`.
    fn new(kind: &'static str, name: std::sync::Arc<str>) -> Self {
        Progress {
            kind,
            name,
            next: tokio::time::Instant::now() + PROGRESS_EVERY,
        }
    }

    /// When the next line is due.
    fn due(&self) -> tokio::time::Instant {
        self.next
    }

    /// Says how many `handlers` still run (nothing when none does) and when
    /// the next line is due.
    fn tell(&mut self, handlers: usize, deadline: Instant) {
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
