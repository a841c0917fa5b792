use std::cell::Cell;

use super::{sent_again, until_stopped};
use crate::error::{Class, Error};

fn refused() -> Error {
    Error::Connect(redis::RedisError::from(std::io::Error::from(
        std::io::ErrorKind::ConnectionRefused,
    )))
}

fn transient_only(e: &Error) -> bool {
    matches!(e, Error::ShutDown) || !e.class().is_transient()
}

#[tokio::test(start_paused = true)]
async fn a_step_is_tried_again_until_it_works_and_failures_are_logged_sparingly() {
    let (_tx, mut stop) = tokio::sync::watch::channel(());
    let (tries, logged) = (Cell::new(0), Cell::new(0));
    let attempt = || {
        tries.set(tries.get() + 1);
        let n = tries.get();
        async move { if n < 4 { Err(refused()) } else { Ok(n) } }
    };
    let out = until_stopped(&mut stop, attempt, transient_only, |_, _| {
        logged.set(logged.get() + 1)
    })
    .await;
    assert_eq!(out.ok(), Some(4));
    assert_eq!(
        logged.get(),
        2,
        "the first and second failures, not the third"
    );
}

#[tokio::test(start_paused = true)]
async fn an_error_no_wait_fixes_ends_it_at_once() {
    let (_tx, mut stop) = tokio::sync::watch::channel(());
    let tries = Cell::new(0);
    let attempt = || {
        tries.set(tries.get() + 1);
        async { Err::<(), _>(Error::ShutDown) }
    };
    let out = until_stopped(&mut stop, attempt, transient_only, |_, _| {}).await;
    assert!(matches!(out, Err(Some(Error::ShutDown))), "{out:?}");
    assert_eq!(tries.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_stop_ends_the_wait_between_tries() {
    let (tx, mut stop) = tokio::sync::watch::channel(());
    let tries = Cell::new(0);
    let attempt = || {
        tries.set(tries.get() + 1);
        async { Err::<(), _>(refused()) }
    };
    tx.send(()).expect("a receiver");
    let out = until_stopped(&mut stop, attempt, transient_only, |_, _| {}).await;
    assert!(matches!(out, Err(None)), "{out:?}");
    assert_eq!(tries.get(), 1, "no try after the stop");
}

/// A server error with `code` and `detail`, as redis-rs gives it.
fn server(code: &str, detail: &str) -> Error {
    let v = redis::parse_redis_value(format!("-{code} {detail}\r\n").as_bytes()).unwrap();
    Error::from_redis(v.extract_error().expect_err("is an error"))
}

#[test]
fn a_settling_write_is_sent_again_whatever_fails_but_a_shut_down_broker_or_a_lost_group() {
    let wrong_type = server(
        "WRONGTYPE",
        "Operation against a key holding the wrong kind of value",
    );
    assert_eq!(wrong_type.class(), Class::Fatal, "{wrong_type}");
    assert!(sent_again(&wrong_type), "an error no wait fixes by itself");
    let no_perm = server(
        "NOPERM",
        "User rillkit has no permissions to run the 'xack' command",
    );
    assert!(sent_again(&no_perm));
    assert!(sent_again(&refused()));
    assert!(!sent_again(&Error::ShutDown));
    let no_group = server(
        "NOGROUP",
        "No such key 'orders' or consumer group 'billing'",
    );
    assert_eq!(no_group.class(), Class::GroupGone, "{no_group}");
    assert!(!sent_again(&no_group));
}
