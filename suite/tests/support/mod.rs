//! A real `redis-server` for tests and benches: started on a free port in a
//! temp dir, killed on drop. Its log is printed when the test panics.
//!
//! Production-like shapes too: replicas ([`RedisServer::start_replica_of`]),
//! a server still loading its dataset ([`RedisServer::start_loading`]), TLS
//! and mutual TLS ([`TlsRedis`]), and Sentinel ([`SentinelGroup`]).
//!
//! Set `RILLKIT_REDIS_SERVER` to use another binary than `redis-server` on
//! the `PATH` (e.g. a `valkey-server`): every server here, sentinels and
//! cluster nodes included, is that binary. A test that needs what the
//! binary lacks (TLS) skips, saying so: [`skip_without_tls!`].
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use process::Process;

pub mod cluster;
mod loading;
pub mod monitor;
pub mod order;
mod process;
pub mod proxy;
pub mod runs;
pub mod sentinel;
pub mod server;
pub mod tls;

#[allow(unused_imports)]
pub use cluster::RedisCluster;
#[allow(unused_imports)]
pub use sentinel::SentinelGroup;
#[allow(unused_imports)]
pub use server::ServerVersion;
#[allow(unused_imports)]
pub(crate) use server::skip_without_tls;
#[allow(unused_imports)]
pub use tls::TlsRedis;

pub struct RedisServer {
    process: Process,
    pub port: u16,
    /// Extra `redis-server` arguments, after the harness's own (later ones
    /// win), kept for [`RedisServer::restart`].
    args: Vec<String>,
    /// What counts as "up" after a (re)start.
    ready: Ready,
    /// Another server binary than the suite's (`None`: the suite's).
    binary: Option<String>,
}

/// When a freshly spawned server counts as started.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ready {
    /// `PING` answers `PONG`.
    Pong,
    /// `PING` answers anything, a `LOADING` error included.
    Answers,
}

