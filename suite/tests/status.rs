//! `Broker::status()`: state, counts since start, and the
//! server's figures (lag, pending, oldest pending entry, dead letters) as
//! polled; readiness for a probe.

mod support;

use std::time::Duration;

use rillkit::SubscriptionState;
use rillkit::prelude::*;
use support::{RedisServer, eventually};

const WAIT: Duration = Duration::from_secs(30);

#[actix_rt::test]
async fn status_reports_state_counts_and_server_figures() {
    let mut redis = RedisServer::start();
    let s = Stream::new("orders", "billing");
    let broker = Broker::builder(redis.url())
        .status_period(Duration::from_millis(100))
        .subscribe(
            &s,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_count(10)
                .with_max_retries(0)
                .with_block(Duration::from_millis(100)),
            |v: u64| async move {
                match v {
                    0 => Err(HandlerError::retry("poison")),
                    // Slow: the others wait, so the group lags.
                    1_000.. => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        Ok(())
                    }
                    _ => Ok(()),
                }
            },
        )
        .build()
        .unwrap();
    let st = broker.status();
    assert!(!st.is_ready());
    assert_eq!(st.subscriptions[0].state, SubscriptionState::Starting);
    assert_eq!(st.subscriptions[0].consumer, "c1");

    broker.start().await.unwrap();
    for v in [1u64, 2, 3, 0] {
        broker.publish(&s, &v).await.unwrap();
    }
    eventually("counted and polled", WAIT, || {
        let st = broker.status();
        let sub = &st.subscriptions[0];
        st.is_ready()
            && sub.handled == 3
            && sub.failed == 1
            && sub.dead_lettered == 1
            && sub
                .server
                .as_ref()
                .is_some_and(|f| f.dead_letters == 1 && f.pending == 0 && f.lag == Some(0))
    })
    .await;

    // A backlog: lag and pending show, with the age of the oldest pending.
    broker
        .publish_batch(&s, (1_000..1_040u64).collect::<Vec<_>>())
        .await
        .unwrap();
    eventually("a lag and a pending entry polled", WAIT, || {
        broker.status().subscriptions[0]
            .server
            .as_ref()
            .is_some_and(|f| {
                f.lag.is_some_and(|l| l > 0) && f.pending > 0 && f.oldest_pending_age.is_some()
            })
    })
    .await;

    // Redis goes away: reconnecting, with the error; back: running.
    redis.stop();
    eventually("reconnecting", WAIT, || {
        matches!(
            &broker.status().subscriptions[0].state,
            SubscriptionState::Reconnecting { last_error, .. } if !last_error.is_empty()
        )
    })
    .await;
    assert!(!broker.status().is_ready());
    redis.restart();
    eventually("running again", WAIT, || broker.status().is_ready()).await;

    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    let st = broker.status();
    assert_eq!(st.phase, Phase::Stopped);
    assert_eq!(st.subscriptions[0].state, SubscriptionState::Stopped);
    assert!(!st.is_ready());
}
