//! The `rillkit` command-line tool (feature `cli`): the built
//! binary against a real server — status, pending, consumers, dead letters
//! (list, show, redrive, purge), publish and tail, `--json` output, and the
//! documented exit codes.
#![cfg(feature = "cli")]

mod support;

use std::process::{Command, Output};

use serde_json::Value;
use support::{RedisServer, stream_len, xadd};

/// Runs the binary against `url` (the caller's `REDIS_*` variables removed).
fn rillkit(url: &str, args: &[&str]) -> Output {
    Command::new(support::rillkit_bin())
        .env_remove("REDIS_URL")
        .env_remove("REDIS_USER")
        .env_remove("REDIS_PASSWORD")
        .arg("--url")
        .arg(url)
        .args(args)
        .output()
        .expect("run the rillkit binary")
}

/// Runs it, expects exit 0, answers stdout.
fn ok(url: &str, args: &[&str]) -> String {
    let out = rillkit(url, args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "rillkit {args:?}: stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Runs it with `--json`, expects exit 0, answers the parsed document.
fn json(url: &str, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let text = ok(url, &args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
}

/// Exit code and stderr of a run expected to fail.
fn fails(url: &str, args: &[&str]) -> (i32, String) {
    let out = rillkit(url, args);
    (
        out.status.code().expect("exited"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A dead letter laid out as the dead-letter move writes it, with an
/// original field named `error`.
fn dead_letter(conn: &mut redis::Connection, dlq: &str, origin_id: &str, error: &str) -> String {
    redis::cmd("XADD")
        .arg(dlq)
        .arg("*")
        .arg(&[
            "data",
            &format!(r#"{{"origin":"{origin_id}"}}"#),
            "error",
            "original",
            "origin_stream",
            "orders",
            "origin_id",
            origin_id,
            "origin_group",
            "billing",
            "origin_consumer",
            "c1",
            "delivery_count",
            "4",
            "error",
            error,
            "failed_at_ms",
            "1700000000000",
        ])
        .query(conn)
        .expect("XADD dead letter")
}

#[test]
fn publish_then_tail_in_text_and_json() {
    let redis = RedisServer::start();
    let url = redis.url();
    let id = ok(&url, &["publish", "orders", r#"{"id":1}"#]);
    let id = id.trim();
    assert!(id.contains('-'), "an entry id: {id}");
    let doc = json(&url, &["publish", "orders", r#"{"id":2}"#]);
    let second = doc["id"].as_str().expect("id").to_owned();

    let tail = ok(&url, &["tail", "orders"]);
    let lines: Vec<&str> = tail.lines().collect();
    assert_eq!(
        lines,
        [
            format!(r#"{id}  data={{"id":1}}"#),
            format!(r#"{second}  data={{"id":2}}"#)
        ],
        "oldest of the newest first"
    );
    let doc = json(&url, &["tail", "orders", "--count", "1"]);
    let entries = doc["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["id"], second.as_str());
    assert_eq!(entries[0]["fields"]["data"], r#"{"id":2}"#);

    // JSON that does not parse is a usage error; nothing is added.
    let (code, err) = fails(&url, &["publish", "orders", "{nope"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("JSON"), "{err}");
    assert_eq!(stream_len(&mut redis.conn(), "orders"), 2);
}

#[test]
fn status_pending_and_consumers_show_groups_and_their_entries() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    let ids: Vec<String> = (1..=3)
        .map(|n| xadd(&mut c, "orders", &format!(r#"{{"id":{n}}}"#)))
        .collect();
    let _: () = redis::cmd("XGROUP")
        .arg(&["CREATE", "orders", "billing", "0"])
        .query(&mut c)
        .unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg(&[
            "GROUP", "billing", "c1", "COUNT", "2", "STREAMS", "orders", ">",
        ])
        .query(&mut c)
        .unwrap();
    dead_letter(&mut c, "orders-dlq", "1-0", "boom");
    xadd(&mut c, "audit", "{}");

    let text = ok(&url, &["status"]);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("STREAM"), "{text}");
    assert_eq!(lines.len(), 3, "audit and orders, not orders-dlq: {text}");
    let row: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        row[..6],
        ["orders", "3", "billing", "1", "2", "1"],
        "{text}"
    );
    assert_eq!(row[7], "1", "one dead letter: {text}");

    let doc = json(&url, &["status"]);
    let streams = doc["streams"].as_array().expect("streams");
    let names: Vec<&str> = streams
        .iter()
        .map(|s| s["stream"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["audit", "orders"]);
    let orders = &streams[1];
    assert_eq!(orders["length"], 3);
    assert_eq!(orders["dlq"], "orders-dlq");
    assert_eq!(orders["dlq_length"], 1);
    let g = &orders["groups"][0];
    assert_eq!(g["group"], "billing");
    assert_eq!(
        (g["consumers"].as_u64(), g["pending"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(g["lag"], 1);
    assert_eq!(g["last_delivered_id"], ids[1].as_str());
    assert!(g["oldest_pending_idle_ms"].is_u64(), "{g}");
    assert_eq!(streams[0]["groups"], Value::Array(vec![]));

    let one = json(&url, &["status", "orders"]);
    assert_eq!(one["streams"].as_array().unwrap().len(), 1);
    let (code, err) = fails(&url, &["status", "missing"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("missing"), "{err}");

    let doc = json(&url, &["pending", "orders", "billing"]);
    let pending = doc["pending"].as_array().expect("pending");
    let got: Vec<(&str, &str, u64)> = pending
        .iter()
        .map(|p| {
            (
                p["id"].as_str().unwrap(),
                p["consumer"].as_str().unwrap(),
                p["delivery_count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [(ids[0].as_str(), "c1", 1), (ids[1].as_str(), "c1", 1)]
    );
    let text = ok(&url, &["pending", "orders", "billing", "--count", "1"]);
    assert_eq!(text.lines().count(), 2, "header and one entry: {text}");
    assert!(text.contains(&ids[0]), "{text}");

    let doc = json(&url, &["consumers", "orders", "billing"]);
    assert_eq!(doc["consumers"][0]["name"], "c1");
    assert_eq!(doc["consumers"][0]["pending"], 2);
    let (code, err) = fails(&url, &["pending", "orders", "nogroup"]);
    assert_eq!(code, 1, "{err}");

    // --prune-idle deletes idle consumers holding nothing, never c1 (it
    // holds two entries).
    let _: i64 = redis::cmd("XGROUP")
        .arg("CREATECONSUMER")
        .arg("orders")
        .arg("billing")
        .arg("ghost")
        .query(&mut c)
        .unwrap();
    let doc = json(
        &url,
        &["consumers", "orders", "billing", "--prune-idle", "1h"],
    );
    assert_eq!(doc["pruned"], serde_json::json!([]), "not idle for an hour");
    // ghost never read: Redis 7.2+ and Valkey answer `inactive` -1, Redis
    // 7.0 has no `inactive`; both are null.
    let doc = json(&url, &["consumers", "orders", "billing"]);
    let ghost = doc["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "ghost")
        .unwrap_or_else(|| panic!("ghost is listed: {doc}"));
    assert_eq!(ghost["inactive_ms"], Value::Null, "{doc}");
    assert_eq!(ghost["pending"], 0, "{doc}");
    support::eventually_blocking(
        "ghost idle for 50 ms",
        std::time::Duration::from_secs(10),
        || {
            let rows: Vec<Vec<redis::Value>> = redis::cmd("XINFO")
                .arg("CONSUMERS")
                .arg("orders")
                .arg("billing")
                .query(&mut c)
                .unwrap();
            rows.iter().any(|r| {
                redis::from_redis_value_ref::<String>(&r[1]).unwrap() == "ghost"
                    && redis::from_redis_value_ref::<u64>(&r[5]).unwrap() > 50
            })
        },
    );
    let text = ok(
        &url,
        &["consumers", "orders", "billing", "--prune-idle", "50ms"],
    );
    assert!(text.contains("pruned 1 idle consumer(s): ghost"), "{text}");
    let doc = json(&url, &["consumers", "orders", "billing"]);
    let names: Vec<_> = doc["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["c1"], "a consumer holding entries stays");
    let (code, err) = fails(
        &url,
        &["consumers", "orders", "billing", "--prune-idle", "soon"],
    );
    assert_eq!(code, 2, "a malformed duration is a usage error: {err}");
}

#[test]
fn dead_letters_are_listed_shown_redriven_and_purged() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    let first = dead_letter(&mut c, "orders-dlq", "1-0", "timeout 1");
    dead_letter(&mut c, "orders-dlq", "2-0", "invalid 2");
    let third = dead_letter(&mut c, "orders-dlq", "3-0", "timeout 3");

    let doc = json(&url, &["dlq", "list", "orders"]);
    assert_eq!(doc["dlq"], "orders-dlq");
    let list = doc["dead_letters"].as_array().expect("dead letters");
    assert_eq!(list.len(), 3);
    assert_eq!(list[0]["id"], first.as_str());
    assert_eq!(list[0]["fields"]["error"], "original", "the original field");
    assert_eq!(list[0]["origin"]["error"], "timeout 1", "the appended one");
    assert_eq!(list[0]["origin"]["id"], "1-0");
    assert_eq!(list[0]["origin"]["delivery_count"], 4);
    let text = ok(&url, &["dlq", "list", "orders", "--error", "timeout"]);
    assert_eq!(text.lines().count(), 3, "header and two: {text}");
    assert!(!text.contains("invalid 2"), "{text}");

    let text = ok(&url, &["dlq", "show", "orders", &third]);
    assert!(text.contains("origin id:        3-0"), "{text}");
    assert!(text.contains("error:            timeout 3"), "{text}");
    assert!(text.contains("  error = original"), "{text}");
    let (code, err) = fails(&url, &["dlq", "show", "orders", "9-9"]);
    assert_eq!(code, 1, "{err}");

    let doc = json(&url, &["dlq", "redrive", "orders", "--error", "timeout"]);
    let redriven = doc["redriven"].as_array().expect("redriven");
    assert_eq!(redriven.len(), 2, "{doc}");
    assert_eq!(redriven[0]["dead_letter"], first.as_str());
    assert_eq!(redriven[1]["dead_letter"], third.as_str());
    assert_eq!(doc["skipped"], Value::Array(vec![]));
    let rows: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(&["orders", "-", "+"])
        .query(&mut c)
        .unwrap();
    let fields: Vec<Vec<(String, String)>> = rows.into_iter().map(|(_, f)| f).collect();
    let want = |origin: &str| {
        vec![
            ("data".to_owned(), format!(r#"{{"origin":"{origin}"}}"#)),
            ("error".to_owned(), "original".to_owned()),
            ("redriven_from".to_owned(), origin.to_owned()),
        ]
    };
    assert_eq!(fields, [want("1-0"), want("3-0")]);
    assert_eq!(stream_len(&mut c, "orders-dlq"), 1);

    // A purge without --yes only counts.
    let (code, err) = fails(&url, &["dlq", "purge", "orders"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("would delete 1"), "{err}");
    assert_eq!(stream_len(&mut c, "orders-dlq"), 1);
    let doc = json(&url, &["dlq", "purge", "orders", "--yes"]);
    assert_eq!(doc["deleted"], 1);
    assert_eq!(stream_len(&mut c, "orders-dlq"), 0);
    let text = ok(&url, &["dlq", "list", "orders"]);
    assert_eq!(text.trim(), "no dead letters in orders-dlq");
}

/// Raw output: stdout and stderr as bytes, whatever the exit code.
fn raw(url: &str, args: &[&str]) -> Vec<u8> {
    let out = rillkit(url, args);
    let mut all = out.stdout;
    all.extend(out.stderr);
    all
}

#[test]
fn names_from_the_server_never_reach_the_terminal_raw() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    // A title change, a bell and a screen clear in a stream name, colour and
    // a clear in the group's and the consumer's.
    let stream = "ev\x1b]0;PWN\x07\x1b[2J";
    let (group, consumer) = ("g\x1b[31m", "c\x1b[2J");
    xadd(&mut c, stream, r#"{"id":1}"#);
    let _: () = redis::cmd("XGROUP")
        .arg(&["CREATE", stream, group, "0"])
        .query(&mut c)
        .unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg(&["GROUP", group, consumer, "STREAMS", stream, ">"])
        .query(&mut c)
        .unwrap();
    let dlq = format!("{stream}-dlq");
    let id: String = redis::cmd("XADD")
        .arg(&dlq)
        .arg("*")
        .arg(&[
            "data",
            "{}",
            "origin_stream",
            stream,
            "origin_id",
            "1-0",
            "origin_group",
            group,
            "origin_consumer",
            consumer,
            "delivery_count",
            "4",
            "error",
            "boom\x1b[2J",
            "failed_at_ms",
            "1700000000000",
        ])
        .query(&mut c)
        .unwrap();
    for args in [
        vec!["status"],
        vec!["pending", stream, group],
        vec!["consumers", stream, group],
        vec!["dlq", "list", stream],
        vec!["dlq", "show", stream, &id],
        vec!["dlq", "show", stream, "9-9"],
    ] {
        let out = raw(&url, &args);
        assert!(
            !out.iter().any(|b| *b == 0x1b || *b == 0x07),
            "rillkit {args:?} printed control bytes: {:?}",
            String::from_utf8_lossy(&out)
        );
        assert!(
            String::from_utf8_lossy(&out).contains("\\u{1b}"),
            "rillkit {args:?} shows them escaped: {:?}",
            String::from_utf8_lossy(&out)
        );
    }
}

#[test]
fn a_misspelt_name_is_not_taken_for_an_empty_stream() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    xadd(&mut c, "orders", r#"{"id":1}"#);
    let _: () = redis::cmd("XGROUP")
        .arg(&["CREATE", "orders", "billing", "0"])
        .query(&mut c)
        .unwrap();
    dead_letter(&mut c, "orders-dlq", "1-0", "boom");
    xadd(&mut c, "audit", "{}");

    for args in [
        vec!["tail", "nosuch"],
        vec!["dlq", "list", "nosuch"],
        vec!["dlq", "purge", "nosuch", "--yes"],
        vec!["dlq", "redrive", "nosuch"],
    ] {
        let (code, err) = fails(&url, &args);
        assert_eq!(code, 1, "rillkit {args:?}: {err}");
        assert!(
            err.contains("no stream \"nosuch\""),
            "rillkit {args:?}: {err}"
        );
    }
    // The dead-letter stream named instead of its origin.
    let (code, err) = fails(&url, &["dlq", "list", "orders-dlq"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("name its origin: \"orders\""), "{err}");
    // What exists but holds nothing is still an empty answer, exit 0.
    assert!(ok(&url, &["dlq", "list", "audit"]).contains("no dead letters"));
    assert_eq!(ok(&url, &["dlq", "list", "orders"]).lines().count(), 2);
    // `--count 0` is a usage error, not "nothing pending".
    let (code, err) = fails(&url, &["pending", "orders", "billing", "--count", "0"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn exit_codes_are_the_documented_ones() {
    // 78: bad configuration.
    let (code, err) = fails("localhost:6379", &["status"]);
    assert_eq!(code, 78, "{err}");
    assert!(err.contains("URL"), "{err}");
    let (code, err) = fails("redis://127.0.0.1:1", &["--cluster", "nonsense", "status"]);
    assert_eq!(code, 78, "{err}");
    let (code, err) = fails(
        "redis://127.0.0.1:1",
        &["--sentinel", "127.0.0.1:26379", "status"],
    );
    assert_eq!(code, 78, "{err}");
    let (code, err) = fails(
        "rediss://127.0.0.1:1",
        &["--tls-ca", "/nonexistent/ca.pem", "status"],
    );
    assert_eq!(code, 78, "{err}");
    // 1: Redis unreachable.
    let mut redis = RedisServer::start();
    let url = redis.url();
    redis.stop();
    let (code, err) = fails(&url, &["status"]);
    assert_eq!(code, 1, "{err}");
    // 2: usage (clap's).
    let (code, _) = fails(&url, &["frobnicate"]);
    assert_eq!(code, 2);
    let (code, _) = fails(&url, &["pending", "orders"]);
    assert_eq!(code, 2);
    // The long help documents them.
    let help = ok(&url, &["--help"]);
    for word in ["Exit codes", "78", "REDIS_URL"] {
        assert!(help.contains(word), "--help lacks {word}: {help}");
    }
}
