//! Publishes a few orders, a handler prints each, then the broker stops and the
//! process exits with the outcome's exit code.
//!
//! ```sh
//! cargo run --example quickstart   # REDIS_URL, else 127.0.0.1:6379, else its own redis-server
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rillkit::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Order {
    id: u64,
    item: String,
    total: f64,
}

#[actix::main]
async fn main() {
    tracing_subscriber::fmt()
        // No colour codes when the log goes to a file or a pipe.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter("rillkit=info")
        .init();
    // REDIS_URL, else a server on 127.0.0.1:6379, else a throwaway
    // redis-server of our own (rillkit's `test-util` feature).
    let mut own_server = None;
    let url = match std::env::var("REDIS_URL") {
        Ok(url) => url,
        Err(_) if std::net::TcpStream::connect("127.0.0.1:6379").is_ok() => {
            "redis://127.0.0.1:6379".into()
        }
        Err(_) => {
            let server = rillkit::test_util::RedisServer::start()
                .expect("no Redis on 127.0.0.1:6379, and redis-server could not be started");
            println!(
                "no Redis on 127.0.0.1:6379; started redis-server at {}",
                server.url()
            );
            own_server.insert(server).url()
        }
    };

    let orders = Stream::new("quickstart-orders", "billing");
    let handled = Arc::new(AtomicUsize::new(0));
    let counter = handled.clone();
    let broker = Broker::builder(url)
        .subscribe(
            &orders,
            // Only entries published from now on: a re-run does not replay old ones.
            ConsumerOptions::default()
                .with_start_id("$")
                .with_block(Duration::from_millis(500)),
            move |order: Order| {
                let counter = counter.clone();
                async move {
                    println!(
                        "order {:>3}: {:<8} {:>7.2}",
                        order.id, order.item, order.total
                    );
                    counter.fetch_add(1, Ordering::SeqCst);
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .expect("valid configuration");

    if let Err(e) = broker.start().await {
        eprintln!("start failed: {e}");
        drop(own_server);
        std::process::exit(e.exit_code());
    }
    let batch = [
        ("coffee", 3.5),
        ("bagel", 2.25),
        ("juice", 4.0),
        ("muffin", 2.75),
    ];
    let ids = broker
        .publish_batch(
            &orders,
            batch.iter().enumerate().map(|(i, (item, total))| Order {
                id: i as u64 + 1,
                item: item.to_string(),
                total: *total,
            }),
        )
        .await
        .expect("publish");
    println!("published {} orders, first entry id {}", ids.len(), ids[0]);

    // Wait (bounded) until every order was handled, then stop.
    let deadline = Instant::now() + Duration::from_secs(10);
    while handled.load(Ordering::SeqCst) < ids.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let code = match broker.stop().await {
        Ok(outcome) if handled.load(Ordering::SeqCst) == ids.len() => {
            println!(
                "handled {} orders; exit code {}",
                ids.len(),
                outcome.exit_code()
            );
            outcome.exit_code()
        }
        Ok(_) => {
            eprintln!(
                "only {} of {} orders handled",
                handled.load(Ordering::SeqCst),
                ids.len()
            );
            1
        }
        Err(e) => {
            eprintln!("stop failed: {e}");
            e.exit_code()
        }
    };
    drop(own_server);
    std::process::exit(code);
}
