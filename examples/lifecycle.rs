//! The four lifecycle hooks print in order around the consumer's start and stop
//! log lines; `on_shutdown` shows the connection still answers PING and
//! `after_shutdown` that it is closed.
//!
//! ```sh
//! cargo run --example lifecycle
//! ```

use std::time::Duration;

use rillkit::prelude::*;

#[actix::main]
async fn main() {
    tracing_subscriber::fmt()
        // No colour codes when the log goes to a file or a pipe.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter("rillkit=info")
        .without_time()
        .with_target(false)
        .init();
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());

    let broker = Broker::builder(url)
        .on_startup(|_| async {
            println!("1. on_startup: nothing connected yet");
            Ok(())
        })
        .after_startup(|_| async {
            println!("2. after_startup: groups exist, consumers are running");
            Ok(())
        })
        .on_shutdown(|broker: Broker| async move {
            let ping = broker.ping().await.is_ok();
            println!("3. on_shutdown: consumers finished, connection still answers PING: {ping}");
            Ok(())
        })
        .after_shutdown(|broker: Broker| async move {
            let closed = broker.ping().await.is_err();
            println!("4. after_shutdown: connections closed: {closed}");
            Ok(())
        })
        .subscribe(
            &Stream::new("lifecycle-tasks", "g"),
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_block(Duration::from_millis(200)),
            |_task: serde_json::Value| async { HandlerResult::Ok(()) },
        )
        .build()
        .expect("valid configuration");

    if let Err(e) = broker.start().await {
        eprintln!("start failed: {e}");
        std::process::exit(e.exit_code());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let code = broker
        .stop()
        .await
        .map_or_else(|e| e.exit_code(), |o| o.exit_code());
    std::process::exit(code);
}
