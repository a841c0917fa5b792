//! Entries of a stream: `publish` adds one, `tail` prints the newest and,
//! with `--follow`, every new one as it arrives.

use std::time::Duration;

use rillkit::admin::StreamEntry;
use serde_json::json;

use crate::operator::Interrupt;
use crate::output::{entry_json, fields_line, id_time, json_text, print_json, text};
use crate::{Ctx, Failure, existing};

/// How long one `XREAD` of `tail --follow` waits for an entry.
const FOLLOW_BLOCK: Duration = Duration::from_secs(2);
/// Entries one `XREAD` of `tail --follow` reads at most.
const FOLLOW_COUNT: usize = 100;

/// The documents to publish: `document`, or with `-` one a line from
/// stdin (empty lines skipped), each checked to parse as JSON.
pub fn documents(document: &str) -> Result<Vec<String>, Failure> {
    if document != "-" {
        return Ok(vec![document.to_owned()]);
    }
    let mut docs = Vec::new();
    for (n, line) in std::io::stdin().lines().enumerate() {
        let line = line.map_err(|e| Failure::Usage(format!("publish: reading stdin: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        serde_json::from_str::<serde_json::Value>(&line).map_err(|e| {
            Failure::Usage(format!(
                "publish: line {} does not parse as JSON: {e}; nothing published",
                n + 1
            ))
        })?;
        docs.push(line);
    }
    Ok(docs)
}

/// `publish`: `XADD <stream> * data <document>` per document. Without
/// `create`, only to a stream that exists (`NOMKSTREAM`): a misspelt name
/// fails (exit 1) rather than create a stream nothing reads.
pub async fn publish(
    ctx: &Ctx,
    stream: &str,
    documents: &[String],
    create: bool,
) -> Result<(), Failure> {
    let mut ids = Vec::new();
    for document in documents {
        let fields = [("data", document.as_str())];
        let id = if create {
            ctx.admin.add(stream, &fields).await?
        } else {
            ctx.admin
                .add_to_existing(stream, &fields)
                .await?
                .ok_or_else(|| {
                    Failure::NotFound(format!(
                        "no stream {stream:?}: nothing published; to create it, add --create"
                    ))
                })?
        };
        ids.push(id);
    }
    print_ids(ctx, stream, &ids);
    Ok(())
}

/// `publish --delay` or `--at`: when the documents are due.
#[derive(Clone, Copy)]
pub enum When {
    After(Duration),
    At(std::time::SystemTime),
}

/// `publish --delay` / `--at`: each document scheduled (one script each),
/// its schedule id printed. Without `create`, only for a stream that
/// exists, as `publish`.
pub async fn publish_later(
    ctx: &Ctx,
    stream: &str,
    documents: &[String],
    when: When,
    create: bool,
) -> Result<(), Failure> {
    if !create && !crate::stream_exists(&ctx.admin, stream).await? {
        return Err(Failure::NotFound(format!(
            "no stream {stream:?}: nothing scheduled; to schedule for a stream not made yet, add --create"
        )));
    }
    let mut ids = Vec::with_capacity(documents.len());
    for document in documents {
        let fields = [("data", document.as_str())];
        let id = match when {
            When::After(d) => ctx.admin.schedule_after(stream, &fields, d).await?,
            When::At(t) => ctx.admin.schedule_at(stream, &fields, t).await?,
        };
        if !ctx.json {
            // Each id as soon as it is scheduled: after a failure, those
            // printed can still be cancelled.
            say!("{id}");
        }
        ids.push(id.to_string());
    }
    if ctx.json {
        print_json(&json!({ "stream": stream, "scheduled": ids }));
    }
    Ok(())
}

/// `cancel-scheduled`: each id cancelled if still scheduled.
pub async fn cancel_scheduled(ctx: &Ctx, stream: &str, ids: &[String]) -> Result<(), Failure> {
    let mut parsed = Vec::with_capacity(ids.len());
    for id in ids {
        let id: rillkit::ScheduleId = id
            .parse()
            .map_err(|e| Failure::Usage(format!("cancel-scheduled: {e}")))?;
        parsed.push(id);
    }
    let mut cancelled = Vec::new();
    let mut not = Vec::new();
    for id in parsed {
        if ctx.admin.cancel_scheduled(stream, &id).await? {
            cancelled.push(id.to_string());
        } else {
            not.push(id.to_string());
        }
    }
    if ctx.json {
        print_json(&json!({ "stream": stream, "cancelled": cancelled, "not_scheduled": not }));
    } else {
        for id in &cancelled {
            say!("{id} cancelled");
        }
        for id in &not {
            say!("{id} not scheduled (already added, cancelled, or unknown)");
        }
    }
    if cancelled.is_empty() {
        return Err(Failure::NothingDone(format!(
            "cancel-scheduled: none of the {} ids was scheduled on {stream:?}",
            ids.len()
        )));
    }
    Ok(())
}

/// `publish --idempotency-key-field`: what makes each document's message
/// key.
pub struct Once<'a> {
    pub field: &'a str,
    pub producer: &'a str,
    pub window: Duration,
}

