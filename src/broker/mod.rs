//! [`Broker`], the public handle (its phase, start, stop, publish, status),
//! and [`BrokerBuilder`] (in `builder.rs`), which configures it.

pub(crate) mod batch;
pub(crate) mod bind;
pub(crate) mod builder;
mod delivery;
mod driver;
pub(crate) mod hooks;
mod pause;
mod publish;
pub(crate) mod runtime;
mod schedule;
mod spans;
mod subscribe;

pub use batch::BatchOptions;
pub use builder::BrokerBuilder;
pub use delivery::{Delivery, ItemDelivery};
pub use runtime::{Removed, SubscriptionHandle};

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::{oneshot, watch};

use crate::connection::{Connector, Topology};
use crate::error::{Error, HookError, HookFailures};
use crate::lifecycle::{Owner, Phase, SupervisorOutcome};
use crate::redis::{Query, RedisActor};
use crate::source::Source;
use crate::status::{Boards, Status};
use crate::supervisor::{RestartPolicy, Setup, Supervisor};
use hooks::Hooks;

struct Inner {
    connector: Connector,
    startup_timeout: Duration,
    retention_period: Duration,
    status_period: Duration,
    boards: Boards,
    publish_timeout: Duration,
    pool_size: usize,
    shutdown_timeout: Duration,
    handle_signals: bool,
    restart: RestartPolicy,
    setup: Mutex<Option<(Hooks, Vec<Source>)>>,
    supervisor: OnceLock<Addr<Supervisor>>,
    phase: watch::Sender<Phase>,
    /// Set once, by the first stop request: the drain timeout to use.
    stop_req: watch::Sender<Option<Duration>>,
    redis: OnceLock<Addr<RedisActor>>,
    result: Mutex<Option<(SupervisorOutcome, Arc<[HookError]>)>>,
    done: watch::Sender<bool>,
    /// Ordered streams whose partition count a publish checked: (name, count).
    orders_checked: Mutex<std::collections::HashSet<(String, u16)>>,
}

/// The handle to a running set of consumers and the shared connections:
/// publish, start, stop. Cheap to clone, `Send + Sync`; every call is a message
/// to the actors, so it works from any thread, task or actor.
///
/// See [`Phase`] for the lifecycle and [`BrokerBuilder`] for the options.
///
/// ```no_run
/// use rillkit::{Broker, ConsumerOptions, HandlerResult, Stream};
///
/// #[derive(serde::Deserialize, serde::Serialize)]
/// struct Order { id: u64 }
///
/// #[actix::main]
/// async fn main() {
///     let orders = Stream::new("orders", "billing");
///     let broker = Broker::builder("redis://127.0.0.1:6379")
///         .subscribe(&orders, ConsumerOptions::default(), |order: Order| async move {
///             println!("order {}", order.id);
///             HandlerResult::Ok(())
///         })
///         .build()
///         .expect("valid configuration");
///     let outcome = broker.run().await;
///     std::process::exit(outcome.map_or_else(|e| e.exit_code(), |o| o.exit_code()));
/// }
/// ```
#[derive(Clone)]
pub struct Broker {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("phase", &self.phase())
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// Starts configuring a broker for the Redis server at `url`
    /// (`redis://[user:password@]host:port[/db]`, or `rediss://` for TLS):
    /// the shorthand of [`Broker::with_topology`]`(`[`Topology::standalone`]`(url))`.
    pub fn builder(url: impl Into<String>) -> BrokerBuilder {
        BrokerBuilder::new(Topology::standalone(url))
    }

    /// Starts configuring a broker for Redis as `topology` describes it
    /// (standalone, Sentinel or Cluster).
    pub fn with_topology(topology: Topology) -> BrokerBuilder {
        BrokerBuilder::new(topology)
    }

    /// Starts configuring a broker on the application's own
    /// `redis::Client` (a standalone server): see [`Topology::client`]. The
    /// stop closes only the connections rillkit opened from it, and
    /// reports how many shared ones in
    /// [`SupervisorOutcome::closed_connections`].
    pub fn from_client(client: redis::Client) -> BrokerBuilder {
        BrokerBuilder::new(Topology::client(client))
    }

    /// Where the broker is in its lifecycle.
    pub fn phase(&self) -> Phase {
        *self.inner.phase.borrow()
    }

