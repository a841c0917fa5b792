//! The consumer loop's drain rules, on tokio's paused clock with a source
//! that keeps its state in memory (handlers that end when told to).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::{Source, run};

enum Event {
    /// A running handler ends.
    Ended,
    /// The source asks for a drain ending after this long (an error
    /// nothing fixes).
    AskDrain(Duration),
}

struct Fake {
    running: usize,
    events: mpsc::UnboundedReceiver<Event>,
    asked: Option<Instant>,
    drain: Option<Instant>,
    abandoned: bool,
}

impl Fake {
    fn new(running: usize, events: Vec<Event>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        for e in events {
            tx.send(e).unwrap();
        }
        // The sender is dropped: once the queue is empty, `step` waits
        // forever (see below).
        Fake {
            running,
            events: rx,
            asked: None,
            drain: None,
            abandoned: false,
        }
    }
}

impl Source for Fake {
    fn names(&self) -> (&'static str, Arc<str>) {
        ("stream", "s".into())
    }

    async fn turn(&mut self) -> bool {
        self.drain.is_some() && self.running == 0
    }

    async fn step(&mut self) {
        match self.events.recv().await {
            Some(Event::Ended) => self.running -= 1,
            Some(Event::AskDrain(d)) => self.asked = Some(Instant::now() + d),
            None => std::future::pending().await,
        }
    }

    fn drain_asked(&self) -> Option<Instant> {
        self.asked
    }

    fn begin_drain(&mut self, deadline: Instant) {
        self.drain = Some(deadline);
    }

    fn running(&self) -> usize {
        self.running
    }

    fn abandon(&mut self) {
        self.abandoned = true;
    }
}

#[tokio::test(start_paused = true)]
async fn a_stop_drains_and_the_loop_ends_once_the_handlers_ended() {
    let mut source = Fake::new(2, vec![Event::Ended, Event::Ended]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let (_stop_tx, stop) = watch::channel(Some(deadline));
    let started = tokio::time::Instant::now();
    run(&mut source, stop, None).await;
    assert_eq!(source.drain, Some(deadline));
    assert!(!source.abandoned);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "ended when the handlers did, not at the deadline: {:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn the_deadline_abandons_what_still_runs() {
    let mut source = Fake::new(1, vec![]);
    let (stop_tx, stop) = watch::channel(None);
    stop_tx
        .send(Some(Instant::now() + Duration::from_secs(3)))
        .unwrap();
    let started = tokio::time::Instant::now();
    run(&mut source, stop, None).await;
    assert!(source.abandoned);
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_drain_the_source_asks_for_with_nothing_running_ends_at_once() {
    let mut source = Fake::new(0, vec![Event::AskDrain(Duration::from_secs(30))]);
    let (_stop_tx, stop) = watch::channel(None);
    let started = tokio::time::Instant::now();
    run(&mut source, stop, None).await;
    assert_eq!(source.drain, source.asked);
    assert!(!source.abandoned);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "not at the next progress line or the deadline: {:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_stop_whose_sender_is_gone_drains_at_once() {
    let mut source = Fake::new(1, vec![]);
    let (stop_tx, stop) = watch::channel(None);
    drop(stop_tx);
    run(&mut source, stop, None).await;
    assert!(source.drain.is_some());
    assert!(
        source.abandoned,
        "the deadline is now: what runs is dropped"
    );
}
