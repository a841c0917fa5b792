use std::time::Duration;

use futures::FutureExt;

use super::{Refresh, refresh_ttl};
use crate::delivery::liveness::Stall;
use crate::error::{Class, Error};
use redis::Value;

#[tokio::test(start_paused = true)]
async fn held_entries_are_refreshed_a_third_of_claim_idle_after_they_are_taken() {
    let claim_idle = Duration::from_millis(300);
    let mut r = Refresh::new("s".into(), claim_idle, Stall::new(claim_idle));
    assert_eq!(r.turn(false), None, "nothing held: nothing to refresh");
    tokio::time::advance(Duration::from_secs(5)).await;
    let now = tokio::time::Instant::now();
    // Entries taken now need no refresh before a third of claim_idle.
    assert_eq!(r.turn(true), Some(now + claim_idle / 3));
    assert!(r.may_send());
    r.send(futures::future::pending().boxed_local());
    assert!(!r.may_send(), "one refresh at a time");
    assert_eq!(r.turn(true), None, "none due while one is on its way");
}

#[tokio::test(start_paused = true)]
async fn a_refresh_the_partitions_lease_refused_ends_the_partition() {
    let claim_idle = Duration::from_millis(300);
    let mut r = Refresh::new("s".into(), claim_idle, Stall::new(claim_idle));
    assert!(r.turn(true).is_some());
    let lost = Error::from_redis(redis::make_extension_error(
        "LEASELOST".to_owned(),
        Some("the partition lease is held by another consumer".to_owned()),
    ));
    r.send(async move { Err(lost) }.boxed_local());
    let answered = r.answered().await;
    assert!(answered.is_some_and(|e| e.class() == Class::LeaseLost));
    assert!(r.may_send());
    r.send(async { Ok(Value::Nil) }.boxed_local());
    assert!(r.answered().await.is_none());
}

#[test]
fn a_short_claim_idle_still_leaves_5_ms_between_refreshes() {
    assert_eq!(
        refresh_ttl(Duration::from_millis(1)),
        Duration::from_millis(15)
    );
    assert_eq!(
        refresh_ttl(Duration::from_secs(30)),
        Duration::from_secs(30)
    );
}
