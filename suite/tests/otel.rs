//! Feature `otel`: spans by the OpenTelemetry messaging conventions,
//! exported by a real OpenTelemetry SDK pipeline (in memory). A publish
//! runs in a `send <stream>` producer span whose context travels as the
//! entry's `traceparent`; the handler's `process <stream>` consumer span
//! links to it, or, with `TraceLinking::Parent`, is its child.
#![cfg(feature = "otel")]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry::trace::{SpanId, SpanKind, TraceContextExt, TracerProvider};
use opentelemetry::{Key, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use rillkit::prelude::*;
use rillkit::{BatchEntry, BatchOptions, TraceLinking, TraceParent};
use support::{RedisServer, eventually};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

const WAIT: Duration = Duration::from_secs(30);

/// A thread-local subscriber exporting spans in memory.
fn pipeline() -> (InMemorySpanExporter, tracing::subscriber::DefaultGuard) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    (exporter, tracing::subscriber::set_default(subscriber))
}

/// The finished spans named `name` (their OpenTelemetry name).
fn spans_named(exporter: &InMemorySpanExporter, name: &str) -> Vec<SpanData> {
    exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| s.name == name)
        .collect()
}

fn handle_spans(exporter: &InMemorySpanExporter) -> Vec<SpanData> {
    spans_named(exporter, "process orders")
}

fn attr(span: &SpanData, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == Key::from(key.to_owned()))
        .map(|kv| kv.value.clone())
}

fn str_attr(span: &SpanData, key: &str) -> Option<String> {
    attr(span, key).map(|v| v.as_str().into_owned())
}

fn assert_attrs(span: &SpanData, expected: &[(&str, Value)]) {
    for (key, value) in expected {
        assert_eq!(
            attr(span, key).as_ref(),
            Some(value),
            "attribute {key} of {}: {:?}",
            span.name,
            span.attributes
        );
    }
}

/// The entry's `traceparent` field as stored in Redis.
fn stored_traceparent(redis: &RedisServer, stream: &str, id: &rillkit::EntryId) -> Option<String> {
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(stream)
        .arg(id.as_str())
        .arg(id.as_str())
        .query(&mut redis.conn())
        .unwrap();
    entries[0]
        .1
        .iter()
        .find(|(k, _)| k == "traceparent")
        .map(|(_, v)| v.clone())
}

