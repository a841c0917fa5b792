//! An actix-web service that publishes from an HTTP endpoint while rillkit
//! consumes in the same actix System. SIGTERM (or Ctrl-C) stops the HTTP server
//! gracefully, then the broker drains; the process exits with the outcome's code.
//!
//! ```sh
//! cargo run -p rillkit-actix-web-example &
//! curl -s -XPOST localhost:8080/orders -H 'content-type: application/json' -d '{"id":1,"total":9.5}'
//! kill -TERM %1
//! ```
//!
//! `GET /health` answers while the process runs (liveness), `GET /ready`
//! while the broker runs and every subscription reads (readiness, from
//! `Broker::status`). `GET /metrics` serves rillkit's metrics as Prometheus text
//! (metrics-exporter-prometheus's recorder, installed here: rillkit itself
//! installs none). `/rillkit/` serves the dashboard (the package `rillkit-dashboard`),
//! behind a guard that lets only loopback clients in: reach it through
//! `kubectl port-forward` or an SSH tunnel, or replace the guard with the
//! application's own authentication (behind a reverse proxy or sidecar on
//! the same host, every client comes from loopback). `HTTP_ADDR` sets the listen address
//! (default `127.0.0.1:8080`), `REDIS_URL` the server (default
//! `redis://127.0.0.1:6379`).
//!
//! The dashboard shows the example's own stream; `RILLKIT_DASHBOARD_STREAMS`
//! adds the server's: `all` shows every stream on the server (`SCAN … TYPE
//! stream` on each refresh), a comma-separated list shows those streams:
//!
//! ```sh
//! RILLKIT_DASHBOARD_STREAMS=all cargo run -p rillkit-actix-web-example
//! # then open http://127.0.0.1:8080/rillkit/
//! ```

use std::time::Duration;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::{Next, from_fn};
use actix_web::{App, HttpResponse, HttpServer, web};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use rillkit::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Order {
    id: u64,
    total: f64,
}

/// The dashboard's guard: loopback clients only. The dashboard has no login
/// of its own and can redrive and delete dead letters: never expose it
/// unauthenticated. Put your own authentication here.
async fn operators_only(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    if req.peer_addr().is_some_and(|a| a.ip().is_loopback()) {
        next.call(req).await
    } else {
        Err(actix_web::error::ErrorForbidden(
            "the dashboard is for operators",
        ))
    }
}

async fn create_order(
    broker: web::Data<Broker>,
    stream: web::Data<Stream>,
    order: web::Json<Order>,
) -> HttpResponse {
    match broker.publish(&stream, &order.into_inner()).await {
        Ok(id) => HttpResponse::Accepted().json(serde_json::json!({ "entry_id": id.as_str() })),
        Err(e) if e.is_retryable() => HttpResponse::ServiceUnavailable().body(e.to_string()),
        Err(e) => HttpResponse::InternalServerError().body(e.to_string()),
    }
}

/// Liveness: the process answers.
async fn health() -> HttpResponse {
    HttpResponse::Ok().body("ok")
}

/// Readiness: the broker is running and every subscription reads.
async fn ready(broker: web::Data<Broker>) -> HttpResponse {
    let status = broker.status();
    if status.is_ready() {
        HttpResponse::Ok().body("ready")
    } else {
        HttpResponse::ServiceUnavailable().body(format!("{status:?}"))
    }
}

async fn metrics(handle: web::Data<PrometheusHandle>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(handle.render())
}

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    tracing_subscriber::fmt()
        // No colour codes when the log goes to a file or a pipe.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter("rillkit=info")
        .init();
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let addr = std::env::var("HTTP_ADDR").unwrap_or_else(|_| "127.0.0.1:8080".into());

    // Histograms with buckets (seconds), which Prometheus can aggregate
    // across pods, rather than the exporter's default summaries; they are
    // also cheaper to keep up.
    let prometheus = PrometheusBuilder::new()
        .set_buckets(&[
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ])
        .expect("buckets are given")
        .install_recorder()
        .expect("install the Prometheus recorder");
    let orders = Stream::new("web-orders", "fulfilment");
    let broker = Broker::builder(url)
        // actix-web owns SIGINT/SIGTERM here; the broker stops when the server
        // has stopped (run_until below).
        .handle_signals(false)
        .shutdown_timeout(Duration::from_secs(10))
        .subscribe(
            &orders,
            ConsumerOptions::default(),
            |order: Order| async move {
                println!("fulfilling order {} ({:.2})", order.id, order.total);
                HandlerResult::Ok(())
            },
        )
        .build()
        .expect("valid configuration");

    // RILLKIT_SERVER_METRICS=1: also export every stream and group on the
    // server (other services' too), every 30 s, at most 200 groups.
    if std::env::var("RILLKIT_SERVER_METRICS").as_deref() == Ok("1") {
        let b = broker.clone();
        actix_web::rt::spawn(async move {
            match rillkit::admin::Admin::for_broker(&b).await {
                Ok(admin) => rillkit::admin::ServerMetrics::new().run(admin).await,
                Err(e) => eprintln!("server-wide metrics off: {e}"),
            }
        });
    }
    let (b, s) = (broker.clone(), orders.clone());
    let dashboard = match std::env::var("RILLKIT_DASHBOARD_STREAMS").as_deref() {
        Ok("all") => rillkit_dashboard::Dashboard::new(broker.clone()).all_streams(true),
        Ok(names) => rillkit_dashboard::Dashboard::new(broker.clone()).streams(
            names
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(String::from),
        ),
        Err(_) => rillkit_dashboard::Dashboard::new(broker.clone()),
    };
    let server = HttpServer::new(move || {
        App::new()
            .service(dashboard.scope("/rillkit").wrap(from_fn(operators_only)))
            .app_data(web::Data::new(b.clone()))
            .app_data(web::Data::new(s.clone()))
            .app_data(web::Data::new(prometheus.clone()))
            .route("/orders", web::post().to(create_order))
            .route("/metrics", web::get().to(metrics))
            .route("/health", web::get().to(health))
            .route("/ready", web::get().to(ready))
    })
    .bind(&addr)?
    .shutdown_timeout(10)
    .run();
    println!("listening on http://{addr}");

    // Start the broker, serve until the server stops (first SIGTERM: graceful
    // HTTP stop), then drain the consumers.
    let code = match broker.run_until(server).await {
        Ok(outcome) => outcome.exit_code(),
        Err(e) => {
            eprintln!("broker failed: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code);
}
