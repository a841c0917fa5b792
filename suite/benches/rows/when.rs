//! Row 13 of the throughput bench (`RILLKIT_BENCH_ONLY=when`, and in the full
//! run): when work runs — how late scheduled entries reach their stream, the
//! rate a group keeps under a limit, and the order a prioritized
//! subscription drains two backlogs in.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rillkit::RateLimit;
use rillkit::prelude::*;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The `q`-quantile of sorted `v`.
fn quantile(v: &[i64], q: f64) -> i64 {
    v[((v.len() - 1) as f64 * q).round() as usize]
}

async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "bench: timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `n` entries scheduled with `publish_at` over the next 2 s (due times on
/// this machine's clock, which the local server shares), consumed by one
/// broker; lateness = the entry id's ms (when the mover added it) − its
/// due ms. Answers (p50, p99, max) in ms.
async fn delay_lateness(url: &str, n: u64) -> (i64, i64, i64) {
    let s = Stream::new("bench-later", "g");
    let got: Arc<Mutex<Vec<i64>>> = Arc::default();
    let g = got.clone();
    let broker = Broker::builder(url)
        .subscribe_message(&s, ConsumerOptions::default().with_count(100), move |m| {
            let g = g.clone();
            async move {
                let due: u64 = m.decode(&rillkit::Json).map_err(HandlerError::reject)?;
                let added = m.id.parts().map_or(0, |(ms, _)| ms);
                g.lock().unwrap().push(added as i64 - due as i64);
                HandlerResult::Ok(())
            }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let start = now_ms() + 200;
    for i in 0..n {
        let due = start + i * 2000 / n;
        let at = UNIX_EPOCH + Duration::from_millis(due);
        broker.publish_at(&s, &due, at).await.unwrap();
    }
    wait_until("every scheduled entry", || {
        got.lock().unwrap().len() as u64 >= n
    })
    .await;
    assert!(broker.stop().await.unwrap().is_clean());
    let mut late = got.lock().unwrap().clone();
    late.sort_unstable();
    (
        quantile(&late, 0.5),
        quantile(&late, 0.99),
        *late.last().unwrap(),
    )
}

/// Two consumers of one group (one broker each) under `limit`, over a
/// backlog larger than the run: entries handled per second, measured from
/// the first handled entry over `secs`.
async fn limited_rate(url: &str, limit: RateLimit, secs: u64) -> f64 {
    let s = Stream::new("bench-limited", "g");
    let mut conn = super::connect(url).await;
    super::prefill(
        &mut conn,
        "bench-limited",
        u64::from(limit.count()) * (secs + 5),
    )
    .await;
    let times: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let mut brokers = Vec::new();
    for c in ["c1", "c2"] {
        let t = times.clone();
        let broker = Broker::builder(url)
            .subscribe(
                &s,
                ConsumerOptions::default()
                    .with_consumer(c)
                    .with_concurrency(16)
                    .with_count(100)
                    .with_rate_limit(limit),
                move |_: serde_json::Value| {
                    let t = t.clone();
                    async move {
                        t.lock().unwrap().push(Instant::now());
                        HandlerResult::Ok(())
                    }
                },
            )
            .build()
            .unwrap();
        broker.start().await.unwrap();
        brokers.push(broker);
    }
    wait_until("the first entry", || !times.lock().unwrap().is_empty()).await;
    let first = times.lock().unwrap()[0];
    let window = Duration::from_secs(secs);
    tokio::time::sleep_until((first + window + Duration::from_millis(200)).into()).await;
    for b in brokers {
        assert!(b.stop().await.unwrap().is_clean());
    }
    let n = times
        .lock()
        .unwrap()
        .iter()
        .filter(|t| **t < first + window)
        .count();
    n as f64 / secs as f64
}

/// Backlogs of `n` in `hi` and `lo`, drained by one prioritized
/// subscription (concurrency 8): the share of the first `n` handled that
/// came from `hi`, and the position of `lo`'s first entry.
async fn priority_order(url: &str, n: u64) -> (f64, usize) {
    let mut conn = super::connect(url).await;
    super::prefill(&mut conn, "bench-hi", n).await;
    super::prefill(&mut conn, "bench-lo", n).await;
    let (hi, lo) = (Stream::new("bench-hi", "g"), Stream::new("bench-lo", "g"));
    let order: Arc<Mutex<Vec<bool>>> = Arc::default();
    let o = order.clone();
    let broker = Broker::builder(url)
        .subscribe_prioritized_with_context(
            &[&hi, &lo],
            ConsumerOptions::default()
                .with_concurrency(8)
                .with_count(100),
            move |_: serde_json::Value, d: rillkit::Delivery| {
                let o = o.clone();
                async move {
                    o.lock().unwrap().push(d.stream() == "bench-hi");
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    wait_until("both backlogs", || {
        order.lock().unwrap().len() as u64 >= 2 * n
    })
    .await;
    assert!(broker.stop().await.unwrap().is_clean());
    let order = order.lock().unwrap();
    let hi_first = order[..n as usize].iter().filter(|h| **h).count();
    let lo_at = order.iter().position(|h| !*h).unwrap_or(order.len());
    (hi_first as f64 / n as f64, lo_at)
}

/// Row 13.
pub async fn rows(url: &str, row: &impl Fn(&str, String)) {
    let n = 2_000;
    let (p50, p99, max) = delay_lateness(url, n).await;
    row(
        &format!("13. scheduled entries: lateness in the stream ({n} over 2 s)"),
        format!("{p50} / {p99} / {max} ms"),
    );
    row("   (p50 / p99 / max after the due time)", String::new());
    let limit = RateLimit::per_second(1_000);
    let rate = limited_rate(url, limit, 5).await;
    row(
        &format!("   rate limit {limit}, 2 consumers, backlog (5 s)"),
        format!("{rate:.0} e/s"),
    );
    let m = 5_000;
    let (share, lo_at) = priority_order(url, m).await;
    row(
        &format!("   priority hi, lo: hi's share of the first {m} handled"),
        format!("{:.1} %", share * 100.0),
    );
    row("   position of lo's first entry", format!("{lo_at}"));
}
