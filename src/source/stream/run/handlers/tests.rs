use std::time::Duration;

use futures::FutureExt;

use super::Handlers;
use crate::delivery::handler::{Ran, Run};
use crate::handler::Message;
use crate::source::stream::run::Finished;
use crate::source::stream::run::batch::Ended;
use crate::source::stream::run::pace::Pace;
use crate::stream::EntryId;

fn ended(id: &str) -> Ended {
    let msg = Message {
        id: EntryId(id.into()),
        stream: "s".into(),
        group: "g".into(),
        consumer: "c".into(),
        delivery_count: 1,
        fields: Vec::new().into(),
        data_field: "data".into(),
    };
    let run = Run {
        ran: Ran::Ok,
        took: Duration::ZERO,
        ended: None,
    };
    Finished { msg, run }.into()
}

fn id(e: &Ended) -> &str {
    match e {
        Ended::One(f) => f.msg.id.as_str(),
        Ended::Batch(_) => "batch",
    }
}

#[tokio::test(start_paused = true)]
async fn a_redelivery_runs_alone_until_it_finishes() {
    let mut h = Handlers::new(metrics::Gauge::noop(), Pace::new(None, None));
    assert!(!h.alone());
    h.push(async { ended("1-0") }.boxed_local(), true);
    assert!((h.len(), h.alone()) == (1, true));
    let e = h.events().0.await;
    assert_eq!(id(&e), "1-0");
    assert!(h.alone(), "alone until its end is handled");
    h.finished(Some(std::time::Instant::now()), Duration::from_millis(4));
    assert!(!h.alone());
    assert_eq!(h.took(), Some(Duration::from_millis(4)));
}

#[tokio::test(start_paused = true)]
async fn handlers_that_finish_nothing_for_a_window_are_stalled() {
    let mut h = Handlers::new(metrics::Gauge::noop(), Pace::new(None, None));
    let window = Duration::from_millis(2);
    assert!(!h.stalled(window), "nothing runs");
    h.push(futures::future::pending().boxed_local(), false);
    assert!(!h.stalled(window));
    tokio::time::advance(Duration::from_millis(3)).await;
    assert!(h.stalled(window));
    // Another run finished just now (on the paused clock): progress again.
    let now = tokio::time::Instant::now().into_std();
    h.finished(Some(now), Duration::from_millis(1));
    assert!(!h.stalled(window));
}

#[tokio::test(start_paused = true)]
async fn abandoning_drops_every_run() {
    let mut h = Handlers::new(metrics::Gauge::noop(), Pace::new(None, None));
    h.push(futures::future::pending().boxed_local(), true);
    h.push(futures::future::pending().boxed_local(), false);
    h.show();
    assert_eq!(h.abandon(), 2);
    assert!(h.is_empty() && !h.alone());
    // Nothing runs: `ended` waits.
    let waited = tokio::time::timeout(Duration::from_millis(10), h.events().0).await;
    assert!(waited.is_err());
}
