//! Which newer stream commands a server has, learned from the server itself
//! (`COMMAND DOCS`), never from its version string: Valkey and other forks
//! number their versions differently, and a managed service may rename or
//! withhold commands. rillkit picks a path per server by what is found
//! here, and keeps the path that works everywhere where a command is
//! missing or the question is refused.
//!
//! In a cluster each master is asked on its own (a stream's read
//! connection asks the master it reads from, again on every new
//! connection, so after a failover or a reshard too): a cluster in the
//! middle of an upgrade, with masters of two versions, uses on each stream
//! what that stream's master has.

use std::fmt;
use std::sync::{Arc, Mutex};

use redis::Value;
use redis::aio::ConnectionLike;

use crate::error::Error;

/// The newer stream commands a Redis server has, as it describes them
/// (`COMMAND DOCS XADD XREADGROUP XACKDEL XNACK XTRIM`).
///
/// Each getter names the command or option and the Redis version that
/// added it; a fork may add it at another version, or not at all. All are
/// `false` for a server that does not answer `COMMAND DOCS` (before 7.0,
/// or refused by an ACL).
///
/// Shown by [`Admin::server_commands`](crate::admin::Admin::server_commands)
/// and `rillkit server`. rillkit takes each where it exists but `XREADGROUP
/// … MAXCOUNT`, which is reported only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerCommands {
    ack_and_delete: bool,
    trim_acked: bool,
    claim_in_read: bool,
    idempotent_add: bool,
    hand_back: bool,
    capped_read: bool,
}

impl ServerCommands {
    /// `XACKDEL key group ACKED IDS n id…` (Redis 8.2, Valkey 9.2): ack
    /// entries and delete each one that no group still needs, in one
    /// command. A stream kept with
    /// [`with_retain_acked`](crate::Stream::with_retain_acked) is acked this
    /// way where it exists.
    pub fn ack_and_delete(&self) -> bool {
        self.ack_and_delete
    }

    /// `XTRIM key MAXLEN 0 ACKED` (Redis 8.2): trim only entries every
    /// group has acked. The periodic retention sweep uses it where it
    /// exists, a script elsewhere.
    pub fn trim_acked(&self) -> bool {
        self.trim_acked
    }

    /// `XREADGROUP … CLAIM min-idle-time` (Redis 8.4): idle pending entries
    /// come with a read. A stream consumer's reads take the group's entries
    /// idle for `claim_idle` this way where it exists, instead of a
    /// separate reclaim (`XPENDING … IDLE`, `XCLAIM`); not a partition of
    /// an ordered stream.
    pub fn claim_in_read(&self) -> bool {
        self.claim_in_read
    }

    /// `XADD key IDMP producer-id idempotent-id …` (Redis 8.6): a resent
    /// entry is not added again. [`Broker::publish_idempotent`](crate::Broker::publish_idempotent)
    /// uses it where it exists, a script elsewhere.
    pub fn idempotent_add(&self) -> bool {
        self.idempotent_add
    }

    /// `XNACK` (Redis 8.8): pending entries handed back with no owner. A
    /// draining stream consumer hands back what it fetched and did not
    /// start with `XNACK … SILENT` where it exists and reads take idle
    /// entries (`claim_in_read`), so the next such read anywhere takes
    /// them at once.
    pub fn hand_back(&self) -> bool {
        self.hand_back
    }

    /// `XREADGROUP … MAXCOUNT n` (Redis 8.10): one read over several
    /// streams with a cap on the total.
    pub fn capped_read(&self) -> bool {
        self.capped_read
    }

    /// The names of the commands and options found, in the order of the
    /// getters (`XACKDEL`, `XTRIM ACKED`, `XREADGROUP CLAIM`, `XADD IDMP`,
    /// `XNACK`, `XREADGROUP MAXCOUNT`).
    pub fn names(&self) -> Vec<&'static str> {
        [
            (self.ack_and_delete, "XACKDEL"),
            (self.trim_acked, "XTRIM ACKED"),
            (self.claim_in_read, "XREADGROUP CLAIM"),
            (self.idempotent_add, "XADD IDMP"),
            (self.hand_back, "XNACK"),
            (self.capped_read, "XREADGROUP MAXCOUNT"),
        ]
        .into_iter()
        .filter_map(|(has, name)| has.then_some(name))
        .collect()
    }
}

