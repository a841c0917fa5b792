//! The fleet: what every rillkit process of a consumer group (or of a
//! list's consumers) shares through Redis, beside the consumers.
//!
//! - [`control`]: the control hash an operator writes (`rillkit pause`,
//!   `rillkit scale`, the dashboard, [`Admin`](crate::admin::Admin)) and
//!   every process reads: the fleet-wide pause and concurrency.
//! - [`registry`]: the record each process keeps of itself, the fleet view.
//!
//! [`FleetWatch`], one per broker with subscriptions, reads the control
//! hashes and renews the record every [`PERIOD`], so a pause or a scale
//! reaches every process within a second; it deletes the record when the
//! broker stops.

pub(crate) mod control;
pub(crate) mod registry;

pub use control::{FleetControl, MAX_CONCURRENCY};
pub use registry::{FleetAutoscale, FleetProcess, FleetSubscription};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix::prelude::*;

use crate::error::Error;
use crate::redis::{Eval, Query, RedisActor};
use crate::status::Boards;
use registry::Identity;

/// How often the fleet watch reads the control hashes and renews the
/// record.
pub(crate) const PERIOD: Duration = Duration::from_millis(500);

/// Reads the fleet's control hashes into the boards and keeps this
/// process's record. Stopped with [`Stop`], which deletes the record.
pub(crate) struct FleetWatch {
    boards: Boards,
    redis: Addr<RedisActor>,
    me: Arc<Identity>,
    /// A look is on its way: skip a tick rather than pile them up.
    busy: Arc<AtomicBool>,
    /// Stopping: the record is deleted and must not be written again.
    stopped: Arc<AtomicBool>,
    /// A record was written: the stop deletes it.
    written: Arc<AtomicBool>,
}

impl FleetWatch {
    pub(crate) fn new(boards: Boards, redis: Addr<RedisActor>, started_at_ms: u64) -> Self {
        FleetWatch {
            boards,
            redis,
            me: Arc::new(Identity {
                token: crate::keys::process_token(),
                started_at_ms,
            }),
            busy: Arc::default(),
            stopped: Arc::default(),
            written: Arc::default(),
        }
    }

    fn tick(&self) {
        if self.busy.swap(true, Ordering::SeqCst) {
            return;
        }
        let (boards, redis, me, busy, stopped, written) = (
            self.boards.clone(),
            self.redis.clone(),
            self.me.clone(),
            self.busy.clone(),
            self.stopped.clone(),
            self.written.clone(),
        );
        actix_rt::spawn(async move {
            if let Err(e) = control::look(&redis, &boards, |_| true).await {
                tracing::debug!(error = %e, "fleet control read failed; trying again");
            }
            autoscale(&redis, &boards).await;
            if stopped.load(Ordering::SeqCst) {
                busy.store(false, Ordering::SeqCst);
                return;
            }
            match renew(&redis, &boards, &me).await {
                Ok(true) => written.store(true, Ordering::SeqCst),
                Ok(false) => {}
                Err(e) => tracing::debug!(error = %e, "fleet record renewal failed; trying again"),
            }
            busy.store(false, Ordering::SeqCst);
        });
    }
}

/// One look of every autoscaled subscription's autoscaler, with its group's
/// lag (`XINFO GROUPS`) as the backlog.
async fn autoscale(redis: &Addr<RedisActor>, boards: &Boards) {
    for board in boards.list() {
        if board.scale().autoscaler().is_none() {
            continue;
        }
        let mut cmd = redis::cmd("XINFO");
        cmd.arg("GROUPS").arg(&*board.stream);
        let reply = redis
            .send(Query("xinfo|groups", cmd))
            .await
            .unwrap_or(Err(Error::ShutDown));
        let lag = match reply.map(crate::redis::info::groups) {
            Ok(Ok(groups)) => groups
                .into_iter()
                .find(|g| g.name == *board.group)
                .and_then(|g| g.lag),
            Ok(Err(e)) => {
                tracing::debug!(stream = %board.stream, error = %e, "autoscale: unreadable XINFO GROUPS reply");
                continue;
            }
            Err(e) => {
                tracing::debug!(stream = %board.stream, error = %e, "autoscale: XINFO GROUPS failed; trying again");
                continue;
            }
        };
        board.autoscale(lag);
    }
}

/// Writes this process's record, when it has stream or list
/// subscriptions; answers whether it did.
async fn renew(redis: &Addr<RedisActor>, boards: &Boards, me: &Identity) -> Result<bool, Error> {
    let Some(record) = registry::record(me, &boards.list()) else {
        return Ok(false);
    };
    let json = serde_json::to_vec(&record).expect("a fleet record serializes");
    redis
        .send(Eval {
            script: &registry::RENEW,
            keys: vec![
                registry::record_key(&me.token).into_bytes(),
                registry::PROCESSES.as_bytes().to_vec(),
            ],
            args: vec![
                json,
                registry::RECORD_TTL.as_millis().to_string().into_bytes(),
                registry::now_ms().to_string().into_bytes(),
            ],
        })
        .await
        .unwrap_or(Err(Error::ShutDown))
        .map(|_| true)
}

impl Actor for FleetWatch {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.tick();
        ctx.run_interval(PERIOD, |act, _| act.tick());
    }
}

/// Stops a [`FleetWatch`] and deletes this process's record (`DEL`, `ZREM`).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Stop;

impl Handler<Stop> for FleetWatch {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: Stop, _: &mut Self::Context) -> Self::Result {
        self.stopped.store(true, Ordering::SeqCst);
        let (redis, key, busy, written) = (
            self.redis.clone(),
            registry::record_key(&self.me.token),
            self.busy.clone(),
            self.written.clone(),
        );
        Box::pin(
            async move {
                // A renewal on its way lands first (a second at most).
                let until = std::time::Instant::now() + Duration::from_secs(1);
                while busy.load(Ordering::SeqCst) && std::time::Instant::now() < until {
                    actix_rt::time::sleep(Duration::from_millis(10)).await;
                }
                if !written.load(Ordering::SeqCst) {
                    return;
                }
                let mut del = redis::cmd("DEL");
                del.arg(&key);
                let _ = redis.send(Query("del", del)).await;
                let mut zrem = redis::cmd("ZREM");
                zrem.arg(registry::PROCESSES).arg(&key);
                let _ = redis.send(Query("zrem", zrem)).await;
            }
            .into_actor(self)
            .map(|(), _, ctx| ctx.stop()),
        )
    }
}
