//! TLS against real `redis-server --tls-port` servers (`TlsRedis`, which
//! speaks nothing but TLS): a private CA, mutual TLS, a wrong CA, no
//! verification, TLS options on a `redis://` URL, and a `rediss://` URL with
//! no `Tls` in a process that has no rustls crypto provider yet.

mod support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rillkit::prelude::*;
use rillkit::{BrokerBuilder, ConfigError, Phase, Tls};
use serde::{Deserialize, Serialize};
use support::{TlsRedis, eventually};

/// How long a round trip may take before the test fails.
const WAIT: Duration = Duration::from_secs(15);
/// A bound on `start()` / `stop()` calls that must fail or finish, not hang.
const BOUND: Duration = Duration::from_secs(20);
/// Entries published per round trip.
const N: usize = 25;

#[derive(Debug, Serialize, Deserialize)]
struct Order {
    id: u64,
}

fn fast() -> ConsumerOptions {
    ConsumerOptions::default()
        .with_consumer("tls-1")
        .with_block(Duration::from_millis(200))
}

/// `builder` with one subscription on `orders`/`billing` whose handler counts
/// the entries it gets.
fn counting(builder: BrokerBuilder, handled: &Arc<AtomicUsize>) -> Broker {
    let h = handled.clone();
    builder
        .subscribe(
            &Stream::new("orders", "billing"),
            fast(),
            move |_: Order| {
                h.fetch_add(1, Ordering::SeqCst);
                async { HandlerResult::Ok(()) }
            },
        )
        .build()
        .expect("valid configuration")
}

/// The number of pending entries of `billing` on `orders`, asked over TLS
/// with `redis-cli` (first line of the `XPENDING` summary).
fn pending(tls: &TlsRedis) -> usize {
    let out = tls.cli(&["XPENDING", "orders", "billing"]);
    out.lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("XPENDING summary: {out:?}"))
}

/// Starts `broker`, publishes `N` orders through it, waits until the handler
/// ran exactly `N` times and nothing is pending on the server, then stops it
/// and checks the outcome is clean (exit code 0).
async fn round_trip(broker: &Broker, handled: &AtomicUsize, tls: &TlsRedis) {
    tokio::time::timeout(BOUND, broker.start())
        .await
        .expect("start() returned in time")
        .expect("start() over TLS");
    assert_eq!(broker.phase(), Phase::Running);
    let s = Stream::new("orders", "billing");
    broker
        .publish(&s, &Order { id: 0 })
        .await
        .expect("publish over TLS");
    let ids = broker
        .publish_batch(&s, (1..N as u64).map(|id| Order { id }))
        .await
        .expect("publish_batch over TLS");
    assert_eq!(ids.len(), N - 1);
    eventually(&format!("{N} orders handled"), WAIT, || {
        handled.load(Ordering::SeqCst) >= N
    })
    .await;
    // The entries are on the TLS-only server, and every one was acked there.
    assert_eq!(tls.cli(&["XLEN", "orders"]), N.to_string());
    eventually("PEL empty on the server", WAIT, || pending(tls) == 0).await;
    let outcome = tokio::time::timeout(BOUND, broker.stop())
        .await
        .expect("stop() returned in time")
        .expect("stop()");
    assert_eq!(outcome.exit_code(), 0, "{outcome:?}");
    assert_eq!(
        handled.load(Ordering::SeqCst),
        N,
        "each entry handled exactly once"
    );
    assert_eq!(broker.phase(), Phase::Stopped);
}

/// Starts `broker`, which must fail: returns the error, after checking that
/// it came within `BOUND` and left the broker stopped.
async fn failed_start(broker: &Broker) -> rillkit::Error {
    let t = Instant::now();
    let result = tokio::time::timeout(BOUND, broker.start())
        .await
        .unwrap_or_else(|_| panic!("start() still running after {BOUND:?}"));
    let err = result.expect_err("start() must fail");
    eprintln!("start() failed after {:?}: {err}", t.elapsed());
    assert_eq!(broker.phase(), Phase::Stopped, "after {err}");
    // A stop after a failed start answers at once, clean.
    let outcome = tokio::time::timeout(BOUND, broker.stop())
        .await
        .expect("stop() after a failed start returned in time")
        .expect("stop() after a failed start");
    assert!(outcome.is_clean(), "{outcome:?}");
    err
}

