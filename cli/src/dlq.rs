//! Dead letters: `dlq list`, `dlq show`, `dlq purge`, and which dead-letter
//! stream a command acts on; `dlq redrive` is in `redrive.rs`.

use rillkit::admin::{Admin, DeadLetterFilter};
use serde_json::json;

use crate::cli::Dlq;
use crate::operator::confirm;
use crate::output::{dead_letter_json, duration, now_ms, print_json, table, text};
use crate::{Ctx, Failure, redrive, stream_exists};

/// Dead letters listed when `dlq list` is not given `--count`.
const LIST_COUNT: usize = 100;

/// The dead-letter stream to act on: `explicit` (`--dlq`), or `stream`'s.
/// When neither it nor `stream` exists, the name is taken for a typo and
/// the command fails ("not found"); when `stream` is itself a dead-letter
/// stream, the error says to name its origin instead.
pub async fn dead_letter_stream(
    admin: &Admin,
    stream: &str,
    explicit: Option<&str>,
) -> Result<String, Failure> {
    let dlq = explicit.map_or_else(|| admin.dlq_of(stream), str::to_owned);
    if stream_exists(admin, &dlq).await? {
        return Ok(dlq);
    }
    if stream_exists(admin, stream).await? {
        if let (None, Some(origin)) = (explicit, stream.strip_suffix("-dlq")) {
            return Err(Failure::NotFound(format!(
                "{stream:?} has no dead-letter stream {dlq:?}; to see its dead letters, name its origin: {origin:?}"
            )));
        }
        return Ok(dlq);
    }
    Err(Failure::NotFound(format!(
        "no stream {stream:?} and no dead-letter stream {dlq:?}"
    )))
}

pub async fn dlq(ctx: &Ctx, cmd: &Dlq) -> Result<(), Failure> {
    let admin = &ctx.admin;
    let (key, explicit) = match cmd {
        Dlq::List { select } | Dlq::Redrive { select, .. } | Dlq::Purge { select, .. } => {
            (&select.stream, select.dlq.as_deref())
        }
        Dlq::Show { stream, dlq, .. } => (stream, dlq.as_deref()),
    };
    if let Some(dlq) = crate::list_dlq::dead_letter_list(admin, key, explicit).await? {
        return crate::list_dlq::dlq(ctx, cmd, &dlq).await;
    }
    match cmd {
        Dlq::List { select } => {
            let dlq = dead_letter_stream(admin, &select.stream, select.dlq.as_deref()).await?;
            let list = admin
                .dead_letters(&dlq, &select.filter(Some(LIST_COUNT)))
                .await?;
            if ctx.json {
                let docs: Vec<_> = list.iter().map(dead_letter_json).collect();
                print_json(&json!({ "dlq": dlq, "dead_letters": docs }));
                return Ok(());
            }
            if list.is_empty() {
                say!("no dead letters in {}", text(dlq.as_bytes()));
                return Ok(());
            }
            let now = now_ms();
            let rows: Vec<Vec<String>> = list
                .iter()
                .map(|d| match &d.origin {
                    Some(o) => vec![
                        d.id.to_string(),
                        format!("{} {}", o.stream, o.id),
                        o.group.clone(),
                        o.delivery_count.to_string(),
                        format!("{} ago", duration(now.saturating_sub(o.failed_at_ms))),
                        o.error.clone(),
                    ],
                    None => vec![
                        d.id.to_string(),
                        "-".into(),
                        "-".into(),
                        "-".into(),
                        "-".into(),
                        "(not a rillkit dead letter)".into(),
                    ],
                })
                .collect();
            say_inline!(
                "{}",
                table(
                    &["ID", "ORIGIN", "GROUP", "DELIVERIES", "FAILED", "ERROR"],
                    &rows,
                    ctx.cap,
                )
            );
            Ok(())
        }
        Dlq::Show { stream, id, dlq } => {
            let dlq = dead_letter_stream(admin, stream, dlq.as_deref()).await?;
            let found = admin
                .dead_letters(&dlq, &DeadLetterFilter::new().with_id(id.clone()))
                .await?;
            let Some(d) = found.first() else {
                return Err(Failure::NotFound(format!("no dead letter {id} in {dlq}")));
            };
            if ctx.json {
                print_json(&json!({ "dlq": dlq, "dead_letter": dead_letter_json(d) }));
                return Ok(());
            }
            say!("id:               {}", d.id);
            match &d.origin {
                Some(o) => {
                    say!("origin stream:    {}", text(o.stream.as_bytes()));
                    say!("origin id:        {}", text(o.id.as_str().as_bytes()));
                    say!("origin group:     {}", text(o.group.as_bytes()));
                    say!("origin consumer:  {}", text(o.consumer.as_bytes()));
                    say!("delivery count:   {}", o.delivery_count);
                    say!(
                        "failed at ms:     {} ({} ago)",
                        o.failed_at_ms,
                        duration(now_ms().saturating_sub(o.failed_at_ms))
                    );
                    say!("error:            {}", text(o.error.as_bytes()));
                    for a in &o.attempts {
                        say!(
                            "attempt:          delivery {} at {} ms: {}",
                            a.delivery_count,
                            a.at_ms,
                            text(a.error.as_bytes())
                        );
                    }
                }
                None => say!("origin:           (not a rillkit dead letter)"),
            }
            say!("fields:");
            for (k, v) in &d.fields {
                say!("  {} = {}", text(k), text(v));
            }
            Ok(())
        }
        Dlq::Redrive {
            select,
            dry_run,
            create_group,
            yes,
        } => {
            redrive::redrive(
                ctx,
                select,
                redrive::Options {
                    dry_run: *dry_run,
                    create_group: create_group.as_deref(),
                    yes: *yes,
                },
            )
            .await
        }
        Dlq::Purge { select, yes } => {
            let dlq = dead_letter_stream(admin, &select.stream, select.dlq.as_deref()).await?;
            let filter = select.filter(None);
            if !yes {
                let would = admin.dead_letters(&dlq, &filter).await?.len();
                let what = format!("delete {would} dead letter(s) from {dlq:?}");
                confirm(false, &what, &format!("would {what}"))?;
            }
            let deleted = admin.purge(&dlq, &filter).await?;
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
