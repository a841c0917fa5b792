use std::sync::Mutex;

use super::{Hint, on_announcement};

#[test]
fn a_promotion_is_followed_until_the_switch_is_announced() {
    let hint: Mutex<Option<Hint>> = Mutex::new(None);
    let hinted = || {
        hint.lock()
            .unwrap()
            .as_ref()
            .map(|h| (h.host.clone(), h.port))
    };
    let promote = "slave 127.0.0.1:7002 127.0.0.1 7002 @ mymaster 127.0.0.1 7001";
    let switch = "mymaster 127.0.0.1 7001 127.0.0.1 7002";
    let (promoting, aborted) = (
        "+failover-state-send-slaveof-noone",
        "-failover-abort-slave-timeout",
    );

    assert!(!on_announcement(promoting, promote, "other", &hint));
    assert_eq!(hinted(), None, "another master's failover");
    assert!(on_announcement(promoting, promote, "mymaster", &hint));
    assert_eq!(hinted(), Some(("127.0.0.1".to_owned(), 7002)));
    assert!(on_announcement("+switch-master", switch, "mymaster", &hint));
    assert_eq!(hinted(), None, "the sentinels name it now");
    assert!(on_announcement(promoting, promote, "mymaster", &hint));
    assert!(!on_announcement(aborted, promote, "mymaster", &hint));
    assert_eq!(hinted(), None, "the promotion failed");
}
