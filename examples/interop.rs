//! A plain redis-rs producer and reader beside rillkit, both directions: the
//! wire format is one field `data` holding JSON.
//!
//! ```sh
//! cargo run --example interop
//! ```

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use rillkit::prelude::*;

#[actix::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let orders = Stream::new("interop-orders", "billing");
    let got: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let sink = got.clone();
    let broker = Broker::builder(url.as_str())
        .subscribe(
            &orders,
            ConsumerOptions::default()
                .with_start_id("$")
                .with_block(Duration::from_millis(300)),
            move |order: serde_json::Value| {
                let sink = sink.clone();
                async move {
                    println!("rillkit consumer got: {order}");
                    sink.lock().unwrap().push(order);
                    HandlerResult::Ok(())
                }
            },
        )
        .build()?;
    broker.start().await?;

    let mut plain = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    // 1. A plain redis-rs producer.
    let first: String = plain
        .xadd(
            "interop-orders",
            "*",
            &[("data", r#"{"id":1,"source":"redis-rs"}"#)],
        )
        .await?;
    // 2. rillkit publishes; a plain redis-rs reader reads it back.
    let second = broker
        .publish(&orders, &serde_json::json!({"id": 2, "source": "rillkit"}))
        .await?;

    let deadline = Instant::now() + Duration::from_secs(10);
    while got.lock().unwrap().len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rows: redis::streams::StreamRangeReply = plain
        .xrange("interop-orders", first.as_str(), second.as_str())
        .await?;
    for row in &rows.ids {
        let data: String = row.get("data").unwrap_or_default();
        println!("plain reader: {} data={data}", row.id);
    }
    let outcome = broker.stop().await?;
    let code = if got.lock().unwrap().len() == 2 {
        outcome.exit_code()
    } else {
        1
    };
    std::process::exit(code);
}
