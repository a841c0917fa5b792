use std::time::Duration;

use super::{ConfigError, Error, SourceKind};

#[test]
fn messages_name_the_kind_of_source() {
    let invalid = |kind, key: &str| {
        ConfigError::Invalid {
            kind,
            key: key.to_owned(),
            option: "concurrency",
            reason: "must be at least 1".to_owned(),
        }
        .to_string()
    };
    assert_eq!(
        invalid(Some(SourceKind::Stream), "orders"),
        r#"invalid option concurrency for stream "orders": must be at least 1"#
    );
    assert_eq!(
        invalid(Some(SourceKind::ListAtMostOnce), "jobs"),
        r#"invalid option concurrency for list "jobs": must be at least 1"#
    );
    assert_eq!(
        invalid(Some(SourceKind::Channel), "events"),
        r#"invalid option concurrency for channel "events": must be at least 1"#
    );
    assert_eq!(
        invalid(None, ""),
        "invalid option concurrency: must be at least 1"
    );

    let in_use = Error::ConsumerNameInUse {
        kind: SourceKind::List,
        key: "jobs".to_owned(),
        group: String::new(),
        consumer: "c1".to_owned(),
        holder: "h-1-ab".to_owned(),
        waited: Duration::ZERO,
    };
    assert_eq!(
        in_use.to_string(),
        r#"consumer "c1" on list "jobs" is in use by another live process (h-1-ab), which took its lease"#
    );
    let duplicate = ConfigError::DuplicateConsumer {
        kind: SourceKind::Stream,
        key: "orders".to_owned(),
        group: "billing".to_owned(),
        consumer: "c1".to_owned(),
    };
    assert_eq!(
        duplicate.to_string(),
        r#"two subscriptions use consumer "c1" of group "billing" on stream "orders""#
    );
    let encode = Error::Encode {
        kind: SourceKind::Channel,
        key: "events".to_owned(),
        source: "bad".into(),
    };
    assert_eq!(
        encode.to_string(),
        r#"encoding a value for channel "events" failed: bad"#
    );
}
