//! Streams read in priority order: while a stream has entries, the streams
//! after it wait.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rillkit::prelude::*;
use rillkit::{ConfigError, SubscriptionId};
use support::{RedisServer, eventually};

const WAIT: Duration = Duration::from_secs(60);

#[actix_rt::test]
async fn the_higher_stream_runs_first_and_the_lower_one_when_it_is_clear() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    support::xadd_values(&mut c, "hi", 0..500);
    support::xadd_values(&mut c, "lo", 1000..1500);
    let (hi, lo) = (Stream::new("hi", "g"), Stream::new("lo", "g"));
    let order: Arc<Mutex<Vec<u64>>> = Arc::default();
    let o = order.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_prioritized(
            &[&hi, &lo],
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(Duration::from_secs(10)),
            move |id: u64| {
                let o = o.clone();
                async move {
                    o.lock().unwrap().push(id);
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    eventually("all 1000 handled", WAIT, || {
        order.lock().unwrap().len() == 1000
    })
    .await;
    let first: Vec<u64> = order.lock().unwrap()[..500].to_vec();
    let from_hi = first.iter().filter(|id| **id < 1000).count();
    assert!(from_hi >= 490, "{from_hi} of the first 500 from hi");

    // Both clear: a lower entry does not wait for the higher stream's
    // blocked read (10 s) to end.
    support::xadd_values(&mut c, "lo", 2000..2001);
    eventually("the lower entry handled", Duration::from_secs(5), || {
        order.lock().unwrap().contains(&2000)
    })
    .await;

    // A higher stream paused does not hold the lower one.
    let hi_id = SubscriptionId::stream("hi", "g", "c1");
    broker.pause_local(&hi_id).unwrap();
    // Paused once no read of its own is in flight.
    eventually("hi paused", WAIT, || {
        broker
            .status()
            .subscriptions
            .iter()
            .any(|s| s.key == "hi" && s.state == rillkit::SubscriptionState::Paused)
    })
    .await;
    support::xadd_values(&mut c, "hi", 3000..3010);
    support::xadd_values(&mut c, "lo", 4000..4010);
    eventually("the lower entries handled", WAIT, || {
        let o = order.lock().unwrap();
        (4000..4010).all(|id| o.contains(&id))
    })
    .await;
    assert!(!order.lock().unwrap().contains(&3000));
    broker.resume_local(&hi_id).unwrap();
    eventually("the higher entries handled", WAIT, || {
        order.lock().unwrap().contains(&3009)
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

#[test]
fn what_cannot_be_prioritized_fails_build() {
    let build = |streams: &[&Stream]| {
        Broker::builder("redis://127.0.0.1:1")
            .subscribe_prioritized(streams, ConsumerOptions::default(), |_: u64| async {
                HandlerResult::Ok(())
            })
            .build()
            .err()
    };
    let reason = |e: Option<ConfigError>| match e {
        Some(ConfigError::Invalid { option, reason, .. }) => {
            assert_eq!(option, "streams");
            reason
        }
        other => panic!("{other:?}"),
    };
    let a = Stream::new("a", "g");
    assert!(reason(build(&[])).contains("at least one"));
    assert!(reason(build(&[&a, &Stream::new("a", "other")])).contains("twice"));
    let ordered = Stream::new("o", "g").ordered_by("k", 4);
    assert!(reason(build(&[&a, &ordered])).contains("ordered"));
    assert!(build(&[&a, &Stream::new("b", "g")]).is_none());
}

/// The `worker` example with `RILLKIT_PRIORITY_STREAMS`.
#[cfg(feature = "cli")]
mod workers {
    use super::*;
    use support::{Worker, eventually_blocking};

    #[test]
    fn a_worker_with_priority_streams_runs_the_first_one_first() {
        let redis = RedisServer::start();
        let mut c = redis.conn();
        let mut pipe = redis::pipe();
        for (stream, ids) in [("hi", 0..500), ("lo", 1000..1500)] {
            for id in ids {
                pipe.cmd("XADD")
                    .arg(stream)
                    .arg("*")
                    .arg("data")
                    .arg(format!("{{\"id\":{id}}}"))
                    .ignore();
            }
        }
        pipe.query::<()>(&mut c).unwrap();
        let w = Worker::spawn(
            &redis.url(),
            &[
                ("RILLKIT_PRIORITY_STREAMS", "hi,lo"),
                ("RILLKIT_CONCURRENCY", "4"),
            ],
        );
        eventually_blocking("all handled", WAIT, || w.handled().len() >= 1000);
        let handled = w.handled();
        let from_hi = handled[..500].iter().filter(|(id, _)| *id < 1000).count();
        assert!(from_hi >= 490, "{from_hi} of the first 500 from hi");
    }
}
