//! [`Alarm`]: one timer a loop keeps across its turns.

use std::pin::Pin;
use std::time::Duration;

/// A timer kept across turns of the loop: a loop that built a fresh
/// `sleep_until` per timer per turn (a timer-wheel entry added and removed each time) was a measurable
/// part of a fast consumer's CPU time. This one is moved only when its
/// instant changes.
pub(crate) struct Alarm {
    sleep: Pin<Box<tokio::time::Sleep>>,
    at: Option<tokio::time::Instant>,
}

impl Alarm {
    pub(crate) fn new() -> Self {
        Alarm {
            sleep: Box::pin(tokio::time::sleep_until(far_future())),
            at: None,
        }
    }

    /// The timer set to `at` (left alone when `None`: the branch that
    /// waits on it is then disabled).
    pub(crate) fn until(
        &mut self,
        at: Option<tokio::time::Instant>,
    ) -> &mut Pin<Box<tokio::time::Sleep>> {
        if let Some(at) = at {
            if self.at != Some(at) {
                self.sleep.as_mut().reset(at);
                self.at = Some(at);
            }
        }
        &mut self.sleep
    }
}

pub(crate) fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400 * 365)
}
