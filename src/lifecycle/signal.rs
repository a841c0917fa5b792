//! The operator's stop request: SIGINT or SIGTERM on Unix, Ctrl-C elsewhere.

/// The shutdown signals, installed once and received in turn.
pub(crate) struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers. From here on the signals no longer end the
    /// process by default: they are received here.
    ///
    /// # Errors
    /// When the operating system refuses the handlers.
    ///
    /// # Panics
    /// Outside a tokio runtime with its I/O driver (tokio's rule).
    pub(crate) fn install() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// The next signal's name (`"SIGTERM"`, `"SIGINT"`, or `"Ctrl-C"`).
    pub(crate) async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => "SIGTERM",
                _ = self.int.recv() => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
            "Ctrl-C"
        }
    }
}

/// Resolves when the process is asked to stop: the first SIGINT or SIGTERM
/// on Unix (what Kubernetes, systemd, Docker and a terminal's Ctrl-C send),
/// Ctrl-C elsewhere. The handlers are installed at the first poll, so call
/// it early; from then on those signals no longer end the process by
/// themselves.
///
/// For any program that stops a broker (or more) on a signal:
/// [`Broker::run_until`](crate::Broker::run_until)`(shutdown_signal())`
/// beside another future, an actix-web `HttpServer` started with
/// `.disable_signals()` and stopped when this resolves, or a plain tokio
/// program that calls [`Broker::stop`](crate::Broker::stop) after it.
/// ([`Broker::run`](crate::Broker::run) watches the same signals by
/// itself, and exits the process with status 1 on a second one.)
///
/// ```no_run
/// # async fn f(broker: rillkit::Broker) -> Result<(), rillkit::Error> {
/// broker.start().await?;
/// rillkit::shutdown_signal().await;
/// let outcome = broker.stop().await?;
/// std::process::exit(outcome.exit_code());
/// # }
/// ```
///
/// # Panics
/// Outside a tokio runtime with its I/O driver enabled (`#[tokio::main]`,
/// `#[actix::main]` and `#[actix_web::main]` all have one).
///
/// If the operating system refuses the handlers (never seen in practice),
/// it logs an ERROR and never resolves: the process then stops only by a
/// signal's default action or a stop from elsewhere.
pub async fn shutdown_signal() {
    match Signals::install() {
        Ok(mut signals) => {
            let name = signals.next().await;
            tracing::info!(signal = name, "shutdown signal received");
        }
        Err(e) => {
            tracing::error!(error = %e, "could not install the SIGINT/SIGTERM handlers");
            std::future::pending::<()>().await;
        }
    }
}
