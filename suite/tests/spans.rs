//! Tracing: each handler runs inside a span carrying stream,
//! group, consumer, entry id and delivery count, so the application's own
//! log lines inside a handler carry them.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rillkit::prelude::*;
use support::{RedisServer, eventually};

/// Collects what the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A plain-text subscriber for this thread, writing into a buffer.
fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let out = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || out.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}

#[actix_rt::test]
async fn a_handlers_own_log_line_names_the_entry() {
    let (captured, _guard) = capture();

    let redis = RedisServer::start();
    let s = Stream::new("orders", "billing");
    let broker = Broker::builder(redis.url())
        .subscribe(
            &s,
            ConsumerOptions::default().with_consumer("c1"),
            |order: u64| async move {
                tracing::info!(order, "charging the card");
                HandlerResult::Ok(())
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let id = broker.publish(&s, &42u64).await.unwrap();
    let line = || {
        String::from_utf8_lossy(&captured.0.lock().unwrap())
            .lines()
            .find(|l| l.contains("charging the card"))
            .map(str::to_owned)
    };
    eventually("the handler logged", Duration::from_secs(10), || {
        line().is_some()
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    let line = line().unwrap();
    for part in [
        "rillkit.handle".to_owned(),
        "stream=orders".to_owned(),
        "group=billing".to_owned(),
        "consumer=c1".to_owned(),
        format!("entry_id={id}"),
        "delivery_count=1".to_owned(),
        "order=42".to_owned(),
    ] {
        assert!(line.contains(&part), "{part:?} missing from: {line}");
    }
}

/// A `traceparent` given at publish travels as the entry's own field; the
/// consumer's span records it, and the handler can read it.
#[actix_rt::test]
async fn a_published_traceparent_is_recorded_by_the_consumers_span() {
    let (captured, _guard) = capture();

    let redis = RedisServer::start();
    let s = Stream::new("orders", "billing");
    let seen: Arc<Mutex<Vec<Option<rillkit::TraceParent>>>> = Default::default();
    let seen2 = seen.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_message(&s, ConsumerOptions::default(), move |msg: Message| {
            seen2.lock().unwrap().push(rillkit::TraceParent::of(&msg));
            let v: u64 = msg.decode(&rillkit::Json).unwrap();
            tracing::info!(v, "traced handler ran");
            async { HandlerResult::Ok(()) }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let tp: rillkit::TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        .parse()
        .unwrap();
    let id = broker.publish_traced(&s, &7u64, &tp).await.unwrap();
    broker.publish(&s, &8u64).await.unwrap();
    eventually("both ran", Duration::from_secs(10), || {
        seen.lock().unwrap().len() == 2
    })
    .await;
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    assert_eq!(*seen.lock().unwrap(), vec![Some(tp.clone()), None]);
    let fields: Vec<(String, String)> = redis::cmd("XRANGE")
        .arg("orders")
        .arg(id.as_str())
        .arg(id.as_str())
        .query::<Vec<(String, Vec<(String, String)>)>>(&mut redis.conn())
        .unwrap()
        .remove(0)
        .1;
    assert_eq!(
        fields,
        vec![
            ("data".to_owned(), "7".to_owned()),
            ("traceparent".to_owned(), tp.to_string())
        ]
    );
    let text = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("traced handler ran"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].contains(&format!("traceparent={tp}")) && lines[0].contains("v=7"),
        "{}",
        lines[0]
    );
    assert!(!lines[1].contains("traceparent"), "{}", lines[1]);
}

/// Consumer hygiene: every connection carries a name in
/// `CLIENT LIST`, set again after a reconnect.
#[actix_rt::test]
async fn connections_are_named_and_named_again_after_a_reconnect() {
    let redis = RedisServer::start();
    let names = || -> Vec<String> {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut redis.conn())
            .unwrap();
        list.lines()
            .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("name=")))
            .filter(|n| n.starts_with("rillkit:"))
            .map(str::to_owned)
            .collect()
    };
    let broker = Broker::builder(redis.url())
        .subscribe(
            &Stream::new("orders", "billing"),
            ConsumerOptions::default()
                .with_consumer("c 1")
                .with_block(Duration::from_millis(100)),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let expected = |names: &[String]| {
        names.iter().any(|n| n == "rillkit:billing:c_1:reader")
            && names
                .iter()
                .any(|n| n.starts_with("rillkit:") && n.ends_with(":shared"))
    };
    eventually("named connections", Duration::from_secs(10), || {
        expected(&names())
    })
    .await;
    let () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut redis.conn())
        .map(|_: i64| ())
        .unwrap();
    // Both kinds reconnect and are named again: the reader at its next read,
    // the shared connections at the next command that meets the dead one.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !expected(&names()) {
        assert!(
            std::time::Instant::now() < deadline,
            "not named again: {:?}",
            names()
        );
        let _ = broker
            .publish(&Stream::new("orders", "billing"), &1u64)
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(broker.phase(), Phase::Running);
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}
