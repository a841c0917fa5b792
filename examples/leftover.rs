//! Five entries, `count` 10, a slow handler, a stop in the middle of the batch:
//! the entries fetched but not started stay pending, handed back to the group
//! so another consumer can take them at once.
//!
//! ```sh
//! cargo run --example leftover
//! ```

use std::time::Duration;

use rillkit::prelude::*;

#[actix::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter("rillkit=warn")
        .init();
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let stream_key = format!("leftover-{}", std::process::id());
    let tasks = Stream::new(stream_key.as_str(), "g");
    let broker = Broker::builder(url.as_str())
        .subscribe(
            &tasks,
            ConsumerOptions::default()
                .consumer("c1")
                .block(Duration::from_millis(200))
                .count(10),
            |task: serde_json::Value| async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                println!("handled {task}");
                Ok(())
            },
        )
        .build()?;
    broker.start().await?;
    broker
        .publish_batch(&tasks, (0..5).map(|n| serde_json::json!({ "n": n })))
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let outcome = broker.stop().await?;

    let mut c = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let summary: (usize, Option<String>, Option<String>, redis::Value) = redis::cmd("XPENDING")
        .arg(&stream_key)
        .arg("g")
        .query_async(&mut c)
        .await?;
    println!("pending after stop: {}", summary.0);
    let _: () = redis::cmd("DEL")
        .arg(&stream_key)
        .query_async(&mut c)
        .await?;
    std::process::exit(outcome.exit_code());
}
