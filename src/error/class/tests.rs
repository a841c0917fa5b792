use redis::RedisError;

use super::{Class, classify, closed_after_accept};

fn server(code: &str, detail: &str) -> RedisError {
    redis::make_extension_error(code.to_owned(), Some(detail.to_owned()))
}

fn parsed(line: &str) -> RedisError {
    // What a server error reply looks like once parsed by redis-rs.
    let v = redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).expect("parses");
    v.extract_error().expect_err("is an error")
}

#[test]
fn every_answer_of_the_table_has_its_class() {
    let cases = [
        (
            "LOADING Redis is loading the dataset in memory",
            Class::Busy,
        ),
        ("BUSY Redis is busy running a script", Class::Busy),
        ("MASTERDOWN Link with MASTER is down", Class::Busy),
        (
            "TRYAGAIN Multiple keys request during rehashing",
            Class::Busy,
        ),
        ("CLUSTERDOWN The cluster is down", Class::Busy),
        ("NOREPLICAS Not enough good replicas to write.", Class::Busy),
        (
            "MISCONF Redis is configured to save RDB snapshots",
            Class::Busy,
        ),
        (
            "OOM command not allowed when used memory > 'maxmemory'.",
            Class::Busy,
        ),
        ("ERR max number of clients reached", Class::Busy),
        (
            "READONLY You can't write against a read only replica.",
            Class::RoleChange,
        ),
        (
            "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)",
            Class::RoleChange,
        ),
        (
            "UNBLOCKED the stream key no longer exists",
            Class::GroupGone,
        ),
        (
            "NOGROUP No such key 's' or consumer group 'g'",
            Class::GroupGone,
        ),
        (
            "WRONGPASS invalid username-password pair",
            Class::Credentials,
        ),
        ("NOAUTH Authentication required.", Class::Credentials),
        (
            "NOPERM this user has no permissions to run the 'xack' command",
            Class::Permission,
        ),
        (
            "ERR The user executing the script can't run this command or subcommand script: abc, on @user_script:5.",
            Class::Permission,
        ),
        ("MOVED 3999 127.0.0.1:6381", Class::Routing),
        ("ASK 3999 127.0.0.1:6381", Class::Routing),
        (
            "LEASELOST the partition lease is held by nobody",
            Class::LeaseLost,
        ),
        (
            "WRONGTYPE Operation against a key holding the wrong kind of value",
            Class::Fatal,
        ),
        ("ERR syntax error", Class::Fatal),
    ];
    for (line, class) in cases {
        assert_eq!(classify(&parsed(line)), class, "{line}");
    }
}

#[test]
fn extension_errors_are_classified_by_code() {
    assert_eq!(classify(&server("NOREPLICAS", "x")), Class::Busy);
    assert_eq!(classify(&server("UNBLOCKED", "gone")), Class::GroupGone);
}

#[test]
fn io_errors_are_connection_errors() {
    let e = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
    assert_eq!(classify(&e), Class::Connection);
    assert!(!closed_after_accept(&e), "refused, never accepted");
    for kind in [
        std::io::ErrorKind::BrokenPipe,
        std::io::ErrorKind::ConnectionReset,
        std::io::ErrorKind::UnexpectedEof,
    ] {
        let closed = RedisError::from(std::io::Error::from(kind));
        assert_eq!(classify(&closed), Class::Connection);
        assert!(closed_after_accept(&closed), "{kind:?}");
    }
    let slow = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
    assert!(!closed_after_accept(&slow), "a timeout is not a close");
    let bad_ca = RedisError::from(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "invalid peer certificate: UnknownIssuer",
    ));
    assert_eq!(classify(&bad_ca), Class::Tls);
    assert!(Class::Tls.is_configuration());
    assert!(Class::Connection.reconnects());
    assert!(!Class::Fatal.is_transient());
    assert!(Class::Permission.is_configuration());
}
