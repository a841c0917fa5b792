//! The end of a drain that every source shares: running handlers get until
//! the deadline to finish, then are abandoned (`timed_out` in the report).

use std::time::Instant;

use futures::StreamExt;
use futures::stream::FuturesUnordered;

/// Waits for `running` to finish, passing each result to `done`, until
/// `deadline`. Answers `true` when handlers were still running at the
/// deadline (they are dropped with `running`).
pub(crate) async fn finish_running<F: Future>(
    running: &mut FuturesUnordered<F>,
    deadline: Instant,
    mut done: impl FnMut(F::Output),
) -> bool {
    let until = tokio::time::Instant::from_std(deadline);
    while !running.is_empty() {
        tokio::select! {
            Some(out) = running.next() => done(out),
            () = tokio::time::sleep_until(until) => return true,
        }
    }
    false
}
