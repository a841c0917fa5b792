//! The dashboard in a real headless Chromium, driven through
//! WebDriver (Debian's `chromium` and `chromium-driver`): the overview lists
//! a stream with its lag; a dead letter shows its error; redrive (confirmed)
//! puts it back and the handler runs it; a `<script>` payload leaves
//! `window` untouched; Pause and Resume of a subscription work from the
//! overview; read-only mode has no buttons and refuses a forged POST, as
//! does a POST without the CSRF cookie.
//!
//! Without chromedriver these tests skip with a message, except under
//! `CI=true`, where they fail: `.ci/run` installs it.
#![cfg(feature = "dashboard")]

mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use actix_web::{App, HttpServer};
use fantoccini::{Client, ClientBuilder, Locator};
use rillkit::SubscriptionState;
use rillkit::prelude::*;
use rillkit_dashboard::Dashboard;
use support::{RedisServer, eventually};

const WAIT: Duration = Duration::from_secs(30);

/// chromedriver on a free port; killed on drop.
struct Driver(Child, u16);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts chromedriver, or answers `None` (skip) when it is not installed
/// outside CI.
fn driver() -> Option<Driver> {
    let bin = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let Some(bin) = bin else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but chromedriver is missing: install chromium and chromium-driver"
        );
        eprintln!("skipped: no chromedriver (apt-get install chromium chromium-driver)");
        return None;
    };
    let port = free_port();
    let child = Command::new(bin)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    support::eventually_blocking("chromedriver listens", WAIT, || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    Some(Driver(child, port))
}

async fn browser(d: &Driver) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"],
        }),
    );
    // chromedriver speaks plain HTTP on loopback: no TLS connector.
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", d.1))
        .await
        .expect("a WebDriver session")
}

