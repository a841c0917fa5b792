//! Settling writes: a script or command on a shared connection, retried
//! until Redis has run it.

use actix::Addr;
use redis::Value;

use crate::error::Error;
use crate::redis::RedisActor;
use crate::util::Retry;

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
