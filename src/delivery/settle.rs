//! Retried steps, all through one loop ([`retrying`]: the capped backoff of
//! [`Retry`], 100 ms doubling to 10 s, and a log line on the failures worth
//! one, the first and then each doubling of the count):
//!
//! * a settling write (a stream's `XACK` batch or dead-letter move, a list
//!   item's `LREM`, dead-letter move or put-back) is sent until Redis
//!   accepts it ([`until_accepted`]), whatever it answers meanwhile, except
//!   a shut-down broker or a lost group: each is safe to send again (an
//!   `XACK` twice acks once; the dead-letter scripts check everything
//!   before they write, and a reliable list's scripts push before they
//!   remove, so one that failed half-way took nothing away; they know an
//!   item by its bytes, so one sent again after a lost reply may settle an
//!   identical copy too);
//! * a write a list loop needs done (its heartbeat, a return of its
//!   processing list) until Redis has run it, giving up on an error no wait
//!   fixes ([`until_done`]);
//! * any step a consumer needs before it goes on (its lease, its
//!   partition's pending entries, a check) until it works or the consumer
//!   is stopped ([`until_stopped`]).

use std::cell::Cell;
use std::future::Future;
use std::pin::{Pin, pin};
use std::time::{Duration, Instant};

use actix::Addr;
use redis::Value;

use crate::error::{Class, Error};
use crate::redis::RedisActor;
use crate::util::{Retry, log_wait};

/// Runs `attempt` until it succeeds, fails in a way `gives_up` holds for,
/// `deadline` would pass during the next wait, or `stopped` resolves.
/// Between attempts it waits the capped backoff of [`Retry`], calling `log`
/// with the error, the wait and the failures so far on the failures worth a
/// line.
///
/// # Errors
/// `Some(error)` for an error `gives_up` holds for, or the last one once
/// `deadline` has come; `None` when `stopped` resolved first.
async fn retrying<T, F, Fut>(
    mut attempt: F,
    gives_up: impl Fn(&Error) -> bool,
    deadline: Option<Instant>,
    mut stopped: Pin<&mut impl Future<Output = ()>>,
    log: impl Fn(&Error, Duration, u32),
) -> Result<T, Option<Error>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut retry = Retry::default();
    loop {
        let e = match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) if gives_up(&e) => return Err(Some(e)),
            Err(e) => e,
        };
        let (delay, worth_a_line) = retry.failed();
        if deadline.is_some_and(|d| Instant::now() + delay > d) {
            return Err(Some(e));
        }
        if worth_a_line {
            log(&e, delay, retry.failures());
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = stopped.as_mut() => return Err(None),
        }
    }
}

/// Runs `attempt` until it succeeds, fails in a way no wait fixes
/// (`gives_up` says which errors), or `stop` changes (a stop asked for),
/// waiting with backoff between attempts and calling `log` with the error
/// and the wait on the failures worth a line.
///
/// # Errors
/// `Some(error)` for an error `gives_up` holds for; `None` when `stop`
/// changed (or its sender went away) first.
pub(crate) async fn until_stopped<T, S, F, Fut>(
    stop: &mut tokio::sync::watch::Receiver<S>,
    attempt: F,
    gives_up: impl Fn(&Error) -> bool,
    log: impl Fn(&Error, Duration),
) -> Result<T, Option<Error>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let stopped = pin!(async {
        let _ = stop.changed().await;
    });
    retrying(attempt, gives_up, None, stopped, |e, delay, _| {
        log(e, delay)
    })
    .await
}

/// Runs a script ([`Eval`](crate::redis::Eval)) or a command
/// ([`Query`](crate::redis::Query)) on a shared connection until Redis has
/// run it, waiting out transient errors with backoff (until `deadline`,
/// when given).
///
/// # Errors
/// An error nothing fixes by waiting, [`Error::ShutDown`], or the last
/// transient one once `deadline` has passed.
pub(crate) async fn until_done<M>(
    redis: &Addr<RedisActor>,
    msg: M,
    deadline: Option<Instant>,
) -> Result<Value, Error>
where
    M: actix::Message<Result = Result<Value, Error>> + Clone + Send + 'static,
    RedisActor: actix::Handler<M>,
{
    let attempt = || {
        let sent = redis.send(msg.clone());
        async move { sent.await.unwrap_or(Err(Error::ShutDown)) }
    };
    let gives_up = |e: &Error| matches!(e, Error::ShutDown) || !e.class().is_transient();
    let log = |e: &Error, delay: Duration, failures| {
        let retry_in_ms = delay.as_millis() as u64;
        tracing::warn!(error = %e, failures, retry_in_ms, "a list write failed; retrying");
    };
    let never = pin!(std::future::pending());
    retrying(attempt, gives_up, deadline, never, log)
        .await
        .map_err(|e| e.unwrap_or(Error::ShutDown))
}

/// Whether a settling write that failed with `e` is sent again: always,
/// but for a shut-down broker (the entry stays pending and is delivered
/// again) and a lost group (the entry went with it).
fn sent_again(e: &Error) -> bool {
    !matches!(e, Error::ShutDown) && e.class() != Class::GroupGone
}

/// Sends `msg`, a write safe to send again, to the Redis actor until Redis
/// accepts it: the retry of every settling write (a stream's `XACK` batch
/// or dead-letter move, a list item's settling script), so a handled entry
/// is never handled again, nor a dead letter lost, because its settle
/// failed for a while. Every failure but those [`sent_again`]
/// rules out (a failover, `READONLY`, `OOM`, a revoked ACL, a script
/// error…) is waited out with backoff for as long as it takes; the entry
/// stays held meanwhile. `what` names the write in the log lines (`<what>
/// failed; …`, a warning, or an error for a failure only configuration
/// fixes; an info line once it is accepted after failures), and `about`
/// gives their other fields (called only for a line).
///
/// Answers Redis's reply and how long the accepted attempt took.
///
/// # Errors
/// [`Error::ShutDown`] or a lost group ([`Class::GroupGone`]): not sent
/// again.
pub(crate) async fn until_accepted<M, T>(
    redis: &Addr<RedisActor>,
    msg: M,
    what: &'static str,
    about: impl Fn() -> String,
) -> Result<(T, Duration), Error>
where
    M: actix::Message<Result = Result<T, Error>> + Clone + Send + 'static,
    T: Send + 'static,
    RedisActor: actix::Handler<M>,
{
    let (started, failed) = (Cell::new(Instant::now()), Cell::new(0));
    let attempt = || {
        started.set(Instant::now());
        let sent = redis.send(msg.clone());
        async move { sent.await.unwrap_or(Err(Error::ShutDown)) }
    };
    let log = |e: &Error, delay: Duration, failures| {
        failed.set(failures);
        let retry_in_ms = delay.as_millis() as u64;
        log_wait!(
            e.class(),
            about = %about(), error = %e, failures, retry_in_ms,
            "{what} failed; what it settles stays held, and it is sent again until Redis accepts it"
        );
    };
    let never = pin!(std::future::pending());
    let out = retrying(attempt, |e| !sent_again(e), None, never, log).await;
    let reply = out.map_err(|e| e.unwrap_or(Error::ShutDown))?;
    if failed.get() > 0 {
        let failures = failed.get();
        tracing::info!(about = %about(), failures, "{what} accepted again");
    }
    Ok((reply, started.get().elapsed()))
}

#[cfg(test)]
mod tests;
