//! A TCP proxy in front of a server, to cut one client off from it without
//! touching the others: [`Proxy::cut`] stops forwarding in both directions
//! while every socket stays open, as a network that silently loses packets
//! does; [`Proxy::restore`] then delivers what was held, as TCP's
//! retransmission does once the path is back. [`Proxy::drop_traffic`]
//! instead throws the bytes away, and the connections that lost some are
//! closed at the restore (a stream with a hole in it cannot go on).
//!
//! It runs on a tokio runtime of its own thread, so plain `#[test]`s use
//! it; it listens on a free port from the harness ([`super::free_port`]).
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with the bytes it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Forward,
    /// Kept until the next [`Mode::Forward`], then delivered.
    Hold,
    /// Thrown away; the connection is closed at the next
    /// [`Mode::Forward`].
    Drop,
}

pub struct Proxy {
    pub port: u16,
    mode: watch::Sender<Mode>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// A proxy on a free port forwarding to `127.0.0.1:<to>`.
    pub fn start(to: u16) -> Proxy {
        let port = super::free_port();
        let (mode, mode_rx) = watch::channel(Mode::Forward);
        let (shutdown, shutdown_rx) = tokio::sync::oneshot::channel();
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the proxy's runtime");
            rt.block_on(async move {
                let listener = TcpListener::bind(("127.0.0.1", port))
                    .await
                    .expect("bind the proxy's port");
                bound_tx.send(()).expect("the test waits");
                tokio::select! {
                    () = accept(listener, to, mode_rx) => {}
                    _ = shutdown_rx => {}
                }
            });
        });
        bound_rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the proxy listens");
        Proxy {
            port,
            mode,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops forwarding in both directions and holds what comes in.
    pub fn cut(&self) {
        self.mode.send_replace(Mode::Hold);
    }

    /// Stops forwarding and throws what comes in away.
    pub fn drop_traffic(&self) {
        self.mode.send_replace(Mode::Drop);
    }

    /// Forwards again: what was held is delivered first; the connections
    /// that lost bytes are closed.
    pub fn restore(&self) {
        self.mode.send_replace(Mode::Forward);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn accept(listener: TcpListener, to: u16, mode: watch::Receiver<Mode>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let mode = mode.clone();
        tokio::spawn(async move {
            // A connection opened during a cut waits for the path, as a
            // SYN retransmitted would.
            let mut m = mode.clone();
            if m.wait_for(|m| *m == Mode::Forward).await.is_err() {
                return;
            }
            let Ok(server) = TcpStream::connect(("127.0.0.1", to)).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            let lost = Arc::new(AtomicBool::new(false));
            let up = pump(cr, sw, mode.clone(), lost.clone());
            let down = pump(sr, cw, mode, lost);
            // Either side closing (or a hole) ends both.
            tokio::select! {
                () = up => {}
                () = down => {}
            }
        });
    }
}

/// Copies `from` to `to` as the mode says. Ends when either side closes,
/// or at a restore after bytes were dropped (`lost`, shared by both
/// directions of one connection).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
    lost: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            changed = mode.changed() => {
                if changed.is_err() {
                    return;
                }
                if *mode.borrow_and_update() == Mode::Forward && lost.load(Ordering::SeqCst) {
                    return;
                }
                continue;
            }
        };
        let now = *mode.borrow_and_update();
        match now {
            Mode::Forward => {}
            Mode::Drop => {
                lost.store(true, Ordering::SeqCst);
                continue;
            }
            Mode::Hold => {
                // Held until the path is back (or it is dropped instead).
                let Ok(back) = mode.wait_for(|m| *m != Mode::Hold).await else {
                    return;
                };
                if *back == Mode::Drop {
                    lost.store(true, Ordering::SeqCst);
                    continue;
                }
            }
        }
        if lost.load(Ordering::SeqCst) {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