/// `publish --idempotency-key-field`: each document added unless its
/// message id was added by the producer within the window (the first
/// entry's id is printed then). Every document must hold its id; one that
/// does not stops the publish before anything is added.
pub async fn publish_once(
    ctx: &Ctx,
    stream: &str,
    documents: &[String],
    once: &Once<'_>,
    create: bool,
) -> Result<(), Failure> {
    let mut keys = Vec::with_capacity(documents.len());
    for (n, doc) in documents.iter().enumerate() {
        let Some(id) = rillkit::json_key(doc.as_bytes(), once.field) else {
            return Err(Failure::Usage(format!(
                "publish: document {} has no message id member {:?} (a string, number or boolean); nothing published",
                n + 1,
                text(once.field.as_bytes())
            )));
        };
        keys.push(rillkit::MessageKey::new(once.producer, id));
    }
    let mut ids = Vec::new();
    for (document, key) in documents.iter().zip(&keys) {
        let fields = [("data", document.as_str())];
        let id = ctx
            .admin
            .add_idempotent(stream, key, &fields, once.window, create)
            .await?
            .ok_or_else(|| {
                Failure::NotFound(format!(
                    "no stream {stream:?}: nothing published; to create it, add --create"
                ))
            })?;
        ids.push(id);
    }
    print_ids(ctx, stream, &ids);
    Ok(())
}

/// `publish --key-field`: each document into its key's partition of the
/// ordered stream `stream`, pipelined. The partition count comes from
/// `partitions` (recorded if none is, else checked) or from the record; a
/// stream with neither is not found (exit 1). Every document must hold
/// its key; one that does not stops the publish before anything is added.
pub async fn publish_keyed(
    ctx: &Ctx,
    stream: &str,
    documents: &[String],
    key_field: &str,
    partitions: Option<u16>,
) -> Result<(), Failure> {
    let mut entries = Vec::with_capacity(documents.len());
    for (n, doc) in documents.iter().enumerate() {
        let key = rillkit::json_key(doc.as_bytes(), key_field);
        let Some(key) = key else {
            return Err(Failure::Usage(format!(
                "publish: document {} has no key member {:?} (a string, number or boolean); nothing published",
                n + 1,
                text(key_field.as_bytes())
            )));
        };
        entries.push((key, doc.as_bytes().to_vec()));
    }
    let partitions = match partitions {
        Some(p) => {
            ctx.admin.record_partitions(stream, p).await?;
            p
        }
        None => ctx.admin.partitions(stream).await?.ok_or_else(|| {
            Failure::NotFound(format!(
                "no ordered stream {stream:?} (no partition count recorded): nothing published; give --partitions N to create it"
            ))
        })?,
    };
    let ids = ctx
        .admin
        .add_keyed(stream, partitions, key_field, "data", &entries)
        .await?;
    let placed: Vec<(String, &str)> = entries
        .iter()
        .zip(&ids)
        .map(|((key, _), id)| {
            let p = rillkit::partition_of(key, partitions);
            (format!("{stream}:p{p}"), id.as_str())
        })
        .collect();
    if ctx.json {
        let list: Vec<_> = placed
            .iter()
            .map(|(p, id)| json!({ "partition": p, "id": id }))
            .collect();
        print_json(&json!({ "stream": stream, "partitions": partitions, "entries": list }));
    } else {
        for (p, id) in &placed {
            say!("{} {id}", text(p.as_bytes()));
        }
    }
    Ok(())
}

