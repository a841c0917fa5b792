//! Entries of a stream: `publish` adds one, `tail` prints the newest and,
//! with `--follow`, every new one as it arrives.

use std::time::Duration;

use rillkit::admin::StreamEntry;
use serde_json::json;

use crate::operator::Interrupt;
use crate::output::{entry_json, fields_line, json_text, print_json, text};
use crate::{Ctx, Failure, existing};

/// How long one `XREAD` of `tail --follow` waits for an entry.
const FOLLOW_BLOCK: Duration = Duration::from_secs(2);
/// Entries one `XREAD` of `tail --follow` reads at most.
const FOLLOW_COUNT: usize = 100;

/// `publish`: `XADD <stream> * data <document>`. Without `create`, only to
/// a stream that exists (`NOMKSTREAM`): a misspelt name fails (exit 1)
/// rather than create a stream nothing reads.
pub async fn publish(ctx: &Ctx, stream: &str, document: &str, create: bool) -> Result<(), Failure> {
    let fields = [("data", document)];
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
    if ctx.json {
        print_json(&json!({ "stream": stream, "id": id.as_str() }));
    } else {
        say!("{id}");
    }
    Ok(())
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

/// `<id>  name=value  …`.
fn line(e: &StreamEntry) -> String {
    format!(
        "{}  {}",
        text(e.id.as_str().as_bytes()),
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
