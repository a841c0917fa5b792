//! Taking a claim another live process may hold (a stream consumer name's
//! lease, a partition's lease, a list consumer's heartbeat) when a consumer
//! starts: one wait for every source. While another process holds it, the
//! board says `WaitingForLease` and the claim is asked for again when it
//! should have lapsed, at most every second.

use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::error::Error;
use crate::status::{Board, SubscriptionState};

/// What a take answered.
#[derive(Debug, PartialEq)]
pub(crate) enum Taken {
    /// Ours, for its TTL from when the take ran.
    Held,
    /// Another process holds it: its token and the claim's remaining time.
    Elsewhere { holder: String, remaining: Duration },
}

/// A take that got the claim: when it was sent (the claim is surely ours
/// until a TTL after that), and how long it waited for another holder.
pub(crate) struct Took {
    pub sent: Instant,
    pub waited: Option<Duration>,
}

/// Takes a claim with `take`, waiting while another process holds it
/// (`first_wait` is called once, with the holder and the time its claim
/// has left, to say so), until `deadline` (then the error `in_use` makes of
/// the holder and the time waited) or until `stop` changes
/// ([`Error::StartAborted`]). Errors of `take` are answered at once: the
/// caller decides whether to wait for Redis.
///
/// # Errors
/// As above.
pub(crate) async fn take_when_free<F, Fut>(
    mut take: F,
    deadline: Option<Instant>,
    mut stop: Option<&mut watch::Receiver<Option<Instant>>>,
    board: &Board,
    mut first_wait: impl FnMut(&str, Duration),
    in_use: impl FnOnce(String, Duration) -> Error,
) -> Result<Took, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Taken, Error>>,
{
    let began = Instant::now();
    let mut waited = false;
    loop {
        let sent = Instant::now();
        let (holder, remaining) = match take().await? {
            Taken::Held => {
                let waited = waited.then(|| began.elapsed());
                return Ok(Took { sent, waited });
            }
            Taken::Elsewhere { holder, remaining } => (holder, remaining),
        };
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Err(in_use(holder, began.elapsed()));
        }
        if !waited {
            waited = true;
            first_wait(&holder, remaining);
            board.set_state(SubscriptionState::WaitingForLease {
                holder,
                since: std::time::SystemTime::now(),
            });
        }
        // Ask again when it should have lapsed (a holder that stopped
        // renewing), at most every second and never past the deadline.
        let mut wait = remaining.clamp(Duration::from_millis(20), Duration::from_secs(1));
        if let Some(d) = deadline {
            wait = wait.min(d.saturating_duration_since(now));
        }
        match stop.as_deref_mut() {
            Some(stop) => {
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    _ = stop.changed() => return Err(Error::StartAborted),
                }
            }
            None => tokio::time::sleep(wait).await,
        }
    }
}
