//! One classification of what the server (or the network) answers, used by
//! every path: start, read, ack, claim, dead-letter move, publish.
//!
//! | answer | [`Class`] | what rillkit does |
//! |---|---|---|
//! | connection lost or refused, timeout | `Connection` | reconnect with capped backoff |
//! | TLS handshake refused (certificate, CA, client certificate), a server without TLS reached over TLS | `Tls` | at start: fail; at run time: wait, log at ERROR |
//! | `LOADING`, `BUSY`, `MASTERDOWN`, `TRYAGAIN`, `CLUSTERDOWN`, `NOREPLICAS`, `MISCONF`, max clients reached, `OOM` | `Busy` | wait with capped backoff |
//! | `READONLY`, `UNBLOCKED … master -> replica`, a connection to a replica | `RoleChange` | reconnect to the master of the moment, go on |
//! | `NOGROUP`, `UNBLOCKED` (stream deleted) | `GroupGone` | recreate the group from `0` |
//! | `WRONGPASS`, `NOAUTH`, failed `AUTH` | `Credentials` | at start: fail; at run time: wait, log at ERROR |
//! | `NOPERM`, or inside a script `ERR The user executing the script can't run this command` | `Permission` | at start: fail; at run time: wait, log at ERROR |
//! | `MOVED`, `ASK` | `Routing` | find the slot's owner (cluster); a read connection follows `ASK` itself first |
//! | `LEASELOST` (rillkit's fenced scripts) | `LeaseLost` | give the partition up: another consumer owns it |
//! | anything else (`WRONGTYPE`, syntax) | `Fatal` | the operation fails |

use redis::{ErrorKind, RedisError};

/// What kind of answer an error is. See the module docs for the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// The connection broke, was refused, or a reply did not come in time.
    Connection,
    /// The TLS handshake failed: a certificate the other side does not trust,
    /// or a server without TLS.
    Tls,
    /// The server answers but cannot serve now (loading, busy, out of memory…).
    Busy,
    /// The server is not (or no longer) the master: find the master again.
    RoleChange,
    /// The consumer group (or its stream) is gone.
    GroupGone,
    /// The credentials were refused.
    Credentials,
    /// The ACL user may not run a command.
    Permission,
    /// Cluster redirection.
    Routing,
    /// A partition's fenced command found the partition's lease held by
    /// another consumer (or by none).
    LeaseLost,
    /// Nothing waiting fixes it.
    Fatal,
}

impl Class {
    /// Whether waiting and trying again may succeed while running (every class
    /// but `Fatal`: a rotated password or a changed ACL may be put right).
    pub(crate) fn is_transient(self) -> bool {
        self != Class::Fatal
    }

    /// Whether trying the same command again later may succeed: a lost
    /// connection, a busy or loading server, a role change, a redirection
    /// ([`Error::is_retryable`](crate::Error::is_retryable)).
    pub(crate) fn is_retryable(self) -> bool {
        matches!(
            self,
            Class::Connection | Class::Busy | Class::RoleChange | Class::Routing
        )
    }

    /// Whether the connection that saw it should be dropped and opened again
    /// (to the master of the moment).
    pub(crate) fn reconnects(self) -> bool {
        matches!(self, Class::Connection | Class::RoleChange)
    }

    /// Whether it is a configuration problem (credentials, ACL), logged at
    /// ERROR rather than WARN while it lasts.
    pub(crate) fn is_configuration(self) -> bool {
        matches!(self, Class::Credentials | Class::Permission | Class::Tls)
    }
}

/// Words Redis 7.0 uses for an ACL refusal inside a script (`ERR …`).
const SCRIPT_NOPERM: &str = "The user executing the script can't run this command";

/// Classifies one redis-rs error.
pub(crate) fn classify(e: &RedisError) -> Class {
    if e.is_io_error() && is_tls_failure(&e.to_string()) {
        return Class::Tls;
    }
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
        return Class::Connection;
    }
    if e.kind() == ErrorKind::AuthenticationFailed {
        return Class::Credentials;
    }
    let detail = e.detail().unwrap_or("");
    match e.code() {
        Some("LOADING" | "BUSY" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN" | "NOREPLICAS") => {
            Class::Busy
        }
        Some("MISCONF" | "OOM") => Class::Busy,
        Some("READONLY") => Class::RoleChange,
        Some("UNBLOCKED") if detail.contains("master -> replica") => Class::RoleChange,
        Some("NOGROUP" | "UNBLOCKED") => Class::GroupGone,
        Some("WRONGPASS" | "NOAUTH") => Class::Credentials,
        Some("NOPERM") => Class::Permission,
        Some("MOVED" | "ASK") => Class::Routing,
        Some("LEASELOST") => Class::LeaseLost,
        Some("ERR") if detail.contains(SCRIPT_NOPERM) => Class::Permission,
        Some("ERR") if detail.contains("max number of clients reached") => Class::Busy,
        _ => {
            // Some answers arrive during the connection handshake, where
            // redis-rs keeps only the text.
            let text = e.to_string();
            if text.contains("max number of clients reached") || text.contains("LOADING") {
                Class::Busy
            } else if text.contains(SCRIPT_NOPERM) || text.contains("NOPERM") {
                Class::Permission
            } else if text.contains("WRONGPASS") || text.contains("NOAUTH") {
                Class::Credentials
            } else {
                Class::Fatal
            }
        }
    }
}

/// Whether the server accepted the connection and then dropped it (broken
/// pipe, reset, end of stream), rather than refusing it or not answering in
/// time: what a server with no free connection slot does after it answers
/// `ERR max number of clients reached`, an answer the client may not get to
/// read.
pub(crate) fn closed_after_accept(e: &RedisError) -> bool {
    e.is_connection_dropped() && !e.is_connection_refusal() && !e.is_timeout()
}

/// Words rustls uses when a handshake fails over a certificate.
fn is_tls_failure(text: &str) -> bool {
    text.contains("certificate") || text.contains("Certificate") || text.contains("fatal alert")
}

#[cfg(test)]
mod tests;
