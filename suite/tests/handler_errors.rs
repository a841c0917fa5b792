//! Handlers return ordinary results: `anyhow::Result<()>` with `bail!`,
//! `ensure!` and `.context(…)?`, `Box<dyn Error>`, `String`, and an
//! application's own error type, in typed, context and whole-message
//! handlers, for streams, lists and channels. The dead letter's `error`
//! keeps the whole chain; a `Reject` anywhere in it dead-letters at once.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use redis::Commands as _;
use rillkit::prelude::*;
use rillkit::{BoxError, ItemDelivery, Reject, RetryBackoff};
use serde::{Deserialize, Serialize};
use support::{RedisServer, eventually, pending_count};

const WAIT: Duration = Duration::from_secs(30);

#[derive(Serialize, Deserialize)]
struct Order {
    id: u64,
    qty: String,
    total: f64,
}

fn order(id: u64, qty: &str, total: f64) -> Order {
    Order {
        id,
        qty: qty.into(),
        total,
    }
}

async fn check(order: &Order) -> anyhow::Result<()> {
    let qty: u32 = order.qty.parse().context("bad qty")?;
    anyhow::ensure!(qty > 0, "an order of nothing");
    if order.total < 0.0 {
        anyhow::bail!(Reject::new("negative total"));
    }
    Ok(())
}

/// Runs per order id.
type Runs = Arc<Mutex<HashMap<u64, u32>>>;

fn count(runs: &Runs, id: u64) {
    *runs.lock().unwrap().entry(id).or_default() += 1;
}

fn opts() -> ConsumerOptions {
    ConsumerOptions::default()
        .with_consumer("c1")
        .with_block(Duration::from_millis(50))
        .with_max_retries(2)
        .with_retry_backoff(RetryBackoff::fixed(Duration::from_millis(10)))
}

/// The dead letters' `error` fields, by the origin entry's order id.
fn stream_dead_letters(conn: &mut redis::Connection, key: &str) -> HashMap<u64, String> {
    let reply: redis::streams::StreamRangeReply = conn.xrange_all(key).unwrap();
    reply
        .ids
        .iter()
        .map(|e| {
            let data: String = e.get("data").expect("the entry's data");
            let o: Order = serde_json::from_str(&data).unwrap();
            (o.id, e.get::<String>("error").expect("an error field"))
        })
        .collect()
}

#[actix_rt::test]
async fn an_anyhow_handler_dead_letters_with_the_whole_chain_and_a_reject_at_once() {
    support::init_tracing();
    let redis = RedisServer::start();
    let orders = Stream::new("orders", "billing");
    let invoices = Stream::new("invoices", "mailer");
    let runs: Runs = Default::default();
    let r = runs.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_with_context(&orders, opts(), move |o: Order, d: Delivery| {
            count(&r, o.id);
            let invoices = invoices.clone();
            async move {
                check(&o).await.with_context(|| format!("order {}", o.id))?;
                d.broker().publish(&invoices, &o.total).await?;
                anyhow::Ok(())
            }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    for o in [
        order(1, "2", 10.0),
        order(30, "x", 5.0),
        order(31, "0", 5.0),
        order(32, "1", -5.0),
    ] {
        broker.publish(&orders, &o).await.unwrap();
    }
    let mut conn = redis.conn();
    eventually("three dead letters", WAIT, || {
        stream_dead_letters(&mut conn, "orders-dlq").len() == 3
    })
    .await;
    let letters = stream_dead_letters(&mut conn, "orders-dlq");
    assert_eq!(
        letters[&30], "order 30: bad qty: invalid digit found in string",
        "the context and its cause"
    );
    assert_eq!(letters[&31], "order 31: an order of nothing");
    assert_eq!(letters[&32], "rejected: order 32: negative total");
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs[&1], 1, "a success runs once");
    assert_eq!(runs[&30], 3, "bail! and ? retry: 1 run + 2 retries");
    assert_eq!(runs[&31], 3, "ensure! retries");
    assert_eq!(
        runs[&32], 1,
        "a Reject under a context is dead-lettered at once"
    );
    let invoices_len: usize = conn.xlen("invoices").unwrap();
    assert_eq!(invoices_len, 1, "the good order published onward");
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    assert_eq!(pending_count(&mut conn, "orders", "billing"), 0);
}

/// An application's own error type, whose cause is a `source()`.
#[derive(Debug)]
enum LedgerError {
    Unavailable(std::io::Error),
}

impl std::fmt::Display for LedgerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LedgerError::Unavailable(_) => f.write_str("the ledger is unavailable"),
        }
    }
}