/// Serves `dashboards` (mount path, dashboard) on a free port; answers
/// the base URL.
fn serve(dashboards: Vec<(&'static str, Dashboard)>) -> String {
    let server = HttpServer::new(move || {
        let mut app = App::new();
        for (path, d) in &dashboards {
            app = app.service(d.scope(path));
        }
        app
    })
    .workers(1)
    .bind(("127.0.0.1", 0))
    .unwrap();
    let addr = server.addrs()[0];
    actix_rt::spawn(server.run());
    format!("http://{addr}")
}

/// A raw HTTP/1.1 POST, off the test's thread (the server's accept loop
/// is a task of this runtime); answers the status code.
async fn post(base: &str, path: &str, body: &str, cookie: Option<&str>) -> u16 {
    let (base, path, body) = (base.to_owned(), path.to_owned(), body.to_owned());
    let cookie = cookie.map(str::to_owned);
    actix_rt::task::spawn_blocking(move || post_now(&base, &path, &body, cookie.as_deref()))
        .await
        .unwrap()
}

fn post_now(base: &str, path: &str, body: &str, cookie: Option<&str>) -> u16 {
    let host = base.trim_start_matches("http://");
    let mut s = TcpStream::connect(host).unwrap();
    let cookie = cookie.map_or(String::new(), |c| format!("Cookie: {c}\r\n"));
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n{cookie}Connection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The text of the first element `css` selects.
async fn text_of(c: &Client, css: &str) -> String {
    text_when(c, css, |_| true).await
}

/// The text of the first element `css` selects once `ready` holds for it,
/// polled for up to [`WAIT`]; then the last text seen. After a click the
/// new page replaces the old one at a moment of the browser's choosing: an
/// element found on the old page goes stale, or still shows the old page's
/// text (the banner of the action before).
async fn text_when(c: &Client, css: &str, ready: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let text = match c.find(Locator::Css(css)).await {
            Ok(e) => e.text().await.ok(),
            Err(_) => None,
        };
        let late = std::time::Instant::now() >= deadline;
        match text {
            Some(t) if ready(&t) || late => return t,
            None if late => panic!("no text for {css} within {WAIT:?}"),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

#[actix_rt::test]
async fn overview_dead_letters_redrive_and_escaping_in_a_browser() {
    let Some(driver) = driver() else { return };
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    // A group nobody reads from: its lag grows with every entry.
    support::create_group(&mut conn, "audit", "auditors", "$");
    let fixed = Arc::new(AtomicBool::new(false));
    let ran_13 = Arc::new(AtomicU64::new(0));
    let (f, r) = (fixed.clone(), ran_13.clone());
    let orders = Stream::new("orders", "billing");
    let broker = Broker::builder(redis.url())
        .subscribe_message(&orders, ConsumerOptions::default(), move |msg: Message| {
            let (f, r) = (f.clone(), r.clone());
            async move {
                let text =
                    String::from_utf8_lossy(msg.field("data").unwrap_or_default()).into_owned();
                if text == "13" {
                    if !f.load(Ordering::SeqCst) {
                        return Err(HandlerError::reject("order 13 is <b>bad</b>"));
                    }
                    r.fetch_add(1, Ordering::SeqCst);
                }
                if text.contains("<script>") {
                    return Err(HandlerError::reject(
                        r#"<img src=x onerror="window.pwned='error'">"#,
                    ));
                }
                Ok(())
            }
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let dash = Dashboard::new(broker.clone()).streams(["audit"]);
    let base = serve(vec![("/rillkit", dash)]);
    for i in 0..3u64 {
        broker
            .publish(&Stream::new("audit", "auditors"), &i)
            .await
            .unwrap();
    }
    broker.publish(&orders, &13u64).await.unwrap();
    broker
        .publish(&orders, &"<script>window.pwned='payload'</script>")
        .await
        .unwrap();
    let mut c2 = redis.conn();
    eventually("two dead letters", WAIT, || {
        support::stream_len(&mut c2, "orders-dlq") == 2
    })
    .await;

    let c = browser(&driver).await;
    // Overview: both streams, audit's lag 3, orders' two dead letters.
    c.goto(&format!("{base}/rillkit/")).await.unwrap();
    let audit = text_of(&c, "tr[data-stream='audit'] td.lag").await;
    assert_eq!(audit, "3", "audit's lag");
    let dlq = text_of(&c, "tr[data-stream='orders'] a.dlq").await;
    assert_eq!(dlq, "2");

    // Dead letters: the errors show as text; nothing ran.
    c.find(Locator::Css("tr[data-stream='orders'] a.dlq"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let table = text_of(&c, "#dead-letters").await;
    assert!(table.contains("order 13 is <b>bad</b>"), "{table}");
    assert!(
        table.contains("<script>window.pwned='payload'</script>"),
        "{table}"
    );
    assert!(
        table.contains(r#"onerror="window.pwned='error'""#),
        "{table}"
    );
    let pwned = c
        .execute("return typeof window.pwned", vec![])
        .await
        .unwrap();
    assert_eq!(pwned, serde_json::json!("undefined"), "no script ran");

    // Redrive entry 13 once the "bug" is fixed: confirm, and it runs.
    fixed.store(true, Ordering::SeqCst);
    let rows = c
        .find_all(Locator::Css("#dead-letters tbody tr"))
        .await
        .unwrap();
    let mut button = None;
    for row in rows {
        if row.text().await.unwrap().contains("order 13") {
            button = Some(row.find(Locator::Css("button.redrive")).await.unwrap());
        }
    }
    button
        .expect("a redrive button on 13's row")
        .click()
        .await
        .unwrap();
    let alert = c.get_alert_text().await.unwrap();
    assert!(alert.contains("Redrive"), "{alert}");
    c.accept_alert().await.unwrap();
    eventually("the redriven entry ran", WAIT, || {
        ran_13.load(Ordering::SeqCst) == 1
    })
    .await;
    let done = text_when(&c, "p.done", |t| t.contains("Redriven: 1.")).await;
    assert!(done.contains("Redriven: 1."), "{done}");
    assert_eq!(support::stream_len(&mut conn, "orders-dlq"), 1);

    // A POST without the cookie's token is refused.
    let dl_id: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("orders-dlq")
        .arg("-")
        .arg("+")
        .query(&mut conn)
        .unwrap();
    let id = &dl_id[0].0;
    assert_eq!(
        post(
            &base,
            "/rillkit/dlq/orders/purge",
            &format!("csrf=forged.token&id={id}"),
            None
        )
        .await,
        403
    );
    assert_eq!(support::stream_len(&mut conn, "orders-dlq"), 1);
    c.close().await.unwrap();
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

#[actix_rt::test]
async fn read_only_mode_has_no_buttons_and_refuses_a_forged_post() {
    let Some(driver) = driver() else { return };
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let id: String = redis::cmd("XADD")
        .arg("orders-dlq")
        .arg("*")
        .arg("data")
        .arg("1")
        .query(&mut conn)
        .unwrap();
    let broker = Broker::builder(redis.url()).build().unwrap();
    broker.start().await.unwrap();
    let base = serve(vec![(
        "/ro",
        Dashboard::new(broker.clone())
            .streams(["orders"])
            .read_only(true),
    )]);
    let c = browser(&driver).await;
    c.goto(&format!("{base}/ro/dlq/orders")).await.unwrap();
    let table = text_of(&c, "#dead-letters").await;
    assert!(table.contains(&id), "{table}");
    let buttons = c
        .find_all(Locator::Css("form[method='post'] button"))
        .await
        .unwrap();
    assert!(buttons.is_empty(), "no action buttons in read-only mode");
    // Even with a cookie and a token the page issued, a POST is refused.
    let cookie = c
        .get_named_cookie("rillkit_csrf")
        .await
        .expect("the page set its CSRF cookie");
    let token = cookie.value().to_owned();
    assert_eq!(
        post(
            &base,
            "/ro/dlq/orders/purge",
            &format!("csrf={token}&id={id}"),
            Some(&format!("rillkit_csrf={token}"))
        )
        .await,
        403
    );
    assert_eq!(support::stream_len(&mut conn, "orders-dlq"), 1);
    c.close().await.unwrap();
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

/// A raw HTTP/1.1 GET, off the test's thread; answers the status code and
/// the body.
async fn get(base: &str, path: &str) -> (u16, String) {
    let (base, path) = (base.to_owned(), path.to_owned());
    actix_rt::task::spawn_blocking(move || get_now(&base, &path))
        .await
        .unwrap()
}

fn get_now(base: &str, path: &str) -> (u16, String) {
    let host = base.trim_start_matches("http://");
    let mut s = TcpStream::connect(host).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, out.split_once("\r\n\r\n").unwrap().1.to_owned())
}

/// Without a browser: discovery of every stream (dead-letter streams shown
/// as their stream's column, not as streams), the stream page's consumers
/// and pending entries, and paging through dead letters.
#[actix_rt::test]
async fn discovery_stream_page_and_dead_letter_pages() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    for key in ["found-a", "found-b"] {
        support::create_group(&mut conn, key, "g", "0");
    }
    support::xadd(&mut conn, "found-a", "1");
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("g")
        .arg("ghost")
        .arg("STREAMS")
        .arg("found-a")
        .arg(">")
        .query(&mut conn)
        .unwrap();
    for i in 0..25 {
        let _: String = redis::cmd("XADD")
            .arg("found-a-dlq")
            .arg("*")
            .arg("data")
            .arg(format!("dead {i}"))
            .query(&mut conn)
            .unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("not a stream")
        .query(&mut conn)
        .unwrap();
    let broker = Broker::builder(redis.url()).build().unwrap();
    let base = serve(vec![(
        "/ops",
        Dashboard::new(broker.clone())
            .all_streams(true)
            .streams(["plain"]),
    )]);
    let (code, page) = get(&base, "/ops/").await;
    assert_eq!(code, 200, "{page}");
    assert!(
        page.contains("WRONGTYPE"),
        "a key of another type spoils its own row only: {page}"
    );
    assert!(page.contains(r#"data-stream="found-a""#), "{page}");
    assert!(page.contains(r#"data-stream="found-b""#), "{page}");
    assert!(
        !page.contains(r#"data-stream="found-a-dlq""#),
        "a dead-letter stream is its stream's column, not a stream"
    );

    let (code, page) = get(&base, "/ops/stream/found-a").await;
    assert_eq!(code, 200);
    assert!(page.contains("ghost"), "the consumer: {page}");
    assert!(
        page.contains("table class=\"pending\""),
        "its pending entry: {page}"
    );

    let (_, first) = get(&base, "/ops/dlq/found-a").await;
    assert_eq!(first.matches("<tr data-id=").count(), 20, "{first}");
    assert!(first.contains("dead 0") && !first.contains("dead 20"));
    let next = first
        .split("class=\"next\" href=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a next-page link")
        .replace("&amp;", "&");
    let (_, second) = get(&base, &next).await;
    assert_eq!(second.matches("<tr data-id=").count(), 5, "{second}");
    assert!(second.contains("dead 20") && second.contains("dead 24"));
    assert!(!second.contains("class=\"next\""), "the last page");
    let (code, _) = get(
        &base,
        "/ops/dlq/found-a?after=18446744073709551615-18446744073709551615",
    )
    .await;
    assert_eq!(code, 200, "the largest id pages to nothing, no panic");
    let (code, page) = get(&base, "/ops/stream/plain").await;
    assert_eq!(code, 400, "{page}");

    // A 1 MiB dead letter: the server sends (and the page shows) its first
    // 2 KiB and its length.
    let _: String = redis::cmd("XADD")
        .arg("big-dlq")
        .arg("*")
        .arg("data")
        .arg("x".repeat(1 << 20))
        .query(&mut conn)
        .unwrap();
    let (code, page) = get(&base, "/ops/dlq/big").await;
    assert_eq!(code, 200);
    assert!(
        page.contains("(1048576 bytes in all)"),
        "the length is told"
    );
    assert!(
        page.len() < 64 * 1024,
        "not the whole value: {} bytes",
        page.len()
    );
}

/// Writes a dead letter of `stream` as rillkit lays one out: the original
/// `data` field, then the seven appended pairs. Answers its id.
fn dead_letter(conn: &mut redis::Connection, stream: &str, data: &str, error: &str) -> String {
    redis::cmd("XADD")
        .arg(format!("{stream}-dlq"))
        .arg("*")
        .arg("data")
        .arg(data)
        .arg("origin_stream")
        .arg(stream)
        .arg("origin_id")
        .arg("1-0")
        .arg("origin_group")
        .arg("billing")
        .arg("origin_consumer")
        .arg("worker-7")
        .arg("delivery_count")
        .arg("4")
        .arg("error")
        .arg(error)
        .arg("failed_at_ms")
        .arg("1700000000000")
        .arg("attempts")
        .arg(r#"[{"delivery_count":3,"at_ms":1699999999000,"error":"gateway timed out"},{"delivery_count":4,"at_ms":1700000000000,"error":"card declined"}]"#)
        .query(conn)
        .unwrap()
}

/// The entry pages: a 5 KB JSON payload shown whole and pretty-printed,
/// with the consumer holding it and its delivery count; a dead letter with
/// its origin and error, redriven from its own page.
#[actix_rt::test]
async fn entry_pages_show_the_whole_payload_and_where_it_is() {
    let Some(driver) = driver() else { return };
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let long = "x".repeat(5000);
    let payload = format!(r#"{{"note":"{long}","n":1}}"#);
    support::create_group(&mut conn, "orders", "billing", "0");
    let id = support::xadd(&mut conn, "orders", &payload);
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("billing")
        .arg("worker-1")
        .arg("STREAMS")
        .arg("orders")
        .arg(">")
        .query(&mut conn)
        .unwrap();
    // A second group, `audit`, has read everything: a redrive of billing's
    // dead letter must not reach it.
    support::create_group(&mut conn, "orders", "audit", "$");
    let dl = dead_letter(&mut conn, "orders", &payload, "card <i>declined</i>");
    let broker = Broker::builder(redis.url()).build().unwrap();
    broker.start().await.unwrap();
    let base = serve(vec![(
        "/rillkit",
        Dashboard::new(broker.clone()).streams(["orders"]),
    )]);
    let c = browser(&driver).await;

    // From the stream page's pending table to the entry's page.
    c.goto(&format!("{base}/rillkit/stream/orders"))
        .await
        .unwrap();
    c.find(Locator::Css("table.pending a.entry"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let fields = text_of(&c, "#fields").await;
    assert!(
        fields.contains(&format!(r#""note": "{long}""#)),
        "the whole payload, pretty-printed: {} bytes shown",
        fields.len()
    );
    assert!(fields.contains(r#""n": 1"#), "{fields}");
    assert!(!fields.contains("bytes in all"), "not cut");
    assert_eq!(text_of(&c, "#pending td.consumer").await, "worker-1");
    assert_eq!(text_of(&c, "#pending td.deliveries").await, "1");
    let url = c.current_url().await.unwrap();
    assert!(
        url.path().ends_with(&format!("/stream/orders/entry/{id}")),
        "{url}"
    );

    // The dead letter's page: origin, error (as text), the payload whole.
    c.goto(&format!("{base}/rillkit/dlq/orders")).await.unwrap();
    c.find(Locator::Css("#dead-letters a.entry"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let origin = text_of(&c, "#origin").await;
    for want in [
        "orders 1-0",
        "billing",
        "worker-7",
        "4",
        "card <i>declined</i>",
    ] {
        assert!(origin.contains(want), "{want}: {origin}");
    }
    assert!(text_of(&c, "#fields").await.contains(&long));
    // Each failed run the consumer saw, in order.
    let runs = text_of(&c, "#attempts").await;
    let (first, second) = (
        runs.find("gateway timed out").expect(&runs),
        runs.find("card declined").expect(&runs),
    );
    assert!(first < second, "{runs}");
    // Redrive from its page, confirmed: back on the stream.
    c.find(Locator::Css("div.actions button.redrive"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert!(c.get_alert_text().await.unwrap().contains(&dl));
    c.accept_alert().await.unwrap();
    eventually("the dead letter is redriven", WAIT, || {
        support::stream_len(&mut conn, "orders-dlq") == 0
    })
    .await;
    assert_eq!(support::stream_len(&mut conn, "orders"), 2);
    let newest: Vec<(String, Vec<(String, String)>)> = redis::cmd("XREVRANGE")
        .arg("orders")
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query(&mut conn)
        .unwrap();
    let (new_id, fields) = &newest[0];
    assert!(
        fields.contains(&("redriven_for".into(), "billing".into())),
        "{fields:?}"
    );
    let groups: Vec<HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg("orders")
        .query(&mut conn)
        .unwrap();
    let audit = groups
        .iter()
        .find(|g| g["name"] == redis::Value::BulkString(b"audit".to_vec()))
        .expect("audit");
    assert_eq!(
        audit["last-delivered-id"],
        redis::Value::BulkString(new_id.as_bytes().to_vec()),
        "audit, caught up, was moved past the redriven entry: {audit:?}"
    );
    let done = text_when(&c, "p.done", |t| t.contains("Redriven: 1.")).await;
    assert!(done.contains("Redriven: 1."), "{done}");
    c.close().await.unwrap();
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

/// The rows of the table whose opening tag holds `class`, as the entry
/// links in it (`/entry/<id>"`), in order.
fn linked_ids(page: &str, class: &str) -> Vec<String> {
    let table = page
        .split(&format!("class=\"{class}\""))
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap_or_else(|| panic!("no table {class} in {page}"));
    table
        .split("/entry/")
        .skip(1)
        .map(|r| r.split('"').next().unwrap().to_owned())
        .collect()
}

/// The link `class` on `page`, unescaped.
fn link(page: &str, class: &str) -> Option<String> {
    page.split(&format!("class=\"{class}\" href=\""))
        .nth(1)
        .and_then(|r| r.split('"').next())
        .map(|l| l.replace("&amp;", "&"))
}

/// Without a browser: the stream page pages its pending entries ("50 of
/// 120 pending", next, next, previous) and its entries ("10 of 120
/// entries", older, newer); the dead-letter page says "20 of 25".
#[actix_rt::test]
async fn pending_entries_and_dead_letters_page_with_their_totals() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    support::strand(&redis, "paged", "g", "ghost", 0..120);
    let ids: Vec<String> = redis::cmd("XRANGE")
        .arg("paged")
        .arg("-")
        .arg("+")
        .query::<Vec<(String, Vec<(String, String)>)>>(&mut conn)
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    for i in 0..25 {
        dead_letter(&mut conn, "paged", &i.to_string(), "boom");
    }
    let broker = Broker::builder(redis.url()).build().unwrap();
    let base = serve(vec![(
        "/ops",
        Dashboard::new(broker.clone()).streams(["paged"]),
    )]);

    let (code, first) = get(&base, "/ops/stream/paged").await;
    assert_eq!(code, 200, "{first}");
    assert!(first.contains("50 of 120 pending"), "{first}");
    assert_eq!(linked_ids(&first, "pending"), ids[..50]);
    assert!(link(&first, "prev").is_none(), "the first page");
    let (_, second) = get(&base, &link(&first, "next").expect("a next page")).await;
    assert_eq!(linked_ids(&second, "pending"), ids[50..100]);
    let (_, third) = get(&base, &link(&second, "next").expect("a third page")).await;
    assert_eq!(linked_ids(&third, "pending"), ids[100..]);
    assert!(third.contains("20 of 120 pending"), "{third}");
    assert!(link(&third, "next").is_none(), "the last page");
    let (_, back) = get(&base, &link(&third, "prev").expect("a previous page")).await;
    assert_eq!(linked_ids(&back, "pending"), ids[50..100]);
    let (_, back) = get(&base, &link(&back, "prev").expect("the first page again")).await;
    assert_eq!(linked_ids(&back, "pending"), ids[..50]);
    assert!(link(&back, "prev").is_none());

    // The entries, newest first, with the stream's length.
    assert!(first.contains("10 of 120 entries"), "{first}");
    let newest: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(linked_ids(&first, "newest"), newest[..10]);
    let (_, older) = get(&base, &link(&first, "older").expect("older entries")).await;
    assert_eq!(linked_ids(&older, "newest"), newest[10..20]);
    let (_, newer) = get(&base, &link(&older, "newer").expect("newer entries")).await;
    assert_eq!(linked_ids(&newer, "newest"), newest[..10]);
    assert!(link(&newer, "newer").is_none(), "the newest page");

    let (_, dlq) = get(&base, "/ops/dlq/paged").await;
    assert!(dlq.contains("20 of 25 dead letters"), "{dlq}");
    let (_, rest) = get(&base, &link(&dlq, "next").expect("a next page")).await;
    assert!(rest.contains("5 of 25 dead letters"), "{rest}");
    let (_, again) = get(&base, &link(&rest, "prev").expect("a previous page")).await;
    assert_eq!(again.matches("<tr data-id=").count(), 20);
    for bad in [
        "/ops/stream/paged?group=g&pending_after=x",
        "/ops/dlq/paged?from=yesterday",
    ] {
        assert_eq!(get(&base, bad).await.0, 400, "{bad}");
    }
}

/// Filters dead letters by error in the browser, then redrives the
/// filtered set with the count the page previewed: only those move.
#[actix_rt::test]
async fn a_filtered_set_of_dead_letters_is_redriven_with_its_count() {
    let Some(driver) = driver() else { return };
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let mut declined = Vec::new();
    for i in 0..7 {
        if i % 3 == 0 {
            declined.push(dead_letter(
                &mut conn,
                "orders",
                &i.to_string(),
                "card declined",
            ));
        } else {
            dead_letter(
                &mut conn,
                "orders",
                &i.to_string(),
                &format!("call {i} timed out"),
            );
        }
    }
    let broker = Broker::builder(redis.url()).build().unwrap();
    broker.start().await.unwrap();
    let base = serve(vec![(
        "/rillkit",
        Dashboard::new(broker.clone()).streams(["orders"]),
    )]);
    let c = browser(&driver).await;
    c.goto(&format!("{base}/rillkit/dlq/orders")).await.unwrap();
    assert!(
        text_of(&c, "p.count")
            .await
            .starts_with("7 of 7 dead letters")
    );
    c.find(Locator::Css("form.filter input[name='error']"))
        .await
        .unwrap()
        .send_keys("timed out")
        .await
        .unwrap();
    c.find(Locator::Css("button.filter"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let count = text_of(&c, "p.count").await;
    assert!(
        count.starts_with(r#"4 of 4 dead letters whose error contains "timed out""#),
        "{count}"
    );
    let bulk = text_of(&c, "div.bulk-filter").await;
    assert!(
        bulk.contains(r#"Redrive the 4 dead letters whose error contains "timed out""#),
        "{bulk}"
    );
    c.find(Locator::Css("div.bulk-filter button.redrive"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let alert = c.get_alert_text().await.unwrap();
    assert!(alert.contains("Redrive the 4 dead letters"), "{alert}");
    c.accept_alert().await.unwrap();
    eventually("the four are redriven", WAIT, || {
        support::stream_len(&mut conn, "orders-dlq") == 3
    })
    .await;
    assert!(
        text_when(&c, "p.done", |t| t.contains("Redriven: 4."))
            .await
            .contains("Redriven: 4.")
    );
    let left: Vec<String> = redis::cmd("XRANGE")
        .arg("orders-dlq")
        .arg("-")
        .arg("+")
        .query::<Vec<(String, Vec<(String, String)>)>>(&mut conn)
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(left, declined, "only the filtered ones moved");
    assert_eq!(support::stream_len(&mut conn, "orders"), 4);

    // A range by id: from the second declined one on.
    c.goto(&format!("{base}/rillkit/dlq/orders?from={}", declined[1]))
        .await
        .unwrap();
    let count = text_of(&c, "p.count").await;
    assert!(
        count.starts_with(&format!("2 of 2 dead letters from {}", declined[1])),
        "{count}"
    );
    c.close().await.unwrap();
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

/// The history: rows in `rillkit:history:<stream>` (capped), charted per
/// minute on the stream page with the sums the rows hold.
#[actix_rt::test]
async fn history_is_kept_in_redis_and_charted() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let orders = Stream::new("orders", "billing");
    let broker = Broker::builder(redis.url())
        .subscribe(&orders, ConsumerOptions::default(), |v: u64| async move {
            if v % 5 == 0 {
                return Err(HandlerError::reject(format!("{v}: bad")));
            }
            Ok(())
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    support::create_group(&mut conn, "audit", "auditors", "$");
    let base = serve(vec![
        (
            "/ops",
            Dashboard::new(broker.clone()).history_period(Duration::from_millis(100)),
        ),
        (
            "/ro",
            Dashboard::new(broker.clone())
                .streams(["audit"])
                .read_only(true)
                .history_period(Duration::from_millis(100)),
        ),
    ]);
    assert_eq!(
        get(&base, "/ro/").await.0,
        200,
        "a read-only one writes none"
    );
    assert_eq!(get(&base, "/ops/").await.0, 200, "starts the writer");
    broker.publish_batch(&orders, 1..=10u64).await.unwrap();
    let sums = |conn: &mut redis::Connection| {
        let rows: Vec<(String, std::collections::HashMap<String, u64>)> = redis::cmd("XRANGE")
            .arg("rillkit:history:orders")
            .arg("-")
            .arg("+")
            .query(conn)
            .unwrap();
        let sum = |f: &str| {
            rows.iter()
                .map(|(_, r)| r.get(f).copied().unwrap_or(0))
                .sum::<u64>()
        };
        (sum("handled"), sum("dead_lettered"), rows.len())
    };
    eventually("the history holds the ten entries", WAIT, || {
        let (handled, dead, _) = sums(&mut conn);
        handled + dead >= 10 && dead == 2
    })
    .await;
    let (_, page) = get(&base, "/ops/stream/orders").await;
    let (handled, dead, rows) = sums(&mut conn);
    assert!(rows > 1, "a row per period");
    // The page may have been read a row later; rows after the ten hold 0.
    assert!(
        page.contains(&format!("data-handled=\"{handled}\"")),
        "{page}"
    );
    assert!(
        page.contains(&format!("data-dead-lettered=\"{dead}\"")),
        "{page}"
    );
    assert!(page.contains("<polyline class=\"handled\""), "{page}");
    eventually("a few more rows", WAIT, || sums(&mut conn).2 > rows + 3).await;
    let written: bool = redis::cmd("EXISTS")
        .arg("rillkit:history:audit")
        .query(&mut conn)
        .unwrap();
    assert!(!written, "the read-only dashboard wrote history");
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

/// The overview's Pause and Resume buttons: a click pauses the broker's
/// stream subscription (an entry published then waits), the next resumes
/// it (the entry runs); a POST without the page's token changes nothing.
#[actix_rt::test]
async fn pause_and_resume_a_subscription_from_the_overview() {
    let Some(driver) = driver() else { return };
    let redis = RedisServer::start();
    let orders = Stream::new("orders", "billing");
    let runs = Arc::new(AtomicU64::new(0));
    let r = runs.clone();
    let broker = Broker::builder(redis.url())
        .subscribe(
            &orders,
            ConsumerOptions::default().with_consumer("c1"),
            move |_: u64| {
                let r = r.clone();
                async move {
                    r.fetch_add(1, Ordering::SeqCst);
                    HandlerResult::Ok(())
                }
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let base = serve(vec![("/rillkit", Dashboard::new(broker.clone()))]);
    let state = || broker.status().subscriptions[0].state.clone();
    let row = "#subscriptions tr[data-key='orders'][data-consumer='c1']";

    // Forged: no cookie, no Origin. Refused, nothing paused.
    assert_eq!(
        post(
            &base,
            "/rillkit/subscription/pause",
            "csrf=forged.token&kind=stream&key=orders&group=billing&consumer=c1",
            None
        )
        .await,
        403
    );
    assert!(!broker.status().subscriptions[0].paused);

    let c = browser(&driver).await;
    c.goto(&format!("{base}/rillkit/")).await.unwrap();
    c.find(Locator::Css(&format!("{row} button.pause")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let done = text_when(&c, "p.done", |t| t.starts_with("Paused in every process")).await;
    assert!(done.starts_with("Paused in every process"), "{done}");
    eventually("paused", WAIT, || state() == SubscriptionState::Paused).await;
    // For the fleet: kept in the group's control hash.
    let mut conn = redis.conn();
    let kept: bool = redis::cmd("HEXISTS")
        .arg("{orders}:rillkit:control:billing")
        .arg("paused_at_ms")
        .query(&mut conn)
        .unwrap();
    assert!(kept, "the pause is kept in Redis for every process");
    assert!(broker.status().subscriptions[0].fleet_paused);
    // The page offers Resume now, and says so once reloaded.
    c.refresh().await.unwrap();
    let shown = text_when(&c, &format!("{row} td.state"), |t| t.starts_with("paused")).await;
    assert_eq!(shown, "paused (fleet pause)");

    broker.publish(&orders, &1u64).await.unwrap();
    let lag = |conn: &mut redis::Connection| -> i64 {
        let groups: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg("orders")
            .query(conn)
            .unwrap();
        match groups[0].get("lag") {
            Some(redis::Value::Int(n)) => *n,
            other => panic!("lag: {other:?}"),
        }
    };
    assert_eq!(lag(&mut conn), 1, "published while paused: not read");

    c.find(Locator::Css(&format!("{row} button.resume")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let done = text_when(&c, "p.done", |t| t.starts_with("Resumed in every process")).await;
    assert!(done.starts_with("Resumed in every process"), "{done}");
    eventually("handled after the resume", WAIT, || {
        runs.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(state(), SubscriptionState::Running);
    assert!(
        c.find(Locator::Css(&format!("{row} button.pause")))
            .await
            .is_ok(),
        "Pause is offered again"
    );
    c.close().await.unwrap();
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

/// The fleet page lists the live processes from their records in Redis, and
/// its Scale form sets the group's concurrency in every process.
#[actix_rt::test]
async fn the_fleet_page_shows_the_process_and_scales_its_group() {
    let Some(driver) = driver() else { return };
    let redis = RedisServer::start();
    let orders = Stream::new("orders", "billing");
    let broker = Broker::builder(redis.url())
        .subscribe(
            &orders,
            ConsumerOptions::default()
                .with_consumer("c1")
                .with_concurrency(2),
            |_: u64| async { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let base = serve(vec![("/rillkit", Dashboard::new(broker.clone()))]);
    let c = browser(&driver).await;
    c.goto(&format!("{base}/rillkit/")).await.unwrap();
    c.find(Locator::Css("#fleet-link"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let row = "#fleet tr[data-consumer='c1'][data-key='orders']";
    // The record is written within 500 ms of the start.
    let mut shown = String::new();
    for _ in 0..100 {
        if let Ok(cell) = c.find(Locator::Css(&format!("{row} td.concurrency"))).await {
            shown = cell.text().await.unwrap();
            break;
        }
        c.refresh().await.unwrap();
    }
    assert_eq!(shown, "2");
    let field = c
        .find(Locator::Css(&format!(
            "{row} form.scale input[name='concurrency']"
        )))
        .await
        .unwrap();
    field.clear().await.unwrap();
    field.send_keys("6").await.unwrap();
    c.find(Locator::Css(&format!("{row} button.scale")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let done = text_when(&c, "p.done", |t| t.starts_with("Scaled")).await;
    assert!(done.starts_with("Scaled"), "{done}");
    eventually("the process follows", WAIT, || {
        broker.status().subscriptions[0].concurrency == 6
    })
    .await;
    let shown = text_when(&c, &format!("{row} td.concurrency"), |t| t.starts_with('6')).await;
    assert!(shown.starts_with('6'), "{shown}");
    c.close().await.unwrap();
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

#[actix_rt::test]
async fn an_ordered_streams_partitions_show_with_their_owner_lag_and_pending() {
    let Some(driver) = driver() else { return };
    let redis = RedisServer::start();
    let orders = Stream::new("orders", "billing").ordered_by("order", 4);
    let broker = Broker::builder(redis.url())
        .status_period(Duration::from_millis(100))
        .subscribe(
            &orders,
            ConsumerOptions::default().with_consumer("c1"),
            move |_: u64| async move { HandlerResult::Ok(()) },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    // Key k's entries all go to one partition, which c1 owns and empties.
    let p2 = format!("orders:p{}", rillkit::partition_of(b"k", 4));
    for n in 0..3u64 {
        broker.publish_keyed(&orders, "k", &n).await.unwrap();
    }
    eventually("handled", WAIT, || {
        broker.status().subscriptions[0].handled == 3
    })
    .await;
    eventually("polled", WAIT, || {
        let s = broker.status();
        s.subscriptions[0]
            .partitions
            .iter()
            .all(|p| p.owned && p.server.is_some())
    })
    .await;
    let base = serve(vec![("/rillkit", Dashboard::new(broker.clone()))]);
    let c = browser(&driver).await;
    c.goto(&format!("{base}/rillkit/")).await.unwrap();
    let rows = c
        .find_all(Locator::Css("table.partitions[data-key='orders'] tbody tr"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 4);
    let row = format!("table.partitions tr[data-partition='{p2}']");
    let cells: Vec<String> = {
        let mut out = Vec::new();
        for td in c
            .find_all(Locator::Css(&format!("{row} td")))
            .await
            .unwrap()
        {
            out.push(td.text().await.unwrap());
        }
        out
    };
    // partition, owner, state, handled here, lag, pending, dead letters.
    assert_eq!(cells[0], p2);
    assert_eq!(cells[1], "c1");
    assert_eq!(cells[2], "running");
    assert_eq!(cells[3], "3");
    assert_eq!(cells[4], "0");
    assert_eq!(cells[5], "0");
    c.close().await.unwrap();
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
}

/// Makes the guide's screenshots, in `docs/guide/src/images/`:
/// `dashboard.png` (the overview), `dashboard-stream.png` (a stream:
/// history, a dead consumer, pending entries), `dashboard-entry.png` (a dead
/// letter's page) and `dashboard-dlq.png` (dead letters):
/// `CI=true cargo test --all-features --test dashboard -- --ignored`.
#[actix_rt::test]
#[ignore = "writes docs/guide/src/images/dashboard*.png; run by hand"]
async fn screenshot_of_the_overview() {
    let driver = driver().expect("chromedriver");
    let redis = RedisServer::start();
    let orders = Stream::new("orders", "billing");
    let broker = Broker::builder(redis.url())
        .subscribe(
            &orders,
            ConsumerOptions::default().with_concurrency(4),
            |v: u64| async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if v % 97 == 0 {
                    return Err(HandlerError::reject(format!("order {v}: card declined")));
                }
                Ok(())
            },
        )
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let mut conn = redis.conn();
    support::create_group(&mut conn, "audit", "auditors", "$");
    // A second group on orders whose consumer read five entries and died.
    support::create_group(&mut conn, "orders", "analytics", "$");
    let base = serve(vec![(
        "/rillkit",
        Dashboard::new(broker.clone())
            .streams(["audit"])
            .history_period(Duration::from_secs(5))
            .dead_consumer_after(Duration::from_secs(30)),
    )]);
    let c = browser(&driver).await;
    c.goto(&format!("{base}/rillkit/")).await.unwrap();
    // An order that is not a number: a decode failure, dead-lettered.
    broker
        .publish(
            &orders,
            &serde_json::json!({"order": 4711, "customer": "c-981", "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}], "total": "59.90"}),
        )
        .await
        .unwrap();
    // A minute of traffic, so the sparkline and the history have samples.
    for round in 0..14u64 {
        let values: Vec<u64> = (round * 40..round * 40 + 20 + round * 3).collect();
        broker.publish_batch(&orders, values).await.unwrap();
        broker
            .publish_batch(&Stream::new("audit", "auditors"), [round, round + 1])
            .await
            .unwrap();
        if round == 1 {
            let _: redis::Value = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg("analytics")
                .arg("analytics-3")
                .arg("COUNT")
                .arg(5)
                .arg("STREAMS")
                .arg("orders")
                .arg(">")
                .query(&mut conn)
                .unwrap();
            let _: i64 = redis::cmd("XGROUP")
                .arg("CREATECONSUMER")
                .arg("orders")
                .arg("analytics")
                .arg("analytics-4")
                .query(&mut conn)
                .unwrap();
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/guide/src/images");
    std::fs::create_dir_all(&docs).unwrap();
    let shoot = |name: &'static str| {
        let (c, docs) = (c.clone(), docs.clone());
        async move {
            let png = c.screenshot().await.unwrap();
            std::fs::write(docs.join(name), png).unwrap();
        }
    };
    c.goto(&format!("{base}/rillkit/")).await.unwrap();
    shoot("dashboard.png").await;
    c.goto(&format!("{base}/rillkit/stream/orders"))
        .await
        .unwrap();
    shoot("dashboard-stream.png").await;
    c.goto(&format!("{base}/rillkit/dlq/orders")).await.unwrap();
    shoot("dashboard-dlq.png").await;
    let dead: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("orders-dlq")
        .arg("-")
        .arg("+")
        .arg("COUNT")
        .arg(1)
        .query(&mut conn)
        .unwrap();
    c.goto(&format!("{base}/rillkit/dlq/orders/entry/{}", dead[0].0))
        .await
        .unwrap();
    shoot("dashboard-entry.png").await;
    c.close().await.unwrap();
    let _ = broker.stop().await.unwrap();
}
