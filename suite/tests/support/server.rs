//! What the server binary under test is and can do: its name and version
//! (Redis or Valkey, from `INFO server`), whether it was built with TLS,
//! and the one way a test skips for a capability the binary lacks
//! ([`skip_without_tls!`](crate::support::skip_without_tls)).
#![allow(dead_code)]

use std::fmt;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{free_port, info_field, redis_server_bin};

/// A server's name and version, from `INFO server`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerVersion {
    /// Valkey (`server_name:valkey`, or a `valkey_version` field).
    pub valkey: bool,
    /// `valkey_version` on Valkey, else `redis_version` (Valkey also sends
    /// `redis_version`, the Redis version it is compatible with: 7.2.4).
    pub version: (u32, u32, u32),
}

impl ServerVersion {
    /// Asks `INFO server` on `conn`.
    ///
    /// # Panics
    /// When the server does not answer or names no version.
    pub fn of(conn: &mut redis::Connection) -> ServerVersion {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(conn)
            .expect("INFO server");
        Self::parse(&info).unwrap_or_else(|| panic!("no server version in INFO server:\n{info}"))
    }

    /// Reads `INFO server`'s text.
    pub fn parse(info: &str) -> Option<ServerVersion> {
        let valkey_version = info_field(info, "valkey_version");
        let valkey = valkey_version.is_some()
            || info_field(info, "server_name").is_some_and(|n| n.eq_ignore_ascii_case("valkey"));
        let text = valkey_version.or_else(|| info_field(info, "redis_version"))?;
        let mut parts = text.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let version = (
            parts.next()?,
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        );
        Some(ServerVersion { valkey, version })
    }

    /// Whether the server knows `CLIENT SETINFO` (Redis 7.2 and later, every
    /// Valkey), which redis-rs sends on every new connection to such a
    /// server. An ACL must then allow `client|setinfo`; Redis 7.0 rejects
    /// the rule's name.
    pub fn has_client_setinfo(&self) -> bool {
        self.valkey || self.version >= (7, 2, 0)
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor, patch) = self.version;
        let name = if self.valkey { "Valkey" } else { "Redis" };
        write!(f, "{name} {major}.{minor}.{patch}")
    }
}

/// Why the server binary cannot serve TLS, or `None` when it can. Asked
/// once per test process: the binary is started with a `--tls-port` and no
/// certificate. A build with TLS then exits complaining about the missing
/// certificate; one without says it has no TLS support ("Missing implement
/// of connection type tls" from Valkey built without TLS). Only that answer
/// counts as "no TLS": anything else (it keeps running, it cannot be
/// started) lets the TLS tests run and fail on their own.
pub fn tls_missing() -> Option<&'static str> {
    static MISSING: OnceLock<Option<String>> = OnceLock::new();
    MISSING.get_or_init(probe_tls).as_deref()
}

fn probe_tls() -> Option<String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("probe.log");
    let mut cmd = Command::new(redis_server_bin());
    cmd.args(["--port", "0"])
        .args(["--tls-port", &free_port().to_string()])
        .args(["--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir.path())
        .arg("--logfile")
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let Ok(mut child) = cmd.spawn() else {
        return None;
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if child.try_wait().ok().flatten().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    text.lines()
        .find(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("connection type tls") || l.contains("tls support")
        })
        .map(|l| {
            // Past the log prefix (`pid:role date time # `).
            l.split_once(" # ").map_or(l, |(_, m)| m).trim().to_owned()
        })
}

/// Whether the server on `conn` knows the command `name` (`COMMAND INFO`
/// answers nil for a command it does not know): a test of a newer
/// command skips elsewhere.
pub fn has_command(conn: &mut redis::Connection, name: &str) -> bool {
    let info: redis::Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(name)
        .query(conn)
        .expect("COMMAND INFO");
    !matches!(&info, redis::Value::Array(v) if v.iter().all(|x| *x == redis::Value::Nil))
}

/// Whether the calling test may go on: when the server on `conn` lacks
/// the command `name`, prints why `test` skips (see [`print_skip`], with
/// `since`, the first version that has it) and answers `false`.
pub fn command_or_skip(conn: &mut redis::Connection, name: &str, since: &str, test: &str) -> bool {
    if has_command(conn, name) {
        return true;
    }
    print_skip(test, &format!("has no {name} ({since})"));
    false
}

/// Prints `SKIP <test>: <binary> <why>` on the process's stderr, past the
/// test harness's capture (which takes `eprintln!`), so a skip is never
/// silent.
pub fn print_skip(test: &str, why: &str) {
    // One write, so the line is not cut by libtest's own output.
    let line = format!("SKIP {test}: {} {why}\n", redis_server_bin());
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Whether the calling test may go on with TLS; when the binary has no TLS,
/// prints why it skips (see [`print_skip`]) and answers `false`. Use
/// [`skip_without_tls!`](crate::support::skip_without_tls).
pub fn tls_or_skip(test: &str) -> bool {
    match tls_missing() {
        None => true,
        Some(why) => {
            print_skip(test, &format!("has no TLS ({why})"));
            false
        }
    }
}

/// The name of the test function this expands in, after its test crate's
/// (`tls::mutual_tls_with_the_client_certificate_works`: the same name can
/// be a test in two files).
#[allow(unused_macros)]
macro_rules! test_name {
    () => {{
        fn here() {}
        fn name_of<T>(_: T) -> &'static str {
            std::any::type_name::<T>()
        }
        name_of(here)
            .trim_end_matches("::here")
            .replace("::{{closure}}", "")
    }};
}

/// Returns from the calling test, after printing
/// `SKIP <crate>::<test>: <binary> has no TLS (…)`, when the server binary
/// (`RILLKIT_REDIS_SERVER`) was built without TLS. Under a binary with TLS
/// it does nothing.
#[allow(unused_macros)]
macro_rules! skip_without_tls {
    () => {
        if !$crate::support::server::tls_or_skip(&$crate::support::server::test_name!()) {
            return;
        }
    };
}

#[allow(unused_imports)]
pub(crate) use {skip_without_tls, test_name};
