//! The fleet's control hash: what an operator asks of every process of a
//! consumer group (or of every consumer of a list) at once, kept in Redis so
//! it holds for processes started later and across restarts.
//!
//! `<slot>:rillkit:control:<group>` for a stream (`<slot>:rillkit:control`
//! for a list), `<slot>` being the key when it holds a hash tag, else
//! `{<key>}`: a hash in the source's hash slot with
//!
//! - `paused_at_ms`: the fleet-wide pause is on (since then, in ms since the
//!   Unix epoch); no field, no pause;
//! - `concurrency`: the fleet-wide concurrency; no field, each process's own.

use actix::Addr;
use redis::Value;

use crate::error::Error;
use crate::keys::{key_part, slot_prefix};
use crate::kind::SourceKind;
use crate::redis::{Query, RedisActor};
use crate::status::{Board, Boards};

/// The field that holds the fleet-wide pause.
pub(crate) const PAUSED: &str = "paused_at_ms";
/// The field that holds the fleet-wide concurrency.
pub(crate) const CONCURRENCY: &str = "concurrency";
pub use crate::status::scale::MAX_CONCURRENCY;

/// The control hash of a stream's `group`, or of a list (`group` empty).
pub(crate) fn control_key(kind: SourceKind, key: &str, group: &str) -> String {
    match kind {
        SourceKind::Stream => format!("{}:rillkit:control:{}", slot_prefix(key), key_part(group)),
        _ => format!("{}:rillkit:control", slot_prefix(key)),
    }
}

/// What the control hash of a group or list asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetControl {
    /// The fleet-wide pause is on since then (ms since the Unix epoch).
    pub paused_at_ms: Option<u64>,
    /// The fleet-wide concurrency, when one is set.
    pub concurrency: Option<usize>,
}

impl FleetControl {
    /// Whether the fleet-wide pause is on.
    pub fn paused(&self) -> bool {
        self.paused_at_ms.is_some()
    }

    /// Reads an `HMGET key paused_at_ms concurrency` reply.
    pub(crate) fn from_reply(v: &Value) -> FleetControl {
        let number = |v: Option<&Value>| match v {
            Some(Value::BulkString(b)) => std::str::from_utf8(b).ok()?.parse::<u64>().ok(),
            _ => None,
        };
        let Value::Array(fields) = v else {
            return FleetControl::default();
        };
        FleetControl {
            paused_at_ms: number(fields.first()),
            concurrency: number(fields.get(1))
                .map(|n| n as usize)
                .filter(|n| (1..=MAX_CONCURRENCY).contains(n)),
        }
    }
}

/// `HMGET <control> paused_at_ms concurrency`.
pub(crate) fn read_cmd(key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("HMGET");
    cmd.arg(key).arg(PAUSED).arg(CONCURRENCY);
    cmd
}

/// `HSET <control> paused_at_ms <now>` to pause, `HDEL <control>
/// paused_at_ms` to resume.
pub(crate) fn pause_cmd(key: &str, on: bool) -> redis::Cmd {
    if on {
        let now = crate::util::now_ms();
        let mut cmd = redis::cmd("HSET");
        cmd.arg(key).arg(PAUSED).arg(now);
        cmd
    } else {
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(key).arg(PAUSED);
        cmd
    }
}

/// `HSET <control> concurrency <n>`, or `HDEL <control> concurrency` to
/// go back to each process's own.
pub(crate) fn scale_cmd(key: &str, concurrency: Option<usize>) -> redis::Cmd {
    match concurrency {
        Some(n) => {
            let mut cmd = redis::cmd("HSET");
            cmd.arg(key).arg(CONCURRENCY).arg(n);
            cmd
        }
        None => {
            let mut cmd = redis::cmd("HDEL");
            cmd.arg(key).arg(CONCURRENCY);
            cmd
        }
    }
}

/// The control hash of `board`'s subscription; `None` for a channel.
pub(crate) fn key_of(board: &Board) -> Option<String> {
    (board.kind != SourceKind::Channel)
        .then(|| control_key(board.kind, &board.stream, &board.group))
}

/// Reads the control hash of every board `only` accepts (one `HMGET` each)
/// and applies it: the fleet-wide pause and concurrency.
///
/// # Errors
/// The first failed read (boards read before it are applied).
pub(crate) async fn look(
    redis: &Addr<RedisActor>,
    boards: &Boards,
    only: impl Fn(&Board) -> bool,
) -> Result<(), Error> {
    for board in boards.list().iter().filter(|b| only(b)) {
        let Some(key) = key_of(board) else { continue };
        let reply = redis
            .send(Query("hmget", read_cmd(&key)))
            .await
            .unwrap_or(Err(Error::ShutDown))?;
        apply(board, &FleetControl::from_reply(&reply));
    }
    Ok(())
}

/// Sets what `control` asks for on `board`, logging a change.
pub(crate) fn apply(board: &Board, control: &FleetControl) {
    if board.fleet_paused() != control.paused() {
        tracing::info!(
            source = %board.stream,
            group = %board.group,
            consumer = %board.consumer,
            paused = control.paused(),
            "fleet-wide pause {}",
            if control.paused() { "on" } else { "off" }
        );
        board.set_fleet_paused(control.paused());
    }
    if board.scale().fleet() != control.concurrency {
        tracing::info!(
            source = %board.stream,
            group = %board.group,
            consumer = %board.consumer,
            concurrency = control.concurrency.unwrap_or(board.scale().configured()),
            followed = board.scale().scalable(),
            "fleet-wide concurrency {}",
            if control.concurrency.is_some() { "set" } else { "cleared" }
        );
        board.set_fleet_concurrency(control.concurrency);
    }
}

#[cfg(test)]
mod tests;