impl std::error::Error for LedgerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LedgerError::Unavailable(e) => Some(e),
        }
    }
}

#[actix_rt::test]
async fn own_error_types_boxed_errors_and_strings_keep_their_sources() {
    support::init_tracing();
    let redis = RedisServer::start();
    let typed = Stream::new("typed", "g");
    let whole = Stream::new("whole", "g");
    let text = Stream::new("text", "g");
    let broker = Broker::builder(redis.url())
        .subscribe(&typed, opts(), |_: Order| async {
            let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
            Err::<(), _>(LedgerError::Unavailable(refused))
        })
        .subscribe_message(&whole, opts(), |m: Message| async move {
            let o: Order = m.decode(&Json)?;
            let e: BoxError = format!("order {} has no customer", o.id).into();
            Err::<(), BoxError>(e)
        })
        .subscribe(&text, opts(), |o: Order| async move {
            Err::<(), String>(format!("order {}: out of stock", o.id))
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish(&typed, &order(1, "1", 1.0)).await.unwrap();
    broker.publish(&whole, &order(2, "1", 1.0)).await.unwrap();
    broker.publish(&text, &order(3, "1", 1.0)).await.unwrap();
    let mut conn = redis.conn();
    eventually("a dead letter on each", WAIT, || {
        ["typed-dlq", "whole-dlq", "text-dlq"]
            .iter()
            .all(|k| stream_dead_letters(&mut conn, k).len() == 1)
    })
    .await;
    assert_eq!(
        stream_dead_letters(&mut conn, "typed-dlq")[&1],
        "the ledger is unavailable: refused",
        "the source walked"
    );
    assert_eq!(
        stream_dead_letters(&mut conn, "whole-dlq")[&2],
        "order 2 has no customer"
    );
    assert_eq!(
        stream_dead_letters(&mut conn, "text-dlq")[&3],
        "order 3: out of stock"
    );
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

#[actix_rt::test]
async fn list_and_channel_handlers_return_anyhow_results() {
    support::init_tracing();
    let redis = RedisServer::start();
    let jobs = List::new("jobs");
    let events = Channel::new("events");
    let heard: Runs = Default::default();
    let h = heard.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_list_with_context(
            &jobs,
            ListOptions::default()
                .with_max_retries(1)
                .with_retry_backoff(RetryBackoff::fixed(Duration::from_millis(10))),
            |o: Order, d: ItemDelivery| async move {
                check(&o)
                    .await
                    .with_context(|| format!("order {} run {}", o.id, d.attempt()))
            },
        )
        .subscribe_channel(&events, ChannelOptions::default(), move |o: Order| {
            count(&h, o.id);
            async move { check(&o).await }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker
        .publish_list(&jobs, &order(40, "many", 1.0))
        .await
        .unwrap();
    let mut conn = redis.conn();
    eventually("the list item dead-lettered", WAIT, || {
        conn.llen::<_, usize>("jobs-dlq").unwrap() == 1
    })
    .await;
    let letters: Vec<String> = conn.lrange("jobs-dlq", 0, -1).unwrap();
    let letter: serde_json::Value = serde_json::from_str(&letters[0]).unwrap();
    assert_eq!(
        letter["error"], "order 40 run 2: bad qty: invalid digit found in string",
        "{letter}"
    );
    eventually("the channel message handled", WAIT, || {
        let _ = redis::cmd("PUBLISH")
            .arg("events")
            .arg(r#"{"id":41,"qty":"1","total":1.0}"#)
            .query::<i64>(&mut conn);
        heard.lock().unwrap().contains_key(&41)
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}
