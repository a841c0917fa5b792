//! The fleet: `pause` and `resume` (a group or a list, in every process),
//! `scale` (their concurrency) and `fleet` (the live processes).

use rillkit::admin::{FleetProcess, MAX_CONCURRENCY};
use serde_json::json;

use crate::output::{print_json, table, text};
use crate::{Ctx, Failure};

/// What a `pause`, `resume` or `scale` acts on.
enum Target<'a> {
    Group { stream: &'a str, group: &'a str },
    List(&'a str),
}

impl Target<'_> {
    fn describe(&self) -> String {
        match self {
            Target::Group { stream, group } => format!("group {group:?} of stream {stream:?}"),
            Target::List(list) => format!("list {list:?}"),
        }
    }
}

/// A stream's group with `--group` (the group must exist), else a list (a
/// stream named without `--group` is refused: it names no group).
async fn target<'a>(
    ctx: &Ctx,
    key: &'a str,
    group: Option<&'a str>,
) -> Result<Target<'a>, Failure> {
    let kind = ctx.admin.key_type(key).await?;
    match (kind.as_deref(), group) {
        (Some("stream"), Some(group)) => {
            let groups = ctx.admin.groups(key).await?;
            if !groups.iter().any(|g| g.name == group) {
                return Err(Failure::NotFound(format!(
                    "stream {} has no consumer group {}",
                    text(key.as_bytes()),
                    text(group.as_bytes())
                )));
            }
            Ok(Target::Group { stream: key, group })
        }
        (Some("stream"), None) => Err(Failure::Usage(format!(
            "{} is a stream: name the consumer group with --group",
            text(key.as_bytes())
        ))),
        (None, Some(_)) => Err(Failure::NotFound(format!(
            "no stream {}",
            text(key.as_bytes())
        ))),
        // A list, or none yet (an empty list does not exist).
        (Some("list") | None, None) => Ok(Target::List(key)),
        (Some(other), Some(_)) => Err(Failure::NotFound(format!(
            "{} is a {other}, not a stream",
            text(key.as_bytes())
        ))),
        (Some(other), None) => Err(Failure::NotFound(format!(
            "{} is a {other}, not a stream or a list",
            text(key.as_bytes())
        ))),
    }
}

pub async fn pause(ctx: &Ctx, key: &str, group: Option<&str>, on: bool) -> Result<(), Failure> {
    let t = target(ctx, key, group).await?;
    let admin = &ctx.admin;
    match (&t, on) {
        (Target::Group { stream, group }, true) => admin.pause_group(stream, group).await?,
        (Target::Group { stream, group }, false) => admin.resume_group(stream, group).await?,
        (Target::List(list), true) => admin.pause_list(list).await?,
        (Target::List(list), false) => admin.resume_list(list).await?,
    }
    let verb = if on { "paused" } else { "resumed" };
    if ctx.json {
        print_json(&target_json(&t, json!({ "paused": on })));
    } else {
        say!(
            "{} {verb} in every rillkit process (each sees it within a second; it holds for processes started later)",
            text(t.describe().as_bytes())
        );
    }
    Ok(())
}

pub async fn scale(
    ctx: &Ctx,
    key: &str,
    group: Option<&str>,
    concurrency: Option<usize>,
) -> Result<(), Failure> {
    if let Some(n) = concurrency.filter(|n| !(1..=MAX_CONCURRENCY).contains(n)) {
        return Err(Failure::Usage(format!(
            "--concurrency must be within 1 and {MAX_CONCURRENCY}, not {n}"
        )));
    }
    let t = target(ctx, key, group).await?;
    match &t {
        Target::Group { stream, group } => {
            ctx.admin.scale_group(stream, group, concurrency).await?;
        }
        Target::List(list) => ctx.admin.scale_list(list, concurrency).await?,
    }
    if ctx.json {
        print_json(&target_json(&t, json!({ "concurrency": concurrency })));
    } else {
        let what = match concurrency {
            Some(n) => format!("concurrency {n} in every rillkit process"),
            None => "each rillkit process back to its own concurrency".into(),
        };
        say!(
            "{}: {what} (each sees it within a second; batch and ordered subscriptions keep theirs)",
            text(t.describe().as_bytes())
        );
    }
    Ok(())
}

fn target_json(t: &Target<'_>, mut doc: serde_json::Value) -> serde_json::Value {
    let (key, group) = match t {
        Target::Group { stream, group } => (*stream, Some(*group)),
        Target::List(list) => (*list, None),
    };
    doc["key"] = json!(key);
    doc["group"] = json!(group);
    doc
}

pub async fn fleet(ctx: &Ctx) -> Result<(), Failure> {
    let fleet: Vec<FleetProcess> = ctx.admin.fleet().await?;
    if ctx.json {
        print_json(&serde_json::to_value(&fleet).expect("the fleet serializes"));
        return Ok(());
    }
    if fleet.is_empty() {
        say!("no live rillkit process");
        return Ok(());
    }
    let mut rows = Vec::new();
    for p in &fleet {
        for s in &p.subscriptions {
            let state = if s.fleet_paused {
                format!("{} (fleet pause)", s.state)
            } else {
                s.state.clone()
            };
            let mut concurrency = if s.concurrency == s.configured_concurrency {
                s.concurrency.to_string()
            } else {
                format!("{} (built {})", s.concurrency, s.configured_concurrency)
            };
            if let Some(limit) = &s.rate_limit {
                concurrency.push_str(&format!(", at most {limit}"));
            }
            rows.push(vec![
                s.consumer.clone(),
                p.host.clone(),
                p.pid.to_string(),
                p.version.clone(),
                s.stream.clone(),
                if s.group.is_empty() {
                    "-".into()
                } else {
                    s.group.clone()
                },
                concurrency,
                s.in_flight.to_string(),
                state,
            ]);
        }
    }
    say_inline!(
        "{}",
        table(
            &[
                "CONSUMER",
                "HOST",
                "PID",
                "VERSION",
                "SOURCE",
                "GROUP",
                "CONCURRENCY",
                "IN-FLIGHT",
                "STATE",
            ],
            &rows,
            ctx.cap
        )
    );
    Ok(())
}
