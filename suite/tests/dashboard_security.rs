//! The dashboard's actions over plain HTTP, as an attacker would send them:
//! a valid token replayed from another origin, or with no origin at all,
//! is refused and deletes nothing; a hand-made range (`-`..`+`) or one that
//! holds more than the page showed acts on nothing; keys the dashboard was
//! not given answer 404; the banner says only what rillkit wrote; the
//! CSRF cookie is `Secure` behind TLS.
#![cfg(feature = "dashboard")]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;

use actix_web::{App, HttpServer};
use rillkit::prelude::*;
use rillkit_dashboard::Dashboard;
use support::{RedisServer, stream_len};

/// A raw HTTP/1.1 request; answers the status, the headers and the body.
fn http(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let host = base.trim_start_matches("http://");
    let mut s = TcpStream::connect(host).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST" {
        head.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    write!(s, "{head}\r\n{body}").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, head.to_owned(), body.to_owned())
}

/// `http` off the test's thread (the server runs on this runtime).
async fn call(
    base: &str,
    method: &'static str,
    path: &str,
    headers: Vec<(&'static str, String)>,
    body: &str,
) -> (u16, String, String) {
    let (base, path, body) = (base.to_owned(), path.to_owned(), body.to_owned());
    actix_rt::task::spawn_blocking(move || {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        http(&base, method, &path, &headers, &body)
    })
    .await
    .unwrap()
}

fn serve(dashboard: Dashboard) -> String {
    let server = HttpServer::new(move || App::new().service(dashboard.scope("/d")))
        .workers(1)
        .bind(("127.0.0.1", 0))
        .unwrap();
    let addr = server.addrs()[0];
    actix_rt::spawn(server.run());
    format!("http://{addr}")
}

/// The CSRF cookie a page set (`rillkit_csrf=<token>`).
fn csrf_cookie(headers: &str) -> String {
    headers
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.eq_ignore_ascii_case("set-cookie") && v.trim().starts_with("rillkit_csrf="))
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no CSRF cookie in\n{headers}"))
}

