//! A throwaway `redis-server` for integration tests.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` of its own on a free port of 127.0.0.1, with its files in
/// a fresh directory under the system's temp dir, persisting nothing; killed
/// and its directory removed on drop.
///
/// `redis-server` must be on the `PATH` (or named by `RILLKIT_REDIS_SERVER`).
///
/// ```no_run
/// # actix::System::new().block_on(async {
/// let redis = rillkit::test_util::RedisServer::start().expect("redis-server on PATH");
/// let broker = rillkit::Broker::builder(redis.url()).build().unwrap();
/// broker.start().await.unwrap();
/// # });
/// ```
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts the server and waits (up to 10 s) until it accepts
    /// connections.
    ///
    /// # Errors
    /// When `redis-server` cannot be run or does not listen within 10 s.
    pub fn start() -> std::io::Result<RedisServer> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let dir = std::env::temp_dir().join(format!("rillkit-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let bin = std::env::var("RILLKIT_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let mut server = RedisServer { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = server.child.try_wait()? {
                return Err(std::io::Error::other(format!(
                    "redis-server exited at start: {status}"
                )));
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(
                    "redis-server did not listen within 10 s",
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        server.child.try_wait()?;
        Ok(server)
    }

    /// Its URL, `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
