use std::task::{Context, Poll};

use futures::FutureExt;
use futures::task::noop_waker_ref;
use tokio::sync::oneshot;

use super::InFlight;
use crate::source::stream::run::pel::ReadDone;

/// A read that ends when `tx` sends, with `n` as its `late` marker's
/// stand-in: `fetching` carries which read it was.
fn read(
    n: u64,
) -> (
    oneshot::Sender<()>,
    futures::future::LocalBoxFuture<'static, ReadDone>,
) {
    let (tx, rx) = oneshot::channel::<()>();
    let read = async move {
        let _ = rx.await;
        ReadDone {
            conn: None,
            pel: None,
            result: Ok(Vec::new()),
            late: false,
            fetching: Some((crate::stream::EntryId(n.to_string()), n)),
            strays: false,
            behind: n > 0,
            asked: 0,
        }
    }
    .boxed_local();
    (tx, read)
}

fn which(p: Poll<ReadDone>) -> Option<(u64, usize)> {
    match p {
        Poll::Ready(d) => Some((d.fetching.expect("set").1, d.asked)),
        Poll::Pending => None,
    }
}

#[test]
fn results_come_in_the_order_the_reads_were_sent() {
    let mut cx = Context::from_waker(noop_waker_ref());
    let mut reads = InFlight::default();
    let (first, a) = read(0);
    let (second, b) = read(1);
    reads.push(a, 100, false);
    reads.push(b, 50, true);
    assert_eq!(reads.asked(), 150);
    assert_eq!(reads.first_behind(), Some(false));
    // The second is done first: it waits for the first.
    second.send(()).unwrap();
    assert_eq!(which(reads.poll(&mut cx)), None);
    assert_eq!(reads.asked(), 150);
    first.send(()).unwrap();
    assert_eq!(which(reads.poll(&mut cx)), Some((0, 100)));
    assert_eq!(reads.first_behind(), Some(true));
    assert_eq!(reads.asked(), 50);
    assert_eq!(which(reads.poll(&mut cx)), Some((1, 50)));
    assert!(reads.is_empty());
    assert_eq!(which(reads.poll(&mut cx)), None);
}