impl fmt::Display for ServerCommands {
    /// The [`names`](Self::names) joined by `, `, or `none of the newer
    /// stream commands`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = self.names();
        if names.is_empty() {
            f.write_str("none of the newer stream commands")
        } else {
            f.write_str(&names.join(", "))
        }
    }
}

/// The question: `COMMAND DOCS` of the commands looked at.
pub(crate) fn question() -> redis::Cmd {
    let mut cmd = redis::cmd("COMMAND");
    cmd.arg("DOCS")
        .arg("XADD")
        .arg("XREADGROUP")
        .arg("XACKDEL")
        .arg("XNACK")
        .arg("XTRIM");
    cmd
}

/// Reads a `COMMAND DOCS` reply (RESP2 arrays or RESP3 maps): a command
/// is there when the reply describes it; an option when one of the
/// command's arguments has it as its token.
pub(crate) fn parse(reply: &Value) -> ServerCommands {
    let mut found = ServerCommands::default();
    for (name, doc) in pairs(reply) {
        let Some(name) = text(name) else { continue };
        let mut tokens = Vec::new();
        collect_tokens(doc, &mut tokens);
        let has = |t: &str| tokens.iter().any(|x| x.eq_ignore_ascii_case(t));
        match name.to_ascii_lowercase().as_str() {
            "xackdel" => found.ack_and_delete = true,
            "xnack" => found.hand_back = true,
            "xadd" => found.idempotent_add = has("IDMP"),
            "xreadgroup" => {
                found.claim_in_read = has("CLAIM");
                found.capped_read = has("MAXCOUNT");
            }
            "xtrim" => found.trim_acked = has("ACKED"),
            _ => {}
        }
    }
    found
}

/// Asks the server at the other end of `conn`. A refused or unanswerable
/// question gives the commands every server has (all `false`), not an
/// error: only a lost connection is one.
///
/// # Errors
/// A connection error (the caller's connection is then broken anyway).
pub(crate) async fn ask<C: ConnectionLike>(conn: &mut C) -> Result<ServerCommands, Error> {
    match question().query_async::<Value>(conn).await {
        Ok(reply) => Ok(parse(&reply)),
        Err(e) => {
            let e = Error::from_redis(e);
            if e.class() == crate::error::Class::Connection {
                return Err(e);
            }
            tracing::debug!(error = %e, "COMMAND DOCS refused; using the paths every server has");
            Ok(ServerCommands::default())
        }
    }
}

/// What one connection's server has, shared between the connection's
/// owner (which asks again on every new connection) and the components
/// that pick a path by it. A component that meets a refusal withdraws the
/// command until the next connection asks again.
#[derive(Clone, Default)]
pub(crate) struct Detected(Arc<Mutex<ServerCommands>>);

impl Detected {
    pub(crate) fn get(&self) -> ServerCommands {
        *self.0.lock().expect("detected lock")
    }

    pub(crate) fn set(&self, found: ServerCommands) {
        *self.0.lock().expect("detected lock") = found;
    }

    /// `XACKDEL` was refused where it was found (a node of another version
    /// answered, an ACL): acks are plain `XACK`s until the next connection.
    pub(crate) fn withdraw_ack_and_delete(&self) {
        self.0.lock().expect("detected lock").ack_and_delete = false;
    }
}

/// The (name, value) pairs of a RESP3 map or a RESP2 flat array.
fn pairs(v: &Value) -> Vec<(&Value, &Value)> {
    match v {
        Value::Map(m) => m.iter().map(|(k, v)| (k, v)).collect(),
        Value::Array(a) => a.chunks_exact(2).map(|p| (&p[0], &p[1])).collect(),
        _ => Vec::new(),
    }
}

fn text(v: &Value) -> Option<&str> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok(),
        Value::SimpleString(s) => Some(s),
        _ => None,
    }
}

/// Every value that follows a `token` key anywhere below `v`.
fn collect_tokens(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Map(m) => {
            for (k, val) in m {
                if text(k) == Some("token") {
                    if let Some(t) = text(val) {
                        out.push(t.to_owned());
                    }
                }
                collect_tokens(val, out);
            }
        }
        Value::Array(a) => {
            let mut i = 0;
            while i < a.len() {
                if text(&a[i]) == Some("token") && i + 1 < a.len() {
                    if let Some(t) = text(&a[i + 1]) {
                        out.push(t.to_owned());
                    }
                    i += 2;
                    continue;
                }
                collect_tokens(&a[i], out);
                i += 1;
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