/// The ids of what was published, one a line (or as JSON).
fn print_ids(ctx: &Ctx, stream: &str, ids: &[rillkit::EntryId]) {
    if ctx.json {
        let list: Vec<&str> = ids.iter().map(rillkit::EntryId::as_str).collect();
        match list.as_slice() {
            [one] => print_json(&json!({ "stream": stream, "id": one })),
            _ => print_json(&json!({ "stream": stream, "ids": list })),
        }
    } else {
        for id in ids {
            say!("{id}");
        }
    }
}

/// `tail`: the newest `count` entries, oldest of them first; with `follow`,
/// then each entry added after them, until Ctrl-C (exit 0).
pub async fn tail(ctx: &Ctx, stream: &str, count: usize, follow: bool) -> Result<(), Failure> {
    existing(&ctx.admin, stream).await?;
    // Watched before the first read: a Ctrl-C from now on ends the follow.
    let interrupt = if follow {
        Some(Interrupt::watch()?)
    } else {
        None
    };
    let mut entries = ctx.admin.newest(stream, count).await?;
    entries.reverse();
    let Some(interrupt) = interrupt else {
        if ctx.json {
            let list: Vec<_> = entries.iter().map(entry_json).collect();
            print_json(&json!({ "stream": stream, "entries": list }));
        } else {
            for e in &entries {
                say!("{}", line(e));
            }
        }
        return Ok(());
    };
    // Following: one line per entry (with --json, one JSON document per
    // line), read after the last one printed. An empty stream: any entry
    // added is after 0-0.
    let mut last = entries
        .last()
        .map_or_else(|| "0-0".to_owned(), |e| e.id.as_str().to_owned());
    if !print_lines(ctx, stream, &entries) {
        return Ok(());
    }
    loop {
        let read = tokio::select! {
            () = interrupt.wait() => return Ok(()),
            read = ctx.admin.read_after(stream, &last, FOLLOW_COUNT, FOLLOW_BLOCK) => read?,
        };
        if let Some(e) = read.last() {
            last = e.id.as_str().to_owned();
        }
        if !print_lines(ctx, stream, &read) {
            // Nobody reads stdout any more (a closed pipe): done.
            return Ok(());
        }
    }
}

/// `<id>  <time>  name=value  …`: the time the entry was added, from its
/// id, in UTC (`-` when the id names none).
fn line(e: &StreamEntry) -> String {
    format!(
        "{}  {}  {}",
        text(e.id.as_str().as_bytes()),
        id_time(e.id.as_str()).as_deref().unwrap_or("-"),
        fields_line(&e.fields)
    )
}

/// Entries as `tail --follow` prints them, flushed at once (stdout may be a
/// pipe); `false` when stdout is closed.
fn print_lines(ctx: &Ctx, stream: &str, entries: &[StreamEntry]) -> bool {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for e in entries {
        let printed = if ctx.json {
            let mut doc = entry_json(e);
            doc["stream"] = json!(stream);
            writeln!(out, "{}", json_text(&doc, false))
        } else {
            writeln!(out, "{}", line(e))
        };
        if printed.is_err() {
            return false;
        }
    }
    out.flush().is_ok()
}
