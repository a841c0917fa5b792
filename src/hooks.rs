//! Lifecycle hooks: async closures run around rillkit's own start and stop
//! work, in registration order.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use futures::future::LocalBoxFuture;

use crate::broker::Broker;
use crate::error::{BoxError, HookError};

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

pub(crate) type Hook =
    Arc<dyn Fn(Broker) -> LocalBoxFuture<'static, Result<(), BoxError>> + Send + Sync>;

pub(crate) fn hook<F, Fut>(f: F) -> Hook
where
    F: Fn(Broker) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), BoxError>> + 'static,
{
    Arc::new(move |b| Box::pin(f(b)))
}

/// The four hook lists of a broker.
#[derive(Default, Clone)]
pub(crate) struct Hooks {
    pub on_startup: Vec<Hook>,
    pub after_startup: Vec<Hook>,
    pub on_shutdown: Vec<Hook>,
    pub after_shutdown: Vec<Hook>,
}

impl Hooks {
    pub fn list(&self, stage: Stage) -> &[Hook] {
        match stage {
            Stage::OnStartup => &self.on_startup,
            Stage::AfterStartup => &self.after_startup,
            Stage::OnShutdown => &self.on_shutdown,
            Stage::AfterShutdown => &self.after_shutdown,
        }
    }

    /// Runs the hooks of `stage` in order. With `keep_going` every hook runs and
    /// all failures are returned; otherwise the first failure stops the list.
    /// Each failure is logged at ERROR.
    /// A panicking hook counts as a failed one.
    ///
    /// The startup stages stop before the next hook once a stop is requested
    /// (a signal during startup).
    pub async fn run(&self, stage: Stage, broker: &Broker, keep_going: bool) -> Vec<HookError> {
        let mut failures = Vec::new();
        let startup = matches!(stage, Stage::OnStartup | Stage::AfterStartup);
        for (index, h) in self.list(stage).iter().enumerate() {
            if startup && broker.stop_requested() {
                tracing::info!(stage = %stage, skipped = self.list(stage).len() - index, "stop requested during startup; skipping the remaining hooks");
                break;
            }
            let result = match std::panic::catch_unwind(AssertUnwindSafe(|| h(broker.clone()))) {
                Ok(fut) => AssertUnwindSafe(fut).catch_unwind().await,
                Err(panic) => Err(panic),
            };
            let result = result.unwrap_or_else(|panic| {
                Err(format!("hook panicked: {}", crate::panic_message(&*panic)).into())
            });
            if let Err(source) = result {
                tracing::error!(stage = %stage, index, error = %source, "lifecycle hook failed");
                failures.push(HookError {
                    stage,
                    index,
                    source,
                });
                if !keep_going {
                    break;
                }
            }
        }
        failures
    }
}
