use redis::Value;

use super::{ServerCommands, parse};

fn s(t: &str) -> Value {
    Value::BulkString(t.as_bytes().to_vec())
}

/// One argument `{name, type, token}` in RESP2's flat form.
fn arg(token: &str) -> Value {
    Value::Array(vec![
        s("name"),
        s(&token.to_ascii_lowercase()),
        s("type"),
        s("pure-token"),
        s("token"),
        s(token),
    ])
}

fn doc(tokens: &[&str]) -> Value {
    Value::Array(vec![
        s("summary"),
        s("…"),
        s("arguments"),
        Value::Array(tokens.iter().map(|t| arg(t)).collect()),
    ])
}

#[test]
fn a_redis_8_reply_shows_every_command() {
    let reply = Value::Array(vec![
        s("xadd"),
        doc(&["NOMKSTREAM", "IDMP", "MAXLEN"]),
        s("xreadgroup"),
        doc(&["GROUP", "COUNT", "MAXCOUNT", "CLAIM", "STREAMS"]),
        s("xackdel"),
        doc(&["IDS"]),
        s("xnack"),
        doc(&["SILENT"]),
        s("xtrim"),
        doc(&["MAXLEN", "ACKED"]),
    ]);
    let found = parse(&reply);
    assert!(found.ack_and_delete());
    assert!(found.trim_acked());
    assert!(found.claim_in_read());
    assert!(found.idempotent_add());
    assert!(found.hand_back());
    assert!(found.capped_read());
    assert_eq!(found.names().len(), 6);
}

#[test]
fn a_redis_7_reply_shows_none() {
    // Commands the server does not have are left out of the reply.
    let reply = Value::Array(vec![
        s("xadd"),
        doc(&["NOMKSTREAM", "MAXLEN"]),
        s("xreadgroup"),
        doc(&["GROUP", "COUNT", "STREAMS"]),
        s("xtrim"),
        doc(&["MAXLEN"]),
    ]);
    assert_eq!(parse(&reply), ServerCommands::default());
    assert_eq!(
        parse(&reply).to_string(),
        "none of the newer stream commands"
    );
}

#[test]
fn a_resp3_map_with_nested_blocks_is_read_too() {
    // XADD's IDMP is a block inside a oneof, as Redis 8.6 describes it.
    let idmp = Value::Map(vec![
        (s("name"), s("idmp")),
        (s("token"), s("IDMP")),
        (s("arguments"), Value::Array(vec![])),
    ]);
    let oneof = Value::Map(vec![
        (s("name"), s("idmp-block")),
        (s("arguments"), Value::Array(vec![idmp])),
    ]);
    let reply = Value::Map(vec![
        (
            s("xadd"),
            Value::Map(vec![(s("arguments"), Value::Array(vec![oneof]))]),
        ),
        (s("xackdel"), Value::Map(vec![])),
    ]);
    let found = parse(&reply);
    assert!(found.idempotent_add());
    assert!(found.ack_and_delete());
    assert!(!found.claim_in_read());
    assert_eq!(found.to_string(), "XACKDEL, XADD IDMP");
}
