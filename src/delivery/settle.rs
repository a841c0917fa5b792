//! Retried steps: a settling write (a script or command on a shared
//! connection) retried until Redis has run it ([`until_done`]), and any step
//! a consumer needs before it goes on (its lease, its partition's pending
//! entries, a check) retried until it works or the consumer is stopped
//! ([`until_stopped`]).

use actix::Addr;
use redis::Value;

use crate::error::Error;
use crate::redis::RedisActor;
use crate::util::Retry;

/// Runs `attempt` until it succeeds, fails in a way no wait fixes
/// (`gives_up` says which errors), or `stop` changes (a stop asked for).
/// Between attempts it waits the capped backoff of [`Retry`] (100 ms
/// doubling to 10 s), calling `log` with the error and the wait on the
/// failures worth a line (the first, then each doubling of the count).
///
/// # Errors
/// `Some(error)` for an error `gives_up` holds for; `None` when `stop`
/// changed (or its sender went away) first.
pub(crate) async fn until_stopped<T, S, F, Fut>(
    stop: &mut tokio::sync::watch::Receiver<S>,
    mut attempt: F,
    gives_up: impl Fn(&Error) -> bool,
    log: impl Fn(&Error, std::time::Duration),
) -> Result<T, Option<Error>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let mut retry = Retry::default();
    loop {
        let e = match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) if gives_up(&e) => return Err(Some(e)),
            Err(e) => e,
        };
        let (delay, worth_a_line) = retry.failed();
        if worth_a_line {
            log(&e, delay);
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = stop.changed() => return Err(None),
        }
    }
}

/// Runs a script ([`Eval`]) or a command ([`Query`](crate::redis::Query))
/// on a shared connection until Redis has run it, waiting out transient
/// errors with backoff (until `deadline`, when given).
///
/// # Errors
/// An error nothing fixes by waiting, [`Error::ShutDown`], or the last
/// transient one once `deadline` has passed.
pub(crate) async fn until_done<M>(
    redis: &Addr<RedisActor>,
    msg: M,
    deadline: Option<std::time::Instant>,
) -> Result<Value, Error>
where
    M: actix::Message<Result = Result<Value, Error>> + Clone + Send + 'static,
    RedisActor: actix::Handler<M>,
{
    let mut retry = Retry::default();
    loop {
        let e = match redis.send(msg.clone()).await {
            Err(_) => return Err(Error::ShutDown),
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => e,
        };
        if matches!(e, Error::ShutDown) || !e.class().is_transient() {
            return Err(e);
        }
        let (delay, log) = retry.failed();
        if deadline.is_some_and(|d| std::time::Instant::now() + delay > d) {
            return Err(e);
        }
        if log {
            tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "a list or channel write failed; retrying");
        }
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests;
