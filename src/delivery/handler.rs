//! Running a handler, the same way for every source: the handler's future
//! is made with its panic caught (decoding happens there, so a value that
//! does not decode never reaches the handler), runs inside the source's
//! `rillkit.handle` span with its panic caught and its time measured, and
//! ends as one [`Ran`]; [`tally`] counts it on the subscription's board and
//! metrics.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use tracing::Instrument;

use crate::handler::{HandlerError, HandlerResult};
use crate::status::Board;
use crate::telemetry::ConsumerMetrics;

/// How one handler run ended.
pub(crate) enum Ran {
    /// The handler returned `Ok`.
    Ok,
    /// The handler returned an error (`reject`: [`HandlerError::Reject`]),
    /// or panicked (`panicked`); `error` is what the logs and the dead
    /// letter say.
    Failed {
        error: String,
        reject: bool,
        panicked: bool,
    },
    /// The value did not decode (or the entry has no data): the handler was
    /// not called.
    Undecodable(String),
}

impl Ran {
    pub(crate) fn of(result: Result<HandlerResult, String>) -> Self {
        match result {
            Ok(Ok(())) => Ran::Ok,
            Ok(Err(e)) => Ran::Failed {
                reject: matches!(e, HandlerError::Reject(_)),
                error: e.to_string(),
                panicked: false,
            },
            Err(panic) => Ran::Failed {
                error: crate::handler::bounded(format!("handler panicked: {panic}")),
                reject: false,
                panicked: true,
            },
        }
    }
}

/// What becomes of an entry or item after a run: one decision for every
/// source.
pub(crate) enum Verdict {
    /// It succeeded: settle it (`XACK`, `LREM`).
    Settle,
    /// It failed before its last run: it runs again after its backoff.
    Retry { error: String },
    /// To the dead-letter stream or list, with what the dead letter says.
    DeadLetter { error: String, why: Why },
}

/// Why an entry or item goes to the dead letters.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Why {
    /// The handler rejected it ([`HandlerError::Reject`]).
    Rejected,
    /// Its value did not decode: the handler never saw it.
    Undecodable,
    /// It failed on its last run (`max_retries + 1`).
    LastRun,
    /// It failed where nothing is retried (a list read at most once).
    NoRetry,
}

impl Ran {
    /// The decision after run number `run` (1 for the first) of at most
    /// `max_retries + 1`; `retries`: whether the source can run it again.
    pub(crate) fn verdict(self, run: u64, max_retries: u64, retries: bool) -> Verdict {
        let (error, why) = match self {
            Ran::Ok => return Verdict::Settle,
            Ran::Undecodable(why) => (why, Why::Undecodable),
            Ran::Failed {
                error,
                reject: true,
                ..
            } => (error, Why::Rejected),
            Ran::Failed { error, .. } if run > max_retries => (error, Why::LastRun),
            Ran::Failed { error, .. } if !retries => (error, Why::NoRetry),
            Ran::Failed { error, .. } => return Verdict::Retry { error },
        };
        Verdict::DeadLetter { error, why }
    }
}

/// Why an entry delivered `delivery_count` times must not run again: more
/// deliveries than runs allowed (`max_retries + 1`), so earlier runs never
/// finished (the process died each time). `None`: it may run.
pub(crate) fn out_of_runs(delivery_count: u64, max_retries: u64) -> Option<String> {
    let max_runs = max_retries.saturating_add(1);
    (delivery_count > max_runs).then(|| {
        format!(
            "delivered {delivery_count} times, more than max_retries + 1 = {max_runs} runs; earlier runs never finished"
        )
    })
}

/// One handler run: how it ended, how long it took, and when it ended
/// (`None`: it never ran).
pub(crate) struct Run {
    pub ran: Ran,
    pub took: Duration,
    pub ended: Option<Instant>,
}

impl Run {
    /// A run that ended before the handler's future existed.
    pub(crate) fn at_once(ran: Ran) -> Self {
        Run {
            ran,
            took: Duration::ZERO,
            ended: None,
        }
    }
}

/// What making a handler's future gave: the future, or why the value
/// cannot reach the handler.
pub(crate) type Made = Result<LocalBoxFuture<'static, HandlerResult>, String>;

