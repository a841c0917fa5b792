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
    // Another service's stream, which the dashboard shows only when told to
    // show the server's streams (`RILLKIT_DASHBOARD_STREAMS=all`).
    let _: String = redis::cmd("XADD")
        .arg("other-service")
        .arg("*")
        .arg("data")
        .arg("{}")
        .query(&mut redis.conn())
        .expect("XADD");
    let mut child = Command::new(support::web_example_bin())
        .env("REDIS_URL", redis.url())
        .env("HTTP_ADDR", &addr)
        .env("RILLKIT_DASHBOARD_STREAMS", "all")
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
    assert!(
        page.contains("other-service"),
        "RILLKIT_DASHBOARD_STREAMS=all shows the server's streams: {page}"
    );
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
                    HandlerResult::Ok(())
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

/// Every rillkit series has its `# HELP`; the restart counter and the
/// subscription's state gauges exist from the start (0 restarts, `running`
/// 1 and the other states 0); readiness turns false while Redis stalls
/// (`CLIENT PAUSE … ALL`) and true again after.
#[actix::test]
async fn help_text_series_from_the_start_and_readiness_while_redis_stalls() {
    use rillkit::prelude::*;
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let scrape = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let redis = RedisServer::start();
    let stream = Stream::new("described", "g");
    let broker = Broker::builder(redis.url())
        .status_period(Duration::from_millis(200))
        .subscribe(&stream, ConsumerOptions::default(), |_: u64| async {
            HandlerResult::Ok(())
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    broker.publish(&stream, &1u64).await.unwrap();
    let labels = r#"{stream="described",group="g"}"#;
    support::eventually("handled and polled", Duration::from_secs(30), || {
        let text = scrape.render();
        value(&text, &format!("rillkit_entries_handled_total{labels}")) == Some(1.0)
            && value(&text, &format!("rillkit_pending{labels}")).is_some()
    })
    .await;
    let text = scrape.render();
    let names: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .filter(|n| n.starts_with("rillkit_"))
        .map(|n| {
            n.trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count")
        })
        .collect();
    assert!(names.len() >= 10, "{names:?}");
    for name in &names {
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "no HELP for {name}:\n{text}"
        );
    }
    assert_eq!(
        value(&text, &format!("rillkit_consumer_restarts_total{labels}")),
        Some(0.0),
        "the restart counter is there before any restart:\n{text}"
    );
    let state = |s: &str| {
        value(
            &scrape.render(),
            &format!(r#"rillkit_subscription_state{{stream="described",group="g",state="{s}"}}"#),
        )
    };
    assert_eq!(state("running"), Some(1.0));
    assert_eq!(state("reconnecting"), Some(0.0));
    assert_eq!(state("failed"), Some(0.0));
    assert!(broker.status().is_ready());

    // A stalled server: every command waits. Readiness follows.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(3000)
        .arg("ALL")
        .query(&mut redis.conn())
        .unwrap();
    support::eventually(
        "unready while Redis stalls",
        Duration::from_secs(30),
        || {
            let s = broker.status();
            !s.redis_reachable && !s.is_ready()
        },
    )
    .await;
    support::eventually("ready again after", Duration::from_secs(30), || {
        broker.status().is_ready()
    })
    .await;
    assert!(broker.stop().await.unwrap().is_clean());
}

/// The alert rules in `deploy/prometheus/` name only metrics rillkit
/// exports (the guide's table, `docs/guide/src/operating.md`) and only
/// their states.
#[test]
fn the_alert_rules_name_only_metrics_that_exist() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let rules = std::fs::read_to_string(root.join("deploy/prometheus/rillkit-alerts.yml")).unwrap();
    let guide = std::fs::read_to_string(root.join("docs/guide/src/operating.md")).unwrap();
    let mut named = 0;
    for word in rules.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("rillkit_") {
            named += 1;
            assert!(
                guide.contains(&format!("| `{word}` |")),
                "{word} is not in the guide's metrics table"
            );
        }
    }
    assert!(named >= 7, "the rules name rillkit's metrics");
    for state in ["reconnecting", "restarting", "waiting_for_lease", "failed"] {
        assert!(
            rillkit::SubscriptionState::NAMES.contains(&state),
            "{state}"
        );
    }
}

/// The server-wide collector exports groups this process does not consume
/// (here: no broker consumes at all), skips dead-letter streams as streams,
/// and keeps to its cap.
#[actix::test]
async fn the_server_wide_collector_exports_every_group_within_its_cap() {
    use rillkit::admin::{Admin, ServerMetrics};
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let scrape = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    let redis = RedisServer::start();
    let mut c = redis.conn();
    let run = |c: &mut redis::Connection, args: &[&str]| {
        let _: redis::Value = redis::cmd(args[0]).arg(&args[1..]).query(c).unwrap();
    };
    run(
        &mut c,
        &["XGROUP", "CREATE", "orders", "billing", "0", "MKSTREAM"],
    );
    run(&mut c, &["XADD", "orders", "*", "data", "1"]);
    run(&mut c, &["XADD", "orders", "*", "data", "2"]);
    // One delivered to a consumer and not acked; one not delivered yet.
    run(
        &mut c,
        &[
            "XREADGROUP",
            "GROUP",
            "billing",
            "w1",
            "COUNT",
            "1",
            "STREAMS",
            "orders",
            ">",
        ],
    );
    run(&mut c, &["XADD", "orders-dlq", "*", "data", "x"]);
    run(&mut c, &["XGROUP", "CREATE", "audit", "a", "$", "MKSTREAM"]);
    run(&mut c, &["XGROUP", "CREATE", "audit", "b", "$"]);

    let admin = Admin::connect(&redis.url()).await.unwrap();
    let capped = ServerMetrics::new().with_max_groups(2);
    let done = capped.collect(&admin).await.unwrap();
    assert_eq!(
        (done.streams, done.groups, done.skipped),
        (2, 2, 1),
        "{done:?}"
    );
    let all = ServerMetrics::new().collect(&admin).await.unwrap();
    assert_eq!((all.groups, all.skipped), (3, 0));

    let text = scrape.render();
    let orders = r#"{stream="orders",group="billing"}"#;
    assert_eq!(
        value(&text, &format!("rillkit_pending{orders}")),
        Some(1.0),
        "{text}"
    );
    assert_eq!(value(&text, &format!("rillkit_lag{orders}")), Some(1.0));
    assert_eq!(
        value(&text, &format!("rillkit_consumers{orders}")),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            r#"rillkit_dead_letters{stream="orders",dlq="orders-dlq"}"#
        ),
        Some(1.0),
        "{text}"
    );
    // Two groups share audit's dead-letter stream: one series, so a sum
    // over the groups does not count it twice.
    let audit_dead_letters = text
        .lines()
        .filter(|l| l.starts_with(r#"rillkit_dead_letters{stream="audit""#))
        .count();
    assert_eq!(audit_dead_letters, 1, "{text}");
    assert!(
        value(
            &text,
            &format!("rillkit_oldest_pending_age_seconds{orders}")
        )
        .is_some(),
        "{text}"
    );
    for g in ["a", "b"] {
        let audit = format!(r#"{{stream="audit",group="{g}"}}"#);
        assert_eq!(
            value(&text, &format!("rillkit_pending{audit}")),
            Some(0.0),
            "{text}"
        );
    }
    assert!(
        !text.contains(r#"stream="orders-dlq""#),
        "a dead-letter stream is not a stream of its own:\n{text}"
    );
    assert_eq!(value(&text, "rillkit_server_metrics_groups "), Some(3.0));
    assert!(text.contains("# HELP rillkit_consumers "), "{text}");
}
