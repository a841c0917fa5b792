//! Metrics: rillkit records through the `metrics` facade; the
//! actix-web example installs metrics-exporter-prometheus's recorder and
//! serves `/metrics`; scraping it shows the counters move.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::{RedisServer, eventually_blocking};

/// One HTTP/1.1 request; the response body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())
}

/// The value of the series whose line starts with `series` (name and
/// labels), if present.
fn value(scrape: &str, series: &str) -> Option<f64> {
    scrape
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn the_example_serves_prometheus_metrics_and_the_counters_move() {
    let redis = RedisServer::start();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(support::example_bin("actix_web"))
        .env("REDIS_URL", redis.url())
        .env("HTTP_ADDR", &addr)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let wait = Duration::from_secs(30);
    eventually_blocking("the example listens", wait, || {
        http(&addr, "GET", "/metrics", "").is_some()
    });
    for id in 1..=3 {
        let r = http(
            &addr,
            "POST",
            "/orders",
            &format!(r#"{{"id":{id},"total":9.5}}"#),
        );
        assert!(
            r.is_some_and(|b| b.contains("entry_id")),
            "order {id} accepted"
        );
    }
    let handled = r#"rillkit_entries_handled_total{stream="web-orders",group="fulfilment"}"#;
    eventually_blocking("3 handled, scraped", wait, || {
        http(&addr, "GET", "/metrics", "")
            .and_then(|m| value(&m, handled))
            .is_some_and(|v| v >= 3.0)
    });
    let scrape = http(&addr, "GET", "/metrics", "").unwrap();
    for name in [
        "rillkit_handler_duration_seconds",
        "rillkit_end_to_end_latency_seconds",
        "rillkit_ack_round_trip_seconds",
        "rillkit_handlers_in_flight",
        "rillkit_pending",
        "rillkit_dead_letters",
    ] {
        assert!(scrape.contains(name), "{name} missing:\n{scrape}");
    }
    assert_eq!(http(&addr, "GET", "/health", "").as_deref(), Some("ok"));
    assert_eq!(http(&addr, "GET", "/ready", "").as_deref(), Some("ready"));
    // The mounted dashboard, from a loopback client (its guard's rule).
    let page = http(&addr, "GET", "/rillkit/", "").expect("the dashboard answers");
    assert!(page.contains("web-orders"), "{page}");
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

/// The in-flight gauge follows the running handlers (it is brought to their
/// number once per turn of the consumer loop), up while they run and back
/// to 0 when they are done.
#[actix::test]
async fn the_in_flight_gauge_counts_the_running_handlers() {
    use rillkit::prelude::*;
    use std::sync::Arc;
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let scrape = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let redis = RedisServer::start();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let g = gate.clone();
    let stream = Stream::new("gauged", "g");
    let broker = Broker::builder(redis.url())
        .subscribe(
            &stream,
            ConsumerOptions::default().with_concurrency(3),
            move |_: u64| {
                let g = g.clone();
                async move {
                    g.acquire().await.unwrap().forget();
                    Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish_batch(&stream, 0..5u64).await.unwrap();
    let series = r#"rillkit_handlers_in_flight{stream="gauged",group="g"}"#;
    let gauge = || value(&scrape.render(), series);
    support::eventually("3 in flight", Duration::from_secs(30), || {
        gauge() == Some(3.0)
    })
    .await;
    gate.add_permits(5);
    support::eventually("none in flight", Duration::from_secs(30), || {
        gauge() == Some(0.0)
    })
    .await;
    assert!(broker.stop().await.unwrap().is_clean());
}
