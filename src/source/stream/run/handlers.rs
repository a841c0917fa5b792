//! The handler runs in flight: their futures, whether a redelivery runs
//! alone, how long a handler takes (for the prefetch), when one last
//! finished (a stalled handler holds reads back), the in-flight gauge, and
//! when the next batch of a batch handler began gathering; and the pace
//! reads keep so that what is read may start ([`Pace`]: a rate limit, a
//! priority). The loop decides what starts; [`Handlers`] keeps what runs.

use std::time::Duration;

use futures::future::LocalBoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};

use super::Ewma;
use super::batch::Ended;
use super::pace::Pace;
use crate::delivery::batch::Gathering;

pub(super) struct Handlers {
    running: FuturesUnordered<LocalBoxFuture<'static, Ended>>,
    /// A redelivery runs alone: nothing else starts until it ends.
    alone: bool,
    /// How long a handler (or a batch) runs, on average.
    took: Ewma,
    /// When a handler last finished: handlers that have not finished for
    /// longer than the fetch window are stalled (a slow entry), and no read
    /// fetches ahead of them.
    last_progress: tokio::time::Instant,
    /// The in-flight gauge, and the count last added to it.
    gauge: metrics::Gauge,
    shown: usize,
    /// Since when the next batch gathers in the queue (after a batch
    /// started, the rest of the queue counts from then).
    gathering: Gathering,
    /// The rate limit and priority reads keep to.
    pace: Pace,
}

impl Handlers {
    pub(super) fn new(gauge: metrics::Gauge, pace: Pace) -> Self {
        Handlers {
            running: FuturesUnordered::new(),
            alone: false,
            took: Ewma::default(),
            last_progress: tokio::time::Instant::now(),
            gauge,
            shown: 0,
            gathering: Gathering::default(),
            pace,
        }
    }

    /// The rate limit and priority reads keep to.
    pub(super) fn pace(&mut self) -> &mut Pace {
        &mut self.pace
    }

    /// Whether reads are paced by nothing (see [`Pace::is_free`]).
    pub(super) fn unpaced(&self) -> bool {
        self.pace.is_free()
    }

    /// Handler runs in flight.
    pub(super) fn len(&self) -> usize {
        self.running.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// Whether a redelivery runs alone.
    pub(super) fn alone(&self) -> bool {
        self.alone
    }

    /// Runs `run` as a handler run of this consumer; `alone`: nothing else
    /// starts until it ends.
    pub(super) fn push(&mut self, run: LocalBoxFuture<'static, Ended>, alone: bool) {
        self.running.push(run);
        self.alone = alone;
    }

    /// What runs and what may be read, to be polled in one pass: the next
    /// handler run that ended (pending while none runs), and a change of
    /// pace (see [`Pace::changed`]). Both cancel-safe.
    pub(super) fn events(
        &mut self,
    ) -> (
        impl Future<Output = Ended> + '_,
        impl Future<Output = ()> + '_,
    ) {
        let Handlers { running, pace, .. } = self;
        let ended = async move {
            match running.next().await {
                Some(ended) => ended,
                None => std::future::pending().await,
            }
        };
        (ended, pace.changed())
    }

    /// A run ended at `ended` (when it ran at all) after `took`: a
    /// redelivery that ran alone is done, nothing ran beside it.
    pub(super) fn finished(&mut self, ended: Option<std::time::Instant>, took: Duration) {
        if let Some(at) = ended {
            self.last_progress = tokio::time::Instant::from_std(at);
        }
        self.took.add(took);
        self.alone = false;
    }

    /// How long a handler runs, on average, once measured.
    pub(super) fn took(&self) -> Option<Duration> {
        self.took.get()
    }

    /// Whether handlers run that finished nothing for longer than `window`.
    pub(super) fn stalled(&self, window: Duration) -> bool {
        !self.running.is_empty() && self.last_progress.elapsed() > window
    }

    /// Drops every run (the drain deadline passed; their entries stay
    /// pending). Answers how many there were.
    pub(super) fn abandon(&mut self) -> usize {
        let n = self.running.len();
        self.running.clear();
        self.alone = false;
        n
    }

    /// Brings the in-flight gauge to the number of runs, once per turn of
    /// the loop (a gauge shared by the consumers of one stream and group in
    /// the process, so by the difference). Fast handlers that finish and
    /// start within one turn cost it nothing.
    pub(super) fn show(&mut self) {
        let n = self.running.len();
        if n != self.shown {
            self.gauge.increment(n as f64 - self.shown as f64);
            self.shown = n;
        }
    }

    /// Since when the next batch gathers.
    pub(super) fn gathering(&self) -> &Gathering {
        &self.gathering
    }

    /// Since when the next batch gathers, to bring up to date.
    pub(super) fn gathering_mut(&mut self) -> &mut Gathering {
        &mut self.gathering
    }
}

#[cfg(test)]
mod tests;
