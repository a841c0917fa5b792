//! The lifecycle driver: one future per broker, from `start()` to the
//! outcome every `stop()` caller receives. In order:
//!
//! 1. `on_startup` hooks, before any Redis I/O;
//! 2. PING, the shared pool and `RedisActor`, the consumer groups (each with
//!    an ACL probe) and the consumer names' leases, each waiting for a
//!    server that is starting until the startup deadline;
//! 3. the fleet-wide pause and concurrency read (so a consumer of a paused
//!    group starts paused), the consumers (the [`Supervisor`] starts one per
//!    subscription), retention, the status poller and the fleet watch;
//! 4. `after_startup` hooks; then it waits for a stop request;
//! 5. the drain ([`DrainAll`]: the supervisor's tally);
//! 6. `on_shutdown` hooks, connections still open;
//! 7. the connections close;
//! 8. every `after_shutdown` hook, then the outcome.
//!
//! A stop requested during startup abandons the start after the step in
//! progress, closes what was opened and runs the `after_shutdown` hooks.

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use tokio::sync::oneshot;

use super::Broker;
use super::hooks::Hooks;
use crate::error::{Error, HookFailures};
use crate::lifecycle::{Phase, Stage, SupervisorOutcome};
use crate::redis::{Close, RedisActor};
use crate::source::Source;
use crate::source::stream::Subscription;
use crate::supervisor::{DrainAll, StartConsumers, Supervisor, startup};

