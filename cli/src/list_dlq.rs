//! The dead letters of a reliable list: `dlq list|show|redrive|purge` when
//! the key named is a list (or its dead-letter list is). A list's dead
//! letters have no ids: `show` takes its place counted from the oldest (0).

use rillkit::admin::{Admin, ListDeadLetter};
use serde_json::json;

use crate::cli::{Dlq, Select};
use crate::operator::confirm;
use crate::output::{duration, now_ms, print_json, table, text};
use crate::{Ctx, Failure};

/// Dead letters listed when `dlq list` is not given `--count`.
const LIST_COUNT: usize = 100;

/// The dead-letter list of `key` when `key` (or its dead-letter key, or
/// `explicit`) is a list; `None` for a stream.
pub async fn dead_letter_list(
    admin: &Admin,
    key: &str,
    explicit: Option<&str>,
) -> Result<Option<String>, Failure> {
    let dlq = explicit.map_or_else(|| admin.dlq_of(key), str::to_owned);
    let list = |t: Option<String>| t.as_deref() == Some("list");
    if list(admin.key_type(&dlq).await?) || list(admin.key_type(key).await?) {
        return Ok(Some(dlq));
    }
    Ok(None)
}

fn letter_json(d: &ListDeadLetter) -> serde_json::Value {
    json!({
        "index": d.index,
        "list": d.list,
        "item": d.item.as_ref().map(|i| String::from_utf8_lossy(i)),
        "error": d.error,
        "consumer": d.consumer,
        "attempts": d.attempts,
        "dead_lettered_at_ms": d.dead_lettered_at_ms,
    })
}

/// A list's dead letters have no ids: `--start` and `--end` select nothing.
fn selection(select: &Select) -> Result<(Option<&str>, Option<usize>), Failure> {
    if select.start.is_some() || select.end.is_some() || select.group.is_some() {
        return Err(Failure::Usage(
            "a list's dead letters have no ids nor groups: select them with --error and --count"
                .into(),
        ));
    }
    Ok((select.error.as_deref(), select.count))
}

pub async fn dlq(ctx: &Ctx, cmd: &Dlq, dlq: &str) -> Result<(), Failure> {
    let admin = &ctx.admin;
    match cmd {
        Dlq::List { select } => {
            let (error, count) = selection(select)?;
            let letters = admin
                .list_dead_letters(dlq, error, Some(count.unwrap_or(LIST_COUNT)))
                .await?;
            if ctx.json {
                let docs: Vec<_> = letters.iter().map(letter_json).collect();
                print_json(&json!({ "dlq": dlq, "dead_letters": docs }));
                return Ok(());
            }
            if letters.is_empty() {
                say!("no dead letters in {}", text(dlq.as_bytes()));
                return Ok(());
            }
            let now = now_ms();
            let rows: Vec<Vec<String>> = letters
                .iter()
                .map(|d| {
                    vec![
                        d.index.to_string(),
                        d.list.clone().unwrap_or_else(|| "-".into()),
                        d.attempts.map_or("-".into(), |n| n.to_string()),
                        d.dead_lettered_at_ms.map_or("-".into(), |at| {
                            format!("{} ago", duration(now.saturating_sub(at)))
                        }),
                        d.error
                            .clone()
                            .unwrap_or_else(|| "(not a rillkit dead letter)".into()),
                    ]
                })
                .collect();
            say_inline!(
                "{}",
                table(
                    &["INDEX", "LIST", "ATTEMPTS", "FAILED", "ERROR"],
                    &rows,
                    ctx.cap
                )
            );
            Ok(())
        }
        Dlq::Show { id, .. } => {
            let index: u64 = id.parse().map_err(|_| {
                Failure::Usage(format!(
                    "a list's dead letter is named by its place from the oldest (0, 1, …), not {id:?}"
                ))
            })?;
            let letters = admin.list_dead_letters(dlq, None, None).await?;
            let Some(d) = letters.iter().find(|d| d.index == index) else {
                return Err(Failure::NotFound(format!(
                    "no dead letter {index} in {dlq}"
                )));
            };
            if ctx.json {
                print_json(&json!({ "dlq": dlq, "dead_letter": letter_json(d) }));
                return Ok(());
            }
            say!("index:            {}", d.index);
            match &d.list {
                Some(list) => {
                    say!("list:             {}", text(list.as_bytes()));
                    say!(
                        "consumer:         {}",
                        text(d.consumer.clone().unwrap_or_default().as_bytes())
                    );
                    say!("attempts:         {}", d.attempts.unwrap_or_default());
                    say!(
                        "error:            {}",
                        text(d.error.clone().unwrap_or_default().as_bytes())
                    );
                    say!(
                        "item:             {}",
                        text(d.item.as_deref().unwrap_or_default())
                    );
                }
                None => say!("(not a rillkit dead letter): {}", text(&d.raw)),
            }
            Ok(())
        }
        Dlq::Redrive {
            select,
            dry_run,
            yes,
            ..
        } => {
            let (error, count) = selection(select)?;
            let letters = admin.list_dead_letters(dlq, error, count).await?;
            if *dry_run {
                if ctx.json {
                    let docs: Vec<_> = letters.iter().map(letter_json).collect();
                    print_json(&json!({
                        "dlq": dlq, "dry_run": true, "would_redrive": letters.len(), "dead_letters": docs,
                    }));
                } else {
                    say!(
                        "dry run: would redrive {} dead letter(s) from {} onto their list; nothing changed",
                        letters.len(),
                        text(dlq.as_bytes())
                    );
                }
                return Ok(());
            }
            let what = format!("redrive {} dead letter(s) from {dlq:?}", letters.len());
            confirm(*yes, &what, &format!("would {what}"))?;
            let report = admin.redrive_list(dlq, &letters).await?;
            if ctx.json {
                let skipped: Vec<_> = report
                    .skipped
                    .iter()
                    .map(|(i, why)| json!({ "index": i, "reason": why }))
                    .collect();
                print_json(&json!({
                    "dlq": dlq, "redriven": report.redriven.len(), "skipped": skipped,
                }));
            } else {
                for (i, why) in &report.skipped {
                    say!("{i} skipped: {}", text(why.as_bytes()));
                }
                say!(
                    "redrove {} dead letter(s) from {}, skipped {}",
                    report.redriven.len(),
                    text(dlq.as_bytes()),
                    report.skipped.len()
                );
            }
            if report.redriven.is_empty() && !report.skipped.is_empty() {
                return Err(Failure::NothingDone(format!(
                    "nothing redriven: every one of the {} selected dead letter(s) was skipped",
                    report.skipped.len()
                )));
            }
            Ok(())
        }
        Dlq::Purge { select, yes } => {
            let (error, count) = selection(select)?;
            let letters = admin.list_dead_letters(dlq, error, count).await?;
            let what = format!("delete {} dead letter(s) from {dlq:?}", letters.len());
            confirm(*yes, &what, &format!("would {what}"))?;
            let deleted = admin.purge_list(dlq, &letters).await?;
            if ctx.json {
                print_json(&json!({ "dlq": dlq, "deleted": deleted }));
            } else {
                say!(
                    "deleted {deleted} dead letter(s) from {}",
                    text(dlq.as_bytes())
                );
            }
            Ok(())
        }
    }
}
