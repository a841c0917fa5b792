use std::time::Duration;

use crate::Phase;
use crate::kind::SourceKind;
use crate::status::SubscriptionStatus;
use crate::status::{ServerFigures, Status, SubscriptionId, SubscriptionState};

fn stream_row() -> SubscriptionStatus {
    SubscriptionStatus {
        kind: SourceKind::Stream,
        key: "orders".into(),
        group: "billing".into(),
        consumer: "web-1".into(),
        dlq: "orders-dlq".into(),
        state: SubscriptionState::Running,
        handled: 1204,
        failed: 3,
        dead_lettered: 1,
        dropped: 0,
        server: Some(ServerFigures {
            polled_at: std::time::SystemTime::now(),
            lag: Some(0),
            pending: 2,
            oldest_pending_age: Some(Duration::from_millis(1234)),
            dead_letters: 1,
        }),
        partitions: Vec::new(),
        paused: false,
        fleet_paused: false,
        concurrency: 4,
        in_flight: 1,
        rate_limit: None,
    }
}

#[test]
fn a_status_prints_as_a_table() {
    let status = Status {
        phase: Phase::Running,
        subscriptions: vec![stream_row()],
        redis_reachable: true,
    };
    assert_eq!(
        status.to_string(),
        "running, Redis reachable, ready\n\
             KIND    KEY     GROUP    CONSUMER  STATE    HANDLED  FAILED  DEAD-LETTERED  LAG  PENDING  OLDEST-AGE  DLQ\n\
             stream  orders  billing  web-1     running  1204     3       1              0    2        1.2s        1"
    );
}

#[test]
fn states_print_with_their_details() {
    let waiting = SubscriptionState::WaitingForLease {
        holder: "host-12-ab".into(),
        since: std::time::SystemTime::now(),
    };
    assert_eq!(
        waiting.to_string(),
        "waiting_for_lease (held by host-12-ab)"
    );
    assert_eq!(
        SubscriptionState::Restarting { restarts: 2 }.to_string(),
        "restarting (2 restarts)"
    );
    let status = Status {
        phase: Phase::Starting,
        subscriptions: Vec::new(),
        redis_reachable: false,
    };
    assert_eq!(
        status.to_string(),
        "starting, Redis unreachable, not ready\nno subscriptions"
    );
}

#[test]
fn ids_print_what_they_name() {
    assert_eq!(
        SubscriptionId::stream("orders", "billing", "web-1").to_string(),
        "stream orders, group billing, consumer web-1"
    );
    assert_eq!(
        SubscriptionId::list("jobs", "web-1").to_string(),
        "list jobs, consumer web-1"
    );
}