    /// Starts the broker: `on_startup` hooks, PING, `XGROUP CREATE … MKSTREAM`
    /// for each subscription (an existing group is fine), consumers,
    /// `after_startup` hooks. Returns once all of that is done.
    ///
    /// Use `start()` + [`stop()`](Self::stop) in tests and when embedding;
    /// [`run()`](Self::run) for a worker process.
    ///
    /// A server that answers it is starting (`LOADING`, `BUSY`, `MASTERDOWN`,
    /// `READONLY`, or a replica during a failover) is waited for, with capped
    /// backoff, up to [`startup_timeout`](BrokerBuilder::startup_timeout).
    ///
    /// # Errors
    /// * [`Error::Connect`]: Redis is unreachable (connection refused or timed
    ///   out: at once, no retry, so a process manager can restart the
    ///   process).
    /// * [`Error::NotTls`]: a `rediss://` URL (or TLS options) reached a
    ///   server without TLS.
    /// * [`Error::NotRedis`]: the server at the address does not speak the
    ///   Redis protocol (an HTTP port, another service).
    /// * [`Error::Credentials`]: the username or password was refused.
    /// * [`Error::Permission`]: the ACL user may not run `PING`,
    ///   `XGROUP CREATE` or `XREADGROUP` (checked with a probe that reads
    ///   nothing; the error names the command).
    /// * [`Error::NoMaster`]: no sentinel knows the master's name.
    /// * [`Error::StartupTimeout`]: the server was still starting at the
    ///   startup deadline.
    /// * [`Error::GroupCreate`]: XGROUP CREATE failed (e.g. the key holds
    ///   something that is not a stream).
    /// * [`Error::Hook`]: an `on_startup` or `after_startup` hook failed.
    /// * [`Error::AlreadyStarted`], [`Error::ShutDown`]: the broker was
    ///   started or stopped before.
    /// * [`Error::StartAborted`]: a stop was requested during startup.
    ///
    /// # Where it runs
    /// Inside an actix `System` (`#[actix::main]`, `#[actix_web::main]`,
    /// `actix::System::new().block_on(…)`), the consumers, hooks and handlers
    /// run on that System's arbiter, the current thread. Anywhere else (a
    /// `#[tokio::main]` program, multi-threaded or not, or a plain thread)
    /// the broker starts as [`start_on_own_thread`](Self::start_on_own_thread)
    /// does: in an actix System of its own on a thread named `rillkit`. Either
    /// way handlers run on one single-threaded arbiter: the futures they
    /// return need not be `Send`, and one subscription's handlers never run
    /// in parallel with each other on two threads.
    pub async fn start(&self) -> Result<(), Error> {
        if actix_rt::System::try_current().is_none() {
            return self.start_on_own_thread().await;
        }
        self.start_in_system().await
    }

    /// [`start`](Self::start) inside the current actix System.
    async fn start_in_system(&self) -> Result<(), Error> {
        let mut from = Phase::Configured;
        self.inner.phase.send_if_modified(|p| {
            from = *p;
            if *p == Phase::Configured {
                *p = Phase::Starting;
                true
            } else {
                false
            }
        });
        match from {
            Phase::Configured => {}
            Phase::Stopped => return Err(Error::ShutDown),
            _ => return Err(Error::AlreadyStarted),
        }
        let (hooks, subs) = self
            .inner
            .setup
            .lock()
            .expect("setup lock")
            .take()
            .unwrap_or_default();
        let (tx, rx) = oneshot::channel();
        let weak = Arc::downgrade(&self.inner);
        let setup = Setup {
            connector: self.inner.connector.clone(),
            owner: self.owner(),
            boards: self.inner.boards.clone(),
            request_stop: Box::new(move || {
                if let Some(inner) = weak.upgrade() {
                    Broker { inner }.request_stop();
                }
            }),
            restart: self.inner.restart,
        };
        let sup = Supervisor::new(setup, subs.clone()).start();
        let _ = self.inner.supervisor.set(sup.clone());
        actix_rt::spawn(self.within(driver::lifecycle(self.clone(), hooks, subs, sup, Some(tx))));
        rx.await.unwrap_or(Err(Error::ShutDown))
    }