/// A port nothing listens on, for a server to bind next. Drawn below the
/// kernel's ephemeral range (32768–60999 on Linux): a port from that range,
/// freed after the check, could be taken by any outgoing connection before
/// the server binds it ("Address already in use" at start, seen in CI).
/// Never the same port twice in one test process.
fn free_port() -> u16 {
    use std::collections::BTreeSet;
    use std::hash::BuildHasher;
    use std::sync::Mutex;
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for n in 0u64.. {
        let draw = std::collections::hash_map::RandomState::new().hash_one((n, std::process::id()));
        let port = 20_000 + (draw % 12_000) as u16;
        if given.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    unreachable!("ports 20000-31999 are all taken")
}

/// The `redis-server` binary: `RILLKIT_REDIS_SERVER` or the one on the `PATH`.
fn redis_server_bin() -> String {
    std::env::var("RILLKIT_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

/// The `redis-cli` binary: `RILLKIT_REDIS_CLI` or the one on the `PATH`
/// (it drives Valkey too: the cluster's creation, TLS checks).
fn redis_cli_bin() -> String {
    std::env::var("RILLKIT_REDIS_CLI").unwrap_or_else(|_| "redis-cli".into())
}

impl RedisServer {
    /// Starts a server on a free port and waits (up to 10 s) until it answers
    /// PING.
    ///
    /// # Panics
    /// When `redis-server` cannot be started or does not answer in time.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Like [`RedisServer::start`] with extra `redis-server` arguments (e.g.
    /// `&["--maxmemory", "10mb"]`), given after the harness's own so they win.
    /// [`RedisServer::restart`] starts it again with the same arguments.
    ///
    /// Every harness server runs with `--repl-diskless-sync-delay 0`, so a
    /// replica syncs at once instead of after Redis's default 5 s.
    ///
    /// # Panics
    /// When `redis-server` cannot be started or does not answer in time.
    pub fn start_with(args: &[&str]) -> Self {
        let mut s = Self::unstarted(args, Ready::Pong);
        s.spawn();
        s
    }

    /// Like [`RedisServer::start_with`], with the server binary `binary`
    /// instead of the suite's (a cluster of two versions).
    pub fn start_binary(binary: &str, args: &[&str]) -> Self {
        let mut s = Self::unstarted(args, Ready::Pong);
        s.binary = Some(binary.to_owned());
        s.spawn();
        s
    }

    fn unstarted(args: &[&str], ready: Ready) -> Self {
        let process = Process::new("redis-server");
        RedisServer {
            port: process.port,
            process,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            ready,
            binary: None,
        }
    }

    /// Starts a replica of `master` (`--replicaof 127.0.0.1 <port>`) and waits
    /// (up to 20 s) until its `master_link_status` is `up`, i.e. the initial
    /// sync is done.
    ///
    /// # Panics
    /// When it does not start or sync in time.
    pub fn start_replica_of(master: &RedisServer) -> Self {
        let port = master.port.to_string();
        let s = Self::start_with(&["--replicaof", "127.0.0.1", &port]);
        s.wait_master_link_up(Duration::from_secs(20));
        s
    }

    /// Waits up to `timeout` until this replica's `master_link_status` is `up`.
    ///
    /// # Panics
    /// When it is not in time; the message has both logs' ends.
    pub fn wait_master_link_up(&self, timeout: Duration) {
        eventually_blocking(
            &format!("replica on port {} has master_link_status:up", self.port),
            timeout,
            || self.master_link_up(),
        );
    }

    /// Whether this server is a replica whose link to its master is up.
    pub fn master_link_up(&self) -> bool {
        self.try_info("replication", "master_link_status")
            .as_deref()
            == Some("up")
    }

    /// The server's working directory (its `dump.rdb` lives there).
    pub fn dir(&self) -> &std::path::Path {
        self.process.dir()
    }

    /// Starts the process and waits (up to 10 s) until PING answers as
    /// `self.ready` asks.
    fn spawn(&mut self) {
        let binary = self.binary.clone().unwrap_or_else(redis_server_bin);
        let mut cmd = Command::new(binary);
        cmd.args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--repl-diskless-sync-delay", "0"])
            .arg("--dir")
            .arg(self.process.dir())
            .arg("--logfile")
            .arg(self.process.log_path())
            .args(&self.args);
        let ready = self.ready;
        self.process.spawn(cmd, |port| {
            let Some(mut c) = try_conn(port) else {
                return false;
            };
            match redis::cmd("PING").query::<String>(&mut c) {
                Ok(_) => true,
                Err(e) => ready == Ready::Answers && e.code().is_some(),
            }
        });
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A plain synchronous redis-rs connection, for checking what is in Redis.
    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .expect("url")
            .get_connection_with_timeout(Duration::from_secs(5))
            .expect("connect to test redis")
    }

    /// The value of `field` in `INFO <section>` (e.g. `blocked_clients`).
    pub fn info(&self, section: &str, field: &str) -> Option<String> {
        let info: String = redis::cmd("INFO")
            .arg(section)
            .query(&mut self.conn())
            .expect("INFO");
        info_field(&info, field)
    }

    /// Like [`RedisServer::info`], but `None` (no panic) when the server
    /// cannot be asked right now.
    pub fn try_info(&self, section: &str, field: &str) -> Option<String> {
        let info: String = redis::cmd("INFO")
            .arg(section)
            .query(&mut try_conn(self.port)?)
            .ok()?;
        info_field(&info, field)
    }

    /// The server's role from `ROLE`: `"master"` or `"slave"`.
    ///
    /// # Panics
    /// When the server does not answer.
    pub fn role(&self) -> String {
        let reply: Vec<redis::Value> = redis::cmd("ROLE").query(&mut self.conn()).expect("ROLE");
        let first = reply.into_iter().next().expect("ROLE reply is empty");
        redis::from_redis_value(first).expect("ROLE role name")
    }

    /// `REPLICAOF 127.0.0.1 <port of master>`, or `REPLICAOF NO ONE` for
    /// `None`. Returns at once; see [`RedisServer::wait_master_link_up`].
    pub fn replicaof(&self, master: Option<&RedisServer>) {
        let mut cmd = redis::cmd("REPLICAOF");
        match master {
            Some(m) => cmd.arg("127.0.0.1").arg(m.port),
            None => cmd.arg("NO").arg("ONE"),
        };
        let _: () = cmd.query(&mut self.conn()).expect("REPLICAOF");
    }

    /// `ACL SETUSER <args…>` as the default user, e.g.
    /// `acl_setuser(&["worker", "on", ">secret", "~tasks*", "+@all"])`.
    ///
    /// # Panics
    /// When Redis rejects the rule.
    pub fn acl_setuser(&self, args: &[&str]) {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(args)
            .query(&mut self.conn())
            .unwrap_or_else(|e| panic!("ACL SETUSER {args:?}: {e}"));
    }

    /// Clients blocked in a command (a consumer's XREADGROUP BLOCK).
    pub fn blocked_clients(&self) -> usize {
        self.info("clients", "blocked_clients")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// Connected clients, the asking one included.
    pub fn connected_clients(&self) -> usize {
        self.info("clients", "connected_clients")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// How many times `cmd` (lower case) ran, from `INFO commandstats`.
    pub fn command_calls(&self, cmd: &str) -> u64 {
        self.info("commandstats", &format!("cmdstat_{cmd}"))
            .and_then(|v| v.strip_prefix("calls=")?.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }

    /// How many calls of `cmd` failed, from `INFO commandstats`
    /// (`failed_calls`).
    pub fn command_failed_calls(&self, cmd: &str) -> u64 {
        self.info("commandstats", &format!("cmdstat_{cmd}"))
            .and_then(|v| {
                v.split(',')
                    .find_map(|f| f.strip_prefix("failed_calls="))?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    }

    /// How many replies had error `code`, from `INFO errorstats`.
    pub fn error_count(&self, code: &str) -> u64 {
        self.info("errorstats", &format!("errorstat_{code}"))
            .and_then(|v| v.strip_prefix("count=")?.parse().ok())
            .unwrap_or(0)
    }

    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// Starts it again on the same port, with the same arguments, in the same
    /// dir (empty unless something was `SAVE`d there: the harness turns
    /// automatic saving off). A server from [`RedisServer::start_loading`]
    /// counts as up again as soon as it answers, while it is still loading.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

/// A connection to 127.0.0.1:`port`, or `None` while nothing accepts one.
fn try_conn(port: u16) -> Option<redis::Connection> {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .ok()?
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()
}

/// The value of `field` in an `INFO` reply.
fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|l| {
        l.strip_prefix(field)?
            .strip_prefix(':')
            .map(|v| v.trim().to_owned())
    })
}

/// Polls `cond` every 10 ms until it holds or `timeout` passes.
///
/// # Panics
/// When the condition does not hold in time; the message names `what`.
pub async fn eventually<F: FnMut() -> bool>(what: &str, timeout: Duration, mut cond: F) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Blocking variant of [`eventually`] for plain threads.
pub fn eventually_blocking<F: FnMut() -> bool>(what: &str, timeout: Duration, cond: F) {
    eventually_blocking_every(what, timeout, Duration::from_millis(10), cond);
}

/// [`eventually_blocking`] polling every `every` instead of every 10 ms, for
/// conditions that are costly to check (many connections each time).
pub fn eventually_blocking_every<F: FnMut() -> bool>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut cond: F,
) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        std::thread::sleep(every);
    }
}

/// Number of entries in the group's pending entries list.
pub fn pending_count(conn: &mut redis::Connection, stream: &str, group: &str) -> usize {
    let v: redis::Value = redis::cmd("XPENDING")
        .arg(stream)
        .arg(group)
        .query(conn)
        .expect("XPENDING");
    match v {
        redis::Value::Array(items) => match items.first() {
            Some(redis::Value::Int(n)) => *n as usize,
            _ => 0,
        },
        _ => 0,
    }
}

/// Number of entries in a stream (0 if the key does not exist).
pub fn stream_len(conn: &mut redis::Connection, stream: &str) -> usize {
    redis::cmd("XLEN").arg(stream).query(conn).expect("XLEN")
}

/// Installs a tracing subscriber writing to the test's output (once).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "rillkit=info".into()),
        )
        .with_test_writer()
        .try_init();
}

/// The `worker` example's binary, built once per test process with the same
/// cargo and profile.
pub fn worker_bin() -> PathBuf {
    example_bin("worker")
}

/// An example's binary, built once per test process (and example) with the
/// same cargo and profile.
pub fn example_bin(name: &str) -> PathBuf {
    built("--example", name)
}

/// The actix_web example's binary (package `rillkit-actix-web-example`),
/// built once per test process.
pub fn web_example_bin() -> PathBuf {
    built("--bin", "actix_web")
}

/// The `rillkit` command-line tool (package `rillkit-cli`), built once per
/// test process with the same cargo and profile: it belongs to another
/// package, so cargo sets no `CARGO_BIN_EXE_rillkit` for the tests here.
pub fn rillkit_bin() -> PathBuf {
    built("--bin", "rillkit")
}

/// Builds one target (`--example worker`, `--bin rillkit`) of the workspace
/// with every feature, as `cargo test --all-features` at the root does (the
/// same feature set, so nothing is built twice), and answers its path.
/// The examples live in the root package (rillkit), the tool and the web
/// example in packages of their own (rillkit-cli, the web example's); the build
/// selects the whole workspace and cargo finds the target's owner.
fn built(kind: &str, name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let key = format!("{kind} {name}");
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = built.iter().find(|(k, _)| *k == key) {
        return p.clone();
    }
    // The workspace root, one above this package (suite/).
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    // Without the variables cargo sets for this test process: ring's build
    // script reruns when CARGO_MANIFEST_DIR or CARGO_PKG_* change, so with
    // them this build would rebuild ring and every crate above it (rillkit
    // too), and the next `cargo test` all of them again.
    for (var, _) in std::env::vars_os() {
        let var = var.to_string_lossy();
        if var.starts_with("CARGO_PKG_")
            || matches!(
                &*var,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_MANIFEST_LINKS"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "OUT_DIR"
            )
        {
            build.env_remove(&*var);
        }
    }
    let status = build
        .args([
            "build",
            "--quiet",
            "--workspace",
            "--all-features",
            kind,
            name,
        ])
        .current_dir(root)
        .status()
        .unwrap_or_else(|e| panic!("run cargo build {key}: {e}"));
    assert!(status.success(), "cargo build {key} failed");
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    let debug = target.join("debug");
    let path = if kind == "--example" {
        debug.join("examples").join(name)
    } else {
        debug.join(name)
    };
    built.push((key, path.clone()));
    path
}

/// A running `worker` example process; killed on drop.
pub struct Worker {
    child: Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stderr: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// The stdout and stderr reader threads; joined once the process has
    /// exited, so every line it printed is in `lines`/`stderr` by then.
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Worker {
    /// Starts the worker against `url` with extra `RILLKIT_*` variables and
    /// waits (up to 20 s) until its consumer has started.
    pub fn spawn(url: &str, env: &[(&str, &str)]) -> Worker {
        let w = Worker::spawn_starting(url, env);
        eventually_blocking("worker consumer started", Duration::from_secs(60), || {
            w.stderr
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains("consumer started"))
        });
        w
    }

    /// Starts the worker without waiting for anything.
    pub fn spawn_starting(url: &str, env: &[(&str, &str)]) -> Worker {
        let mut cmd = Command::new(worker_bin());
        cmd.env("REDIS_URL", url)
            .env("RUST_LOG", "rillkit=info")
            .envs(env.iter().copied());
        Worker::spawn_command(cmd)
    }

    /// Starts another program the same way (its stdout and stderr
    /// collected line by line), without waiting for anything.
    pub fn spawn_command(mut cmd: Command) -> Worker {
        use std::io::BufRead;
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start the worker example");
        let lines: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let stderr: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let l = lines.clone();
        let out_reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        let e = stderr.clone();
        let err_reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                e.lock().unwrap().push(line);
            }
        });
        Worker {
            child,
            lines,
            stderr,
            readers: vec![out_reader, err_reader],
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lines printed on stdout so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Log lines printed on stderr so far.
    pub fn log(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// `handled <id> delivery <n>` lines as `(id, n)`.
    pub fn handled(&self) -> Vec<(u64, u64)> {
        self.lines()
            .iter()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                match (it.next(), it.next(), it.next(), it.next()) {
                    (Some("handled"), Some(id), Some("delivery"), Some(n)) => {
                        Some((id.parse().ok()?, n.parse().ok()?))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// Sends a signal by name (`TERM`, `INT`, `KILL`) with `kill(1)`.
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{name} failed");
    }

    /// Waits up to `timeout` for the process to exit; its exit status, or
    /// `None` if it was killed by a signal.
    ///
    /// # Panics
    /// When it is still running after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // The pipes close with the process: the readers reach their
                // end and the last lines it printed are collected.
                for reader in self.readers.drain(..) {
                    let _ = reader.join();
                }
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "worker still running after {timeout:?}; log:\n{}",
                self.log().join("\n")
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- worker {} stderr ----\n{}",
                self.pid(),
                self.log().join("\n")
            );
            eprintln!(
                "---- worker {} stdout ----\n{}",
                self.pid(),
                self.lines().join("\n")
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The group's consumers as `(name, pending)`, sorted by name
/// (`XINFO CONSUMERS`).
pub fn consumers(conn: &mut redis::Connection, stream: &str, group: &str) -> Vec<(String, u64)> {
    let rows: Vec<Vec<redis::Value>> = redis::cmd("XINFO")
        .arg("CONSUMERS")
        .arg(stream)
        .arg(group)
        .query(conn)
        .unwrap();
    let mut v: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                redis::from_redis_value_ref(&r[1]).unwrap(),
                redis::from_redis_value_ref(&r[3]).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// `XADD <stream> * data <json>`; returns the entry id.
pub fn xadd(conn: &mut redis::Connection, stream: &str, json: &str) -> String {
    redis::cmd("XADD")
        .arg(stream)
        .arg("*")
        .arg("data")
        .arg(json)
        .query(conn)
        .expect("XADD")
}

/// Entries whose `data` is each of `values` (JSON numbers), added to
/// `stream` with pipelined `XADD`s, 1,000 to a pipeline.
pub fn xadd_values(conn: &mut redis::Connection, stream: &str, values: std::ops::Range<u64>) {
    for chunk in values.collect::<Vec<_>>().chunks(1_000) {
        let mut pipe = redis::pipe();
        for v in chunk {
            pipe.cmd("XADD")
                .arg(stream)
                .arg("*")
                .arg("data")
                .arg(v.to_string())
                .ignore();
        }
        pipe.query::<()>(conn).expect("XADD");
    }
}

/// `XGROUP CREATE <stream> <group> <start> MKSTREAM`; a group that exists
/// already is left as it is.
pub fn create_group(conn: &mut redis::Connection, stream: &str, group: &str, start: &str) {
    let _: redis::RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(group)
        .arg(start)
        .arg("MKSTREAM")
        .query(conn);
}

/// Adds `{"id": <id>}` entries for each id to `stream` and has a consumer
/// named `consumer` of `group` (created from `0` if missing) read them without
/// acking, as a consumer that dies mid-batch leaves them.
pub fn strand(
    redis: &RedisServer,
    stream: &str,
    group: &str,
    consumer: &str,
    ids: std::ops::Range<u64>,
) {
    let mut c = redis.conn();
    create_group(&mut c, stream, group, "0");
    let n = ids.end - ids.start;
    for id in ids {
        xadd(&mut c, stream, &format!(r#"{{"id":{id}}}"#));
    }
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(group)
        .arg(consumer)
        .arg("COUNT")
        .arg(n)
        .arg("STREAMS")
        .arg(stream)
        .arg(">")
        .query(&mut c)
        .expect("XREADGROUP");
}

/// Environment for a `worker` on stream `tasks`, group `workers`, named
/// `consumer`, plus `extra` variables.
pub fn worker_env<'a>(consumer: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut v = vec![
        ("RILLKIT_STREAM", "tasks"),
        ("RILLKIT_GROUP", "workers"),
        ("RILLKIT_CONSUMER", consumer),
        // A crashed worker's successor under its name waits for the lease
        // to lapse: keep that short in tests (tests about the lease set it).
        ("RILLKIT_LEASE_TTL_MS", "1000"),
    ];
    v.extend_from_slice(extra);
    v
}

/// The words of the guide's minimal ACL line for `server` (between
/// `<!-- minimal-acl -->` and `<!-- /minimal-acl -->`), so tests run exactly
/// what the guide (`docs/guide/src/production.md`) says. The block has two `ACL SETUSER` lines: one for
/// Redis 7.0, and one for Redis 7.2+ and Valkey that adds `+client|setinfo`
/// (redis-rs sends `CLIENT SETINFO` at connect to the servers that know it;
/// 7.0 rejects the rule's name). The two must differ by that rule alone.
pub fn guide_acl_words(server: &ServerVersion) -> Vec<String> {
    const SETINFO: &str = "+client|setinfo";
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/guide/src/production.md");
    let text = std::fs::read_to_string(&path).expect("read the guide's production.md");
    let (open, close) = ("<!-- minimal-acl -->", "<!-- /minimal-acl -->");
    let start = text
        .find(open)
        .unwrap_or_else(|| panic!("production.md has no {open} marker"))
        + open.len();
    let len = text[start..]
        .find(close)
        .unwrap_or_else(|| panic!("production.md has no {close} marker after {open}"));
    let lines: Vec<Vec<String>> = text[start..start + len]
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("ACL SETUSER"))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect();
    let [old, new] = lines.as_slice() else {
        panic!(
            "expected two `ACL SETUSER` lines between the markers (Redis 7.0; \
             Redis 7.2+ and Valkey), found {lines:?}"
        );
    };
    let mut without: Vec<String> = new.clone();
    without.retain(|w| w != SETINFO);
    assert!(
        !old.iter().any(|w| w == SETINFO) && without.len() + 1 == new.len() && without == *old,
        "the guide's second ACL line must be the first plus {SETINFO}:\n{old:?}\n{new:?}"
    );
    if server.has_client_setinfo() {
        new.clone()
    } else {
        old.clone()
    }
}

/// A server that is not Redis: it listens on a free port of 127.0.0.1 and
/// answers whatever each connection sends first with `HTTP/1.1 400 Bad
/// Request`, then closes it, as an HTTP server does with a Redis command.
/// Answers its port; it serves until the test process ends.
pub fn http_server() -> u16 {
    use std::io::{Read as _, Write as _};
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a port for the HTTP server");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut request = [0u8; 1024];
            if conn.read(&mut request).is_ok_and(|n| n > 0) {
                let _ = conn.write_all(
                    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 11\r\nConnection: close\r\n\r\nBad Request",
                );
            }
        }
    });
    port
}
