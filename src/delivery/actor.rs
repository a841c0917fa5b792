//! `ConsumerActor`: the actor that runs one subscription's loop — a
//! stream's, a list's or a channel's — and reports its end to the
//! supervisor. The loop drains once its stop channel holds a deadline.

use std::panic::AssertUnwindSafe;
use std::time::Instant;

use actix::prelude::*;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use tokio::sync::watch;

use super::ConsumerReport;
use crate::lifecycle::Owner;

/// Sent by a consumer when its loop has ended, for whatever reason.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ConsumerExited {
    pub index: usize,
    pub report: ConsumerReport,
}

/// Tells a consumer to drain, with the instant past which running handlers
/// are abandoned.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Drain(pub Instant);

/// The actor that runs one subscription's loop — of any kind: a stream's
/// consumer loop, a list's, a channel's — and reports its end.
pub(crate) struct ConsumerActor {
    owner: Owner,
    index: usize,
    run: Option<LocalBoxFuture<'static, ConsumerReport>>,
    exited: Recipient<ConsumerExited>,
    stop: watch::Sender<Option<Instant>>,
}

impl ConsumerActor {
    /// `run` is the loop; it drains once `stop` (whose sender this actor
    /// keeps) holds a deadline.
    pub(crate) fn new(
        owner: Owner,
        index: usize,
        run: LocalBoxFuture<'static, ConsumerReport>,
        stop: watch::Sender<Option<Instant>>,
        exited: Recipient<ConsumerExited>,
    ) -> Self {
        ConsumerActor {
            owner,
            index,
            run: Some(run),
            exited,
            stop,
        }
    }
}

impl Actor for ConsumerActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let Some(run) = self.run.take() else {
            return;
        };
        // The actor boundary: a panic in rillkit's own loop code is caught here
        // and reported, never lost with the task.
        let guarded = AssertUnwindSafe(crate::lifecycle::within(self.owner, run))
            .catch_unwind()
            .map(|r| match r {
                Ok(report) => report,
                Err(payload) => {
                    let what = crate::util::panic_message(&*payload);
                    tracing::error!(panic = %what, "consumer loop panicked");
                    ConsumerReport::panicked(what)
                }
            });
        ctx.spawn(actix::fut::wrap_future(guarded).map(
            |report, act: &mut Self, ctx: &mut Context<Self>| {
                act.exited.do_send(ConsumerExited {
                    index: act.index,
                    report,
                });
                ctx.stop();
            },
        ));
    }
}

impl Handler<Drain> for ConsumerActor {
    type Result = ();

    fn handle(&mut self, msg: Drain, _: &mut Self::Context) {
        self.stop.send_replace(Some(msg.0));
    }
}
