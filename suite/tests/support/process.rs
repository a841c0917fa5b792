//! One server process of the harness (a `redis-server`, a TLS one, a
//! sentinel): a free port, a temp dir with its log, started and waited for
//! with a deadline, killed on drop, its log printed when the test panics.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

pub struct Process {
    /// What it is, for messages ("redis-server", "sentinel"…).
    label: &'static str,
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Process {
    /// A process not started yet, with its port and temp dir.
    pub fn new(label: &'static str) -> Process {
        Process {
            label,
            port: free_port(),
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
        }
    }

    /// The working directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Where the process writes its log (pass it as `--logfile`).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Spawns `cmd` (stdout and stderr discarded), then polls `up` every
    /// 20 ms until it holds.
    ///
    /// # Panics
    /// When the process cannot be spawned, exits, or is not up within 10 s;
    /// the message has its log.
    pub fn spawn(&mut self, mut cmd: Command, mut up: impl FnMut(u16) -> bool) {
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "could not start {} ({cmd:?}): {e} (set RILLKIT_REDIS_SERVER)",
                    self.label
                )
            });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !up(self.port) {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "{} on port {} exited ({status}) at start; log:\n{}",
                    self.label,
                    self.port,
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} on port {} was not up within 10 s; log:\n{}",
                self.label,
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the process (SIGKILL) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- {} log (port {}) ----\n{}",
                self.label,
                self.port,
                self.log()
            );
        }
        self.stop();
    }
}
