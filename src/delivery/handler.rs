//! Running a handler: its panic caught, its time measured, its result told
//! apart.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use futures::future::LocalBoxFuture;

use crate::handler::HandlerResult;

/// How one handler run ended.
pub(crate) enum Ran {
    Ok,
    Failed {
        error: String,
        reject: bool,
    },
    /// The item did not decode: the handler was not called.
    Undecodable(String),
}

/// Runs a prepared handler future, catching a panic (counted as a failed
/// run), and answers how it ended and how long it took.
pub(crate) async fn run_guarded(fut: LocalBoxFuture<'static, HandlerResult>) -> (Ran, Duration) {
    let started = std::time::Instant::now();
    let ran = match AssertUnwindSafe(fut).catch_unwind().await {
        Ok(Ok(())) => Ran::Ok,
        Ok(Err(e)) => Ran::Failed {
            reject: e.is_reject(),
            error: e.to_string(),
        },
        Err(payload) => Ran::Failed {
            error: format!(
                "handler panicked: {}",
                crate::util::panic_message(&*payload)
            ),
            reject: false,
        },
    };
    (ran, started.elapsed())
}