#[actix_rt::test]
async fn actions_are_refused_from_elsewhere_and_pages_limited_to_the_streams_given() {
    support::init_tracing();
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let ids: Vec<String> = (0..3)
        .map(|i| {
            redis::cmd("XADD")
                .arg("orders-dlq")
                .arg("*")
                .arg("data")
                .arg(i.to_string())
                .query(&mut conn)
                .unwrap()
        })
        .collect();
    let _: String = redis::cmd("XADD")
        .arg("secret-dlq")
        .arg("*")
        .arg("data")
        .arg("x")
        .query(&mut conn)
        .unwrap();
    let broker = Broker::builder(redis.url()).build().unwrap();
    broker.start().await.unwrap();
    let base = serve(Dashboard::new(broker.clone()).streams(["orders"]));
    let host = base.trim_start_matches("http://").to_owned();
    let own = format!("http://{host}");

    let (code, headers, page) = call(&base, "GET", "/d/dlq/orders", vec![], "").await;
    assert_eq!(code, 200, "{page}");
    let cookie = csrf_cookie(&headers);
    assert!(
        !cookie.contains("Secure"),
        "plain HTTP: no Secure flag: {cookie}"
    );
    let token = cookie
        .trim_start_matches("rillkit_csrf=")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert!(page.contains(&token), "the forms carry the cookie's token");
    let jar = format!("rillkit_csrf={token}");
    let purge_one = format!("csrf={token}&id={}", ids[0]);

    // A valid token and cookie, replayed from another origin: 403, nothing
    // deleted. Without Origin or Referer: the same.
    for from in [
        vec![("Origin", "https://evil.example".to_owned())],
        vec![("Referer", "https://evil.example/page".to_owned())],
        vec![("Origin", "null".to_owned())],
        vec![],
    ] {
        let mut headers = vec![("Cookie", jar.clone())];
        headers.extend(from.clone());
        let (code, _, body) = call(&base, "POST", "/d/dlq/orders/purge", headers, &purge_one).await;
        assert_eq!(code, 403, "{from:?}: {body}");
        assert_eq!(stream_len(&mut conn, "orders-dlq"), 3, "{from:?}");
    }

    // A hand-made range over the whole stream, or one without the count
    // the page showed: refused, nothing deleted.
    for body in [
        format!("csrf={token}&start=-&end=%2B&count=3"),
        format!("csrf={token}&start={}&end={}", ids[0], ids[2]),
    ] {
        let headers = vec![("Cookie", jar.clone()), ("Origin", own.clone())];
        let (code, _, _) = call(&base, "POST", "/d/dlq/orders/purge", headers, &body).await;
        assert_eq!(code, 400, "{body}");
        assert_eq!(stream_len(&mut conn, "orders-dlq"), 3, "{body}");
    }
    // A range that holds more than the page showed: 409, nothing deleted.
    let body = format!("csrf={token}&start={}&end={}&count=2", ids[0], ids[2]);
    let headers = vec![("Cookie", jar.clone()), ("Origin", own.clone())];
    let (code, _, _) = call(&base, "POST", "/d/dlq/orders/purge", headers, &body).await;
    assert_eq!(code, 409);
    assert_eq!(stream_len(&mut conn, "orders-dlq"), 3);

    // From its own page: one, then the two left as a range with their count.
    let headers = vec![("Cookie", jar.clone()), ("Origin", own.clone())];
    let (code, head, _) = call(&base, "POST", "/d/dlq/orders/purge", headers, &purge_one).await;
    assert_eq!(code, 303, "{head}");
    assert_eq!(stream_len(&mut conn, "orders-dlq"), 2);
    let body = format!("csrf={token}&start={}&end={}&count=2", ids[1], ids[2]);
    let headers = vec![
        ("Cookie", jar.clone()),
        ("Referer", format!("{own}/d/dlq/orders")),
    ];
    let (code, head, _) = call(&base, "POST", "/d/dlq/orders/purge", headers, &body).await;
    assert_eq!(code, 303, "a Referer of this site will do: {head}");
    assert_eq!(stream_len(&mut conn, "orders-dlq"), 0);
    let location = head
        .lines()
        .find_map(|l| l.strip_prefix("location: "))
        .unwrap_or_else(|| panic!("{head}"))
        .to_owned();
    let (_, _, page) = call(&base, "GET", &location, vec![], "").await;
    assert!(page.contains("Purged: 2."), "the banner: {page}");

    // A redrive that skips every dead letter it selects (one rillkit did
    // not write) did nothing: its banner does not say it redrove.
    let stranger: String = redis::cmd("XADD")
        .arg("orders-dlq")
        .arg("*")
        .arg("data")
        .arg("{}")
        .query(&mut conn)
        .unwrap();
    let body = format!("csrf={token}&id={stranger}");
    let headers = vec![("Cookie", jar.clone()), ("Origin", own.clone())];
    let (code, head, _) = call(&base, "POST", "/d/dlq/orders/redrive", headers, &body).await;
    assert_eq!(code, 303, "{head}");
    let location = head
        .lines()
        .find_map(|l| l.strip_prefix("location: "))
        .unwrap_or_else(|| panic!("{head}"))
        .to_owned();
    let (_, _, page) = call(&base, "GET", &location, vec![], "").await;
    assert!(
        page.contains("Nothing redriven: every one of the 1 selected dead letters was skipped")
            && page.contains(r#"class="done failed""#)
            && !page.contains("Redriven:"),
        "the banner: {page}"
    );
    assert_eq!(stream_len(&mut conn, "orders-dlq"), 1, "it stays");
    let _: i64 = redis::cmd("XDEL")
        .arg("orders-dlq")
        .arg(&stranger)
        .query(&mut conn)
        .unwrap();

    // The banner never shows text from the URL.
    let (code, _, page) = call(
        &base,
        "GET",
        "/d/dlq/orders?done=Your+account+is+locked",
        vec![],
        "",
    )
    .await;
    assert!(
        !page.contains("Your account is locked"),
        "{code}: the URL's text painted in the banner"
    );

    // Keys the dashboard was not given: 404, and their actions too.
    for path in ["/d/dlq/secret", "/d/stream/secret"] {
        let (code, _, _) = call(&base, "GET", path, vec![], "").await;
        assert_eq!(code, 404, "{path}");
    }
    let (_, _, secret_id) = {
        let id: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
            .arg("secret-dlq")
            .arg("-")
            .arg("+")
            .query(&mut conn)
            .unwrap();
        (0, 0, id[0].0.clone())
    };
    let headers = vec![("Cookie", jar.clone()), ("Origin", own.clone())];
    let (code, _, _) = call(
        &base,
        "POST",
        "/d/dlq/secret/purge",
        headers,
        &format!("csrf={token}&id={secret_id}"),
    )
    .await;
    assert_eq!(code, 404);
    assert_eq!(stream_len(&mut conn, "secret-dlq"), 1);

    // Behind TLS (a proxy that says so), the cookie is Secure.
    let (_, headers, _) = call(
        &base,
        "GET",
        "/d/dlq/orders",
        vec![("X-Forwarded-Proto", "https".to_owned())],
        "",
    )
    .await;
    assert!(csrf_cookie(&headers).contains("Secure"), "{headers}");
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

/// The guide's dashboard ACL lines (`dashboard-ro`, `dashboard`, in
/// `docs/guide/src/dashboard.md`) as words, with `+client|setinfo` where the
/// server knows it.
fn guide_dashboard_acl(redis: &RedisServer) -> Vec<Vec<String>> {
    let guide = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/guide/src/dashboard.md"),
    )
    .unwrap();
    let (open, close) = ("<!-- dashboard-acl -->", "<!-- /dashboard-acl -->");
    let start = guide.find(open).expect("the guide's dashboard ACL") + open.len();
    let len = guide[start..].find(close).unwrap();
    let setinfo = support::ServerVersion::of(&mut redis.conn()).has_client_setinfo();
    guide[start..start + len]
        .lines()
        .filter(|l| l.starts_with("ACL SETUSER"))
        .map(|l| {
            let mut words: Vec<String> = l.split_whitespace().map(str::to_owned).collect();
            if setinfo {
                words.push("+client|setinfo".into());
            }
            words
        })
        .collect()
}

/// Commands `ACL LOG` says were refused.
fn refused(conn: &mut redis::Connection) -> Vec<String> {
    let log: Vec<Vec<redis::Value>> = redis::cmd("ACL").arg("LOG").query(conn).unwrap();
    log.iter()
        .filter_map(|entry| {
            let words: Vec<String> = entry
                .iter()
                .map(|v| redis::from_redis_value_ref::<String>(v).unwrap_or_default())
                .collect();
            let at = words.iter().position(|w| w == "object")?;
            Some(words.get(at + 1)?.clone())
        })
        .collect()
}

#[actix_rt::test]
async fn the_guides_dashboard_acls_are_enough_for_every_page_and_action() {
    support::init_tracing();
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let lines = guide_dashboard_acl(&redis);
    assert_eq!(lines.len(), 2, "a read-only line and one with actions");
    for words in &lines {
        let _: () = redis::cmd(&words[0])
            .arg(&words[1..])
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("{}: {e}", words.join(" ")));
    }
    // A stream with a group, a pending entry and a dead letter written by a
    // worker (as the default user).
    let orders = Stream::new("orders", "billing");
    let worker = Broker::builder(redis.url())
        .subscribe(
            &orders,
            ConsumerOptions::default()
                .with_max_retries(0)
                .with_block(std::time::Duration::from_millis(50)),
            |_: u64| async { Err::<(), _>("no") },
        )
        .build()
        .unwrap();
    worker.start().await.unwrap();
    worker.publish(&orders, &1u64).await.unwrap();
    support::eventually("a dead letter", std::time::Duration::from_secs(30), || {
        stream_len(&mut conn, "orders-dlq") == 1
    })
    .await;
    assert_eq!(worker.stop().await.unwrap().exit_code(), 0);
    // A consumer that holds entries and reads no more, for the hand-over.
    support::strand(&redis, "jobs", "g", "gone", 0..2);
    let _: i64 = redis::cmd("XGROUP")
        .arg("CREATECONSUMER")
        .arg("jobs")
        .arg("g")
        .arg("alive")
        .query(&mut conn)
        .unwrap();
    let dl: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("orders-dlq")
        .arg("-")
        .arg("+")
        .query(&mut conn)
        .unwrap();
    let dl = dl[0].0.clone();
    let job: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("jobs")
        .arg("-")
        .arg("+")
        .query(&mut conn)
        .unwrap();
    let job = job[0].0.clone();
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query(&mut conn)
        .unwrap();

    for (user, read_only) in [("dashboard-ro", true), ("dashboard", false)] {
        let url = format!("redis://{user}:change-me@127.0.0.1:{}", redis.port);
        let broker = Broker::builder(url).build().unwrap();
        broker.start().await.unwrap();
        let base = serve(
            Dashboard::new(broker.clone())
                .streams(["orders", "jobs"])
                .all_streams(true)
                .dead_consumer_after(std::time::Duration::from_millis(1))
                .read_only(read_only),
        );
        let entry = format!("/d/stream/jobs/entry/{job}");
        let dead = format!("/d/dlq/orders/entry/{dl}");
        for path in [
            "/d/",
            "/d/stream/orders",
            "/d/stream/jobs",
            "/d/dlq/orders",
            "/d/dlq/orders?error=no",
            &entry,
            &dead,
        ] {
            let (code, _, body) = call(&base, "GET", path, vec![], "").await;
            assert_eq!(code, 200, "{user} {path}: {body}");
        }
        if !read_only {
            let (_, headers, _) = call(&base, "GET", "/d/dlq/orders", vec![], "").await;
            let cookie = csrf_cookie(&headers);
            let token = cookie
                .trim_start_matches("rillkit_csrf=")
                .split(';')
                .next()
                .unwrap()
                .to_owned();
            let id: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
                .arg("orders-dlq")
                .arg("-")
                .arg("+")
                .query(&mut conn)
                .unwrap();
            let own = base.clone();
            let headers = vec![("Cookie", format!("rillkit_csrf={token}")), ("Origin", own)];
            let (code, _, body) = call(
                &base,
                "POST",
                "/d/dlq/orders/redrive",
                headers,
                &format!("csrf={token}&id={}", id[0].0),
            )
            .await;
            assert_eq!(code, 303, "{body}");
            assert_eq!(stream_len(&mut conn, "orders-dlq"), 0, "redriven");
            let headers = vec![
                ("Cookie", format!("rillkit_csrf={token}")),
                ("Origin", base.clone()),
            ];
            let (code, _, body) = call(
                &base,
                "POST",
                "/d/stream/jobs/handover",
                headers,
                &format!("csrf={token}&group=g&consumer=gone&to=alive&count=2"),
            )
            .await;
            assert_eq!(code, 303, "{body}");
            assert_eq!(support::pending_count(&mut conn, "jobs", "g"), 2);
        }
        assert_eq!(refused(&mut conn), Vec::<String>::new(), "{user}");
        assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    }
}

