//! Small utilities every layer may use: a panic's message, the capped
//! backoff of every wait on the server ([`Retry`]), and a timer kept across
//! turns of a loop ([`Alarm`]).

mod alarm;
mod backoff;

pub(crate) use alarm::Alarm;
pub(crate) use backoff::{Retry, log_wait};

/// The text of a panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// Milliseconds since the Unix epoch, now (0 on a clock set before it).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
