//! The lifecycle's vocabulary: where a broker is ([`Phase`]), where a hook
//! runs ([`Stage`]), how a drain ended ([`SupervisorOutcome`]), and the
//! operator's request to stop ([`shutdown_signal`]).

mod outcome;
mod signal;

pub use outcome::SupervisorOutcome;
pub(crate) use signal::Signals;
pub use signal::shutdown_signal;

use std::fmt;
use std::future::Future;

/// Where a broker is in its lifecycle.
///
/// ```text
/// Configured ──start()──▶ Starting ──▶ Running ──stop()/signal──▶ Draining ──▶ Stopped
///      │                     │ (start failed)                                    ▲
///      └──stop()─────────────┴────────────────────────────────────────────────────┘
/// ```
///
/// * **Configured**: built, no I/O done. Publishing answers
///   [`Error::NotStarted`](crate::Error::NotStarted).
/// * **Starting**: `on_startup` hooks, PING, group creation, consumers
///   starting, `after_startup` hooks.
/// * **Running**: consumers read and handle entries; publishing works.
/// * **Draining**: consumers stopped reading; running handlers finish until the
///   drain deadline; entries fetched but not started are handed back to the
///   group; then `on_shutdown` hooks run (publishing still works).
/// * **Stopped**: connections are closed; `after_shutdown` hooks run. Every
///   call that needs Redis answers [`Error::ShutDown`](crate::Error::ShutDown). A stopped broker is
///   finished: build a new one to run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// Built, not started.
    Configured,
    /// `start()` is running.
    Starting,
    /// Started; consumers run.
    Running,
    /// Stopping: consumers drain, then `on_shutdown` hooks run.
    Draining,
    /// Connections closed.
    Stopped,
}

/// Which point of the lifecycle a hook runs at.
///
/// | stage | runs | Redis |
/// |-------|------|-------|
/// | `OnStartup` | first, before any Redis I/O | not connected |
/// | `AfterStartup` | groups exist, consumers run | usable |
/// | `OnShutdown` | consumers have drained | still usable |
/// | `AfterShutdown` | connections are closed | closed ([`Error::ShutDown`](crate::Error::ShutDown)) |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Stage {
    /// Before any Redis I/O.
    OnStartup,
    /// After consumers started.
    AfterStartup,
    /// After consumers drained, before connections close.
    OnShutdown,
    /// After connections closed.
    AfterShutdown,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::OnStartup => "on_startup",
            Stage::AfterStartup => "after_startup",
            Stage::OnShutdown => "on_shutdown",
            Stage::AfterShutdown => "after_shutdown",
        })
    }
}

/// Which broker some running code belongs to: an opaque number, the same
/// for every clone of one broker's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner(pub usize);

tokio::task_local! {
    /// The broker whose own code (a hook, a consumer loop with its handlers)
    /// is running.
    static WITHIN: Owner;
}

/// Runs `fut` marked as `owner`'s own code, so a `stop()` it calls can tell
/// it would wait for itself.
pub(crate) fn within<F: Future>(owner: Owner, fut: F) -> impl Future<Output = F::Output> {
    WITHIN.scope(owner, fut)
}

/// Whether the running code is `owner`'s own (inside [`within`]).
pub(crate) fn is_within(owner: Owner) -> bool {
    WITHIN.try_with(|o| *o == owner).unwrap_or(false)
}
