use super::{check_url, redact_url};

#[test]
fn malformed_urls_say_which_part_is_wrong() {
    let cases = [
        ("127.0.0.1:6379", "scheme"),
        ("localhost", "no scheme"),
        ("http://h:6379", "\"http\""),
        ("redis://h:notaport", "port"),
        ("redis://h:6379/orders", "/orders is not a database number"),
        ("redis://:6379", "host"),
    ];
    for (url, says) in cases {
        let e = check_url(url).expect_err(url);
        assert!(e.contains(says), "{url}: {e}");
    }
    for ok in [
        "redis://127.0.0.1:6379",
        "rediss://user:pw@h:6380/2",
        "redis://h",
        "unix:///tmp/redis.sock",
    ] {
        assert_eq!(check_url(ok), Ok(()), "{ok}");
    }
}

#[test]
fn urls_are_logged_without_their_password() {
    assert_eq!(
        redact_url("rediss://worker:s3cret@10.0.0.1:6380/2"),
        "rediss://worker:<redacted>@10.0.0.1:6380/2"
    );
    assert_eq!(
        redact_url("redis://127.0.0.1:6379"),
        "redis://127.0.0.1:6379"
    );
}