/// Makes the handler's future (`make`, inside `span`, its panic caught) and
/// answers the run to await — the future running inside `span`, its panic
/// caught, timed; unboxed, so the caller boxes it once with whatever it
/// adds — or, when there is nothing to run (the value does not decode, or
/// making the future panicked), the run as it ended at once.
pub(crate) fn start(
    span: tracing::Span,
    make: impl FnOnce() -> Made,
) -> Result<impl Future<Output = Run> + 'static, Run> {
    let made = span.in_scope(|| std::panic::catch_unwind(AssertUnwindSafe(make)));
    let fut = match made {
        Ok(Ok(fut)) => fut,
        Ok(Err(why)) => return Err(Run::at_once(Ran::Undecodable(why))),
        Err(payload) => {
            let panic = crate::util::panic_message(&*payload);
            return Err(Run::at_once(Ran::of(Err(panic))));
        }
    };
    Ok(async move {
        let t0 = Instant::now();
        let result = AssertUnwindSafe(fut)
            .catch_unwind()
            .await
            .map_err(|p| crate::util::panic_message(&*p));
        let ended = Instant::now();
        Run {
            ran: Ran::of(result),
            took: ended - t0,
            ended: Some(ended),
        }
    }
    .instrument(span))
}

/// Decodes a batch's entries for its handler (`decode`, a codec's work),
/// its panic caught: what it made, or the panic's message.
pub(crate) fn decode<T>(decode: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(AssertUnwindSafe(decode)).map_err(|p| crate::util::panic_message(&*p))
}

/// One batch handler run: each entry's result, in the order the handler
/// got them, or the panic that ended the run; how long it took and when it
/// ended (`None`: making its future panicked).
pub(crate) struct BatchRun {
    pub results: Result<Vec<HandlerResult>, String>,
    pub took: Duration,
    pub ended: Option<Instant>,
}

/// How each of a batch's `n` entries ran, in the order the handler got
/// them: by its own result (a failed run for one the handler gave no result
/// for), or, when the batch's run or its decoding panicked, failed with the
/// panic.
pub(crate) fn each_ran(results: Result<Vec<HandlerResult>, String>, n: usize) -> Vec<Ran> {
    match results {
        Ok(results) => {
            let mut results = results.into_iter();
            (0..n)
                .map(|_| {
                    Ran::of(Ok(results.next().unwrap_or_else(|| {
                        Err(HandlerError::retry(
                            "the batch handler gave no result for this entry",
                        ))
                    })))
                })
                .collect()
        }
        Err(panic) => (0..n).map(|_| Ran::of(Err(panic.clone()))).collect(),
    }
}

/// A batch handler's run, as [`start`] for one entry: its future made (by
/// `make`, inside `span`, its panic caught) and run inside `span` with its
/// panic caught, timed. A panic while making it ends the run at once.
pub(crate) fn start_batch(
    span: tracing::Span,
    make: impl FnOnce() -> LocalBoxFuture<'static, Vec<HandlerResult>>,
) -> impl Future<Output = BatchRun> + 'static {
    let made = span.in_scope(|| std::panic::catch_unwind(AssertUnwindSafe(make)));
    async move {
        let fut = match made {
            Ok(fut) => fut,
            Err(payload) => {
                return BatchRun {
                    results: Err(crate::util::panic_message(&*payload)),
                    took: Duration::ZERO,
                    ended: None,
                };
            }
        };
        let t0 = Instant::now();
        let results = AssertUnwindSafe(fut)
            .catch_unwind()
            .await
            .map_err(|p| crate::util::panic_message(&*p));
        let ended = Instant::now();
        BatchRun {
            results,
            took: ended - t0,
            ended: Some(ended),
        }
    }
    .instrument(span)
}

/// Counts a run on the subscription's board and metrics: its duration when
/// the handler ran, and handled or failed. (An undecodable value counts
/// neither: what becomes of it is the source's business.)
pub(crate) fn tally(metrics: &ConsumerMetrics, board: &Board, run: &Run) {
    if run.ended.is_some() {
        metrics.handler_duration.record(run.took.as_secs_f64());
    }
    match &run.ran {
        Ran::Ok => {
            metrics.handled.increment(1);
            board.handled();
        }
        Ran::Failed { reject: false, .. } => {
            metrics.failed.increment(1);
            board.failed();
        }
        // A rejection is no failed run: it is dead-lettered at once.
        Ran::Failed { reject: true, .. } | Ran::Undecodable(_) => {}
    }
}

#[cfg(test)]
mod tests;
