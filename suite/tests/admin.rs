//! `rillkit::admin`: discovery, groups, consumers, pending entries
//! (selected, claimed, acknowledged) and the newest entries of a stream;
//! writes that keep to existing streams, group creation, reads after an id;
//! dead letters made by a real broker listed apart from what the move
//! appended, a filtered subset redriven to a running consumer, the rest
//! purged; the slot rule under a cluster.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rillkit::admin::{Admin, DeadLetterFilter};
use rillkit::prelude::*;
use rillkit::{Error, Topology};
use support::{RedisCluster, RedisServer, eventually, stream_len};

const WAIT: Duration = Duration::from_secs(15);

fn pairs(items: &[(&str, &str)]) -> Fields {
    items
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

/// An entry's field/value pairs.
type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// What the consumer saw of each redriven entry: its `redriven_from` and
/// fields.
type Redriven = Arc<Mutex<Vec<(String, Fields)>>>;

/// A broker on `jobs`/`g` whose handler rejects every entry that was not
/// redriven, with `timeout <n>` for even `n` (from the `n` field) and
/// `invalid <n>` for odd, and records every redriven one.
fn broker(redis: &RedisServer, s: &Stream, seen: &Redriven) -> Broker {
    let seen = seen.clone();
    let opts = ConsumerOptions::default()
        .with_consumer("c1")
        .with_block(Duration::from_millis(50))
        .with_max_retries(0)
        .with_claim_idle(Duration::from_millis(200));
    Broker::builder(redis.url())
        .subscribe_message(s, opts, move |m: Message| {
            let seen = seen.clone();
            async move {
                if let Some(from) = m.field("redriven_from") {
                    let from = String::from_utf8(from.to_vec()).unwrap();
                    seen.lock().unwrap().push((from, m.fields.to_vec()));
                    return Ok(());
                }
                let n: u64 = std::str::from_utf8(m.field("n").expect("n"))
                    .unwrap()
                    .parse()
                    .unwrap();
                let kind = if n % 2 == 0 { "timeout" } else { "invalid" };
                Err(HandlerError::reject(format!("{kind} {n}")))
            }
        })
        .build()
        .unwrap()
}

#[actix_rt::test]
async fn dead_letters_are_listed_apart_redriven_to_a_running_consumer_and_purged() {
    support::init_tracing();
    let redis = RedisServer::start();
    let s = Stream::new("jobs", "g");
    let seen = Redriven::default();
    let broker = broker(&redis, &s, &seen);
    broker.start().await.unwrap();
    let admin = Admin::connect(&redis.url()).await.unwrap();
    let dlq = admin.dlq_of("jobs");
    assert_eq!(dlq, "jobs-dlq");
    assert_eq!(dlq, s.dlq_name());

    // Four entries, each with an original field literally named `error`.
    let mut originals = Vec::new();
    let mut ids = Vec::new();
    for n in 1..=4 {
        let data = format!(r#"{{"id":{n}}}"#);
        let err = format!("original-{n}");
        let f = pairs(&[("data", &data), ("n", &n.to_string()), ("error", &err)]);
        ids.push(admin.add("jobs", &f).await.unwrap());
        originals.push(f);
    }
    eventually("four dead letters", WAIT, || {
        stream_len(&mut redis.conn(), "jobs-dlq") == 4
    })
    .await;

    // Listed apart: original fields exact, the appended ones parsed. (The
    // moves run side by side, so the dead letters' order is not the
    // entries'.)
    let all = admin
        .dead_letters(&dlq, &DeadLetterFilter::new())
        .await
        .unwrap();
    assert_eq!(all.len(), 4);
    let index_of = |d: &rillkit::admin::DeadLetter| {
        let o = d.origin.as_ref().expect("written by rillkit");
        ids.iter().position(|id| *id == o.id).expect("one of ours")
    };
    for dl in &all {
        let i = index_of(dl);
        assert_eq!(
            dl.fields, originals[i],
            "original fields verbatim, in order"
        );
        assert_eq!(
            dl.field("error"),
            Some(format!("original-{}", i + 1).as_bytes())
        );
        let o = dl.origin.as_ref().unwrap();
        assert_eq!(o.stream, "jobs");
        assert_eq!((o.group.as_str(), o.consumer.as_str()), ("g", "c1"));
        assert_eq!(o.delivery_count, 1);
        let kind = if (i + 1) % 2 == 0 {
            "timeout"
        } else {
            "invalid"
        };
        assert!(
            o.error.contains(&format!("{kind} {}", i + 1)),
            "{}",
            o.error
        );
        assert!(o.failed_at_ms > 1_600_000_000_000);
    }

    // Filters: error text, count, one id.
    let timeouts = DeadLetterFilter::new().with_error_contains("timeout");
    let picked = admin.dead_letters(&dlq, &timeouts).await.unwrap();
    let mut picked_entries: Vec<usize> = picked.iter().map(index_of).collect();
    picked_entries.sort();
    assert_eq!(picked_entries, [1, 3]);
    assert!(
        picked.windows(2).all(|w| w[0].id.parts() < w[1].id.parts()),
        "oldest first"
    );
    assert_eq!(
        admin
            .dead_letters(&dlq, &timeouts.clone().with_count(1))
            .await
            .unwrap(),
        picked[..1]
    );
    let invalid = all.iter().find(|d| index_of(d) == 2).unwrap();
    let one = DeadLetterFilter::new().with_id(invalid.id.as_str());
    assert_eq!(
        admin.dead_letters(&dlq, &one).await.unwrap(),
        std::slice::from_ref(invalid)
    );
    assert!(
        admin
            .dead_letters(
                &dlq,
                &DeadLetterFilter::new().with_error_contains("original")
            )
            .await
            .unwrap()
            .is_empty(),
        "an original field named error is never matched"
    );

    // An entry that is not a dead letter rillkit wrote: skipped, kept.
    let stranger = admin.add(&dlq, &[("foo", "bar")]).await.unwrap();

    // Redrive the timeouts: back on `jobs` as new entries, handled by the
    // running consumer with redriven_from.
    let report = admin.redrive(&dlq, &timeouts).await.unwrap();
    assert_eq!(report.count(), 2, "{report:?}");
    assert!(report.skipped.is_empty(), "{report:?}");
    for (r, d) in report.redriven.iter().zip(&picked) {
        assert_eq!(r.dead_letter, d.id);
        assert_eq!(r.stream, "jobs");
        assert!(
            r.id.parts() > ids[3].parts(),
            "a new entry: {} after {}",
            r.id,
            ids[3]
        );
    }
    eventually("the consumer handled both redriven entries", WAIT, || {
        seen.lock().unwrap().len() == 2
    })
    .await;
    let got: HashMap<String, Fields> = seen.lock().unwrap().iter().cloned().collect();
    for i in [1, 3] {
        let mut expected = originals[i].clone();
        expected.push((
            b"redriven_from".to_vec(),
            ids[i].as_str().as_bytes().to_vec(),
        ));
        assert_eq!(
            got[ids[i].as_str()],
            expected,
            "original fields + redriven_from"
        );
    }
    assert_eq!(stream_len(&mut redis.conn(), "jobs-dlq"), 3);

    // Redrive from the stranger on: skipped with a reason, and it stays.
    let rest = DeadLetterFilter::new().with_start(stranger.as_str());
    let report = admin.redrive(&dlq, &rest).await.unwrap();
    assert_eq!(report.count(), 0);
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(report.skipped[0].id, stranger);
    assert!(
        report.skipped[0].reason.contains("origin_stream"),
        "{}",
        report.skipped[0].reason
    );
    let kept = admin.dead_letters(&dlq, &one).await.unwrap();
    assert_eq!(kept.len(), 1, "the unselected invalid ones stay");

    // Purge: a count first, then the rest.
    assert_eq!(
        admin
            .purge(&dlq, &DeadLetterFilter::new().with_count(1))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        admin.purge(&dlq, &DeadLetterFilter::new()).await.unwrap(),
        2
    );
    assert_eq!(stream_len(&mut redis.conn(), "jobs-dlq"), 0);
    assert_eq!(
        admin.purge(&dlq, &DeadLetterFilter::new()).await.unwrap(),
        0
    );
    assert!(broker.stop().await.unwrap().is_clean());
    assert_eq!(seen.lock().unwrap().len(), 2, "nothing else was redriven");
}

#[actix_rt::test]
async fn a_dead_letter_redriven_twice_carries_only_its_latest_redriven_from() {
    let redis = RedisServer::start();
    let s = Stream::new("again", "g");
    // Rejects everything, redriven or not.
    let opts = ConsumerOptions::default()
        .with_consumer("c1")
        .with_block(Duration::from_millis(50))
        .with_max_retries(0);
    let broker = Broker::builder(redis.url())
        .subscribe_message(&s, opts, |_m: Message| async {
            Err(HandlerError::reject("no"))
        })
        .build()
        .unwrap();
    broker.start().await.unwrap();
    let admin = Admin::connect(&redis.url()).await.unwrap();
    let first = admin.add("again", &[("data", "{}")]).await.unwrap();
    let dlq = admin.dlq_of("again");
    eventually("a dead letter", WAIT, || {
        stream_len(&mut redis.conn(), &dlq) == 1
    })
    .await;
    let report = admin.redrive(&dlq, &DeadLetterFilter::new()).await.unwrap();
    assert_eq!(report.count(), 1);
    eventually("dead again", WAIT, || {
        stream_len(&mut redis.conn(), &dlq) == 1
    })
    .await;
    let dl = admin
        .dead_letters(&dlq, &DeadLetterFilter::new())
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(
        dl.fields,
        pairs(&[("data", "{}"), ("redriven_from", first.as_str())])
    );
    let second = dl.origin.unwrap().id;
    // A second redrive replaces redriven_from instead of adding another.
    assert_eq!(
        admin
            .redrive(&dlq, &DeadLetterFilter::new())
            .await
            .unwrap()
            .count(),
        1
    );
    eventually("dead a third time", WAIT, || {
        stream_len(&mut redis.conn(), &dlq) == 1
    })
    .await;
    let dl = admin
        .dead_letters(&dlq, &DeadLetterFilter::new())
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(
        dl.fields,
        pairs(&[("data", "{}"), ("redriven_from", second.as_str())])
    );
    assert!(broker.stop().await.unwrap().is_clean());
}

#[actix_rt::test]
async fn discovery_groups_consumers_pending_and_newest_have_the_right_shapes() {
    let redis = RedisServer::start();
    let admin = Admin::connect(&redis.url()).await.unwrap();
    assert!(!admin.is_cluster());
    let mut ids = Vec::new();
    for n in 1..=3 {
        let v = n.to_string();
        ids.push(admin.add("a:1", &[("n", v.as_str())]).await.unwrap());
    }
    admin.add("a:2", &[("n", "1")]).await.unwrap();
    admin.add("b", &[("n", "1")]).await.unwrap();
    let mut c = redis.conn();
    let _: () = redis::cmd("SET")
        .arg("a:str")
        .arg("x")
        .query(&mut c)
        .unwrap();
    for (group, id) in [("g1", "0"), ("late", "$")] {
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg("a:1")
            .arg(group)
            .arg(id)
            .query(&mut c)
            .unwrap();
    }
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("g1")
        .arg("c1")
        .arg("COUNT")
        .arg(2)
        .arg("STREAMS")
        .arg("a:1")
        .arg(">")
        .query(&mut c)
        .unwrap();

    assert_eq!(admin.streams("a:*").await.unwrap(), ["a:1", "a:2"]);
    assert_eq!(admin.streams("*").await.unwrap(), ["a:1", "a:2", "b"]);
    assert!(admin.streams("nothing*").await.unwrap().is_empty());
    assert_eq!(admin.stream_len("a:1").await.unwrap(), 3);
    assert_eq!(admin.stream_len("missing").await.unwrap(), 0);

    let groups = admin.groups("a:1").await.unwrap();
    assert_eq!(groups.len(), 2);
    let g1 = &groups[0];
    assert_eq!((g1.name.as_str(), g1.consumers, g1.pending), ("g1", 1, 2));
    assert_eq!(g1.last_delivered_id, ids[1]);
    assert_eq!((g1.entries_read, g1.lag), (Some(2), Some(1)));
    let late = &groups[1];
    assert_eq!(
        (late.name.as_str(), late.pending, late.lag),
        ("late", 0, Some(0))
    );

    let consumers = admin.consumers("a:1", "g1").await.unwrap();
    assert_eq!(consumers.len(), 1);
    assert_eq!(
        (consumers[0].name.as_str(), consumers[0].pending),
        ("c1", 2)
    );
    assert!(consumers[0].idle_ms < 60_000);

    let pending = admin.pending("a:1", "g1", 10).await.unwrap();
    let got: Vec<_> = pending
        .iter()
        .map(|p| (p.id.clone(), p.consumer.as_str(), p.delivery_count))
        .collect();
    assert_eq!(got, [(ids[0].clone(), "c1", 1), (ids[1].clone(), "c1", 1)]);
    assert!(
        pending
            .iter()
            .all(|p| p.idle_ms.is_some_and(|i| i < 60_000))
    );
    assert_eq!(admin.pending("a:1", "g1", 1).await.unwrap().len(), 1);

    let newest = admin.newest("a:1", 2).await.unwrap();
    assert_eq!(newest.len(), 2);
    assert_eq!(
        (&newest[0].id, &newest[1].id),
        (&ids[2], &ids[1]),
        "newest first"
    );
    assert_eq!(newest[0].fields, pairs(&[("n", "3")]));
    assert_eq!(newest[0].field("n"), Some(&b"3"[..]));
    assert!(admin.newest("missing", 5).await.unwrap().is_empty());

    // Lag is unknown once an entry past the group's position is deleted.
    let _: u64 = redis::cmd("XDEL")
        .arg("a:1")
        .arg(ids[2].as_str())
        .query(&mut c)
        .unwrap();
    assert_eq!(admin.groups("a:1").await.unwrap()[0].lag, None);

    // Errors: no such key, no such group, not a stream.
    assert!(matches!(
        admin.groups("missing").await,
        Err(Error::Redis(_))
    ));
    assert!(matches!(
        admin.pending("a:1", "nogroup", 1).await,
        Err(Error::Redis(_))
    ));
    assert!(matches!(
        admin.stream_len("a:str").await,
        Err(Error::Redis(_))
    ));
    assert!(matches!(
        admin.dead_letters("a:str", &DeadLetterFilter::new()).await,
        Err(Error::Redis(_))
    ));
}

#[actix_rt::test]
async fn a_malformed_url_is_a_configuration_error_and_a_dead_server_a_connection_error() {
    let e = Admin::connect("localhost:6379").await.unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
    assert_eq!(e.exit_code(), 78);
    let mut redis = RedisServer::start();
    let url = redis.url();
    redis.stop();
    let e = Admin::connect(&url).await.unwrap_err();
    assert!(e.is_connection(), "{e}");
    assert_eq!(e.exit_code(), 1);
}

/// Names owned by `n` different masters.
fn on_distinct_masters(cluster: &RedisCluster, n: usize) -> Vec<String> {
    let mut by_owner: HashMap<usize, String> = HashMap::new();
    for i in 0.. {
        let name = format!("orders-{i}");
        let owner = cluster.owner_of_slot(cluster.slot_of(&name));
        by_owner.entry(owner).or_insert(name);
        if by_owner.len() == n {
            break;
        }
    }
    let mut names: Vec<String> = by_owner.into_values().collect();
    names.sort();
    names
}

#[actix_rt::test]
async fn under_a_cluster_discovery_scans_every_master_and_redrive_keeps_to_the_slot_rule() {
    let cluster = RedisCluster::start();
    let admin = Admin::connect_topology(&Topology::cluster(cluster.seeds()), None)
        .await
        .unwrap();
    assert!(admin.is_cluster());
    let names = on_distinct_masters(&cluster, 3);
    for name in &names {
        admin.add(name, &[("data", "{}")]).await.unwrap();
    }
    assert_eq!(admin.streams("orders-*").await.unwrap(), names);

    let name = &names[0];
    let dlq = admin.dlq_of(name);
    assert_eq!(dlq, format!("{{{name}}}-dlq"));
    assert_eq!(
        dlq,
        Stream::new(name.as_str(), "g").dlq_for(&Topology::cluster(cluster.seeds()))
    );
    // Dead letters laid out as the move writes them: one from this stream,
    // one claiming a stream in another slot.
    let dead = |origin: &str| {
        pairs(&[
            ("data", "{}"),
            ("origin_stream", origin),
            ("origin_id", "1-0"),
            ("origin_group", "g"),
            ("origin_consumer", "c1"),
            ("delivery_count", "1"),
            ("error", "boom"),
            ("failed_at_ms", "1700000000000"),
        ])
    };
    let home = admin.add(&dlq, &dead(name)).await.unwrap();
    let away = admin.add(&dlq, &dead(&names[1])).await.unwrap();
    let report = admin.redrive(&dlq, &DeadLetterFilter::new()).await.unwrap();
    assert_eq!(report.count(), 1, "{report:?}");
    assert_eq!(report.redriven[0].dead_letter, home);
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(report.skipped[0].id, away);
    assert!(
        report.skipped[0].reason.contains("hash slot"),
        "{}",
        report.skipped[0].reason
    );
    let newest = admin.newest(name, 1).await.unwrap();
    assert_eq!(
        newest[0].fields,
        pairs(&[("data", "{}"), ("redriven_from", "1-0")])
    );
    assert_eq!(
        admin.stream_len(&dlq).await.unwrap(),
        1,
        "the skipped one stays"
    );
    assert_eq!(
        admin.purge(&dlq, &DeadLetterFilter::new()).await.unwrap(),
        1
    );

    // A partition of an ordered stream: its fail_rest dead letter goes back
    // with the key's mark deleted, in one script over three keys of one slot.
    let partition = "events:p0";
    let pdlq = admin.dlq_of(partition);
    let mark = format!("{{{partition}}}:rillkit:failed-keys:g");
    let _: () = redis::cmd("HSET")
        .arg(&mark)
        .arg("k1")
        .arg("5-0")
        .query(&mut cluster.conn_for_key(&mark))
        .unwrap();
    let dl = admin
        .add(
            &pdlq,
            &ordered_dead_letter(partition, "5-0", "k1", "fail_rest"),
        )
        .await
        .unwrap();
    let report = admin
        .redrive(&pdlq, &DeadLetterFilter::new())
        .await
        .unwrap();
    assert_eq!(report.count(), 1, "{report:?}");
    assert_eq!(report.redriven[0].dead_letter, dl);
    assert_eq!(report.redriven[0].lifted_mark.as_deref(), Some(&b"k1"[..]));
    let left: Option<String> = redis::cmd("HGET")
        .arg(&mark)
        .arg("k1")
        .query(&mut cluster.conn_for_key(&mark))
        .unwrap();
    assert_eq!(left, None);
}

/// A dead letter of the partition `origin` laid out as the move writes it
/// for a stream ordered by key.
fn ordered_dead_letter(origin: &str, origin_id: &str, key: &str, rule: &str) -> Fields {
    let data = format!(r#"{{"key":"{key}","at":"{origin_id}"}}"#);
    pairs(&[
        ("data", data.as_str()),
        ("origin_stream", origin),
        ("origin_id", origin_id),
        ("origin_group", "g"),
        ("origin_consumer", "c1"),
        ("delivery_count", "1"),
        ("error", "boom"),
        ("failed_at_ms", "1700000000000"),
        ("order_key", key),
        ("on_key_failure", rule),
    ])
}

#[actix_rt::test]
async fn an_ordered_dead_letter_is_redriven_and_lifts_its_keys_mark_unless_a_later_failure_set_it()
{
    let redis = RedisServer::start();
    let admin = Admin::connect(&redis.url()).await.unwrap();
    let (p, dlq) = ("orders:p0", "orders:p0-dlq");
    let marks = "{orders:p0}:rillkit:failed-keys:g";
    let mut c = redis.conn();
    // k1 failed at 5-0 and 6-0 was dead-lettered behind it; k2's entry 7-0
    // failed, and its mark, 9-0, is newer: a later failure of k2 set it.
    let _: () = redis::cmd("HSET")
        .arg(marks)
        .arg(&["k1", "5-0", "k2", "9-0"])
        .query(&mut c)
        .unwrap();
    let mut ids = Vec::new();
    for (id, key, rule) in [
        ("5-0", "k1", "fail_rest"),
        ("6-0", "k1", "fail_rest"),
        ("7-0", "k2", "fail_rest"),
        ("8-0", "k3", "skip"),
    ] {
        ids.push(
            admin
                .add(dlq, &ordered_dead_letter(p, id, key, rule))
                .await
                .unwrap(),
        );
    }
    let listed = admin
        .dead_letters(dlq, &DeadLetterFilter::new())
        .await
        .unwrap();
    assert_eq!(
        listed[0].origin.as_ref().and_then(|o| o.order_key.clone()),
        Some(b"k1".to_vec())
    );
    let report = admin.redrive(dlq, &DeadLetterFilter::new()).await.unwrap();
    assert!(report.skipped.is_empty(), "{report:?}");
    assert!(!report.all_skipped());
    let got: Vec<(&str, Option<&[u8]>)> = report
        .redriven
        .iter()
        .map(|r| (r.dead_letter.as_str(), r.lifted_mark.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            (ids[0].as_str(), Some(&b"k1"[..])),
            (ids[1].as_str(), None),
            (ids[2].as_str(), None),
            (ids[3].as_str(), None),
        ],
        "back in the order they failed; only k1's mark deleted"
    );
    let left: HashMap<String, String> = redis::cmd("HGETALL").arg(marks).query(&mut c).unwrap();
    assert_eq!(
        left,
        HashMap::from([("k2".to_owned(), "9-0".to_owned())]),
        "a mark newer than the dead letter stays"
    );
    assert_eq!(stream_len(&mut c, dlq), 0);
    let back = admin.newest(p, 4).await.unwrap();
    let fields: Vec<Fields> = back.into_iter().rev().map(|e| e.fields).collect();
    assert_eq!(
        fields,
        [
            pairs(&[
                ("data", r#"{"key":"k1","at":"5-0"}"#),
                ("redriven_from", "5-0")
            ]),
            pairs(&[
                ("data", r#"{"key":"k1","at":"6-0"}"#),
                ("redriven_from", "6-0")
            ]),
            pairs(&[
                ("data", r#"{"key":"k2","at":"7-0"}"#),
                ("redriven_from", "7-0")
            ]),
            pairs(&[
                ("data", r#"{"key":"k3","at":"8-0"}"#),
                ("redriven_from", "8-0")
            ]),
        ],
        "the original fields only, order_key and on_key_failure left out"
    );
    // Nothing selected is not "all skipped"; a stranger alone is.
    assert!(
        !admin
            .redrive(dlq, &DeadLetterFilter::new())
            .await
            .unwrap()
            .all_skipped()
    );
    admin.add(dlq, &pairs(&[("data", "{}")])).await.unwrap();
    let report = admin.redrive(dlq, &DeadLetterFilter::new()).await.unwrap();
    assert!(report.all_skipped(), "{report:?}");
}

#[actix_rt::test]
async fn stuck_entries_are_claimed_and_acked_and_writes_keep_to_existing_streams() {
    use rillkit::admin::PendingFilter;
    let redis = RedisServer::start();
    let admin = Admin::connect(&redis.url()).await.unwrap();
    let mut c = redis.conn();

    // add_to_existing never creates a stream; create_group does (MKSTREAM),
    // once.
    let none = admin
        .add_to_existing("jobs", &[("data", "{}")])
        .await
        .unwrap();
    assert_eq!(none, None);
    assert_eq!(stream_len(&mut c, "jobs"), 0);
    assert!(admin.create_group("jobs", "g", "$").await.unwrap());
    assert!(
        !admin.create_group("jobs", "g", "$").await.unwrap(),
        "BUSYGROUP"
    );
    let id = admin
        .add_to_existing("jobs", &[("data", "{}")])
        .await
        .unwrap()
        .expect("the stream exists now");
    let err = admin
        .create_group("jobs", "bad", "not-an-id")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::GroupCreate { .. }), "{err:?}");

    // read_after: what follows an id, or nothing when the wait ends.
    let after = admin
        .read_after("jobs", "0-0", 10, Duration::from_millis(10))
        .await
        .unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].id, id);
    let nothing = admin
        .read_after("jobs", id.as_str(), 10, Duration::from_millis(10))
        .await
        .unwrap();
    assert!(nothing.is_empty());

    // Pending, selected by consumer and idle time; claimed; acked.
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg(&["GROUP", "g", "c1", "STREAMS", "jobs", ">"])
        .query(&mut c)
        .unwrap();
    let by_c2 = PendingFilter::new(10).with_consumer("c2");
    assert!(
        admin
            .pending_matching("jobs", "g", &by_c2)
            .await
            .unwrap()
            .is_empty()
    );
    let idle_hour = PendingFilter::new(10).with_min_idle(Duration::from_secs(3600));
    assert!(
        admin
            .pending_matching("jobs", "g", &idle_hour)
            .await
            .unwrap()
            .is_empty()
    );
    let held = admin
        .pending_matching("jobs", "g", &PendingFilter::new(10).with_consumer("c1"))
        .await
        .unwrap();
    assert_eq!(held.len(), 1);
    // Not idle for an hour: XCLAIM leaves it.
    let ids = [id.clone()];
    let claimed = admin
        .claim("jobs", "g", "c2", Duration::from_secs(3600), &ids)
        .await
        .unwrap();
    assert!(claimed.is_empty());
    let claimed = admin
        .claim("jobs", "g", "c2", Duration::ZERO, &ids)
        .await
        .unwrap();
    assert_eq!(claimed, ids);
    let now = admin.pending_matching("jobs", "g", &by_c2).await.unwrap();
    assert_eq!((now.len(), now[0].delivery_count), (1, 1), "JUSTID");
    assert_eq!(admin.ack("jobs", "g", &ids).await.unwrap(), 1);
    assert_eq!(
        admin.ack("jobs", "g", &ids).await.unwrap(),
        0,
        "no longer pending"
    );
    assert!(admin.pending("jobs", "g", 10).await.unwrap().is_empty());
}

/// Since Redis 8.8 `XNACK` hands an entry back to its group with no
/// holder: `pending` lists it with no consumer and no idle time (the server
/// answers `-1`), beside the entries a consumer holds.
#[actix_rt::test]
async fn pending_lists_an_entry_handed_back_with_xnack_without_holder_or_idle_time() {
    let redis = RedisServer::start();
    let mut c = redis.conn();
    if !support::server::command_or_skip(
        &mut c,
        "XNACK",
        "Redis 8.8+",
        "pending_lists_an_entry_handed_back_with_xnack_without_holder_or_idle_time",
    ) {
        return;
    }
    let admin = Admin::connect(&redis.url()).await.unwrap();
    let first = admin.add("jobs", &[("n", "1")]).await.unwrap();
    let second = admin.add("jobs", &[("n", "2")]).await.unwrap();
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("jobs")
        .arg("g")
        .arg("0")
        .query(&mut c)
        .unwrap();
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("g")
        .arg("c1")
        .arg("COUNT")
        .arg(2)
        .arg("STREAMS")
        .arg("jobs")
        .arg(">")
        .query(&mut c)
        .unwrap();
    let nacked: i64 = redis::cmd("XNACK")
        .arg("jobs")
        .arg("g")
        .arg("SILENT")
        .arg("IDS")
        .arg(1)
        .arg(first.as_str())
        .query(&mut c)
        .unwrap();
    assert_eq!(nacked, 1);
    let pending = admin.pending("jobs", "g", 10).await.unwrap();
    let got: Vec<_> = pending
        .iter()
        .map(|p| (p.id.clone(), p.consumer.as_str(), p.idle_ms.is_some()))
        .collect();
    assert_eq!(got, [(first, "", false), (second, "c1", true)]);
}
