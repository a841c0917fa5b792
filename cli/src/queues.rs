//! Streams and their groups: `status`, `pending` (and its repairs, `claim`
//! and `ack`) and `consumers`.

use std::collections::BTreeSet;
use std::time::Duration;

use rillkit::admin::{PendingEntry, PendingFilter};
use serde_json::json;

use crate::cli::{PendingAction, PendingCommand, PendingSelect};
use crate::operator::confirm;
use crate::output::{duration, print_json, table, text};
use crate::{Ctx, Failure};

/// Whether a `status` argument is a glob pattern rather than a name.
fn is_pattern(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// How long ago an entry was added, in ms, from its id (`None` for an id
/// not in `<ms>-<seq>` form).
fn age_ms(p: &PendingEntry) -> Option<u64> {
    p.id.age().map(|a| a.as_millis() as u64)
}

pub async fn status(ctx: &Ctx, stream: Option<&str>) -> Result<(), Failure> {
    let admin = &ctx.admin;
    if let Some(name) = stream.filter(|s| !is_pattern(s)) {
        if let Some(partitions) = admin.partitions(name).await? {
            if admin.stream_len(name).await? == 0 {
                return ordered_status(ctx, name, partitions).await;
            }
        }
    }
    // A reliable list named, or those matching the pattern.
    let named_list = match stream.filter(|s| !is_pattern(s)) {
        // An empty list does not exist: its consumers' registry tells it.
        Some(name) => match admin.key_type(name).await?.as_deref() {
            Some(kind) => kind == "list",
            None => admin.lists(name).await?.iter().any(|l| l == name),
        },
        None => false,
    };
    let lists: Vec<String> = match stream {
        Some(name) if named_list => vec![name.to_owned()],
        Some(name) if !is_pattern(name) => Vec::new(),
        pattern => admin.lists(pattern.unwrap_or("*")).await?,
    };
    let names: Vec<String> = match stream {
        Some(_) if named_list => Vec::new(),
        Some(name) if !is_pattern(name) => vec![name.to_owned()],
        pattern => {
            let found = admin.streams(pattern.unwrap_or("*")).await?;
            // A stream's default dead-letter stream is shown beside it, not
            // as a stream of its own.
            let all: BTreeSet<&String> = found.iter().collect();
            let dlqs: BTreeSet<String> = found
                .iter()
                .map(|s| admin.dlq_of(s))
                .filter(|d| all.contains(d))
                .collect();
            found.into_iter().filter(|s| !dlqs.contains(s)).collect()
        }
    };
    let mut streams = Vec::new();
    let mut rows = Vec::new();
    for name in &names {
        let length = admin.stream_len(name).await?;
        let groups = match admin.groups(name).await {
            Ok(g) => g,
            // XLEN is 0 for a missing key, and XINFO refuses it.
            Err(_) if length == 0 && stream == Some(name.as_str()) => {
                return Err(Failure::NotFound(format!("no stream named {name:?}")));
            }
            Err(e) => return Err(e.into()),
        };
        let dlq = admin.dlq_of(name);
        let dlq_length = admin.stream_len(&dlq).await?;
        let mut group_docs = Vec::new();
        for g in &groups {
            // The oldest pending entry (the lowest id): how long ago it was
            // added, and how long since it was last delivered.
            let oldest = if g.pending > 0 {
                admin.pending(name, &g.name, 1).await?.into_iter().next()
            } else {
                None
            };
            let age = oldest.as_ref().and_then(age_ms);
            // None for an entry handed back with XNACK: nobody holds it.
            let idle = oldest.as_ref().and_then(|p| p.idle_ms);
            rows.push(vec![
                name.clone(),
                length.to_string(),
                g.name.clone(),
                g.consumers.to_string(),
                g.pending.to_string(),
                g.lag.map_or("?".into(), |l| l.to_string()),
                age.map_or("-".into(), duration),
                idle.map_or("-".into(), duration),
                dlq_length.to_string(),
            ]);
            group_docs.push(json!({
                "group": g.name,
                "consumers": g.consumers,
                "pending": g.pending,
                "lag": g.lag,
                "last_delivered_id": g.last_delivered_id.as_str(),
                "oldest_pending_id": oldest.as_ref().map(|p| p.id.as_str()),
                "oldest_pending_age_ms": age,
                "oldest_pending_idle_ms": idle,
            }));
        }
        if groups.is_empty() {
            let mut row = vec![name.clone(), length.to_string()];
            row.extend(std::iter::repeat_n("-".to_owned(), 6));
            row.push(dlq_length.to_string());
            rows.push(row);
        }
        streams.push(json!({
            "stream": name,
            "length": length,
            "dlq": dlq,
            "dlq_length": dlq_length,
            "groups": group_docs,
        }));
    }
    let (list_docs, list_rows) = list_status(ctx, &lists).await?;
    if ctx.json {
        print_json(&json!({ "streams": streams, "lists": list_docs }));
        return Ok(());
    }
    if !list_rows.is_empty() {
        say_inline!(
            "{}",
            table(
                &["LIST", "LENGTH", "PROCESSING", "CONSUMERS", "LIVE", "DLQ"],
                &list_rows,
                ctx.cap,
            )
        );
        if rows.is_empty() {
            return Ok(());
        }
        say!("");
    }
    if rows.is_empty() {
        say!("no streams");
    } else {
        say_inline!(
            "{}",
            table(
                &[
                    "STREAM",
                    "LENGTH",
                    "GROUP",
                    "CONSUMERS",
                    "PENDING",
                    "LAG",
                    "OLDEST-AGE",
                    "SINCE-DELIVERY",
                    "DLQ",
                ],
                &rows,
                ctx.cap,
            )
        );
    }
    Ok(())
}

/// `server`: each master's newer stream commands and the paths they give.
pub async fn server(ctx: &Ctx) -> Result<(), Failure> {
    let rows = ctx.admin.server_commands().await?;
    let path = |has: bool, native: &'static str, script: &'static str| {
        if has { native } else { script }
    };
    let mut docs = Vec::new();
    let mut table_rows = Vec::new();
    for (server, found) in &rows {
        let retention = match (found.ack_and_delete(), found.trim_acked()) {
            (true, true) => "XACKDEL + XTRIM ACKED",
            (true, false) => "XACKDEL + script",
            (false, true) => "XACK + XTRIM ACKED",
            (false, false) => "script",
        };
        let idempotent = path(found.idempotent_add(), "XADD IDMP", "script");
        let reclaim = path(
            found.claim_in_read(),
            "XREADGROUP CLAIM",
            "XPENDING IDLE + XCLAIM",
        );
        docs.push(json!({
            "server": server,
            "commands": found.names(),
            "retention": retention,
            "idempotent_publish": idempotent,
            "reclaim": reclaim,
        }));
        table_rows.push(vec![
            server.clone(),
            retention.to_owned(),
            idempotent.to_owned(),
            reclaim.to_owned(),
            found.to_string(),
        ]);
    }
    if ctx.json {
        print_json(&json!({ "servers": docs }));
    } else {
        say_inline!(
            "{}",
            table(
                &[
                    "SERVER",
                    "RETENTION",
                    "IDEMPOTENT-PUBLISH",
                    "RECLAIM",
                    "COMMANDS",
                ],
                &table_rows,
                ctx.cap,
            )
        );
    }
    Ok(())
}

/// Each reliable list's figures: its length, the items its consumers hold,
/// its consumers (live by heartbeat) and dead letters; as JSON documents and
/// as table rows.
async fn list_status(
    ctx: &Ctx,
    lists: &[String],
) -> Result<(Vec<serde_json::Value>, Vec<Vec<String>>), Failure> {
    let (mut docs, mut rows) = (Vec::new(), Vec::new());
    for list in lists {
        let s = ctx.admin.list_status(list).await?;
        let processing: u64 = s.consumers.iter().map(|c| c.processing).sum();
        let live = s.consumers.iter().filter(|c| c.alive).count();
        rows.push(vec![
            list.clone(),
            s.length.to_string(),
            processing.to_string(),
            s.consumers.len().to_string(),
            live.to_string(),
            s.dead_letters.to_string(),
        ]);
        let consumers: Vec<_> = s
            .consumers
            .iter()
            .map(|c| json!({ "name": c.name, "processing": c.processing, "alive": c.alive }))
            .collect();
        docs.push(json!({
            "list": list,
            "length": s.length,
            "processing": processing,
            "dlq": s.dlq,
            "dead_letters": s.dead_letters,
            "live_consumers": live,
            "consumers": consumers,
        }));
    }
    Ok((docs, rows))
}

/// `status` of a stream ordered by key: a row per partition and group,
/// with the consumer that owns the partition (holds its lease).
async fn ordered_status(ctx: &Ctx, name: &str, partitions: u16) -> Result<(), Failure> {
    let admin = &ctx.admin;
    let mut rows = Vec::new();
    let mut docs = Vec::new();
    for i in 0..partitions {
        let partition = format!("{name}:p{i}");
        let length = admin.stream_len(&partition).await?;
        let groups = match admin.groups(&partition).await {
            Ok(g) => g,
            // No entry and no group yet: XINFO refuses a missing key.
            Err(_) if length == 0 => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        let dlq_length = admin.stream_len(&admin.dlq_of(&partition)).await?;
        for g in &groups {
            let owner = admin.partition_owner(&partition, &g.name).await?;
            rows.push(vec![
                partition.clone(),
                g.name.clone(),
                owner.clone().unwrap_or_else(|| "-".into()),
                length.to_string(),
                g.pending.to_string(),
                g.lag.map_or("?".into(), |l| l.to_string()),
                dlq_length.to_string(),
            ]);
            docs.push(json!({
                "partition": partition,
                "group": g.name,
                "owner": owner,
                "length": length,
                "pending": g.pending,
                "lag": g.lag,
                "dlq_length": dlq_length,
            }));
        }
        if groups.is_empty() {
            rows.push(vec![
                partition.clone(),
                "-".into(),
                "-".into(),
                length.to_string(),
                "-".into(),
                "-".into(),
                dlq_length.to_string(),
            ]);
            docs.push(
                json!({ "partition": partition, "length": length, "dlq_length": dlq_length }),
            );
        }
    }
    if ctx.json {
        print_json(&json!({ "stream": name, "partitions": partitions, "rows": docs }));
    } else {
        say!(
            "{}: ordered by key, {partitions} partitions",
            text(name.as_bytes())
        );
        say_inline!(
            "{}",
            table(
                &[
                    "PARTITION",
                    "GROUP",
                    "OWNER",
                    "LENGTH",
                    "PENDING",
                    "LAG",
                    "DLQ"
                ],
                &rows,
                ctx.cap,
            )
        );
    }
    Ok(())
}

impl PendingSelect {
    fn filter(&self) -> PendingFilter {
        let mut f = PendingFilter::new(self.count);
        if let Some(c) = &self.consumer {
            f = f.with_consumer(c.clone());
        }
        if let Some(idle) = self.min_idle {
            f = f.with_min_idle(idle);
        }
        f
    }

    /// The selected entries.
    async fn read(&self, ctx: &Ctx) -> Result<Vec<PendingEntry>, Failure> {
        if self.count == 0 {
            return Err(Failure::Usage(
                "--count 0 would select nothing; give at least 1".into(),
            ));
        }
        Ok(ctx
            .admin
            .pending_matching(&self.stream, &self.group, &self.filter())
            .await?)
    }

    /// "`n` pending entr(ies) of `<stream>` group `<group>` [held by …] [idle
    /// ≥ …]", for questions and answers.
    fn describe(&self, n: usize) -> String {
        let mut s = format!(
            "{n} pending entr{} of {:?} group {:?}",
            if n == 1 { "y" } else { "ies" },
            self.stream,
            self.group
        );
        if let Some(c) = &self.consumer {
            s.push_str(&format!(" held by {c:?}"));
        }
        if let Some(idle) = self.min_idle {
            s.push_str(&format!(
                " idle for {} or more",
                humantime::format_duration(idle)
            ));
        }
        s
    }
}

pub async fn pending(ctx: &Ctx, cmd: &PendingCommand) -> Result<(), Failure> {
    match (&cmd.action, &cmd.select) {
        (Some(PendingAction::Claim { select, to, yes }), _) => {
            let entries = select.read(ctx).await?;
            if entries.is_empty() {
                return nothing(ctx, select, "claimed");
            }
            let what = format!("hand {} to {to:?}", select.describe(entries.len()));
            confirm(*yes, &what, &format!("would {what}"))?;
            let ids: Vec<_> = entries.iter().map(|p| p.id.clone()).collect();
            let min_idle = select.min_idle.unwrap_or(Duration::ZERO);
            let claimed = ctx
                .admin
                .claim(&select.stream, &select.group, to, min_idle, &ids)
                .await?;
            if ctx.json {
                let ids: Vec<_> = claimed.iter().map(|id| id.as_str()).collect();
                print_json(&json!({
                    "stream": select.stream,
                    "group": select.group,
                    "consumer": to,
                    "selected": entries.len(),
                    "claimed": ids,
                }));
            } else {
                let done = format!(
                    "claimed {} of {} for {to:?}",
                    claimed.len(),
                    select.describe(entries.len())
                );
                say!("{}", text(done.as_bytes()));
            }
            Ok(())
        }
        (Some(PendingAction::Ack { select, yes }), _) => {
            let entries = select.read(ctx).await?;
            if entries.is_empty() {
                return nothing(ctx, select, "acknowledged");
            }
            let what = format!(
                "acknowledge {} without running them",
                select.describe(entries.len())
            );
            confirm(*yes, &what, &format!("would {what}"))?;
            let ids: Vec<_> = entries.iter().map(|p| p.id.clone()).collect();
            let acked = ctx.admin.ack(&select.stream, &select.group, &ids).await?;
            if ctx.json {
                print_json(&json!({
                    "stream": select.stream,
                    "group": select.group,
                    "selected": entries.len(),
                    "acknowledged": acked,
                }));
            } else {
                say!(
                    "acknowledged {acked} of {}",
                    text(select.describe(entries.len()).as_bytes())
                );
            }
            Ok(())
        }
        (None, Some(select)) => list_pending(ctx, select).await,
        (None, None) => Err(Failure::Usage(
            "pending needs STREAM and GROUP (or claim, ack)".into(),
        )),
    }
}

/// A `claim` or `ack` that selected nothing.
fn nothing(ctx: &Ctx, select: &PendingSelect, done: &str) -> Result<(), Failure> {
    if ctx.json {
        print_json(&json!({
            "stream": select.stream,
            "group": select.group,
            "selected": 0,
        }));
    } else {
        say!(
            "nothing {done}: no {}",
            text(select.describe(0).trim_start_matches("0 ").as_bytes())
        );
    }
    Ok(())
}

async fn list_pending(ctx: &Ctx, select: &PendingSelect) -> Result<(), Failure> {
    let entries = select.read(ctx).await?;
    if ctx.json {
        let list: Vec<_> = entries
            .iter()
            .map(|p| {
                json!({
                    "id": p.id.as_str(),
                    "consumer": p.consumer,
                    "age_ms": age_ms(p),
                    "idle_ms": p.idle_ms,
                    "delivery_count": p.delivery_count,
                })
            })
            .collect();
        print_json(&json!({
            "stream": select.stream,
            "group": select.group,
            "pending": list,
        }));
    } else if entries.is_empty() {
        say!("nothing pending");
    } else {
        let rows: Vec<Vec<String>> = entries
            .iter()
            .map(|p| {
                vec![
                    p.id.to_string(),
                    p.consumer.clone(),
                    age_ms(p).map_or("-".into(), duration),
                    p.idle_ms.map_or("handed back".into(), duration),
                    p.delivery_count.to_string(),
                ]
            })
            .collect();
        say_inline!(
            "{}",
            table(
                &["ID", "CONSUMER", "AGE", "SINCE-DELIVERY", "DELIVERIES"],
                &rows,
                ctx.cap,
            )
        );
    }
    Ok(())
}

pub async fn consumers(
    ctx: &Ctx,
    stream: &str,
    group: &str,
    prune_idle: Option<Duration>,
) -> Result<(), Failure> {
    let admin = &ctx.admin;
    let pruned = match prune_idle {
        Some(idle) => admin.prune_idle_consumers(stream, group, idle).await?,
        None => Vec::new(),
    };
    let list = admin.consumers(stream, group).await?;
    if ctx.json {
        let docs: Vec<_> = list
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "pending": c.pending,
                    "idle_ms": c.idle_ms,
                    "inactive_ms": c.inactive_ms,
                })
            })
            .collect();
        print_json(
            &json!({ "stream": stream, "group": group, "pruned": pruned, "consumers": docs }),
        );
        return Ok(());
    }
    if prune_idle.is_some() {
        say!(
            "pruned {} idle consumer(s): {}",
            pruned.len(),
            text(pruned.join(", ").as_bytes())
        );
    }
    if list.is_empty() {
        say!("no consumers");
    } else {
        let rows: Vec<Vec<String>> = list
            .iter()
            .map(|c| vec![c.name.clone(), c.pending.to_string(), duration(c.idle_ms)])
            .collect();
        say_inline!(
            "{}",
            table(&["CONSUMER", "PENDING", "IDLE"], &rows, ctx.cap)
        );
    }
    Ok(())
}
