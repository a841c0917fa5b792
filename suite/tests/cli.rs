//! The `rillkit` command-line tool (package `rillkit-cli`): the built
//! binary against a real server — status, pending, consumers, dead letters
//! (list, show, redrive, purge), publish and tail, `--json` output, and the
//! documented exit codes.
#![cfg(feature = "cli")]

mod support;

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
use support::{RedisServer, stream_len, xadd};

/// The binary against `url` with `args` (the caller's `REDIS_*` variables
/// removed).
fn command(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(support::rillkit_bin());
    cmd.env_remove("REDIS_URL")
        .env_remove("REDIS_USER")
        .env_remove("REDIS_PASSWORD")
        .arg("--url")
        .arg(url)
        .args(args);
    cmd
}

/// Runs the binary against `url`.
fn rillkit(url: &str, args: &[&str]) -> Output {
    command(url, args).output().expect("run the rillkit binary")
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
    dead_letter_of(conn, dlq, origin_id, "billing", error)
}

/// [`dead_letter`] of the consumer group `group`.
fn dead_letter_of(
    conn: &mut redis::Connection,
    dlq: &str,
    origin_id: &str,
    group: &str,
    error: &str,
) -> String {
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
            group,
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

/// Whether `s` is an RFC 3339 time in UTC with milliseconds
/// (`2026-12-03T13:41:01.403Z`).
fn is_utc_ms_time(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    b.len() == 24
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[19] == b'.'
        && digits(20..23)
        && b[23] == b'Z'
}

#[test]
fn publish_then_tail_in_text_and_json() {
    let redis = RedisServer::start();
    let url = redis.url();
    // A stream that does not exist is not created by a misspelt name.
    let (code, err) = fails(&url, &["publish", "orders", r#"{"id":1}"#]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no stream \"orders\"") && err.contains("--create"),
        "{err}"
    );
    assert_eq!(stream_len(&mut redis.conn(), "orders"), 0);
    let id = ok(&url, &["publish", "orders", r#"{"id":1}"#, "--create"]);
    let id = id.trim();
    assert!(id.contains('-'), "an entry id: {id}");
    let doc = json(&url, &["publish", "orders", r#"{"id":2}"#]);
    let second = doc["id"].as_str().expect("id").to_owned();

    // Each line: the id, the time it names (UTC), the fields.
    let tail = ok(&url, &["tail", "orders"]);
    let lines: Vec<Vec<&str>> = tail.lines().map(|l| l.split("  ").collect()).collect();
    assert_eq!(lines.len(), 2, "{tail}");
    for (line, (id, data)) in lines
        .iter()
        .zip([(id, r#"{"id":1}"#), (&second, r#"{"id":2}"#)])
    {
        assert_eq!(line.len(), 3, "{tail}");
        assert_eq!(line[0], id, "oldest of the newest first: {tail}");
        assert!(is_utc_ms_time(line[1]), "{tail}");
        assert_eq!(line[2], format!("data={data}"), "{tail}");
    }
    let doc = json(&url, &["tail", "orders", "--count", "1"]);
    let entries = doc["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["id"], second.as_str());
    assert_eq!(entries[0]["time"], lines[1][1]);
    assert_eq!(entries[0]["fields"]["data"], r#"{"id":2}"#);
    // The time is the id's milliseconds since the epoch.
    let _: String = redis::cmd("XADD")
        .arg(&["dated", "1999999999999-0", "data", "{}"])
        .query(&mut redis.conn())
        .expect("XADD with an id");
    let tail = ok(&url, &["tail", "dated"]);
    assert_eq!(
        tail.trim_end(),
        "1999999999999-0  2033-05-18T03:33:19.999Z  data={}"
    );
    let doc = json(&url, &["tail", "dated"]);
    assert_eq!(doc["entries"][0]["time"], "2033-05-18T03:33:19.999Z");

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
    assert_eq!(row[8], "1", "one dead letter: {text}");

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
    support::eventually_blocking("ghost idle for 50 ms", Duration::from_secs(10), || {
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
    });
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
    assert_eq!(
        list[0]["origin"]["attempts"],
        serde_json::json!([]),
        "no failed runs recorded"
    );
    let text = ok(&url, &["dlq", "list", "orders", "--error", "timeout"]);
    assert_eq!(text.lines().count(), 3, "header and two: {text}");
    assert!(!text.contains("invalid 2"), "{text}");

    let text = ok(&url, &["dlq", "show", "orders", &third]);
    assert!(text.contains("origin id:        3-0"), "{text}");
    assert!(text.contains("error:            timeout 3"), "{text}");
    assert!(text.contains("  error = original"), "{text}");
    let (code, err) = fails(&url, &["dlq", "show", "orders", "9-9"]);
    assert_eq!(code, 1, "{err}");

    // The origin stream must have a group to read what comes back.
    let _: () = redis::cmd("XGROUP")
        .arg(&["CREATE", "orders", "billing", "$", "MKSTREAM"])
        .query(&mut c)
        .unwrap();
    let doc = json(
        &url,
        &["dlq", "redrive", "orders", "--error", "timeout", "--yes"],
    );
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

/// Characters that must never reach a terminal raw: they reorder
/// (bidi controls) or hide (zero-width, BOM, fillers) what is shown.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{61c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}'
        | '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{3164}')
}

/// Asserts that `out` (one command's stdout and stderr) holds no control
/// byte but line ends, and no bidi or invisible character.
fn assert_clean(args: &[&str], out: &[u8]) {
    let shown = String::from_utf8_lossy(out);
    assert!(
        !out.iter().any(|b| *b < 0x20 && *b != b'\n' || *b == 0x7f),
        "rillkit {args:?} printed control bytes: {shown:?}"
    );
    assert!(
        !shown.chars().any(invisible),
        "rillkit {args:?} printed bidi or invisible characters: {shown:?}"
    );
}

/// Asserts that a table (header line first) is aligned as a terminal shows
/// it: every row has a cell starting at each header's column (in display
/// columns: CJK and emoji take two), after a space, and no line is wider
/// than `max` columns.
fn assert_aligned(args: &[&str], table: &str, max: usize) {
    use unicode_width::UnicodeWidthChar;
    // (display column, char) of each char of a line.
    let cols = |line: &str| -> Vec<(usize, char)> {
        let mut at = 0;
        line.chars()
            .map(|c| {
                let here = (at, c);
                at += c.width().unwrap_or(0);
                here
            })
            .collect()
    };
    let mut lines = table.lines();
    let header = cols(lines.next().expect("a header"));
    let starts: Vec<usize> = header
        .iter()
        .enumerate()
        .filter(|(i, (_, c))| *c != ' ' && (*i == 0 || header[i - 1].1 == ' '))
        .map(|(_, (col, _))| *col)
        .collect();
    for line in lines {
        let row = cols(line);
        let width = row.last().map_or(0, |(at, c)| at + c.width().unwrap_or(0));
        assert!(
            width <= max,
            "rillkit {args:?}: a line of {width} columns (at most {max}): {line:?}"
        );
        for &start in &starts[1..] {
            let at = row.iter().position(|(col, _)| *col == start);
            let ok = at.is_some_and(|i| row[i].1 != ' ' && i > 0 && row[i - 1].1 == ' ');
            assert!(
                ok,
                "rillkit {args:?}: no cell starts at column {start} in {line:?}\n{table}"
            );
        }
    }
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
    // A right-to-left override (shows "exe.gpj" as "jpg.exe"), CR/LF and a
    // zero-width space; a 300-character consumer; CJK and emoji.
    let rtl = "rtl\u{202e}exe.gpj\r\nfake\u{200b}\u{2066}x\u{2069}";
    let long = format!("{}\u{202e}end", "l".repeat(300));
    let cjk = "注文🚀ストリーム";
    let cjk_group = "請求🧾";
    for (s, g, consumer) in [
        (stream, group, consumer),
        (rtl, "g\u{200f}\u{61c}\u{feff}", long.as_str()),
        (cjk, cjk_group, "処理係👷"),
        (long.as_str(), "plain", "c1"),
    ] {
        let _: String = redis::cmd("XADD")
            .arg(s)
            .arg("*")
            .arg(&["data", r#"{"id":1}"#, "note\x1b[2J", "\u{202e}\r\n\x07"])
            .query(&mut c)
            .unwrap();
        let _: () = redis::cmd("XGROUP")
            .arg(&["CREATE", s, g, "0"])
            .query(&mut c)
            .unwrap();
        let _: redis::Value = redis::cmd("XREADGROUP")
            .arg(&["GROUP", g, consumer, "STREAMS", s, ">"])
            .query(&mut c)
            .unwrap();
    }
    let dlq = format!("{stream}-dlq");
    let id: String = redis::cmd("XADD")
        .arg(&dlq)
        .arg("*")
        .arg(&[
            "data\u{202e}",
            "{}\r\n",
            "origin_stream",
            stream,
            "origin_id",
            "1-0\u{202e}",
            "origin_group",
            group,
            "origin_consumer",
            consumer,
            "delivery_count",
            "4",
            "error",
            &format!("boom\x1b[2J {rtl} {long}"),
            "failed_at_ms",
            "1700000000000",
        ])
        .query(&mut c)
        .unwrap();
    let rtl_dlq = format!("{rtl}-dlq");
    redis::cmd("XADD")
        .arg(&rtl_dlq)
        .arg("*")
        .arg(&[
            "data",
            "{}",
            "origin_stream",
            rtl,
            "origin_id",
            "1-0",
            "origin_group",
            cjk_group,
            "origin_consumer",
            &long,
            "delivery_count",
            "1",
            "error",
            &long,
            "failed_at_ms",
            "1700000000000",
        ])
        .query::<String>(&mut c)
        .unwrap();

    // (arguments, prints a table)
    let rtl_group = "g\u{200f}\u{61c}\u{feff}";
    let runs: Vec<(Vec<&str>, bool)> = vec![
        (vec!["status"], true),
        (vec!["status", rtl], true),
        (vec!["status", "\u{202e}missing\x07\x1b"], false),
        (vec!["pending", stream, group], true),
        (vec!["pending", rtl, rtl_group], true),
        (vec!["pending", cjk, cjk_group], true),
        (vec!["pending", rtl, rtl_group, "--consumer", &long], true),
        (vec!["consumers", stream, group], true),
        (vec!["consumers", rtl, rtl_group], true),
        (vec!["consumers", cjk, cjk_group], true),
        (vec!["dlq", "list", stream], true),
        (vec!["dlq", "list", rtl], true),
        (vec!["dlq", "show", stream, &id], false),
        (vec!["dlq", "show", stream, "9-9"], false),
        (vec!["dlq", "redrive", stream, "--dry-run"], true),
        (vec!["dlq", "redrive", rtl, "--dry-run"], true),
        (vec!["dlq", "redrive", rtl], false),
        (vec!["dlq", "purge", rtl], false),
        (vec!["tail", stream], false),
        (vec!["tail", rtl], false),
        (vec!["tail", cjk], false),
        (vec!["publish", "\u{202e}nosuch\x07", "{}"], false),
        (vec!["pending", "ack", rtl, rtl_group], false),
        (
            vec!["pending", "claim", rtl, rtl_group, "--to", "x\u{202e}\x1b"],
            false,
        ),
    ];
    // No cell is wider than 48 columns: 9 columns at most, 2 apart.
    let max = 9 * 48 + 8 * 2;
    for (args, is_table) in &runs {
        let out = rillkit(&url, args);
        assert_clean(args, &out.stdout);
        assert_clean(args, &out.stderr);
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            all.contains("\\u{") || all.contains('…') || args.contains(&cjk),
            "rillkit {args:?} shows them escaped: {all:?}"
        );
        if *is_table {
            let stdout = String::from_utf8(out.stdout).expect("UTF-8");
            let table: String = stdout
                .lines()
                .take_while(|l| !l.starts_with("to ") && !l.starts_with("dry run"))
                .map(|l| format!("{l}\n"))
                .collect();
            assert_aligned(args, &table, max);
        }
    }
    // Nothing was changed by the refused or unconfirmed commands.
    assert_eq!(stream_len(&mut c, &rtl_dlq), 1);
    // The status table: one row per stream, the long name cut.
    let status = ok(&url, &["status"]);
    assert_eq!(
        status.lines().count(),
        5,
        "a header and 4 streams: {status}"
    );
    assert!(status.contains('…'), "{status}");
    assert!(status.contains(cjk), "CJK and emoji are shown: {status}");
    // --wide shows it whole (escaped).
    let wide = ok(&url, &["status", "--wide"]);
    assert!(
        wide.contains(&format!("{}\\u{{202e}}end", "l".repeat(300))),
        "{wide}"
    );
    // JSON carries the names verbatim, escaped the JSON way (`\u202e`).
    let doc = json(&url, &["status", rtl]);
    assert_eq!(doc["streams"][0]["stream"], rtl);
    for args in [
        vec!["status", "--json"],
        vec!["pending", rtl, rtl_group, "--json"],
        vec!["consumers", rtl, rtl_group, "--json"],
        vec!["dlq", "list", stream, "--json"],
        vec!["dlq", "show", stream, &id, "--json"],
        vec!["dlq", "redrive", rtl, "--dry-run", "--json"],
        vec!["tail", rtl, "--json"],
    ] {
        let out = rillkit(&url, &args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert_clean(&args, &out.stdout);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("\\u202e"),
            "{args:?}"
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

/// A `rediss://` URL to a server without TLS: one line that names the TLS
/// handshake and the plain scheme, exit 1.
#[test]
fn a_rediss_url_to_a_server_without_tls_says_so() {
    let plain = RedisServer::start();
    let addr = format!("127.0.0.1:{}", plain.port);
    let (code, err) = fails(&format!("rediss://{addr}"), &["status"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!("TLS handshake with {addr} failed"))
            && err.contains("is the server TLS-enabled? use redis://"),
        "{err}"
    );
}

/// A port where no Redis listens but an HTTP server does: one line naming
/// the address, what it sent and the hint, exit 1.
#[test]
fn a_port_that_is_not_redis_is_named_in_one_line() {
    let port = support::http_server();
    let (code, err) = fails(&format!("redis://127.0.0.1:{port}"), &["status"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!(
            "127.0.0.1:{port} did not answer as a Redis server (it sent `HTTP/1.1 400 Bad Request`): is the port a Redis port?"
        )),
        "{err}"
    );
}

/// Milliseconds since the Unix epoch, now.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn the_oldest_pending_entry_shows_its_age_and_the_time_since_its_delivery() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    // Added a minute ago (an explicit id in the past), delivered just now.
    let id = format!("{}-0", now_ms() - 60_000);
    let _: String = redis::cmd("XADD")
        .arg("orders")
        .arg(&id)
        .arg(&["data", "{}"])
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("XGROUP")
        .arg(&["CREATE", "orders", "billing", "0"])
        .query(&mut c)
        .unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg(&["GROUP", "billing", "c1", "STREAMS", "orders", ">"])
        .query(&mut c)
        .unwrap();

    let doc = json(&url, &["status", "orders"]);
    let g = &doc["streams"][0]["groups"][0];
    assert_eq!(g["oldest_pending_id"], id.as_str());
    let age = g["oldest_pending_age_ms"].as_u64().expect("an age");
    let idle = g["oldest_pending_idle_ms"].as_u64().expect("an idle time");
    assert!(age >= 60_000, "added a minute ago: {g}");
    assert!(idle < 30_000, "delivered just now: {g}");

    let text = ok(&url, &["status", "orders"]);
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header[6..8], ["OLDEST-AGE", "SINCE-DELIVERY"], "{text}");
    let row: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
    assert!(row[6].starts_with("1m"), "a minute old: {text}");
    assert!(
        row[7].ends_with("ms") || row[7].ends_with('s') && !row[7].contains('m'),
        "seconds at most since delivery: {text}"
    );

    let doc = json(&url, &["pending", "orders", "billing"]);
    let p = &doc["pending"][0];
    assert!(p["age_ms"].as_u64().unwrap() >= 60_000, "{p}");
    assert!(p["idle_ms"].as_u64().unwrap() < 30_000, "{p}");
    let text = ok(&url, &["pending", "orders", "billing"]);
    assert!(text.starts_with("ID"), "{text}");
    assert!(
        text.contains("AGE") && text.contains("SINCE-DELIVERY"),
        "{text}"
    );
}

/// Runs the binary with stdin on a fresh pseudo-terminal, on which `answer`
/// is typed; the terminal stays open until the process exits.
fn with_terminal(url: &str, args: &[&str], answer: &str) -> Output {
    use std::io::Write;
    use std::os::fd::{FromRawFd, OwnedFd};
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two new descriptors, owned from here on.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned by nothing else.
    let (mut master, slave) = unsafe {
        (
            std::fs::File::from(OwnedFd::from_raw_fd(master)),
            OwnedFd::from_raw_fd(slave),
        )
    };
    master.write_all(answer.as_bytes()).unwrap();
    let out = Command::new(support::rillkit_bin())
        .env_remove("REDIS_URL")
        .env_remove("REDIS_USER")
        .env_remove("REDIS_PASSWORD")
        .arg("--url")
        .arg(url)
        .args(args)
        .stdin(std::process::Stdio::from(slave))
        .output()
        .expect("run the rillkit binary");
    drop(master);
    out
}

#[test]
fn a_redrive_is_previewed_confirmed_and_refused_where_nothing_would_read() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    // Dead letters of "orders" (group billing), whose stream was deleted.
    let first = dead_letter(&mut c, "orders-dlq", "1-0", "timeout 1");
    let second = dead_letter(&mut c, "orders-dlq", "2-0", "timeout 2");

    // A dry run lists what would move, says the origin is gone, and changes
    // nothing.
    let text = ok(&url, &["dlq", "redrive", "orders", "--dry-run"]);
    assert!(text.contains(&first) && text.contains(&second), "{text}");
    assert!(text.contains("would redrive 2 dead letter(s)"), "{text}");
    assert!(text.contains("does not exist"), "{text}");
    assert!(text.contains("refused without --create-group"), "{text}");
    let text = ok(
        &url,
        &[
            "dlq",
            "redrive",
            "orders",
            "--dry-run",
            "--create-group",
            "billing",
        ],
    );
    assert!(
        text.contains("group \"billing\" would be created"),
        "{text}"
    );
    let exists: i64 = redis::cmd("EXISTS").arg("orders").query(&mut c).unwrap();
    assert_eq!(exists, 0, "a dry run creates nothing");
    let doc = json(&url, &["dlq", "redrive", "orders", "--dry-run"]);
    assert_eq!(doc["would_redrive"], 2);
    assert_eq!(doc["dead_letters"][1]["origin_id"], "2-0");
    assert_eq!(doc["origins"][0]["readers"], "no_stream");
    assert_eq!(stream_len(&mut c, "orders-dlq"), 2);

    // Refused: the origin stream is gone; the message names it and the way on.
    let (code, err) = fails(&url, &["dlq", "redrive", "orders", "--yes"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("\"orders\" does not exist"), "{err}");
    assert!(err.contains("--create-group \"billing\""), "{err}");
    assert_eq!(stream_len(&mut c, "orders-dlq"), 2);
    assert_eq!(stream_len(&mut c, "orders"), 0);
    // A stream there, but no group: refused too.
    xadd(&mut c, "orders", "{}");
    let (code, err) = fails(&url, &["dlq", "redrive", "orders", "--yes"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no consumer group"), "{err}");
    let _: i64 = redis::cmd("DEL").arg("orders").query(&mut c).unwrap();

    // Not confirmed: no --yes and no terminal (exit 2), or "n" on one.
    let (code, err) = fails(
        &url,
        &["dlq", "redrive", "orders", "--create-group", "billing"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("would redrive 2") && err.contains("--yes"),
        "{err}"
    );
    let out = with_terminal(
        &url,
        &["dlq", "redrive", "orders", "--create-group", "billing"],
        "n\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("[y/N]"), "asked: {err}");
    assert_eq!(stream_len(&mut c, "orders-dlq"), 2, "nothing moved");
    assert_eq!(stream_len(&mut c, "orders"), 0, "no group made either");

    // "y" on the terminal: the group is created at $ and reads them.
    let out = with_terminal(
        &url,
        &["dlq", "redrive", "orders", "--create-group", "billing"],
        "y\n",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("redrove 2 dead letter(s) from orders-dlq, skipped 0"),
        "{stdout}"
    );
    assert_eq!(stream_len(&mut c, "orders-dlq"), 0);
    let read: redis::Value = redis::cmd("XREADGROUP")
        .arg(&["GROUP", "billing", "c1", "STREAMS", "orders", ">"])
        .query(&mut c)
        .unwrap();
    let rows = read_count(read);
    assert_eq!(rows, 2, "the new group reads both redriven entries");
}

/// `XINFO GROUPS` of `stream`: each group's name and last-delivered id.
fn last_delivered(c: &mut redis::Connection, stream: &str) -> Vec<(String, String)> {
    let groups: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(stream)
        .query(c)
        .unwrap();
    groups
        .iter()
        .map(|g| {
            (
                redis::from_redis_value_ref(&g["name"]).unwrap(),
                redis::from_redis_value_ref(&g["last-delivered-id"]).unwrap(),
            )
        })
        .collect()
}

#[test]
fn dlq_redrive_with_group_sends_one_groups_dead_letters_back_to_that_group_only() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    // "orders" is read by billing, shipping and audit, each caught up.
    let origin = xadd(&mut c, "orders", "{}");
    for g in ["billing", "shipping", "audit"] {
        support::create_group(&mut c, "orders", g, "$");
    }
    let billing = dead_letter_of(&mut c, "orders-dlq", &origin, "billing", "card declined");
    let shipping = dead_letter_of(&mut c, "orders-dlq", &origin, "shipping", "no address");

    let doc = json(&url, &["dlq", "list", "orders", "--group", "billing"]);
    let listed = doc["dead_letters"].as_array().expect("dead letters");
    assert_eq!(listed.len(), 1, "{doc}");
    assert_eq!(listed[0]["id"], billing.as_str(), "{doc}");

    let text = ok(
        &url,
        &[
            "dlq",
            "redrive",
            "orders",
            "--group",
            "billing",
            "--dry-run",
        ],
    );
    assert!(
        text.contains(&billing) && !text.contains(&shipping),
        "{text}"
    );
    assert!(
        text.contains("3 groups; each dead letter runs again in its origin group only"),
        "{text}"
    );
    let doc = json(
        &url,
        &[
            "dlq",
            "redrive",
            "orders",
            "--group",
            "billing",
            "--dry-run",
        ],
    );
    assert_eq!(doc["dead_letters"][0]["origin_group"], "billing", "{doc}");

    let text = ok(
        &url,
        &["dlq", "redrive", "orders", "--group", "billing", "--yes"],
    );
    assert!(text.contains("(group billing)"), "{text}");
    assert!(
        text.contains("redrove 1 dead letter(s) from orders-dlq, skipped 0"),
        "{text}"
    );
    // Shipping's dead letter stays; the redriven entry is billing's alone.
    let left: Vec<Entry> = redis::cmd("XRANGE")
        .arg(&["orders-dlq", "-", "+"])
        .query(&mut c)
        .unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].0, shipping);
    let newest: Vec<Entry> = redis::cmd("XREVRANGE")
        .arg(&["orders", "+", "-", "COUNT", "1"])
        .query(&mut c)
        .unwrap();
    let (new_id, fields) = &newest[0];
    assert!(
        fields.contains(&("redriven_for".into(), "billing".into())),
        "{fields:?}"
    );
    for (group, last) in last_delivered(&mut c, "orders") {
        if group == "billing" {
            assert_eq!(last, origin, "billing still has it to read");
        } else {
            assert_eq!(&last, new_id, "{group} was moved past it");
        }
    }
    let read: redis::Value = redis::cmd("XREADGROUP")
        .arg(&["GROUP", "billing", "c1", "STREAMS", "orders", ">"])
        .query(&mut c)
        .unwrap();
    assert_eq!(read_count(read), 1, "billing reads the redriven entry");
    let read: redis::Value = redis::cmd("XREADGROUP")
        .arg(&["GROUP", "audit", "c1", "STREAMS", "orders", ">"])
        .query(&mut c)
        .unwrap();
    assert_eq!(read_count(read), 0, "audit never does");
}

/// An entry as redis-rs reads it: id, then field/value pairs.
type Entry = (String, Vec<(String, String)>);

/// How many entries an XREADGROUP reply holds.
fn read_count(v: redis::Value) -> usize {
    let streams: Vec<(String, Vec<Entry>)> = redis::from_redis_value(v).unwrap_or_default();
    streams.into_iter().map(|(_, e)| e.len()).sum()
}

#[test]
fn stuck_pending_entries_are_selected_claimed_and_acknowledged() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    let ids: Vec<String> = (1..=4)
        .map(|n| xadd(&mut c, "orders", &format!(r#"{{"id":{n}}}"#)))
        .collect();
    let _: () = redis::cmd("XGROUP")
        .arg(&["CREATE", "orders", "billing", "0"])
        .query(&mut c)
        .unwrap();
    for (consumer, count) in [("c1", "2"), ("c2", "1"), ("c3", "1")] {
        let _: redis::Value = redis::cmd("XREADGROUP")
            .arg(&[
                "GROUP", "billing", consumer, "COUNT", count, "STREAMS", "orders", ">",
            ])
            .query(&mut c)
            .unwrap();
    }
    // The first three idle for ten minutes (XCLAIM … IDLE sets it); the
    // fourth, c3's, was just delivered.
    for (id, holder) in [(&ids[0], "c1"), (&ids[1], "c1"), (&ids[2], "c2")] {
        let _: redis::Value = redis::cmd("XCLAIM")
            .arg(&[
                "orders", "billing", holder, "0", id, "IDLE", "600000", "JUSTID",
            ])
            .query(&mut c)
            .unwrap();
    }
    let listed = |args: &[&str]| -> Vec<(String, String)> {
        let mut all = vec!["pending", "orders", "billing"];
        all.extend(args);
        json(&url, &all)["pending"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["id"].as_str().unwrap().to_owned(),
                    p["consumer"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let pair = |i: usize, c: &str| (ids[i].clone(), c.to_owned());
    assert_eq!(listed(&["--consumer", "c2"]), [pair(2, "c2")]);
    assert_eq!(
        listed(&["--min-idle", "5m"]),
        [pair(0, "c1"), pair(1, "c1"), pair(2, "c2")],
        "the fresh one is left out"
    );
    assert_eq!(
        listed(&["--min-idle", "5m", "--consumer", "c1", "--count", "1"]),
        [pair(0, "c1")]
    );

    // claim: not without confirmation, then to c9.
    let (code, err) = fails(
        &url,
        &[
            "pending",
            "claim",
            "orders",
            "billing",
            "--consumer",
            "c1",
            "--to",
            "c9",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("would hand 2 pending entries"), "{err}");
    let text = ok(
        &url,
        &[
            "pending",
            "claim",
            "orders",
            "billing",
            "--consumer",
            "c1",
            "--min-idle",
            "5m",
            "--to",
            "c9",
            "--yes",
        ],
    );
    assert!(text.starts_with("claimed 2 of 2"), "{text}");
    assert_eq!(
        listed(&["--consumer", "c9"]),
        [pair(0, "c9"), pair(1, "c9")]
    );
    let doc = json(&url, &["pending", "orders", "billing", "--consumer", "c9"]);
    assert_eq!(doc["pending"][0]["delivery_count"], 1, "JUSTID: not raised");

    // ack: not without confirmation, then c2's stuck entry.
    let (code, err) = fails(
        &url,
        &["pending", "ack", "orders", "billing", "--consumer", "c2"],
    );
    assert_eq!(code, 2, "{err}");
    assert_eq!(listed(&[]).len(), 4, "nothing acknowledged");
    let doc = json(
        &url,
        &[
            "pending",
            "ack",
            "orders",
            "billing",
            "--consumer",
            "c2",
            "--yes",
        ],
    );
    assert_eq!(doc["acknowledged"], 1, "{doc}");
    assert_eq!(
        listed(&[]),
        [pair(0, "c9"), pair(1, "c9"), pair(3, "c3")],
        "c2's entry left the pending list"
    );
    assert_eq!(
        stream_len(&mut c, "orders"),
        4,
        "entries stay in the stream"
    );
    let text = ok(
        &url,
        &[
            "pending",
            "ack",
            "orders",
            "billing",
            "--consumer",
            "nobody",
        ],
    );
    assert!(text.starts_with("nothing acknowledged"), "{text}");
}

#[test]
fn tail_follow_prints_new_entries_until_ctrl_c() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    let first = xadd(&mut c, "orders", r#"{"id":1}"#);
    let mut cmd = Command::new(support::rillkit_bin());
    cmd.env_remove("REDIS_URL")
        .args(["--url", &url, "tail", "orders", "--follow"]);
    let mut p = support::Worker::spawn_command(cmd);
    let wait = Duration::from_secs(10);
    support::eventually_blocking("the newest entry", wait, || {
        p.lines().iter().any(|l| l.starts_with(&first))
    });
    let second = xadd(&mut c, "orders", r#"{"id":2}"#);
    support::eventually_blocking("the entry added after it", wait, || {
        p.lines().iter().any(|l| {
            let parts: Vec<&str> = l.split("  ").collect();
            parts.len() == 3
                && parts[0] == second
                && is_utc_ms_time(parts[1])
                && parts[2] == r#"data={"id":2}"#
        })
    });
    p.signal("INT");
    assert_eq!(p.wait_exit(wait), Some(0), "Ctrl-C ends it with 0");
    assert_eq!(p.lines().len(), 2, "{:?}", p.lines());
}

#[test]
fn help_never_prints_the_values_of_the_environment() {
    for args in [
        vec!["--help"],
        vec!["status", "--help"],
        vec!["dlq", "redrive", "--help"],
        vec!["help", "pending"],
    ] {
        let out = Command::new(support::rillkit_bin())
            .env("REDIS_PASSWORD", "hunter2")
            .env("REDIS_USER", "sekrit-user")
            .env("REDIS_URL", "redis://u:pa55word@127.0.0.1:1")
            .args(&args)
            .output()
            .expect("run the rillkit binary");
        let help = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        for secret in ["hunter2", "sekrit-user", "pa55word"] {
            assert!(!help.contains(secret), "{args:?} printed {secret}: {help}");
        }
        assert!(help.contains("REDIS_PASSWORD"), "{args:?}: {help}");
        assert!(
            help.contains("Connection:"),
            "{args:?}: options grouped: {help}"
        );
    }
}

#[test]
fn a_long_redrive_shows_progress_and_ctrl_c_stops_it_with_the_count() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    const TOTAL: usize = 50_000;
    let mut pipe = redis::pipe();
    for n in 0..TOTAL {
        pipe.cmd("XADD")
            .arg("orders-dlq")
            .arg("*")
            .arg(&[
                "data",
                "{}",
                "origin_stream",
                "orders",
                "origin_id",
                &format!("{n}-0"),
                "origin_group",
                "billing",
                "origin_consumer",
                "c1",
                "delivery_count",
                "4",
                "error",
                "boom",
                "failed_at_ms",
                "1700000000000",
            ])
            .ignore();
    }
    let _: () = pipe.query(&mut c).unwrap();
    let _: () = redis::cmd("XGROUP")
        .arg(&["CREATE", "orders", "billing", "$", "MKSTREAM"])
        .query(&mut c)
        .unwrap();
    let mut cmd = Command::new(support::rillkit_bin());
    cmd.env_remove("REDIS_URL")
        .args(["--url", &url, "dlq", "redrive", "orders", "--yes"]);
    let mut p = support::Worker::spawn_command(cmd);
    let wait = Duration::from_secs(60);
    support::eventually_blocking("a progress line", wait, || {
        p.log().iter().any(|l| {
            l.starts_with("rillkit: redriving from orders-dlq: ") && l.ends_with("/50000 done")
        })
    });
    p.signal("INT");
    assert_eq!(p.wait_exit(wait), Some(130), "{:?}", p.log());
    let lines = p.lines();
    let last = lines.last().expect("a last line");
    assert!(last.contains("not attempted (interrupted)"), "{last}");
    let moved = stream_len(&mut c, "orders");
    assert!(moved > 0 && moved < TOTAL, "{moved}");
    assert!(
        last.starts_with(&format!(
            "redrove {moved} dead letter(s) from orders-dlq, skipped 0; "
        )),
        "the count printed is the count moved ({moved}): {last}"
    );
    assert_eq!(
        stream_len(&mut c, "orders-dlq"),
        TOTAL - moved,
        "each in one place"
    );
    let err = p.log().join("\n");
    assert!(
        err.contains(&format!("interrupted: redrove {moved} of {TOTAL}")),
        "{err}"
    );
}

/// A reader that goes away (`rillkit tail … | head -1`) ends the tool
/// quietly with 141 (as SIGPIPE would), not with a panic.
#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let mut pipe = redis::pipe();
    for i in 0..5000 {
        pipe.cmd("XADD")
            .arg("big")
            .arg("*")
            .arg("data")
            .arg(format!("{{\"id\":{i},\"pad\":\"{}\"}}", "x".repeat(200)))
            .ignore();
    }
    let _: () = pipe.query(&mut conn).unwrap();
    let mut child = command(&redis.url(), &["tail", "big", "--count", "5000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(!first.is_empty(), "the first line came");
    // The reader is dropped: the rest of the 5000 lines meet a closed pipe.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{stderr}");
}

/// The lines of the Prometheus text `text` that are `name`'s samples, its
/// `# HELP` and its `# TYPE`.
fn family<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| {
            l.starts_with(&format!("{name}{{"))
                || l.starts_with(&format!("{name} "))
                || l.starts_with(&format!("# HELP {name} "))
                || l.starts_with(&format!("# TYPE {name} "))
        })
        .collect()
}

/// `rillkit metrics` prints every group's gauges, one that no broker
/// consumes included, with the library's metric names and `# HELP` text
/// (as a Prometheus recorder renders them), keeps to `--max-groups`, and
/// escapes label values as the format says.
#[test]
fn metrics_prints_every_group_in_the_prometheus_text_format() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    let run = |c: &mut redis::Connection, args: &[&str]| {
        let _: redis::Value = redis::cmd(args[0]).arg(&args[1..]).query(c).unwrap();
    };
    // A group nobody reads: its lag is every entry.
    run(
        &mut c,
        &["XGROUP", "CREATE", "audit", "auditors", "$", "MKSTREAM"],
    );
    for i in 0..3 {
        xadd(&mut c, "audit", &i.to_string());
    }
    // One entry delivered and not acked, one dead letter.
    run(
        &mut c,
        &["XGROUP", "CREATE", "orders", "billing", "$", "MKSTREAM"],
    );
    xadd(&mut c, "orders", "1");
    run(
        &mut c,
        &[
            "XREADGROUP",
            "GROUP",
            "billing",
            "w1",
            "COUNT",
            "1",
            "STREAMS",
            "orders",
            ">",
        ],
    );
    xadd(&mut c, "orders-dlq", "1");
    // A name the format must escape.
    run(&mut c, &["XGROUP", "CREATE", "q\"\\", "g", "$", "MKSTREAM"]);

    let text = ok(&url, &["metrics"]);
    let audit = r#"{stream="audit",group="auditors"}"#;
    let orders = r#"{stream="orders",group="billing"}"#;
    assert!(
        text.lines().any(|l| l == format!("rillkit_lag{audit} 3")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == format!("rillkit_pending{audit} 0"))
    );
    assert!(
        text.lines()
            .any(|l| l == format!("rillkit_consumers{audit} 0"))
    );
    assert!(
        text.lines()
            .any(|l| l == format!("rillkit_pending{orders} 1"))
    );
    assert!(text.lines().any(|l| l == format!("rillkit_lag{orders} 0")));
    assert!(
        text.lines()
            .any(|l| l == r#"rillkit_dead_letters{stream="orders",dlq="orders-dlq"} 1"#),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("rillkit_oldest_pending_age_seconds{orders} "))),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == r#"rillkit_pending{stream="q\"\\",group="g"} 0"#),
        "{text}"
    );
    assert!(!text.contains(r#"stream="orders-dlq""#), "{text}");
    assert!(text.lines().any(|l| l == "rillkit_server_metrics_groups 3"));
    assert!(
        text.lines()
            .any(|l| l == "rillkit_server_metrics_groups_skipped 0")
    );
    for name in [
        "rillkit_lag",
        "rillkit_pending",
        "rillkit_oldest_pending_age_seconds",
        "rillkit_consumers",
        "rillkit_dead_letters",
        "rillkit_server_metrics_groups",
        "rillkit_server_metrics_groups_skipped",
    ] {
        assert!(
            text.contains(&format!("\n# TYPE {name} gauge\n")),
            "{name}: {text}"
        );
    }

    // The same HELP lines as the library gives an installed recorder.
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let scrape = recorder.handle();
    {
        let _local = metrics::set_default_local_recorder(&recorder);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let admin = rillkit::admin::Admin::connect(&url).await.unwrap();
            rillkit::admin::ServerMetrics::new()
                .collect(&admin)
                .await
                .unwrap();
        });
    }
    let exported = scrape.render();
    for name in ["rillkit_lag", "rillkit_pending", "rillkit_consumers"] {
        let help = |t: &str| {
            family(t, name)
                .into_iter()
                .find(|l| l.starts_with("# HELP"))
                .map(str::to_owned)
        };
        assert!(help(&exported).is_some(), "{exported}");
        assert_eq!(help(&text), help(&exported), "{name}");
    }

    // The cap: one group, the others counted.
    let out = rillkit(&url, &["metrics", "--max-groups", "1"]);
    assert_eq!(out.status.code(), Some(0));
    let capped = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(family(&capped, "rillkit_pending").len(), 3, "{capped}");
    assert!(
        capped
            .lines()
            .any(|l| l == "rillkit_server_metrics_groups_skipped 2"),
        "{capped}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("2 groups left out"),
        "{out:?}"
    );

    // --json: the same figures.
    let doc = json(&url, &["metrics"]);
    let groups = doc["groups"].as_array().unwrap();
    let audit = groups
        .iter()
        .find(|g| g["stream"] == "audit")
        .expect("audit");
    assert_eq!(audit["lag"], 3);
}

/// `rillkit metrics --listen` serves the gauges at /metrics, read afresh
/// for each scrape, 404 elsewhere, until Ctrl-C (exit 0).
#[test]
fn metrics_listen_serves_every_scrape_afresh() {
    use std::io::{Read as _, Write as _};
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    let _: redis::Value = redis::cmd("XGROUP")
        .arg(&["CREATE", "audit", "auditors", "$", "MKSTREAM"])
        .query(&mut c)
        .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new(support::rillkit_bin());
    cmd.env_remove("REDIS_URL").args([
        "--url",
        &url,
        "metrics",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ]);
    let mut p = support::Worker::spawn_command(cmd);
    let get = |path: &str| -> Option<(String, String)> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let (head, body) = out.split_once("\r\n\r\n")?;
        Some((head.lines().next()?.to_owned(), body.to_owned()))
    };
    let wait = Duration::from_secs(10);
    support::eventually_blocking("it listens", wait, || get("/metrics").is_some());
    let (status, body) = get("/metrics").unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    let lag = r#"rillkit_lag{stream="audit",group="auditors"}"#;
    assert!(body.lines().any(|l| l == format!("{lag} 0")), "{body}");
    xadd(&mut c, "audit", "1");
    let (_, body) = get("/metrics").unwrap();
    assert!(body.lines().any(|l| l == format!("{lag} 1")), "{body}");
    assert_eq!(get("/elsewhere").unwrap().0, "HTTP/1.1 404 Not Found");
    p.signal("INT");
    assert_eq!(p.wait_exit(wait), Some(0), "Ctrl-C ends it with 0");
}

/// `rillkit metrics --listen` on a port another process listens on: exit 78
/// and one line naming the address and that it is in use.
#[test]
fn metrics_listen_on_a_port_in_use_says_so_and_exits_78() {
    let redis = RedisServer::start();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let addr = taken.local_addr().expect("its address").to_string();
    let (code, err) = fails(&redis.url(), &["metrics", "--listen", &addr]);
    assert_eq!(code, 78, "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!("--listen {addr}: address in use")),
        "{err}"
    );
    drop(taken);
}

/// Runs the binary with `input` on stdin.
fn with_stdin(url: &str, args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = command(url, args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the rillkit binary");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn ordered_entries_are_published_by_key_into_their_partitions_and_status_shows_the_partitions() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    // No ordered stream yet: without --partitions nothing is published.
    let out = with_stdin(
        &url,
        &["publish", "orders", "-", "--key-field", "order"],
        "{\"order\":1}\n",
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A document without its key stops the publish before anything is added.
    let lines = "{\"order\":\"o-1\",\"n\":1}\n{\"n\":2}\n";
    let out = with_stdin(
        &url,
        &[
            "publish",
            "orders",
            "-",
            "--key-field",
            "order",
            "--partitions",
            "4",
        ],
        lines,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("document 2"));
    let lines: String = (0..20)
        .map(|n| format!("{{\"order\":\"o-{}\",\"n\":{n}}}\n", n % 5))
        .collect();
    let out = with_stdin(
        &url,
        &[
            "publish",
            "orders",
            "-",
            "--key-field",
            "order",
            "--partitions",
            "4",
        ],
        &lines,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    assert_eq!(printed.lines().count(), 20);
    // Each into the documented partition, in order per key, with the key as
    // a field of its own.
    for k in 0..5 {
        let key = format!("o-{k}");
        let p = format!("orders:p{}", rillkit::partition_of(key.as_bytes(), 4));
        let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
            .arg(&p)
            .arg("-")
            .arg("+")
            .query(&mut c)
            .unwrap();
        let ns: Vec<u64> = entries
            .iter()
            .filter(|(_, f)| f.iter().any(|(k2, v)| k2 == "order" && *v == key))
            .map(|(_, f)| {
                let data = &f.iter().find(|(k2, _)| k2 == "data").unwrap().1;
                serde_json::from_str::<Value>(data).unwrap()["n"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(
            ns,
            (0..4).map(|i| i * 5 + k).collect::<Vec<u64>>(),
            "{key} in {p}"
        );
    }
    // Another count than the one recorded is refused.
    let out = with_stdin(
        &url,
        &[
            "publish",
            "orders",
            "-",
            "--key-field",
            "order",
            "--partitions",
            "8",
        ],
        "{\"order\":1}\n",
    );
    assert_eq!(
        out.status.code(),
        Some(78),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Status: a row per partition with its owner (the lease's holder).
    support::create_group(&mut c, "orders:p0", "g", "0");
    let _: () = redis::cmd("SET")
        .arg("{orders:p0}:rillkit:owner:g")
        .arg("worker-7 host-1-abc")
        .query(&mut c)
        .unwrap();
    let table = ok(&url, &["status", "orders"]);
    assert!(table.contains("4 partitions"), "{table}");
    assert!(table.contains("orders:p3"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.contains("orders:p0") && l.contains("worker-7")),
        "{table}"
    );
    let doc = json(&url, &["status", "orders"]);
    assert_eq!(doc["partitions"], 4);
    assert_eq!(doc["rows"][0]["owner"], "worker-7");
}

/// Streams ordered by key: a `fail_rest` key's dead letters redriven with
/// the tool run again in their order; a redrive that skips everything fails.
mod ordered_redrive {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use redis::Commands;
    use rillkit::prelude::*;
    use rillkit::{OnKeyFailure, RetryBackoff, partition_of};
    use serde::{Deserialize, Serialize};
    use serde_json::Value;

    use super::support::{self, RedisServer, eventually, pending_count, stream_len};

    const WAIT: Duration = Duration::from_secs(60);
    const PARTITIONS: u16 = 2;

    #[derive(Debug, Clone, Serialize, Deserialize)]
    struct Event {
        key: String,
        seq: u64,
    }

    /// Every run, in the order they started: (key, seq, succeeded).
    type Runs = Arc<Mutex<Vec<(String, u64, bool)>>>;

    fn partition(key: &str) -> String {
        format!("orders:p{}", partition_of(key.as_bytes(), PARTITIONS))
    }

    /// A key of the other partition than `k1`'s.
    fn other_key() -> String {
        (2..)
            .map(|i| format!("k{i}"))
            .find(|k| partition(k) != partition("k1"))
            .unwrap()
    }

    /// A broker on `orders` (ordered by `key`, `fail_rest`) whose handler
    /// fails seq 1 of each of `poisoned` while `broken` is set.
    fn broker(
        redis: &RedisServer,
        poisoned: Vec<String>,
        broken: Arc<AtomicBool>,
        runs: Runs,
    ) -> Broker {
        let s = Stream::new("orders", "g").ordered_by("key", PARTITIONS);
        Broker::builder(redis.url())
            .subscribe(
                &s,
                ConsumerOptions::default()
                    .with_consumer("c1")
                    .with_block(Duration::from_millis(100))
                    .with_concurrency(8)
                    .with_lease_ttl(Duration::from_millis(900))
                    .with_max_retries(1)
                    .with_retry_backoff(RetryBackoff::fixed(Duration::from_millis(30)))
                    .with_on_key_failure(OnKeyFailure::FailRest),
                move |e: Event| {
                    let fail =
                        broken.load(Ordering::SeqCst) && e.seq == 1 && poisoned.contains(&e.key);
                    runs.lock().unwrap().push((e.key.clone(), e.seq, !fail));
                    async move {
                        if fail {
                            return Err(HandlerError::retry(format!("{} {} fails", e.key, e.seq)));
                        }
                        HandlerResult::Ok(())
                    }
                },
            )
            .build()
            .unwrap()
    }

    /// The seqs of `key` that succeeded, in the order they ran.
    fn succeeded(runs: &Runs, key: &str) -> Vec<u64> {
        runs.lock()
            .unwrap()
            .iter()
            .filter(|(k, _, ok)| k == key && *ok)
            .map(|(_, q, _)| *q)
            .collect()
    }

    /// Seqs 0..6 of every key in `keys` published, seq 1 of each failing:
    /// with `fail_rest` seqs 1..6 of each go to its partition's dead-letter
    /// stream, 1 first, and the key is marked; then the broker stops.
    async fn poison(redis: &RedisServer, keys: &[String]) -> (Arc<AtomicBool>, Runs) {
        let broken = Arc::new(AtomicBool::new(true));
        let runs = Runs::default();
        let b = broker(redis, keys.to_vec(), broken.clone(), runs.clone());
        b.start().await.unwrap();
        let s = Stream::new("orders", "g").ordered_by("key", PARTITIONS);
        for seq in 0..6 {
            for key in keys {
                let e = Event {
                    key: key.clone(),
                    seq,
                };
                b.publish_keyed(&s, key, &e).await.unwrap();
            }
        }
        let mut c = redis.conn();
        eventually("every poisoned key's seqs 1..6 dead-lettered", WAIT, || {
            keys.iter()
                .all(|k| stream_len(&mut c, &format!("{}-dlq", partition(k))) == 5)
        })
        .await;
        eventually("nothing pending", WAIT, || {
            keys.iter()
                .all(|k| pending_count(&mut c, &partition(k), "g") == 0)
        })
        .await;
        for k in keys {
            let mark: Option<String> = c
                .hget(format!("{{{}}}:rillkit:failed-keys:g", partition(k)), k)
                .unwrap();
            assert!(mark.is_some(), "{k} is marked");
            assert_eq!(succeeded(&runs, k), [0], "only seq 0 of {k} ran to success");
        }
        assert_eq!(b.stop().await.unwrap().exit_code(), 0);
        (broken, runs)
    }

    /// The tool, off the test's thread: exit code, stdout, stderr.
    async fn tool(url: &str, args: &[&str]) -> (i32, String, String) {
        let url = url.to_owned();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let out = actix_rt::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            super::rillkit(&url, &args)
        })
        .await
        .unwrap();
        (
            out.status.code().expect("exited"),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// After the redrive: a new broker, the handler fixed, runs every
    /// redriven entry of `keys`, each key's in its order, and nothing is
    /// dead-lettered again.
    async fn rerun(redis: &RedisServer, keys: &[String]) {
        let runs = Runs::default();
        let b = broker(
            redis,
            keys.to_vec(),
            Arc::new(AtomicBool::new(false)),
            runs.clone(),
        );
        b.start().await.unwrap();
        eventually("the redriven entries ran", WAIT, || {
            keys.iter().all(|k| succeeded(&runs, k).len() == 5)
        })
        .await;
        let mut c = redis.conn();
        eventually("the redriven entries acked", WAIT, || {
            keys.iter()
                .all(|k| pending_count(&mut c, &partition(k), "g") == 0)
        })
        .await;
        assert_eq!(b.stop().await.unwrap().exit_code(), 0);
        for k in keys {
            assert_eq!(succeeded(&runs, k), [1, 2, 3, 4, 5], "{k} in its order");
            assert_eq!(
                stream_len(&mut c, &format!("{}-dlq", partition(k))),
                0,
                "nothing of {k} dead-lettered again"
            );
        }
    }

    #[actix_rt::test]
    async fn a_fail_rest_keys_dead_letters_redriven_by_partition_run_again_in_order() {
        support::init_tracing();
        let redis = RedisServer::start();
        let url = redis.url();
        let _ = support::rillkit_bin();
        let keys = vec!["k1".to_owned()];
        let (_, _) = poison(&redis, &keys).await;
        let p = partition("k1");
        let dlq = format!("{p}-dlq");
        let mut c = redis.conn();
        let before: redis::streams::StreamRangeReply = c.xrange_all(&dlq).unwrap();
        let dead_ids: Vec<String> = before.ids.iter().map(|e| e.id.clone()).collect();

        let (code, out, err) = tool(&url, &["dlq", "redrive", &p, "--yes", "--json"]).await;
        assert_eq!(code, 0, "{out}{err}");
        let doc: Value = serde_json::from_str(&out).unwrap();
        let redriven = doc["redriven"].as_array().expect("redriven");
        let ids: Vec<&str> = redriven
            .iter()
            .map(|r| r["dead_letter"].as_str().unwrap())
            .collect();
        assert_eq!(ids, dead_ids, "every one, in the order they failed: {doc}");
        assert!(redriven.iter().all(|r| r["stream"] == p.as_str()), "{doc}");
        assert_eq!(redriven[0]["lifted_mark"], "k1", "{doc}");
        assert_eq!(doc["skipped"], Value::Array(vec![]), "{doc}");
        assert_eq!(
            stream_len(&mut c, &dlq),
            0,
            "the dead-letter stream is empty"
        );
        let mark: Option<String> = c
            .hget(format!("{{{p}}}:rillkit:failed-keys:g"), "k1")
            .unwrap();
        assert_eq!(mark, None, "the key's mark went with the redrive");
        // The redriven entries carry the original fields only.
        let back: redis::streams::StreamRangeReply = c.xrange_count(&p, "-", "+", 100).unwrap();
        let last = back.ids.last().unwrap();
        let mut names: Vec<&str> = last.map.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["data", "key", "redriven_from"], "{:?}", last.map);

        rerun(&redis, &keys).await;
    }

    #[actix_rt::test]
    async fn naming_the_base_stream_redrives_every_partitions_dead_letters_into_its_partition() {
        support::init_tracing();
        let redis = RedisServer::start();
        let url = redis.url();
        let _ = support::rillkit_bin();
        let keys = vec!["k1".to_owned(), other_key()];
        poison(&redis, &keys).await;

        let (code, out, err) =
            tool(&url, &["dlq", "redrive", "orders", "--dry-run", "--json"]).await;
        assert_eq!(code, 0, "{out}{err}");
        let doc: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(doc["would_redrive"], 10, "{doc}");
        assert_eq!(doc["dlqs"].as_array().map(Vec::len), Some(2), "{doc}");

        let (code, out, err) = tool(&url, &["dlq", "redrive", "orders", "--yes", "--json"]).await;
        assert_eq!(code, 0, "{out}{err}");
        let doc: Value = serde_json::from_str(&out).unwrap();
        let redriven = doc["redriven"].as_array().expect("redriven");
        assert_eq!(redriven.len(), 10, "{doc}");
        for r in redriven {
            let stream = r["stream"].as_str().unwrap();
            assert_eq!(
                r["dlq"],
                format!("{stream}-dlq").as_str(),
                "back to its own partition: {doc}"
            );
        }
        let mut c = redis.conn();
        for k in &keys {
            assert_eq!(stream_len(&mut c, &format!("{}-dlq", partition(k))), 0);
        }
        rerun(&redis, &keys).await;
    }

    #[actix_rt::test]
    async fn a_redrive_that_skips_every_dead_letter_exits_1_naming_why() {
        let redis = RedisServer::start();
        let url = redis.url();
        let mut c = redis.conn();
        super::xadd(&mut c, "orders", "{}");
        let _: () = redis::cmd("XGROUP")
            .arg(&["CREATE", "orders", "g", "$"])
            .query(&mut c)
            .unwrap();
        // Written by something else than rillkit: no origin.
        super::xadd(&mut c, "orders-dlq", "{\"stranger\":1}");
        super::xadd(&mut c, "orders-dlq", "{\"stranger\":2}");
        let (code, out, err) = tool(&url, &["dlq", "redrive", "orders", "--yes"]).await;
        assert_eq!(code, 1, "{out}{err}");
        assert!(
            out.contains("redrove 0 dead letter(s) from orders-dlq, skipped 2"),
            "{out}"
        );
        assert!(
            err.contains("nothing redriven")
                && err.contains("2 because no origin_stream: not a dead letter rillkit wrote"),
            "{err}"
        );
        assert_eq!(stream_len(&mut c, "orders-dlq"), 2);
    }
}

/// `rillkit fleet --json` until `done` holds of it (the records are renewed
/// every 500 ms), up to 30 s.
fn fleet_when(url: &str, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut last = Vec::new();
    let mut ok = false;
    support::eventually_blocking(what, Duration::from_secs(30), || {
        last = json(url, &["fleet"]).as_array().cloned().expect("an array");
        ok = done(&last);
        ok
    });
    assert!(ok);
    last
}

/// The `state` and `concurrency` of each process's one subscription.
fn states(fleet: &[Value]) -> Vec<(String, u64)> {
    fleet
        .iter()
        .map(|p| {
            let s = &p["subscriptions"][0];
            (
                s["state"].as_str().unwrap_or_default().to_owned(),
                s["concurrency"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn pause_scale_and_fleet_reach_every_worker_process() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    let env = |name: &'static str| {
        [
            ("RILLKIT_STREAM", "tasks"),
            ("RILLKIT_GROUP", "workers"),
            ("RILLKIT_CONSUMER", name),
            ("RILLKIT_CONCURRENCY", "2"),
            ("RILLKIT_BLOCK_MS", "30000"),
        ]
    };
    let w1 = support::Worker::spawn(&url, &env("w1"));
    let w2 = support::Worker::spawn(&url, &env("w2"));
    fleet_when(&url, "both workers in the fleet view", |f| f.len() == 2);

    // Usage: a stream needs its group, which must exist; bounds are checked.
    let (code, err) = fails(&url, &["pause", "tasks"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--group"), "{err}");
    let (code, err) = fails(&url, &["pause", "tasks", "--group", "nope"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no consumer group"), "{err}");
    let (code, err) = fails(
        &url,
        &["scale", "tasks", "--group", "workers", "--concurrency", "0"],
    );
    assert_eq!(code, 2, "{err}");

    let text = ok(&url, &["pause", "tasks", "--group", "workers"]);
    assert!(text.contains("paused in every rillkit process"), "{text}");
    fleet_when(&url, "both paused", |f| {
        f.len() == 2 && states(f).iter().all(|(s, _)| s == "paused")
    });
    for n in 0..10 {
        xadd(&mut c, "tasks", &format!(r#"{{"id":{n}}}"#));
    }
    // Started while the pause is on: paused from its first read.
    let w3 = support::Worker::spawn(&url, &env("w3"));
    let fleet = fleet_when(&url, "the third paused too", |f| {
        f.len() == 3 && states(f).iter().all(|(s, _)| s == "paused")
    });
    for p in &fleet {
        for field in ["consumer", "host", "pid", "version"] {
            assert!(!p[field].is_null(), "{field}: {p}");
        }
        let s = &p["subscriptions"][0];
        assert_eq!(
            (s["stream"].as_str(), s["group"].as_str()),
            (Some("tasks"), Some("workers"))
        );
        assert_eq!(s["consumer"], p["consumer"]);
        assert_eq!(s["in_flight"], 0);
        assert_eq!(s["fleet_paused"], true);
    }
    let pids: Vec<u64> = fleet.iter().map(|p| p["pid"].as_u64().unwrap()).collect();
    for w in [&w1, &w2, &w3] {
        assert!(pids.contains(&u64::from(w.pid())), "{pids:?}");
        assert!(w.handled().is_empty(), "nothing handled while paused");
    }

    let t = std::time::Instant::now();
    ok(
        &url,
        &["scale", "tasks", "--group", "workers", "--concurrency", "8"],
    );
    fleet_when(&url, "concurrency 8 in every process", |f| {
        f.len() == 3 && states(f).iter().all(|(_, n)| *n == 8)
    });
    eprintln!("scale to 8 seen by every process after {:?}", t.elapsed());
    let text = ok(&url, &["fleet"]);
    assert!(text.contains("8 (built 2)"), "{text}");

    ok(&url, &["resume", "tasks", "--group", "workers"]);
    support::eventually_blocking("the backlog drained", Duration::from_secs(30), || {
        [&w1, &w2, &w3]
            .iter()
            .map(|w| w.handled().len())
            .sum::<usize>()
            == 10
    });
    for mut w in [w1, w2, w3] {
        w.signal("TERM");
        assert_eq!(w.wait_exit(Duration::from_secs(30)), Some(0));
    }
    fleet_when(&url, "a stopped process leaves the view", |f| f.is_empty());
}

#[test]
fn a_reliable_lists_status_and_dead_letters_are_shown_redriven_and_purged() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    let mut w = support::Worker::spawn(
        &url,
        &[
            ("RILLKIT_SOURCE", "list"),
            ("RILLKIT_STREAM", "jobs"),
            ("RILLKIT_CONSUMER", "l1"),
            ("RILLKIT_MAX_RETRIES", "0"),
        ],
    );
    let _: i64 = redis::cmd("LPUSH")
        .arg("jobs")
        .arg(r#"{"id":7,"fail":true}"#)
        .query(&mut c)
        .unwrap();
    support::eventually_blocking("the item dead-lettered", Duration::from_secs(30), || {
        redis::cmd("LLEN")
            .arg("jobs-dlq")
            .query::<i64>(&mut c)
            .unwrap()
            == 1
    });

    let doc = json(&url, &["status"]);
    let lists = doc["lists"].as_array().expect("lists");
    assert_eq!(lists.len(), 1, "{doc}");
    let jobs = &lists[0];
    assert_eq!(jobs["list"], "jobs");
    assert_eq!(jobs["dead_letters"], 1);
    assert_eq!(jobs["live_consumers"], 1);
    assert_eq!(jobs["consumers"][0]["name"], "l1");
    let text = ok(&url, &["status", "jobs"]);
    assert!(text.contains("LIST") && text.contains("jobs"), "{text}");

    let doc = json(&url, &["dlq", "list", "jobs"]);
    assert_eq!(doc["dlq"], "jobs-dlq");
    let letter = &doc["dead_letters"][0];
    assert_eq!(letter["index"], 0);
    assert_eq!(letter["item"], r#"{"id":7,"fail":true}"#);
    assert!(
        !letter["error"].as_str().unwrap_or_default().is_empty(),
        "{letter}"
    );
    let text = ok(&url, &["dlq", "list", "jobs"]);
    assert!(text.contains("INDEX") && text.contains("jobs"), "{text}");
    let text = ok(&url, &["dlq", "show", "jobs", "0"]);
    assert!(
        text.contains(r#"item:             {"id":7,"fail":true}"#),
        "{text}"
    );
    let (code, err) = fails(&url, &["dlq", "list", "jobs", "--start", "1-0"]);
    assert_eq!(code, 2, "{err}");

    // Redriven with the worker stopped: back on the list, waiting.
    w.signal("TERM");
    assert_eq!(w.wait_exit(Duration::from_secs(30)), Some(0));
    let text = ok(&url, &["dlq", "redrive", "jobs", "--yes"]);
    assert!(
        text.contains("redrove 1 dead letter(s) from jobs-dlq"),
        "{text}"
    );
    let waiting: Vec<String> = redis::cmd("LRANGE")
        .arg("jobs")
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    assert_eq!(waiting, [r#"{"id":7,"fail":true}"#]);
    assert_eq!(llen(&mut c, "jobs-dlq"), 0);

    // A dead letter of another writer: listed as such, and purged.
    let _: i64 = redis::cmd("LPUSH")
        .arg("jobs-dlq")
        .arg("plain")
        .query(&mut c)
        .unwrap();
    let text = ok(&url, &["dlq", "list", "jobs"]);
    assert!(text.contains("(not a rillkit dead letter)"), "{text}");
    let doc = json(&url, &["dlq", "purge", "jobs", "--yes"]);
    assert_eq!(doc["deleted"], 1);
    assert_eq!(llen(&mut c, "jobs-dlq"), 0);
}

/// `LLEN` of a list key.
fn llen(c: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("LLEN").arg(key).query(c).unwrap()
}

#[test]
fn the_same_500_documents_published_twice_with_an_idempotency_key_leave_500_entries() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    let lines: String = (0..500)
        .map(|n| format!("{{\"doc\":\"d-{n}\",\"n\":{n}}}\n"))
        .collect();
    let args = [
        "publish",
        "docs",
        "-",
        "--create",
        "--idempotency-key-field",
        "doc",
    ];
    let first = with_stdin(&url, &args, &lines);
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let again = with_stdin(&url, &args, &lines);
    assert_eq!(again.status.code(), Some(0));
    // The same ids, in the same order: the first entries'.
    assert_eq!(first.stdout, again.stdout);
    assert_eq!(String::from_utf8_lossy(&first.stdout).lines().count(), 500);
    assert_eq!(stream_len(&mut c, "docs"), 500);
    // Another producer's ids are its own.
    let other = with_stdin(
        &url,
        &[
            "publish",
            "docs",
            "-",
            "--idempotency-key-field",
            "doc",
            "--producer",
            "nightly",
        ],
        "{\"doc\":\"d-0\"}\n",
    );
    assert_eq!(other.status.code(), Some(0));
    assert_eq!(stream_len(&mut c, "docs"), 501);
    // A document without its id stops the publish before anything is added.
    let out = with_stdin(&url, &args, "{\"doc\":\"d-900\"}\n{\"n\":1}\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("document 2"));
    assert_eq!(stream_len(&mut c, "docs"), 501);
}

#[test]
fn server_shows_the_paths_each_master_gives() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut c = redis.conn();
    let doc = json(&url, &["server"]);
    let servers = doc["servers"].as_array().expect("servers");
    assert_eq!(servers.len(), 1, "{doc}");
    let xackdel = support::server::has_command(&mut c, "XACKDEL");
    let commands: Vec<&str> = servers[0]["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(commands.contains(&"XACKDEL"), xackdel, "{doc}");
    assert_eq!(
        servers[0]["retention"],
        if xackdel {
            "XACKDEL + XTRIM ACKED"
        } else {
            "script"
        },
        "{doc}"
    );
    let text = ok(&url, &["server"]);
    assert!(text.starts_with("SERVER"), "{text}");
    assert_eq!(text.lines().count(), 2, "{text}");
}