/// The token and cookie a page of `base` hands out.
async fn token_of(base: &str, path: &str) -> (String, String) {
    let (_, headers, _) = call(base, "GET", path, vec![], "").await;
    let cookie = csrf_cookie(&headers);
    let token = cookie
        .trim_start_matches("rillkit_csrf=")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    (format!("rillkit_csrf={token}"), token)
}

fn pending_of(conn: &mut redis::Connection, stream: &str, group: &str) -> Vec<(String, String)> {
    let rows: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(stream)
        .arg(group)
        .arg("-")
        .arg("+")
        .arg(1000)
        .query(conn)
        .unwrap();
    rows.into_iter().map(|(id, c, _, _)| (id, c)).collect()
}

/// A bulk action on a filter's selection acts only when the filter still
/// selects the count the page showed (409 otherwise), and only on what it
/// selects. A consumer holding entries and idle past the threshold is
/// flagged dead; the hand-over moves its entries to the consumer chosen,
/// refused when the count changed or the target is not in the group.
#[actix_rt::test]
async fn filtered_bulk_actions_and_the_hand_over_are_counted() {
    support::init_tracing();
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let dead_letter = |conn: &mut redis::Connection, error: &str| -> String {
        redis::cmd("XADD")
            .arg("orders-dlq")
            .arg("*")
            .arg("data")
            .arg("1")
            .arg("origin_stream")
            .arg("orders")
            .arg("origin_id")
            .arg("1-0")
            .arg("origin_group")
            .arg("g")
            .arg("origin_consumer")
            .arg("c")
            .arg("delivery_count")
            .arg("1")
            .arg("error")
            .arg(error)
            .arg("failed_at_ms")
            .arg("1")
            .query(conn)
            .unwrap()
    };
    let kept: Vec<String> = ["a", "b"]
        .iter()
        .map(|e| dead_letter(&mut conn, &format!("{e}: declined")))
        .collect();
    for i in 0..3 {
        dead_letter(&mut conn, &format!("{i}: timed out"));
    }
    support::strand(&redis, "jobs", "g", "gone", 0..3);
    let _: i64 = redis::cmd("XGROUP")
        .arg("CREATECONSUMER")
        .arg("jobs")
        .arg("g")
        .arg("alive")
        .query(&mut conn)
        .unwrap();
    let broker = Broker::builder(redis.url()).build().unwrap();
    broker.start().await.unwrap();
    let base = serve(
        Dashboard::new(broker.clone())
            .streams(["orders", "jobs"])
            .dead_consumer_after(std::time::Duration::from_millis(300)),
    );
    let own = base.clone();
    let (jar, token) = token_of(&base, "/d/dlq/orders").await;
    let headers = || vec![("Cookie", jar.clone()), ("Origin", own.clone())];

    // The page counts 3; a form that says 2 is refused, and so is one
    // with a bound that is neither an id nor a time.
    let (_, _, page) = call(&base, "GET", "/d/dlq/orders?error=timed+out", vec![], "").await;
    assert!(page.contains("3 of 3 dead letters"), "{page}");
    for (body, want) in [
        (format!("csrf={token}&error=timed+out&count=2"), 409),
        (format!("csrf={token}&error=timed+out&from=-&count=3"), 400),
        (
            format!("csrf={token}&error=timed+out&id={}&count=3", kept[0]),
            400,
        ),
    ] {
        let (code, _, text) = call(&base, "POST", "/d/dlq/orders/purge", headers(), &body).await;
        assert_eq!(code, want, "{body}: {text}");
        assert_eq!(stream_len(&mut conn, "orders-dlq"), 5);
    }
    let body = format!("csrf={token}&error=timed+out&count=3");
    let (code, head, _) = call(&base, "POST", "/d/dlq/orders/purge", headers(), &body).await;
    assert_eq!(code, 303, "{head}");
    let left: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("orders-dlq")
        .arg("-")
        .arg("+")
        .query(&mut conn)
        .unwrap();
    let left: Vec<String> = left.into_iter().map(|(id, _)| id).collect();
    assert_eq!(left, kept, "only what the filter selected was purged");

    // "gone" holds 3 entries and stops reading: flagged once 300 ms pass;
    // "alive" holds none and is never flagged.
    support::eventually(
        "gone idle past 300 ms",
        std::time::Duration::from_secs(10),
        || {
            let rows: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
                .arg("CONSUMERS")
                .arg("jobs")
                .arg("g")
                .query(&mut conn)
                .unwrap();
            rows.iter().any(|r| {
                r.get("name") == Some(&redis::Value::BulkString(b"gone".to_vec()))
                    && matches!(r.get("idle"), Some(redis::Value::Int(ms)) if *ms > 400)
            })
        },
    )
    .await;
    let (_, _, page) = call(&base, "GET", "/d/stream/jobs", vec![], "").await;
    assert!(
        page.contains(r#"data-consumer="gone" class="dead""#),
        "gone is flagged: {page}"
    );
    assert!(!page.contains(r#"data-consumer="alive" class="dead""#));
    assert!(page.contains("form class=\"handover\""), "{page}");
    for (body, want) in [
        (
            format!("csrf={token}&group=g&consumer=gone&to=alive&count=2"),
            409,
        ),
        (
            format!("csrf={token}&group=g&consumer=alive&to=gone&count=0"),
            409,
        ),
        (
            format!("csrf={token}&group=g&consumer=gone&to=nobody&count=3"),
            400,
        ),
        (
            "csrf=forged&group=g&consumer=gone&to=alive&count=3".to_owned(),
            403,
        ),
    ] {
        let (code, _, text) =
            call(&base, "POST", "/d/stream/jobs/handover", headers(), &body).await;
        assert_eq!(code, want, "{body}: {text}");
        assert!(
            pending_of(&mut conn, "jobs", "g")
                .iter()
                .all(|(_, c)| c == "gone")
        );
    }
    let body = format!("csrf={token}&group=g&consumer=gone&to=alive&count=3");
    let (code, head, _) = call(&base, "POST", "/d/stream/jobs/handover", headers(), &body).await;
    assert_eq!(code, 303, "{head}");
    let pending = pending_of(&mut conn, "jobs", "g");
    assert_eq!(pending.len(), 3);
    assert!(pending.iter().all(|(_, c)| c == "alive"), "{pending:?}");
    let location = head
        .lines()
        .find_map(|l| l.strip_prefix("location: "))
        .unwrap()
        .to_owned();
    let (_, _, page) = call(&base, "GET", &location, vec![], "").await;
    assert!(page.contains("Handed over: 3 pending entries."), "{page}");
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}