/// The lifecycle, in order. See the module docs.
pub(super) async fn lifecycle(
    broker: Broker,
    hooks: Hooks,
    subs: Vec<Source>,
    me: Addr<Supervisor>,
    started: Option<oneshot::Sender<Result<(), Error>>>,
) {
    // Should this future die half-way (a panic in rillkit's own code), every
    // stop() caller still wakes, with the panic counted.
    let _guard = Unfinished(broker.clone());
    let _supervisor = StopSupervisor(me.clone());
    // The recorder may have been installed after the broker was built.
    crate::telemetry::describe();
    for board in broker.boards().list() {
        board.publish_state();
    }
    let mut started = started;
    let mut report_start = |r: Result<(), Error>| {
        if let Some(tx) = started.take() {
            let _ = tx.send(r);
        }
    };
    let fail_start = |broker: &Broker, e: Error| {
        broker.set_phase(Phase::Stopped);
        broker.finish(SupervisorOutcome::default(), Vec::new());
        e
    };

    // A stop requested during startup (a signal): abandon the start after
    // the hook or command in progress, close what was opened, run the
    // after_shutdown hooks, and finish clean.
    let abort_start = |broker: Broker, hooks: Hooks| async move {
        tracing::info!("stop requested during startup; the start is abandoned");
        if let Some(redis) = broker.redis_if_started() {
            let _ = redis.send(Close).await;
        }
        broker.set_phase(Phase::Stopped);
        let failures = hooks.run(Stage::AfterShutdown, &broker, true).await;
        broker.finish(SupervisorOutcome::default(), failures);
        Err(Error::StartAborted)
    };

    // 1. on_startup hooks, before any Redis I/O.
    let failures = hooks.run(Stage::OnStartup, &broker, false).await;
    if !failures.is_empty() {
        let e = Error::Hook(HookFailures {
            failures: failures.into(),
            outcome: None,
        });
        return report_start(Err(fail_start(&broker, e)));
    }
    if broker.stop_requested() {
        return report_start(abort_start(broker.clone(), hooks.clone()).await);
    }
    // 2. PING (waiting for a server that is starting); then the shared pool.
    let streams: Vec<Arc<Subscription>> =
        subs.iter().filter_map(Source::as_stream).cloned().collect();
    let shared = startup::Shared {
        pool_size: broker.pool_size(),
        publish_timeout: broker.publish_timeout(),
    };
    let deadline = Instant::now() + broker.startup_timeout();
    let opened = |redis: Addr<RedisActor>| broker.set_redis(redis);
    let connected = tokio::select! {
        r = startup::connect(broker.connector(), shared, deadline, &streams, opened) => Some(r),
        () = broker.wait_stop_requested() => None,
    };
    let redis = match connected {
        Some(Ok(r)) if !broker.stop_requested() => r,
        Some(Err(e)) if !broker.stop_requested() => {
            return report_start(Err(fail_start(&broker, e)));
        }
        _ => return report_start(abort_start(broker.clone(), hooks.clone()).await),
    };
    // 4. Consumers, each paused from its first read if its fleet is, and
    //    retention for the streams that ask for it.
    if let Err(e) = crate::fleet::control::look(&redis, broker.boards(), |_| true).await {
        tracing::warn!(error = %e, "could not read the fleet-wide pause and concurrency; reading them again every 500 ms");
    }
    let _ = me.send(StartConsumers(redis.clone())).await;
    let retention = crate::retention::start(
        streams
            .iter()
            .flat_map(|s| s.readers())
            .map(|s| s.names.clone())
            .collect::<Vec<_>>()
            .iter(),
        &redis,
        broker.retention_period(),
    );
    let poller = crate::status::StatusPoller::new(
        broker.boards().clone(),
        redis.clone(),
        broker.status_period(),
    )
    .start();
    let fleet = crate::fleet::FleetWatch::new(
        broker.boards().clone(),
        redis.clone(),
        crate::fleet::registry::now_ms(),
    )
    .start();
    broker.set_phase(Phase::Running);
    // 5. after_startup hooks.
    let failures = hooks.run(Stage::AfterStartup, &broker, false).await;
    let after_startup_ok = failures.is_empty();
    let mut start_error = None;
    if after_startup_ok {
        report_start(Ok(()));
        broker.wait_stop_requested().await;
    } else {
        start_error = Some(failures);
        broker.request_stop();
    }

    // 6. Drain.
    let timeout = broker.requested_timeout();
    broker.set_phase(Phase::Draining);
    let outcome = me
        .send(DrainAll(Instant::now() + timeout))
        .await
        .unwrap_or(SupervisorOutcome {
            timed_out: true,
            ..Default::default()
        });
    for r in retention {
        let _ = r.send(crate::retention::Stop).await;
    }
    let _ = poller.send(crate::status::Stop).await;
    let _ = fleet.send(crate::fleet::Stop).await;
    // 7. on_shutdown hooks, connections still open (skipped when
    //    after_startup failed).
    let mut failures = Vec::new();
    if after_startup_ok {
        failures = hooks.run(Stage::OnShutdown, &broker, false).await;
    }
    // 8. Close the connections.
    broker.set_phase(Phase::Stopped);
    let closed = redis.send(Close).await.unwrap_or(0);
    let outcome = SupervisorOutcome {
        closed_connections: closed,
        ..outcome
    };
    tracing::info!(
        connections = closed,
        exit_code = outcome.exit_code(),
        "stopped; shared pool connections closed"
    );
    // 9. Every after_shutdown hook.
    failures.extend(hooks.run(Stage::AfterShutdown, &broker, true).await);

    match start_error {
        Some(mut startup_failures) => {
            startup_failures.extend(failures);
            broker.finish(outcome, Vec::new());
            report_start(Err(Error::Hook(HookFailures {
                failures: startup_failures.into(),
                outcome: Some(outcome),
            })));
        }
        None => broker.finish(outcome, failures),
    }
}

/// Finishes the broker with one panic counted if the lifecycle driver is
/// dropped before it finished (it panicked).
struct Unfinished(Broker);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.0.is_finished() {
            tracing::error!("the lifecycle driver ended before finishing; counting a panic");
            self.0.set_phase(Phase::Stopped);
            self.0.finish(
                SupervisorOutcome {
                    panics: 1,
                    ..Default::default()
                },
                Vec::new(),
            );
        }
    }
}

/// Stops the supervisor when the driver ends, however it ends.
struct StopSupervisor(Addr<Supervisor>);

impl Drop for StopSupervisor {
    fn drop(&mut self) {
        self.0.do_send(crate::supervisor::Finish);
    }
}
