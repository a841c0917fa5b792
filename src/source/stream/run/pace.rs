//! What a read may fetch besides the room the handlers have: the group's
//! rate limit (a read fetches no more than the permits held) and, in a
//! prioritized subscription, this stream's place (it reads new entries only
//! while every stream before it is clear). [`Pace`] keeps both; the loop
//! asks it before a read and tells it what a read of new entries found.

use std::pin::pin;

use tokio::sync::watch;

use crate::delivery::limit::Limiter;
use crate::source::stream::priority::Level;

pub(super) struct Pace {
    /// The group's rate limit: the permits this consumer holds.
    limit: Option<Limiter>,
    /// Its place among the streams of a prioritized subscription, and the
    /// wake-ups when a stream before it turns clear or not.
    level: Option<(Level, watch::Receiver<()>)>,
    /// Its last read of new entries found none.
    found_none: bool,
    /// Its last read of new entries brought fewer than it asked for: the
    /// next asks for one, so an idle consumer's blocked read holds one
    /// permit, not a read's worth that others could use.
    short: bool,
    /// Permits the read in flight was given.
    in_read: usize,
}

impl Pace {
    pub(super) fn new(limit: Option<Limiter>, level: Option<Level>) -> Self {
        Pace {
            limit,
            level: level.map(|l| {
                let changes = l.priority.watch();
                (l, changes)
            }),
            found_none: false,
            short: true,
            in_read: 0,
        }
    }

    /// Whether new entries may be read now: every stream before this one
    /// is clear.
    pub(super) fn may_read_new(&self) -> bool {
        self.level
            .as_ref()
            .is_none_or(|(l, _)| l.priority.before_clear(l.index))
    }

    /// Whether it paces nothing: no rate limit, no priority. Only then may
    /// a second read be sent behind the one in flight (each read is
    /// admitted alone, and a level learns it is clear from one read).
    pub(super) fn is_free(&self) -> bool {
        self.limit.is_none() && self.level.is_none()
    }

    /// Whether the next read of new entries should not block: streams come
    /// after this one and it has not found its stream empty yet, so they
    /// learn at once when it is.
    pub(super) fn probes(&self) -> bool {
        !self.found_none
            && self
                .level
                .as_ref()
                .is_some_and(|(l, _)| l.priority.has_after(l.index))
    }

    /// The read in flight ended: it brought `n` entries (`None`: it
    /// failed); `new`: a read of new entries. Permits it did not use go
    /// back to the group's bucket. A read of new entries that failed counts
    /// as finding none: the streams after this one do not wait out this
    /// one's trouble.
    pub(super) fn read_ended(&mut self, n: Option<usize>, new: bool) {
        let given = std::mem::take(&mut self.in_read);
        let brought = n.unwrap_or(0);
        if let Some(limit) = self.limit.as_mut() {
            limit.give_back(given.saturating_sub(brought));
        }
        if new {
            self.found_none = brought == 0;
            self.short = brought < given.max(1);
        }
    }

    /// A read of new entries may not start: a stream before this one has
    /// work. This one is not known to be clear until it has read again.
    pub(super) fn held_back(&mut self) {
        self.found_none = false;
    }

    /// Tells the streams after this one whether it is clear: its last read
    /// of new entries found none and nothing it read waits to start (`idle`),
    /// or it reads nothing now (`paused`: paused, draining or gone).
    pub(super) fn show(&self, idle: bool, paused: bool) {
        if let Some((l, _)) = &self.level {
            l.priority
                .set_clear(l.index, paused || (idle && self.found_none));
        }
    }

    /// How many entries a read that would fetch `want` may fetch (spent
    /// until it ends), asking the rate limit's bucket for what is missing;
    /// `None` when none. `new`: a read of new entries, which after a short
    /// one asks for one entry.
    pub(super) fn admit(&mut self, want: usize, new: bool) -> Option<usize> {
        let Some(limit) = self.limit.as_mut() else {
            return Some(want);
        };
        let want = if new && self.short { 1 } else { want };
        limit.turn(want);
        let count = want.min(limit.permits());
        if count == 0 {
            return None;
        }
        limit.spend(count);
        self.in_read = count;
        Some(count)
    }

    /// Resolves when the rate limit's bucket answered a take, or a stream
    /// before this one turned clear or not (pending when neither can
    /// happen). Cancel-safe.
    pub(super) async fn changed(&mut self) {
        let Pace { limit, level, .. } = self;
        let answered = async {
            match limit.as_mut() {
                Some(l) => l.answered().await,
                None => std::future::pending().await,
            }
        };
        let turned = async {
            match level.as_mut() {
                Some((_, changes)) => {
                    if changes.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        };
        futures::future::select(pin!(answered), pin!(turned)).await;
    }
}

impl Drop for Pace {
    /// A loop that ends however it ends (a stop, an error, a panic, a lease
    /// it never got) no longer holds the streams after it back.
    fn drop(&mut self) {
        self.show(true, true);
    }
}

#[cfg(test)]
mod tests;
