//! A real `redis-server` for tests and benches: started on a free port in a
//! temp dir, killed on drop. Its log is printed when the test panics.
//!
//! Set `RILLKIT_REDIS_SERVER` to use another binary than `redis-server` on
//! the `PATH`.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral port")
        .local_addr()
        .expect("local addr")
        .port()
}

impl RedisServer {
    /// Starts a server on a free port and waits (up to 10 s) until it answers
    /// PING.
    ///
    /// # Panics
    /// When `redis-server` cannot be started or does not answer in time.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut s = RedisServer {
            child: None,
            port: free_port(),
            dir,
        };
        s.spawn();
        s
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn spawn(&mut self) {
        let bin = std::env::var("RILLKIT_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(&bin)
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {bin}: {e} (set RILLKIT_REDIS_SERVER)"));
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(client) = redis::Client::open(self.url()) {
                if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200)) {
                    if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                        return;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer within 10 s; log:\n{}",
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
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

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port (empty: nothing is persisted).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- redis-server log (port {}) ----\n{}",
                self.port,
                self.log()
            );
        }
        self.stop();
    }
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
pub fn eventually_blocking<F: FnMut() -> bool>(what: &str, timeout: Duration, mut cond: F) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
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
