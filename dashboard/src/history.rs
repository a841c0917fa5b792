//! Per-minute history of each shown stream, kept in Redis so that it
//! survives restarts and is shared by replicas: every `period` (a minute
//! by default) each dashboard process with [`history`](super::Dashboard::history)
//! on appends one row per stream to the stream `rillkit:history:<stream>`
//! (`XADD … MAXLEN ~ 1440`: about 1440 rows, a day with one process): the entries this
//! process handled, failed and dead-lettered since its last row, and the
//! stream's lag (the sum over its groups, `XINFO GROUPS`). The stream page
//! charts the last hour as inline SVG, summing the rows of every process
//! per minute (lag: the largest).

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use maud::{Markup, html};

use super::Dashboard;
use rillkit::Error;
use rillkit::admin::Admin;

/// The history key of `stream`.
pub(super) fn key(stream: &str) -> String {
    format!("rillkit:history:{stream}")
}

/// Rows kept per history key (approximately: `MAXLEN ~`).
const KEEP: usize = 1440;
/// Minutes the chart shows.
const MINUTES: u64 = 60;

/// Starts the writer on the current actix runtime, once per dashboard (a
/// read-only dashboard writes nothing: it charts what others wrote).
pub(super) fn start(dash: &Dashboard) {
    let Some(period) = dash.history.filter(|_| !dash.read_only) else {
        return;
    };
    if dash
        .shared
        .history_started
        .swap(true, std::sync::atomic::Ordering::SeqCst)
    {
        return;
    }
    let dash = dash.clone();
    actix_rt::spawn(async move {
        let mut last: HashMap<String, [u64; 3]> = HashMap::new();
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = write(&dash, &mut last).await {
                dash.forget(&e).await;
                tracing::debug!(error = %e, "dashboard history: no row written");
            }
        }
    });
}

/// Appends one row per shown stream.
async fn write(dash: &Dashboard, last: &mut HashMap<String, [u64; 3]>) -> Result<(), Error> {
    let admin = dash.admin().await?;
    let mut counts: HashMap<String, [u64; 3]> = HashMap::new();
    for s in dash.broker.status().subscriptions {
        let c = counts.entry(s.key).or_default();
        c[0] += s.handled;
        c[1] += s.failed;
        c[2] += s.dead_lettered;
    }
    for shown in dash.stream_names(&admin).await? {
        let now = counts.get(&shown.name).copied().unwrap_or_default();
        let before = last.insert(shown.name.clone(), now).unwrap_or(now);
        let delta: Vec<u64> = now
            .iter()
            .zip(before)
            .map(|(n, b)| n.saturating_sub(b))
            .collect();
        let lag: Option<u64> = match admin.groups(&shown.name).await {
            Ok(groups) => groups.iter().map(|g| g.lag).sum(),
            Err(_) => None,
        };
        let mut fields = vec![
            ("handled", delta[0].to_string()),
            ("failed", delta[1].to_string()),
            ("dead_lettered", delta[2].to_string()),
        ];
        if let Some(lag) = lag {
            fields.push(("lag", lag.to_string()));
        }
        admin.add_capped(&key(&shown.name), KEEP, &fields).await?;
    }
    Ok(())
}

/// One minute of the chart.
#[derive(Default, Clone, Copy)]
pub(super) struct Minute {
    pub handled: u64,
    pub failed: u64,
    pub dead_lettered: u64,
    pub lag: Option<u64>,
}

/// The last hour of `stream`, a minute a bucket, oldest first (`XRANGE`
/// from an hour ago).
pub(super) async fn read(admin: &Admin, stream: &str) -> Result<Vec<Minute>, Error> {
    let now_min = now_ms() / 60_000;
    let first = now_min + 1 - MINUTES;
    let rows = admin
        .preview(
            &key(stream),
            (&(first * 60_000).to_string(), "+"),
            5000,
            false,
            32,
        )
        .await?;
    let mut buckets: BTreeMap<u64, Minute> =
        (first..=now_min).map(|m| (m, Minute::default())).collect();
    for row in rows {
        let Some((ms, _)) = row.id.as_str().split_once('-') else {
            continue;
        };
        let Some(b) = ms
            .parse::<u64>()
            .ok()
            .and_then(|ms| buckets.get_mut(&(ms / 60_000)))
        else {
            continue;
        };
        let num = |name: &str| {
            row.field(name)
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.parse::<u64>().ok())
        };
        b.handled += num("handled").unwrap_or(0);
        b.failed += num("failed").unwrap_or(0);
        b.dead_lettered += num("dead_lettered").unwrap_or(0);
        if let Some(lag) = num("lag") {
            b.lag = Some(b.lag.map_or(lag, |l| l.max(lag)));
        }
    }
    Ok(buckets.into_values().collect())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as u64
}

/// A polyline of `values` (`None`: no point) scaled to `max` in a `w` ×
/// `h` box.
fn line(values: &[Option<u64>], max: u64, (w, h): (f64, f64), color: &str, label: &str) -> Markup {
    let step = w / (values.len().max(2) - 1) as f64;
    let points: Vec<String> = values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            v.map(|v| {
                format!(
                    "{:.1},{:.1}",
                    i as f64 * step,
                    h - v as f64 / max.max(1) as f64 * (h - 4.0) - 2.0
                )
            })
        })
        .collect();
    html! {
        polyline class=(label) fill="none" stroke=(color) stroke-width="1.5" points=(points.join(" ")) {}
    }
}

/// The chart: handled, failed and dead-lettered per minute, and lag, over
/// the last hour.
pub(super) fn chart(minutes: &[Minute]) -> Markup {
    let (w, h) = (600.0, 110.0);
    let sum = |f: fn(&Minute) -> u64| minutes.iter().map(f).sum::<u64>();
    let (handled, failed, dead) = (
        sum(|m| m.handled),
        sum(|m| m.failed),
        sum(|m| m.dead_lettered),
    );
    let max = minutes
        .iter()
        .map(|m| m.handled.max(m.failed).max(m.dead_lettered))
        .max()
        .unwrap_or(0);
    let lag_max = minutes.iter().filter_map(|m| m.lag).max().unwrap_or(0);
    let series = |f: fn(&Minute) -> u64| minutes.iter().map(|m| Some(f(m))).collect::<Vec<_>>();
    let lags: Vec<Option<u64>> = minutes.iter().map(|m| m.lag).collect();
    html! {
        div.history data-handled=(handled) data-failed=(failed) data-dead-lettered=(dead) {
            p.muted {
                "last hour, per minute: "
                span style="color:#2563eb" { "handled " (handled) } ", "
                span style="color:#d97706" { "failed " (failed) } ", "
                span style="color:#b3261e" { "dead-lettered " (dead) } " (peak " (max) "/min); "
                span style="color:#6b7280" { "lag" } " up to " (lag_max)
            }
            svg width="600" height="110" viewBox="0 0 600 110" role="img" aria-label="handled, failed and dead-lettered per minute" style="background:#fff;border:1px solid #dde1e6" {
                (line(&series(|m| m.handled), max, (w, h), "#2563eb", "handled"))
                (line(&series(|m| m.failed), max, (w, h), "#d97706", "failed"))
                (line(&series(|m| m.dead_lettered), max, (w, h), "#b3261e", "dead-lettered"))
            }
            br;
            svg width="600" height="50" viewBox="0 0 600 50" role="img" aria-label="lag" style="background:#fff;border:1px solid #dde1e6" {
                (line(&lags, lag_max, (w, 50.0), "#6b7280", "lag"))
            }
        }
    }
}