    /// Starts the broker in an actix `System` of its own, on a thread of its
    /// own (named `rillkit`): what [`start`](Self::start) does outside an
    /// actix System (`#[tokio::main]`, or no async runtime at all), and what
    /// an actix program may choose to keep handlers off its own arbiter.
    /// Returns once the start has finished there; the thread ends when the
    /// broker has stopped.
    ///
    /// The `Broker` handle is `Send + Sync`: publish, stop and read the phase
    /// from any thread or runtime. Handlers, hooks and everything they
    /// capture move to that thread (the builder already asks them to be
    /// `Send + Sync`); the futures they return run there and need not be
    /// `Send`. Signals are not watched here: [`run`](Self::run) watches
    /// them, or stop the broker from your program (for instance on
    /// [`shutdown_signal`](crate::shutdown_signal)).
    ///
    /// ```no_run
    /// use rillkit::prelude::*;
    ///
    /// #[tokio::main]
    /// async fn main() -> Result<(), rillkit::Error> {
    ///     let orders = Stream::new("orders", "billing");
    ///     let broker = Broker::builder("redis://127.0.0.1:6379")
    ///         .subscribe(&orders, ConsumerOptions::default(), |id: u64| async move {
    ///             println!("order {id}");
    ///             HandlerResult::Ok(())
    ///         })
    ///         .build()?;
    ///     broker.start_on_own_thread().await?;
    ///     broker.publish(&orders, &1u64).await?;
    ///     rillkit::shutdown_signal().await;
    ///     let outcome = broker.stop().await?;
    ///     std::process::exit(outcome.exit_code());
    /// }
    /// ```
    ///
    /// # Errors
    /// As [`start`](Self::start); [`Error::ShutDown`] if the thread could not
    /// be spawned.
    pub async fn start_on_own_thread(&self) -> Result<(), Error> {
        let (tx, rx) = oneshot::channel();
        let broker = self.clone();
        let spawned = std::thread::Builder::new()
            .name("rillkit".into())
            .spawn(move || {
                actix::System::new().block_on(async move {
                    let started = broker.start_in_system().await;
                    let ok = started.is_ok();
                    let _ = tx.send(started);
                    if ok {
                        let mut done = broker.inner.done.subscribe();
                        let _ = done.wait_for(|d| *d).await;
                    }
                });
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "could not spawn the broker's thread");
            return Err(Error::ShutDown);
        }
        rx.await.unwrap_or(Err(Error::ShutDown))
    }

    /// Asks the broker to stop with the configured `shutdown_timeout`, without
    /// waiting. Safe from any thread, any number of times; only the first
    /// request counts. A broker that was never started is stopped at once.
    pub fn request_stop(&self) {
        self.request_stop_with_timeout(self.inner.shutdown_timeout);
    }

    /// [`request_stop`](Self::request_stop) with an explicit drain timeout.
    pub fn request_stop_with_timeout(&self, timeout: Duration) {
        self.inner.stop_req.send_if_modified(|t| {
            if t.is_none() {
                *t = Some(timeout);
                true
            } else {
                false
            }
        });
        let never_started = self.inner.phase.send_if_modified(|p| {
            if *p == Phase::Configured {
                *p = Phase::Stopped;
                true
            } else {
                false
            }
        });
        if never_started {
            self.finish(SupervisorOutcome::default(), Vec::new());
        }
    }

    /// Stops the broker and waits until it is stopped: consumers stop reading
    /// (a blocked XREADGROUP is interrupted at once), running handlers get up to
    /// `shutdown_timeout` to finish and ack, entries fetched but not started are
    /// handed back to the group; then `on_shutdown` hooks, the connections
    /// close, `after_shutdown` hooks.
    ///
    /// Idempotent and callable from any thread or actor: the shutdown path runs
    /// once, and every caller gets its outcome.
    ///
    /// # Errors
    /// * [`Error::Hook`] when `on_shutdown` or `after_shutdown` hooks failed
    ///   (to every caller; it carries the outcome too).
    /// * [`Error::StopFromWithin`] when called from this broker's own hook or
    ///   handler, which the stop would wait for: the stop is requested and the
    ///   call returns at once.
    ///
    /// # Cancellation safety
    /// Dropping the future does not cancel the stop; it goes on in the actors.
    pub async fn stop(&self) -> Result<SupervisorOutcome, Error> {
        self.stop_with_timeout(self.inner.shutdown_timeout).await
    }