/// `err` followed by each of its sources, for failure messages.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut s = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        s.push_str(" <- ");
        s.push_str(&e.to_string());
        cur = e.source();
    }
    s
}

#[actix_rt::test]
async fn a_private_ca_starts_publishes_consumes_and_stops_cleanly() {
    support::skip_without_tls!();
    support::init_tracing();
    let tls = TlsRedis::start();
    let handled = Arc::new(AtomicUsize::new(0));
    let broker = counting(
        Broker::builder(tls.url()).tls(Tls::new().ca_pem(tls.ca_pem())),
        &handled,
    );
    round_trip(&broker, &handled, &tls).await;
}

#[actix_rt::test]
async fn mutual_tls_with_the_client_certificate_works() {
    support::skip_without_tls!();
    support::init_tracing();
    let tls = TlsRedis::start_mutual();
    assert!(tls.is_mutual());
    let handled = Arc::new(AtomicUsize::new(0));
    let broker = counting(
        Broker::builder(tls.url()).tls(
            Tls::new()
                .ca_pem(tls.ca_pem())
                .client_cert_pem(tls.client_cert_pem(), tls.client_key_pem()),
        ),
        &handled,
    );
    round_trip(&broker, &handled, &tls).await;
}

#[actix_rt::test]
async fn mutual_tls_without_a_client_certificate_fails_start() {
    support::skip_without_tls!();
    support::init_tracing();
    let tls = TlsRedis::start_mutual();
    // The server does refuse a client without a certificate.
    let out = tls.cli_output(false, &["PING"]);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("PONG"),
        "the mutual-TLS server answered a client without a certificate: {out:?}"
    );
    let handled = Arc::new(AtomicUsize::new(0));
    let broker = counting(
        Broker::builder(tls.url()).tls(Tls::new().ca_pem(tls.ca_pem())),
        &handled,
    );
    let err = failed_start(&broker).await;
    assert!(
        !matches!(
            err,
            rillkit::Error::Credentials(_) | rillkit::Error::Permission { .. }
        ),
        "a refused handshake is not an AUTH or ACL refusal: {err:?}"
    );
    assert_eq!(handled.load(Ordering::SeqCst), 0);
}

#[actix_rt::test]
async fn a_wrong_ca_fails_start_naming_the_certificate() {
    support::skip_without_tls!();
    support::init_tracing();
    let tls = TlsRedis::start();
    let other = TlsRedis::start();
    assert_ne!(tls.ca_pem(), other.ca_pem(), "each server has its own CA");
    let handled = Arc::new(AtomicUsize::new(0));
    let broker = counting(
        Broker::builder(tls.url()).tls(Tls::new().ca_pem(other.ca_pem())),
        &handled,
    );
    let err = failed_start(&broker).await;
    // What an operator reads in the log line (`error = %e`).
    let text = err.to_string().to_lowercase();
    assert!(
        text.contains("certificate"),
        "the error should say the server's certificate was not trusted: {text:?} \
         (with sources: {})",
        chain(&err)
    );
    assert_eq!(handled.load(Ordering::SeqCst), 0);
}

#[actix_rt::test]
async fn danger_accept_invalid_certs_connects_without_a_ca() {
    support::skip_without_tls!();
    support::init_tracing();
    let tls = TlsRedis::start();
    let handled = Arc::new(AtomicUsize::new(0));
    let broker = counting(
        Broker::builder(tls.url()).tls(Tls::new().danger_accept_invalid_certs()),
        &handled,
    );
    round_trip(&broker, &handled, &tls).await;
}

