use super::{MAX_PARTITIONS, Order, entry_key, partition_name, partition_of};

#[test]
fn the_mapping_is_zlib_crc32_modulo_the_partitions() {
    // Test vectors from Python: zlib.crc32(b"order-42") == 1475806942.
    assert_eq!(crc32fast::hash(b"order-42"), 1_475_806_942);
    assert_eq!(partition_of(b"order-42", 16), 14);
    assert_eq!(partition_of(b"order-42", 4), 2);
    assert_eq!(partition_of(b"42", 16), 8);
    assert_eq!(partition_of(b"customer:7", 16), 14);
    assert_eq!(partition_of(b"", 16), 0);
    assert_eq!(partition_of(b"anything", 1), 0);
}

#[test]
fn a_key_comes_from_its_field_or_the_json_member() {
    let f = |pairs: &[(&str, &str)]| -> Vec<(Vec<u8>, Vec<u8>)> {
        pairs
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    };
    let by_field = f(&[("data", r#"{"order":1}"#), ("order", "o-7")]);
    assert_eq!(entry_key(&by_field, "order", "data"), Some(b"o-7".to_vec()));
    let by_json = f(&[("data", r#"{"order":"o-8","n":1}"#)]);
    assert_eq!(entry_key(&by_json, "order", "data"), Some(b"o-8".to_vec()));
    let number = f(&[("data", r#"{"order":42}"#)]);
    assert_eq!(entry_key(&number, "order", "data"), Some(b"42".to_vec()));
    let none = f(&[("data", r#"{"other":1}"#)]);
    assert_eq!(entry_key(&none, "order", "data"), None);
    let not_json = f(&[("data", "plain")]);
    assert_eq!(entry_key(&not_json, "order", "data"), None);
    let nested = f(&[("data", r#"{"order":{"id":1}}"#)]);
    assert_eq!(entry_key(&nested, "order", "data"), None);
}

#[test]
fn partitions_are_checked() {
    let o = |p| Order {
        key_field: "k".into(),
        partitions: p,
    };
    assert!(o(0).validate("s").is_err());
    assert!(o(1).validate("s").is_ok());
    assert!(o(MAX_PARTITIONS).validate("s").is_ok());
    assert!(o(MAX_PARTITIONS + 1).validate("s").is_err());
    assert_eq!(partition_name("orders", 3), "orders:p3");
}
