//! Typed handlers with the delivery's context: the entry id and
//! the server's delivery count beside the decoded value, a `Broker` handle to
//! publish onward with, and undecodable entries still dead-lettered before
//! they reach the handler.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rillkit::prelude::*;
use support::{RedisServer, eventually, stream_len, xadd};

const WAIT: Duration = Duration::from_secs(30);

/// (entry id, amount, delivery count, is_redelivery) of each run.
type Runs = Arc<Mutex<Vec<(String, u64, u64, bool)>>>;

#[actix_rt::test]
async fn a_typed_handler_sees_id_and_delivery_count_and_publishes_onward() {
    let redis = RedisServer::start();
    let payments = Stream::new("payments", "ledger");
    let receipts = Stream::new("receipts", "mailer");
    let runs: Runs = Default::default();
    let r = runs.clone();
    let onward = receipts.clone();
    let got: Arc<Mutex<Vec<u64>>> = Default::default();
    let g = got.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_with_context(
            &payments,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_claim_idle(Duration::from_millis(100)),
            move |amount: u64, d: Delivery| {
                let (r, onward) = (r.clone(), onward.clone());
                async move {
                    assert_eq!(
                        (d.stream(), d.group(), d.consumer()),
                        ("payments", "ledger", "c1")
                    );
                    r.lock().unwrap().push((
                        d.id().to_string(),
                        amount,
                        d.delivery_count(),
                        d.is_redelivery(),
                    ));
                    if amount == 7 && d.delivery_count() == 1 {
                        return Err(HandlerError::retry("the ledger is busy"));
                    }
                    d.broker().publish(&onward, &(amount * 100)).await?;
                    Ok(())
                }
            },
        )
        .subscribe(&receipts, ConsumerOptions::default(), move |cents: u64| {
            g.lock().unwrap().push(cents);
            async { HandlerResult::Ok(()) }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let first = broker.publish(&payments, &5u64).await.unwrap();
    let retried = broker.publish(&payments, &7u64).await.unwrap();
    let mut conn = redis.conn();
    xadd(&mut conn, "payments", "\"not a number\"");
    eventually("both receipts published onward and handled", WAIT, || {
        let mut g = got.lock().unwrap().clone();
        g.sort();
        g == vec![500, 700]
    })
    .await;
    eventually("the undecodable entry dead-lettered", WAIT, || {
        stream_len(&mut conn, "payments-dlq") == 1
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);

    let runs = runs.lock().unwrap().clone();
    assert!(runs.contains(&(first.to_string(), 5, 1, false)), "{runs:?}");
    assert!(
        runs.contains(&(retried.to_string(), 7, 1, false)),
        "{runs:?}"
    );
    assert!(
        runs.contains(&(retried.to_string(), 7, 2, true)),
        "the retry sees the server's count: {runs:?}"
    );
    assert_eq!(
        runs.len(),
        3,
        "the undecodable entry never reached the handler"
    );
}
