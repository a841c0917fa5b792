//! Tests of the test harness itself (`tests/support`): the production-like
//! Redis shapes other tests build on.

mod support;

use std::time::{Duration, Instant};

use support::{RedisServer, SentinelGroup, TlsRedis, eventually_blocking};

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn start_with_args_survive_restart() {
    let mut redis = RedisServer::start_with(&["--maxmemory", "10mb"]);
    let maxmemory = |r: &RedisServer| -> Vec<String> {
        redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory")
            .query(&mut r.conn())
            .expect("CONFIG GET")
    };
    assert_eq!(maxmemory(&redis), ["maxmemory", "10485760"]);
    redis.restart();
    assert_eq!(maxmemory(&redis), ["maxmemory", "10485760"]);
}

#[test]
fn replica_follows_and_can_be_promoted() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    assert_eq!(master.role(), "master");
    assert_eq!(replica.role(), "slave");
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut master.conn())
        .unwrap();
    eventually_blocking("k replicated", WAIT, || {
        redis::cmd("GET")
            .arg("k")
            .query::<Option<String>>(&mut replica.conn())
            .unwrap()
            .as_deref()
            == Some("v")
    });
    replica.replicaof(None);
    assert_eq!(replica.role(), "master");
    master.replicaof(Some(&replica));
    assert_eq!(master.role(), "slave");
    master.wait_master_link_up(WAIT);
}

#[test]
fn acl_user_can_log_in() {
    let redis = RedisServer::start();
    redis.acl_setuser(&["worker", "on", ">s3cret", "~tasks*", "+@all"]);
    let mut c = redis::Client::open(format!("redis://worker:s3cret@127.0.0.1:{}", redis.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let _: String = redis::cmd("XADD")
        .arg("tasks")
        .arg("*")
        .arg("f")
        .arg("v")
        .query(&mut c)
        .unwrap();
    let denied = redis::cmd("SET")
        .arg("other")
        .arg("v")
        .query::<()>(&mut c)
        .unwrap_err();
    assert_eq!(denied.code(), Some("NOPERM"), "{denied}");
}

#[test]
fn loading_server_answers_loading_then_pong() {
    let started = Instant::now();
    let redis = RedisServer::start_loading_with(
        |c| {
            let _: String = redis::cmd("XADD")
                .arg("tasks")
                .arg("*")
                .arg("data")
                .arg("{}")
                .query(c)
                .unwrap();
        },
        30_000,
        50,
    );
    let up = Instant::now();
    assert!(redis.is_loading());
    let err = redis::cmd("PING")
        .query::<String>(&mut redis.conn())
        .unwrap_err();
    assert_eq!(err.code(), Some("LOADING"), "{err}");
    eventually_blocking("loading finished", WAIT, || !redis.is_loading());
    let loaded = up.elapsed();
    let pong: String = redis::cmd("PING").query(&mut redis.conn()).unwrap();
    assert_eq!(pong, "PONG");
    let dbsize: u64 = redis::cmd("DBSIZE").query(&mut redis.conn()).unwrap();
    assert_eq!(dbsize, 30_001);
    assert_eq!(support::stream_len(&mut redis.conn(), "tasks"), 1);
    eprintln!(
        "loading server: set up in {:?}, loaded for {loaded:?}",
        up - started
    );
}

#[test]
fn tls_server_answers_with_the_ca() {
    support::skip_without_tls!();
    let redis = TlsRedis::start();
    assert!(redis.url().starts_with("rediss://127.0.0.1:"));
    assert_eq!(redis.cli(&["PING"]), "PONG");
    // --tls-auth-clients optional: no client certificate is fine too.
    let out = redis.cli_output(false, &["PING"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "PONG",
        "{out:?}"
    );
    for pem in [redis.ca_pem(), redis.client_cert_pem()] {
        assert!(pem.starts_with(b"-----BEGIN CERTIFICATE-----"));
    }
    assert!(
        redis
            .client_key_pem()
            .starts_with(b"-----BEGIN PRIVATE KEY-----")
    );
    // Plain TCP on the TLS port gets no answer.
    let plain = redis::Client::open(format!("redis://127.0.0.1:{}", redis.port))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
    assert!(plain.is_err(), "{plain:?}");
}

#[test]
fn mutual_tls_server_refuses_clients_without_a_certificate() {
    support::skip_without_tls!();
    let redis = TlsRedis::start_mutual();
    assert_eq!(redis.cli(&["PING"]), "PONG");
    let out = redis.cli_output(false, &["PING"]);
    assert_ne!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "PONG",
        "{out:?}"
    );
    // The server logs the refusal after it has closed the connection, so the
    // line can land a moment after redis-cli has returned.
    eventually_blocking(
        "the server's log to name the missing client certificate",
        Duration::from_secs(10),
        || redis.log().contains("certificate"),
    );
}

#[test]
fn sentinel_group_fails_over_and_back() {
    let started = Instant::now();
    let group = SentinelGroup::start("rillkit");
    eprintln!("sentinel group settled in {:?}", started.elapsed());
    assert_eq!(group.sentinel_addrs().len(), 3);
    let [a, b] = group.nodes();
    assert_eq!(group.current_master_port(), a.port);
    assert_eq!((a.role().as_str(), b.role().as_str()), ("master", "slave"));

    let write = |key: &str| {
        let mut c = group.conn_to_master();
        let _: () = redis::cmd("SET").arg(key).arg("v").query(&mut c).unwrap();
        // Replicated before the next failover, which does not wait for it.
        let acked: u64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut c).unwrap();
        assert_eq!(acked, 1, "{key} not replicated");
    };
    write("before");

    for (n, (from, to)) in [(a, b), (b, a)].into_iter().enumerate() {
        let t = Instant::now();
        assert_eq!(group.failover(), to.port);
        eprintln!("failover {} took {:?}", n + 1, t.elapsed());
        assert_eq!(group.current_master_port(), to.port);
        assert_eq!(to.role(), "master");
        assert_eq!(from.role(), "slave");
        let key = format!("after-{}", n + 1);
        write(&key);
        let on_new: Option<String> = redis::cmd("GET").arg(&key).query(&mut to.conn()).unwrap();
        assert_eq!(on_new.as_deref(), Some("v"));
        let ro = redis::cmd("SET")
            .arg("x")
            .arg("v")
            .query::<()>(&mut from.conn())
            .unwrap_err();
        assert_eq!(ro.code(), Some("READONLY"), "{ro}");
        let old: Option<String> = redis::cmd("GET")
            .arg("before")
            .query(&mut to.conn())
            .unwrap();
        assert_eq!(old.as_deref(), Some("v"));
    }
    eprintln!("sentinel test total {:?}", started.elapsed());
}