    /// [`stop`](Self::stop) with an explicit drain timeout (used when this is
    /// the first stop request).
    ///
    /// # Errors
    /// As [`stop`](Self::stop).
    pub async fn stop_with_timeout(&self, timeout: Duration) -> Result<SupervisorOutcome, Error> {
        self.request_stop_with_timeout(timeout);
        if self.is_within() {
            return Err(Error::StopFromWithin);
        }
        let mut done = self.inner.done.subscribe();
        let _ = done.wait_for(|d| *d).await;
        let result = self.inner.result.lock().expect("result lock");
        let (outcome, failures) = result
            .clone()
            .unwrap_or_else(|| (SupervisorOutcome::default(), Arc::from([])));
        if failures.is_empty() {
            Ok(outcome)
        } else {
            Err(Error::Hook(HookFailures {
                failures,
                outcome: Some(outcome),
            }))
        }
    }

    /// Starts the broker, waits, then stops it. Returns when SIGINT or SIGTERM
    /// arrives (if [`handle_signals`](BrokerBuilder::handle_signals) is on),
    /// when a stop is requested elsewhere, or when every subscription has
    /// failed. Signals are watched from the first instruction, before any
    /// Redis I/O: one arriving during startup abandons the start after the
    /// hook or command in progress, shuts down what had started
    /// (`after_shutdown` hooks always run), and returns the clean outcome
    /// (exit code 0: the operator asked to stop). A second SIGINT/SIGTERM,
    /// during startup or the drain, exits the process with status 1 at once.
    ///
    /// # Errors
    /// As [`start`](Self::start) and [`stop`](Self::stop).
    ///
    pub async fn run(&self) -> Result<SupervisorOutcome, Error> {
        self.run_until(std::future::pending::<()>()).await
    }

    /// [`run`](Self::run), also stopping when `trigger` resolves (for example
    /// an actix-web server's end, or a `CancellationToken`'s `cancelled()`).
    ///
    /// # Errors
    /// As [`start`](Self::start) and [`stop`](Self::stop).
    ///
    pub async fn run_until<F: Future>(&self, trigger: F) -> Result<SupervisorOutcome, Error> {
        // Signals are watched from the first instruction: a SIGTERM while
        // Redis is still loading stops the start, it does not kill the
        // process unlogged.
        let signals = if self.inner.handle_signals {
            spawn_signal_watch(self.clone())
        } else {
            None
        };
        match self.start().await {
            Ok(()) => {}
            Err(Error::StartAborted) => {
                let result = self.stop().await;
                if let Some(s) = signals {
                    s.abort();
                }
                return result;
            }
            Err(e) => {
                if let Some(s) = signals {
                    s.abort();
                }
                return Err(e);
            }
        }
        tokio::select! {
            _ = trigger => {}
            () = self.wait_stop_requested() => {}
        }
        let result = self.stop().await;
        if let Some(s) = signals {
            s.abort();
        }
        result
    }

    /// Sends PING on a shared connection.
    ///
    /// # Errors
    /// As [`publish`](Self::publish).
    pub async fn ping(&self) -> Result<(), Error> {
        let redis = self.redis_addr()?;
        redis
            .send(Query("ping", redis::cmd("PING")))
            .await
            .map_err(|_| Error::ShutDown)?
            .map(|_| ())
    }

    pub(crate) fn redis_addr(&self) -> Result<&Addr<RedisActor>, Error> {
        match self.phase() {
            Phase::Stopped => Err(Error::ShutDown),
            _ => self.inner.redis.get().ok_or(Error::NotStarted),
        }
    }

    // ---- used by the Supervisor ----

    pub(crate) fn connector(&self) -> &Connector {
        &self.inner.connector
    }

    pub(crate) fn retention_period(&self) -> Duration {
        self.inner.retention_period
    }

    pub(crate) fn status_period(&self) -> Duration {
        self.inner.status_period
    }

    /// The live subscriptions' boards.
    pub(crate) fn boards(&self) -> &Boards {
        &self.inner.boards
    }

    /// A snapshot of the broker's status: its phase, and per subscription
    /// its state (starting, running, reconnecting since when and why,
    /// restarting, failed, stopped), its consumer name, the handled, failed
    /// and dead-lettered counts since start, and the server's figures — lag,
    /// pending, age of the oldest pending entry, dead-letter length — as of
    /// the last poll (every [`status_period`](BrokerBuilder::status_period),
    /// 5 s by default). No I/O: cheap enough for every health probe.
    ///
    /// ```
    /// # let broker = rillkit::Broker::builder("redis://127.0.0.1").build().unwrap();
    /// let status = broker.status();
    /// assert!(!status.is_ready(), "not started");
    /// ```
    pub fn status(&self) -> Status {
        Status {
            phase: self.phase(),
            subscriptions: self.boards().list().iter().map(|b| b.snapshot()).collect(),
            redis_reachable: self.phase() == Phase::Running && self.boards().in_contact(),
        }
    }