#[actix::test]
async fn the_handler_span_links_to_the_send_span_by_default() {
    let (exporter, _guard) = pipeline();

    let redis = RedisServer::start();
    let orders = Stream::new("orders", "billing");
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let broker = Broker::builder(redis.url())
        .subscribe(
            &orders,
            ConsumerOptions::default().with_consumer("c1"),
            move |_: u64| {
                let r = r.clone();
                async move {
                    r.fetch_add(1, Ordering::SeqCst);
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();

    let publisher = tracing::info_span!("checkout");
    let publisher_sc = publisher.context().span().span_context().clone();
    assert!(publisher_sc.is_valid());
    let id = broker
        .publish(&orders, &1u64)
        .instrument(publisher)
        .await
        .unwrap();
    eventually("handled", WAIT, || runs.load(Ordering::SeqCst) == 1).await;
    eventually("the process span exported", WAIT, || {
        handle_spans(&exporter).len() == 1
    })
    .await;

    // The send span: a producer span, child of the publisher's.
    let sends = spans_named(&exporter, "send orders");
    assert_eq!(sends.len(), 1);
    let send = &sends[0];
    assert_eq!(send.span_kind, SpanKind::Producer);
    assert_eq!(send.span_context.trace_id(), publisher_sc.trace_id());
    assert_eq!(send.parent_span_id, publisher_sc.span_id());
    assert_attrs(
        send,
        &[
            ("messaging.system", "redis".into()),
            ("messaging.operation.name", "send".into()),
            ("messaging.operation.type", "send".into()),
            ("messaging.destination.name", "orders".into()),
            ("messaging.message.id", id.as_str().to_owned().into()),
        ],
    );
    assert_eq!(attr(send, "messaging.batch.message_count"), None);
    // The entry carries the send span's context.
    let sc = &send.span_context;
    assert_eq!(
        stored_traceparent(&redis, "orders", &id),
        Some(format!("00-{}-{}-01", sc.trace_id(), sc.span_id()))
    );

    // The process span: a consumer span starting its own trace, linked to
    // the send span.
    let handle = &handle_spans(&exporter)[0];
    assert_eq!(handle.span_kind, SpanKind::Consumer);
    assert_attrs(
        handle,
        &[
            ("messaging.system", "redis".into()),
            ("messaging.operation.name", "process".into()),
            ("messaging.operation.type", "process".into()),
            ("messaging.destination.name", "orders".into()),
            ("messaging.consumer.group.name", "billing".into()),
            ("messaging.message.id", id.as_str().to_owned().into()),
            ("messaging.client.id", "c1".into()),
            ("messaging.redis.delivery_count", Value::I64(1)),
        ],
    );
    // The fields the span had before are attributes still.
    assert_eq!(str_attr(handle, "stream").as_deref(), Some("orders"));
    assert_eq!(str_attr(handle, "entry_id").as_deref(), Some(id.as_str()));
    assert_eq!(handle.parent_span_id, SpanId::INVALID);
    assert_ne!(handle.span_context.trace_id(), sc.trace_id());
    assert_eq!(handle.links.len(), 1);
    let link = &handle.links[0].span_context;
    assert_eq!(link.trace_id(), sc.trace_id());
    assert_eq!(link.span_id(), sc.span_id());
    assert!(link.is_remote());
    assert!(broker.stop().await.unwrap().is_clean());
}

#[actix::test]
async fn the_handler_span_is_a_child_of_the_publishers_span_with_trace_linking_parent() {
    let (exporter, _guard) = pipeline();

    let redis = RedisServer::start();
    let orders = Stream::new("orders", "billing");
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let options = ConsumerOptions::default().with_trace_linking(TraceLinking::Parent);
    assert_eq!(options.trace_linking(), TraceLinking::Parent);
    let broker = Broker::builder(redis.url())
        .subscribe(&orders, options, move |_: u64| {
            let r = r.clone();
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                HandlerResult::Ok(())
            }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();

    // 1. Published inside a span of the application: the process span is
    // a remote child of the send span, itself the publisher span's child.
    let publisher = tracing::info_span!("checkout");
    let publisher_cx = publisher.context();
    let publisher_sc = publisher_cx.span().span_context().clone();
    assert!(publisher_sc.is_valid());
    broker
        .publish(&orders, &1u64)
        .instrument(publisher)
        .await
        .unwrap();
    eventually("handled", WAIT, || runs.load(Ordering::SeqCst) == 1).await;
    eventually("the handle span exported", WAIT, || {
        handle_spans(&exporter).len() == 1
    })
    .await;
    let handle = &handle_spans(&exporter)[0];
    let send = &spans_named(&exporter, "send orders")[0];
    assert_eq!(handle.span_context.trace_id(), publisher_sc.trace_id());
    assert_eq!(send.parent_span_id, publisher_sc.span_id());
    assert_eq!(handle.parent_span_id, send.span_context.span_id());
    assert!(handle.parent_span_is_remote);
    assert!(handle.links.is_empty());

    // 2. An explicit traceparent (another service's): written as given, the
    // parent of both the send span and the process span.
    let tp: TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        .parse()
        .unwrap();
    let id = broker.publish_traced(&orders, &2u64, &tp).await.unwrap();
    assert_eq!(
        stored_traceparent(&redis, "orders", &id),
        Some(tp.to_string())
    );
    eventually("second handle span exported", WAIT, || {
        handle_spans(&exporter).len() == 2
    })
    .await;
    let second = handle_spans(&exporter)
        .into_iter()
        .find(|s| s.span_context.trace_id().to_string() == tp.trace_id())
        .expect("a handle span in the given trace");
    assert_eq!(second.parent_span_id.to_string(), tp.parent_id());
    let traced_send = spans_named(&exporter, "send orders")
        .into_iter()
        .find(|s| s.span_context.trace_id().to_string() == tp.trace_id())
        .expect("a send span in the given trace");
    assert_eq!(traced_send.parent_span_id.to_string(), tp.parent_id());

    // 3. Outside any span nothing is attached: the handler starts a trace.
    let id = broker.publish(&orders, &3u64).await.unwrap();
    assert_eq!(stored_traceparent(&redis, "orders", &id), None);
    eventually("third handle span exported", WAIT, || {
        handle_spans(&exporter).len() == 3
    })
    .await;
    let roots = handle_spans(&exporter)
        .into_iter()
        .filter(|s| s.parent_span_id == SpanId::INVALID)
        .count();
    assert_eq!(roots, 1);
    assert!(broker.stop().await.unwrap().is_clean());
}

#[actix::test]
async fn a_batch_publish_and_a_batch_handler_are_spans_of_their_entries() {
    let (exporter, _guard) = pipeline();

    let redis = RedisServer::start();
    let orders = Stream::new("orders", "billing");
    let handled = Arc::new(AtomicUsize::new(0));
    let h = handled.clone();
    let broker = Broker::builder(redis.url())
        .subscribe_batch(
            &orders,
            ConsumerOptions::default().with_consumer("c1"),
            BatchOptions::new()
                .with_max_entries(10)
                .with_max_wait(Duration::from_millis(100)),
            move |batch: Vec<BatchEntry<u64>>| {
                let h = h.clone();
                async move {
                    h.fetch_add(batch.len(), Ordering::SeqCst);
                    anyhow::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();

    let ids = broker
        .publish_batch(&orders, [1u64, 2])
        .instrument(tracing::info_span!("checkout"))
        .await
        .unwrap();
    eventually("both handled", WAIT, || handled.load(Ordering::SeqCst) == 2).await;
    let batches = || spans_named(&exporter, "process orders");
    let counted = |spans: &[SpanData]| {
        spans
            .iter()
            .map(|s| match attr(s, "messaging.batch.message_count") {
                Some(Value::I64(n)) => n,
                other => panic!("message count {other:?}"),
            })
            .sum::<i64>()
    };
    eventually("the batch spans exported", WAIT, || {
        counted(&batches()) == 2
    })
    .await;

    let sends = spans_named(&exporter, "send orders");
    assert_eq!(sends.len(), 1);
    let send = &sends[0];
    assert_eq!(send.span_kind, SpanKind::Producer);
    assert_attrs(
        send,
        &[
            ("messaging.system", "redis".into()),
            ("messaging.operation.name", "send".into()),
            ("messaging.operation.type", "send".into()),
            ("messaging.destination.name", "orders".into()),
            ("messaging.batch.message_count", Value::I64(2)),
        ],
    );
    assert_eq!(attr(send, "messaging.message.id"), None);
    let sc = &send.span_context;
    for id in &ids {
        assert_eq!(
            stored_traceparent(&redis, "orders", id),
            Some(format!("00-{}-{}-01", sc.trace_id(), sc.span_id()))
        );
    }

    // Each batch span links to its entries' send span, once per entry.
    for batch in batches() {
        assert_eq!(batch.span_kind, SpanKind::Consumer);
        assert_attrs(
            &batch,
            &[
                ("messaging.system", "redis".into()),
                ("messaging.operation.name", "process".into()),
                ("messaging.operation.type", "process".into()),
                ("messaging.destination.name", "orders".into()),
                ("messaging.consumer.group.name", "billing".into()),
                ("messaging.client.id", "c1".into()),
            ],
        );
        assert_eq!(batch.parent_span_id, SpanId::INVALID);
        let Some(Value::I64(n)) = attr(&batch, "messaging.batch.message_count") else {
            unreachable!()
        };
        assert_eq!(batch.links.len(), n as usize);
        for link in batch.links.iter() {
            assert_eq!(link.span_context.trace_id(), sc.trace_id());
            assert_eq!(link.span_context.span_id(), sc.span_id());
        }
    }
    assert!(broker.stop().await.unwrap().is_clean());
}
