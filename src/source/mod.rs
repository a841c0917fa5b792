//! The kinds of source a subscription reads besides streams: Redis lists
//! ([`list`]) and Pub/Sub channels ([`channel`]), and what they share — the
//! typed handler they run, the slot a subscription takes in the supervisor,
//! and the handle of a subscription added at run time ([`runtime`]).
//!
//! Each kind reads on a dedicated connection of its own and runs the same
//! way as a stream's consumer: an actor whose loop reads, runs up to
//! `concurrency` handlers, drains on a stop within the deadline and reports a
//! `ConsumerReport` the supervisor tallies.

pub(crate) mod channel;
pub(crate) mod list;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use redis::Value;

use crate::consumer::Subscription;
use crate::error::Error;
use crate::handler::HandlerResult;
use crate::redis::RedisActor;
use crate::status::Board;
pub use crate::status::SourceKind;
use crate::util::Retry;

/// One configured subscription of any kind.
#[derive(Clone)]
pub(crate) enum Source {
    Stream(Arc<Subscription>),
    List(Arc<list::ListSub>),
    Channel(Arc<channel::ChannelSub>),
}

impl Source {
    pub(crate) fn board(&self) -> &Arc<Board> {
        match self {
            Source::Stream(s) => &s.board,
            Source::List(s) => &s.board,
            Source::Channel(s) => &s.board,
        }
    }

    pub(crate) fn as_stream(&self) -> Option<&Arc<Subscription>> {
        match self {
            Source::Stream(s) => Some(s),
            _ => None,
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