    pub(crate) fn supervisor(&self) -> Option<Addr<Supervisor>> {
        self.inner.supervisor.get().cloned()
    }

    pub(crate) fn shutdown_timeout(&self) -> Duration {
        self.inner.shutdown_timeout
    }

    pub(crate) fn startup_timeout(&self) -> Duration {
        self.inner.startup_timeout
    }

    pub(crate) fn publish_timeout(&self) -> Duration {
        self.inner.publish_timeout
    }

    pub(crate) fn pool_size(&self) -> usize {
        self.inner.pool_size
    }

    pub(crate) fn set_phase(&self, phase: Phase) {
        self.inner.phase.send_replace(phase);
    }

    pub(crate) fn set_redis(&self, addr: Addr<RedisActor>) {
        let _ = self.inner.redis.set(addr);
    }

    /// Whether a stop has been requested.
    pub(crate) fn stop_requested(&self) -> bool {
        self.inner.stop_req.borrow().is_some()
    }

    /// The shared-connection actor, once `start()` has opened it.
    pub(crate) fn redis_if_started(&self) -> Option<Addr<RedisActor>> {
        self.inner.redis.get().cloned()
    }

    pub(crate) async fn wait_stop_requested(&self) {
        let mut rx = self.inner.stop_req.subscribe();
        let _ = rx.wait_for(Option::is_some).await;
    }

    pub(crate) fn requested_timeout(&self) -> Duration {
        (*self.inner.stop_req.borrow()).unwrap_or(self.inner.shutdown_timeout)
    }

    /// Records the final outcome and wakes every `stop()` caller.
    pub(crate) fn finish(&self, outcome: SupervisorOutcome, failures: Vec<HookError>) {
        *self.inner.result.lock().expect("result lock") = Some((outcome, failures.into()));
        self.inner.done.send_replace(true);
    }

    pub(crate) fn is_finished(&self) -> bool {
        *self.inner.done.borrow()
    }

    /// Runs `fut` marked as this broker's own code (hooks, the lifecycle
    /// driver), so `stop()` can tell it is called from within.
    pub(crate) fn within<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> + use<F> {
        crate::lifecycle::within(self.owner(), fut)
    }

    /// This broker as the owner of running code.
    pub(crate) fn owner(&self) -> Owner {
        Owner(Arc::as_ptr(&self.inner) as usize)
    }

    fn is_within(&self) -> bool {
        crate::lifecycle::is_within(self.owner())
    }
}

/// Watches signals for `run()`: on the current actix arbiter inside an
/// actix System, else as a tokio task (`#[tokio::main]`). `None` outside
/// both, after an ERROR: nothing could receive a signal there.
fn spawn_signal_watch(broker: Broker) -> Option<tokio::task::JoinHandle<()>> {
    if actix_rt::System::try_current().is_some() {
        Some(actix_rt::spawn(watch_signals(broker)))
    } else if tokio::runtime::Handle::try_current().is_ok() {
        Some(tokio::spawn(watch_signals(broker)))
    } else {
        tracing::error!(
            "run() outside an async runtime: SIGINT and SIGTERM are not watched; stop the broker yourself"
        );
        None
    }
}

/// First SIGINT/SIGTERM: request a graceful stop. Second: exit with status 1.
async fn watch_signals(broker: Broker) {
    let mut signals = match crate::lifecycle::Signals::install() {
        Ok(signals) => signals,
        Err(e) => {
            tracing::error!(error = %e, "could not install the SIGINT/SIGTERM handlers");
            return;
        }
    };
    let name = signals.next().await;
    // The phase when the signal came, not when the watch began.
    if broker.phase() == Phase::Starting {
        tracing::info!(
            signal = name,
            "signal received during startup; abandoning the start, or draining if it is done"
        );
    } else {
        tracing::info!(signal = name, "signal received; draining");
    }
    broker.request_stop();
    signals.next().await;
    tracing::warn!("second signal received; exiting with status 1");
    std::process::exit(1);
}