#[actix_rt::test]
async fn tls_options_on_a_redis_url_are_a_configuration_error() {
    let err = Broker::builder("redis://127.0.0.1:1")
        .tls(Tls::new())
        .build()
        .expect_err("TLS options need rediss://");
    match &err {
        ConfigError::Invalid {
            option, kind, key, ..
        } => {
            assert_eq!(*option, "tls", "{err}");
            assert_eq!(
                (*kind, key.as_str()),
                (None, ""),
                "a broker-wide option: {err}"
            );
            assert!(!err.to_string().contains(" for "), "{err}");
        }
        other => panic!("expected ConfigError::Invalid for option tls, got {other:?}"),
    }
    // The same options with rediss:// are fine (no I/O at build).
    Broker::builder("rediss://127.0.0.1:1")
        .tls(Tls::new())
        .build()
        .expect("TLS options with rediss:// build");
}

/// The name of the test that [`rediss_without_tls_options_builds_and_fails_start_with_an_error`]
/// runs in a fresh process.
const FRESH: &str = "rediss_without_tls_options_in_a_fresh_process";

/// A `rediss://` URL and no `Tls` at all: `build()` installs a rustls crypto
/// provider (ring's) and does not panic; `start()` fails with an error since
/// the test CA is not in the system's trust store.
///
/// The crypto provider is process-wide and every other test here installs it,
/// so this runs [`rediss_without_tls_options_in_a_fresh_process`] alone in a
/// new process of this test binary.
#[test]
fn rediss_without_tls_options_builds_and_fails_start_with_an_error() {
    support::skip_without_tls!();
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = Command::new(exe)
        .args([
            FRESH,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RILLKIT_TLS_FRESH_PROCESS", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the test binary again");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "the fresh-process test still ran after 60 s; stdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the fresh-process test failed ({}); stdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
}

#[actix_rt::test]
#[ignore = "run in a fresh process by rediss_without_tls_options_builds_and_fails_start_with_an_error"]
async fn rediss_without_tls_options_in_a_fresh_process() {
    support::skip_without_tls!();
    support::init_tracing();
    let fresh = std::env::var_os("RILLKIT_TLS_FRESH_PROCESS").is_some();
    if fresh {
        assert!(
            rustls::crypto::CryptoProvider::get_default().is_none(),
            "a fresh process has no rustls crypto provider yet"
        );
    }
    let tls = TlsRedis::start();
    let handled = Arc::new(AtomicUsize::new(0));
    let broker = counting(Broker::builder(tls.url()), &handled);
    assert!(
        rustls::crypto::CryptoProvider::get_default().is_some(),
        "build() installs a rustls crypto provider for a rediss:// URL"
    );
    // The test CA is not in the system's trust store: an error, not a panic.
    let err = failed_start(&broker).await;
    eprintln!("rediss:// without Tls: {}", chain(&err));
    assert_eq!(handled.load(Ordering::SeqCst), 0);
}

/// A `rediss://` URL to a server without TLS: `start()` fails, with an
/// error that names the TLS handshake, the address and the plain scheme,
/// rather than a bare timeout. Over TLS, no certificate is involved: the
/// server never answers as TLS.
#[actix_rt::test]
async fn a_rediss_url_to_a_server_without_tls_fails_start_naming_tls() {
    let plain = support::RedisServer::start();
    let addr = format!("127.0.0.1:{}", plain.port);
    let handled = Arc::new(AtomicUsize::new(0));
    let broker = counting(Broker::builder(format!("rediss://{addr}")), &handled);
    let err = failed_start(&broker).await;
    let text = err.to_string();
    assert!(
        text.contains(&format!("TLS handshake with {addr} failed"))
            && text.contains("is the server TLS-enabled?")
            && text.contains("use redis://"),
        "{}",
        chain(&err)
    );
    assert!(matches!(err, rillkit::Error::NotTls { .. }), "{err:?}");
    assert!(!err.is_retryable(), "a configuration problem: {err:?}");
    assert_eq!(handled.load(Ordering::SeqCst), 0);
}
