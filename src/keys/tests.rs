use super::{dead_letter_name, dlq_slot_error, key_slot, slot_prefix};

#[test]
fn slots_are_computed_as_redis_does() {
    // Values from `CLUSTER KEYSLOT`.
    assert_eq!(key_slot(b"foo"), 12182);
    assert_eq!(key_slot(b"orders"), key_slot(b"{orders}-dlq"));
    assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
    // An empty tag does not count: the whole key is hashed.
    assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
    assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
    assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
}

#[test]
fn the_default_dead_letter_stream_shares_the_stream_slot() {
    assert_eq!(dead_letter_name("orders", true), "{orders}-dlq");
    assert_eq!(
        dead_letter_name("{tenant1}:orders", true),
        "{tenant1}:orders-dlq"
    );
    for name in ["orders", "a{b", "{tenant1}:orders", "{t}"] {
        assert!(
            dlq_slot_error(name, &dead_letter_name(name, true)).is_none(),
            "{name}"
        );
    }
    let e = dlq_slot_error("orders", "orders-dlq").expect("different slots");
    assert!(e.to_string().contains("{orders}-dlq"), "{e}");
}

#[test]
fn sibling_keys_share_the_slot_of_the_name() {
    for name in ["jobs", "{tenant}.jobs", "a:b"] {
        let p = slot_prefix(name);
        let sibling = format!("{p}:rillkit:processing:c1");
        assert_eq!(
            key_slot(sibling.as_bytes()),
            key_slot(name.as_bytes()),
            "{name} -> {sibling}"
        );
    }
}
