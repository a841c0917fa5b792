//! The consumer loop every source runs ([`run`]): a source says what it
//! starts at each turn and what it waits for ([`Source`]); the loop owns
//! the rest — the stop that begins a drain, the pause's wake-ups, the drain
//! deadline and its progress line — so a drain means the same for a stream,
//! a list and a channel.
//!
//! A source's own events (a read's reply, a handler's end, an ack's
//! answer, its timers) are its components' futures; its [`Source::step`]
//! polls them all in one pass and handles every one that is ready
//! ([`Ready`]), so a busy component never starves the others.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::watch;

use super::drain::Draining;
use crate::util::Alarm;

/// What a source plugs into the consumer loop.
///
/// The loop calls [`turn`](Source::turn), then waits on
/// [`step`](Source::step) beside the stop, the pause and, once draining,
/// the drain's deadline and progress line; and again, until the source is
/// drained or the deadline passes.
pub(crate) trait Source {
    /// What a drain's progress line names: the source's kind (`stream`,
    /// `list`, `channel`) and its key.
    fn names(&self) -> (&'static str, Arc<str>);

    /// A turn before the loop waits: starts what may start now (handlers,
    /// a read, a claim) and sends what is due. Answers `true` once the
    /// source is drained (a drain began and nothing it waits for is left):
    /// the loop then ends.
    async fn turn(&mut self) -> bool;

    /// Waits until at least one of the source's own events happened, and
    /// handles them. Cancel-safe: dropped while it waits, nothing is lost.
    async fn step(&mut self);

    /// A drain the source asks for itself (an error nothing fixes, a lease
    /// given up), ending at the deadline answered; checked after every
    /// turn.
    fn drain_asked(&self) -> Option<Instant>;

    /// Begins the drain that ends at `deadline`: nothing new is read, what
    /// was fetched and not started goes back.
    fn begin_drain(&mut self, deadline: Instant);

    /// How many handlers still run, for the drain's progress line.
    fn running(&self) -> usize;

    /// The drain deadline passed: running handlers are dropped, and the
    /// source notes what it left unsettled.
    fn abandon(&mut self);
}

/// Runs `source` until it is drained, or its drain's deadline passed. A
/// drain begins when `stop` holds a deadline (the deadline is now when the
/// stop's sender is gone) or when the source asks for one. `pause`, when
/// given, wakes the loop whenever the pause is asked for or undone.
pub(crate) async fn run<S: Source>(
    source: &mut S,
    mut stop: watch::Receiver<Option<Instant>>,
    mut pause: Option<watch::Receiver<bool>>,
) {
    let mut drain: Option<Draining> = None;
    if let Some(deadline) = *stop.borrow_and_update() {
        begin(source, &mut drain, deadline);
    }
    loop {
        if source.turn().await {
            return;
        }
        if drain.is_none()
            && let Some(deadline) = source.drain_asked()
        {
            // A turn first: the drain may be over already, and a read in
            // flight is cut short there.
            begin(source, &mut drain, deadline);
            continue;
        }
        let (until, progress) = match &drain {
            Some(d) => (Some(d.until()), Some(d.progress_due())),
            None => (None, None),
        };
        let paused = async {
            match pause.as_mut() {
                Some(p) if drain.is_none() => p.changed().await.is_ok(),
                _ => false,
            }
        };
        // The stop first: what is fetched after it goes back unrun.
        tokio::select! {
            biased;
            changed = stop.changed(), if drain.is_none() => {
                let deadline = match changed {
                    Ok(()) => (*stop.borrow()).unwrap_or_else(Instant::now),
                    // The actor is gone: stop now.
                    Err(_) => Instant::now(),
                };
                begin(source, &mut drain, deadline);
            }
            () = sleep_until(until) => {
                source.abandon();
                return;
            }
            () = sleep_until(progress) => {
                if let Some(d) = drain.as_mut() {
                    d.tell(source.running());
                }
            }
            true = paused => {}
            () = source.step() => {}
        }
    }
}

fn begin<S: Source>(source: &mut S, drain: &mut Option<Draining>, deadline: Instant) {
    let (kind, name) = source.names();
    *drain = Some(Draining::new(kind, name, deadline));
    source.begin_drain(deadline);
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One pass over a source's event futures: [`poll`](Ready::poll) polls a
/// future once and keeps its output; [`any`](Ready::any) is whether one
/// was ready. Every future is polled in every pass, so a component whose
/// future is always ready (handlers ending under load) never keeps another
/// (the read's reply) waiting.
#[derive(Default)]
pub(crate) struct Ready {
    any: bool,
}

impl Ready {
    /// Polls `f` once; its output, when ready.
    pub(crate) fn poll<F: Future + ?Sized>(
        &mut self,
        f: Pin<&mut F>,
        cx: &mut Context<'_>,
    ) -> Option<F::Output> {
        match f.poll(cx) {
            Poll::Ready(out) => {
                self.any = true;
                Some(out)
            }
            Poll::Pending => None,
        }
    }

    /// Polls `alarm` set to `at` (not at all without one); whether it rang.
    pub(crate) fn alarm(
        &mut self,
        alarm: &mut Alarm,
        at: Option<tokio::time::Instant>,
        cx: &mut Context<'_>,
    ) -> bool {
        at.is_some() && self.poll(alarm.until(at).as_mut(), cx).is_some()
    }

    /// Polls every future of `set` that is ready (each of whose outputs is
    /// thrown away: settling writes, sent `CLIENT UNBLOCK`s).
    pub(crate) fn poll_all<F: Future<Output = ()>>(
        &mut self,
        set: &mut FuturesUnordered<F>,
        cx: &mut Context<'_>,
    ) {
        while let Poll::Ready(Some(())) = set.poll_next_unpin(cx) {
            self.any = true;
        }
    }

    /// Ready when a polled future was.
    pub(crate) fn any(&self) -> Poll<()> {
        if self.any {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Runs `f` until it ends or `stop` asks for a stop (a source's start:
/// joining, subscribing). Answers `None` on a stop.
pub(crate) async fn unless_stopped<F: Future>(
    stop: &mut watch::Receiver<Option<Instant>>,
    f: F,
) -> Option<F::Output> {
    tokio::select! {
        out = f => Some(out),
        _ = stop.wait_for(Option::is_some) => None,
    }
}

#[cfg(test)]
mod tests;
