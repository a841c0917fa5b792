//! Five entries, `count` 10, a slow handler, a stop in the middle: what is left,
//! and where.
//!
//! rillkit fetches no faster than its handlers start entries (beyond what they
//! get through in one Redis round trip), so a slow consumer holds nothing
//! unstarted: the entries it did not reach are still undelivered in the stream
//! (the group's lag) and go to the next consumer at once, not after
//! `claim_idle`. Anything that was fetched but not started when the stop came
//! would be handed back to the group the same way.
//!
//! ```sh
//! cargo run --example leftover
//! ```

use std::time::Duration;

use rillkit::prelude::*;

#[actix::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        // No colour codes when the log goes to a file or a pipe.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter("rillkit=warn")
        .init();
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let stream_key = format!("leftover-{}", std::process::id());
    let tasks = Stream::new(stream_key.as_str(), "g");
    let broker = Broker::builder(url.as_str())
        .subscribe(
            &tasks,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(Duration::from_millis(200))
                .with_count(10),
            |task: serde_json::Value| async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                println!("handled {task}");
                HandlerResult::Ok(())
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
    let groups: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(&stream_key)
        .query_async(&mut c)
        .await?;
    let lag = match groups.first().and_then(|g| g.get("lag")) {
        Some(redis::Value::Int(n)) => n.to_string(),
        _ => "unknown".into(),
    };
    println!("pending after stop (fetched, not acked): {}", summary.0);
    println!("not yet delivered (group lag): {lag}");
    let _: () = redis::cmd("DEL")
        .arg(&stream_key)
        .query_async(&mut c)
        .await?;
    std::process::exit(outcome.exit_code());
}
