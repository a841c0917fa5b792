//! Feature `otel`: a handler's `rillkit.handle` span is a child
//! of the publisher's span, through the entry's `traceparent` field, with
//! spans exported by a real OpenTelemetry SDK pipeline (in memory).
#![cfg(feature = "otel")]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry::trace::{TraceContextExt, TracerProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use rillkit::TraceParent;
use rillkit::prelude::*;
use support::{RedisServer, eventually};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

const WAIT: Duration = Duration::from_secs(30);

fn handle_spans(exporter: &InMemorySpanExporter) -> Vec<SpanData> {
    exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| s.name == "rillkit.handle")
        .collect()
}

#[actix::test]
async fn the_handler_span_is_a_child_of_the_publishers_span() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let _guard = tracing::subscriber::set_default(subscriber);

    let redis = RedisServer::start();
    let orders = Stream::new("orders", "billing");
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let broker = Broker::builder(redis.url())
        .subscribe(&orders, ConsumerOptions::default(), move |_: u64| {
            let r = r.clone();
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                HandlerResult::Ok(())
            }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();

    // 1. Published inside a span of the application: its context travels.
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
    assert_eq!(handle.span_context.trace_id(), publisher_sc.trace_id());
    assert_eq!(handle.parent_span_id, publisher_sc.span_id());
    assert!(handle.parent_span_is_remote);

    // 2. An explicit traceparent (another service's).
    let tp: TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        .parse()
        .unwrap();
    broker.publish_traced(&orders, &2u64, &tp).await.unwrap();
    eventually("second handle span exported", WAIT, || {
        handle_spans(&exporter).len() == 2
    })
    .await;
    let second = handle_spans(&exporter)
        .into_iter()
        .find(|s| s.span_context.trace_id().to_string() == tp.trace_id())
        .expect("a handle span in the given trace");
    assert_eq!(second.parent_span_id.to_string(), tp.parent_id());

    // 3. Outside any span nothing is attached: the handler starts a trace.
    broker.publish(&orders, &3u64).await.unwrap();
    eventually("third handle span exported", WAIT, || {
        handle_spans(&exporter).len() == 3
    })
    .await;
    let roots = handle_spans(&exporter)
        .into_iter()
        .filter(|s| s.parent_span_id == opentelemetry::trace::SpanId::INVALID)
        .count();
    assert_eq!(roots, 1);
    assert!(broker.stop().await.unwrap().is_clean());
}
