//! Talking with the operator during a change: asking before it (`--yes`
//! skips the question), and Ctrl-C during it.

use std::io::{BufRead, IsTerminal, Write};

use tokio::sync::watch;

use crate::Failure;
use crate::output::text;

/// Goes on when `yes` (`--yes`), or when the operator answers `y` to
/// "`what`?" asked on the terminal. Otherwise nothing is done, and the
/// command fails with exit 2: `unasked` says what it would have done when
/// there is no terminal to ask on (stdin is not one: a script, a pipe).
pub fn confirm(yes: bool, what: &str, unasked: &str) -> Result<(), Failure> {
    if yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Failure::Usage(format!("{unasked}; add --yes to do it")));
    }
    let mut err = std::io::stderr();
    let _ = write!(err, "{}? [y/N] ", text(what.as_bytes()));
    let _ = err.flush();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::Usage(format!("could not read the answer: {e}")))?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(Failure::Usage("not confirmed: nothing done".into())),
    }
}

/// Whether Ctrl-C (SIGINT) came since [`Interrupt::watch`]. From then on the
/// signal no longer ends the process: the command looks at
/// [`Interrupt::requested`] between two steps and stops there, or waits for
/// it ([`Interrupt::wait`]).
pub struct Interrupt(watch::Receiver<bool>);

impl Interrupt {
    /// Starts watching for Ctrl-C (on the current tokio runtime). The
    /// handler is in place when this returns.
    pub fn watch() -> Result<Interrupt, Failure> {
        let (tx, rx) = watch::channel(false);
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let mut sigint = signal(SignalKind::interrupt())
                .map_err(|e| Failure::Usage(format!("cannot watch for Ctrl-C: {e}")))?;
            tokio::spawn(async move {
                if sigint.recv().await.is_some() {
                    let _ = tx.send(true);
                }
            });
        }
        #[cfg(not(unix))]
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                let _ = tx.send(true);
            }
        });
        Ok(Interrupt(rx))
    }

    /// Whether Ctrl-C came.
    pub fn requested(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits for Ctrl-C.
    pub async fn wait(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|&came| came).await;
    }
}
