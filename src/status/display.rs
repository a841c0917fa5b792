//! How a [`Status`] and a [`SubscriptionId`] print: a status as a table
//! with a row per subscription (and per partition of an ordered stream),
//! for a log line at startup, a debug endpoint or a test failure.

use std::fmt;
use std::time::Duration;

use super::{PartitionStatus, ServerFigures, Status, SubscriptionId, SubscriptionState};
use crate::kind::SourceKind;

/// The kind's name as the status table shows it.
fn kind_name(kind: SourceKind) -> &'static str {
    match kind {
        SourceKind::Stream => "stream",
        SourceKind::List => "list",
        SourceKind::ListAtMostOnce => "list-at-most-once",
        SourceKind::Channel => "channel",
    }
}

impl fmt::Display for SubscriptionId {
    /// `stream orders, group billing, consumer web-1`; lists and channels
    /// have no group: `list jobs, consumer web-1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", kind_name(self.kind), self.key)?;
        if !self.group.is_empty() {
            write!(f, ", group {}", self.group)?;
        }
        write!(f, ", consumer {}", self.consumer)
    }
}

impl fmt::Display for SubscriptionState {
    /// The state's [name](SubscriptionState::name), with its details:
    /// `reconnecting (connection refused)`, `restarting (2 restarts)`,
    /// `waiting_for_lease (held by host-12-ab)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        match self {
            SubscriptionState::Reconnecting { last_error, .. } => write!(f, " ({last_error})"),
            SubscriptionState::Restarting { restarts } => write!(f, " ({restarts} restarts)"),
            SubscriptionState::WaitingForLease { holder, .. } => write!(f, " (held by {holder})"),
            _ => Ok(()),
        }
    }
}

/// A duration as people read one: `850ms`, `12.3s`, `4m05s`, `2h10m`,
/// `3d04h`.
fn human(d: Duration) -> String {
    let ms = d.as_millis();
    let s = ms / 1000;
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{}.{}s", s, (ms % 1000) / 100),
        60_000..3_600_000 => format!("{}m{:02}s", s / 60, s % 60),
        3_600_000..86_400_000 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// The server's figures as four cells: lag, pending, oldest pending age,
/// dead letters (`-` before the first poll, `?` for a lag Redis cannot
/// tell).
fn figures(server: Option<&ServerFigures>) -> [String; 4] {
    match server {
        None => std::array::from_fn(|_| "-".to_owned()),
        Some(s) => [
            s.lag.map_or("?".into(), |l| l.to_string()),
            s.pending.to_string(),
            s.oldest_pending_age.map_or("-".into(), human),
            s.dead_letters.to_string(),
        ],
    }
}

const HEADER: [&str; 12] = [
    "KIND",
    "KEY",
    "GROUP",
    "CONSUMER",
    "STATE",
    "HANDLED",
    "FAILED",
    "DEAD-LETTERED",
    "LAG",
    "PENDING",
    "OLDEST-AGE",
    "DLQ",
];

fn partition_row(p: &PartitionStatus, group: &str, consumer: &str) -> Vec<String> {
    let state = if p.owned {
        format!("{} (owned)", p.state)
    } else {
        p.state.to_string()
    };
    let mut row = vec![
        format!("  partition {}", p.index),
        p.key.clone(),
        group.to_owned(),
        consumer.to_owned(),
        state,
        p.handled.to_string(),
        p.failed.to_string(),
        p.dead_lettered.to_string(),
    ];
    row.extend(figures(p.server.as_ref()));
    row
}

impl fmt::Display for Status {
    /// A first line with the broker's phase, whether Redis answers and
    /// whether it is [ready](Status::is_ready), then a table: a row per
    /// subscription (its kind, key, group, consumer, state, the counts
    /// since the broker started, and the server's figures at the last poll:
    /// lag, pending entries, the oldest pending entry's age, dead letters),
    /// and under an ordered stream a row per partition. Columns are
    /// separated by two spaces and padded to their widest cell.
    ///
    /// ```text
    /// running, Redis reachable, ready
    /// KIND    KEY     GROUP    CONSUMER  STATE    HANDLED  FAILED  DEAD-LETTERED  LAG  PENDING  OLDEST-AGE  DLQ
    /// stream  orders  billing  web-1     running  1204     3       1              0    2        1.2s        1
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phase = format!("{:?}", self.phase).to_lowercase();
        let reach = if self.redis_reachable {
            "Redis reachable"
        } else {
            "Redis unreachable"
        };
        let ready = if self.is_ready() {
            "ready"
        } else {
            "not ready"
        };
        writeln!(f, "{phase}, {reach}, {ready}")?;
        if self.subscriptions.is_empty() {
            return f.write_str("no subscriptions");
        }
        let mut rows: Vec<Vec<String>> = vec![HEADER.iter().map(|h| (*h).to_owned()).collect()];
        for s in &self.subscriptions {
            let mut row = vec![
                kind_name(s.kind).to_owned(),
                s.key.clone(),
                if s.group.is_empty() {
                    "-".to_owned()
                } else {
                    s.group.clone()
                },
                s.consumer.clone(),
                s.state.to_string(),
                s.handled.to_string(),
                s.failed.to_string(),
                s.dead_lettered.to_string(),
            ];
            row.extend(figures(s.server.as_ref()));
            rows.push(row);
            rows.extend(
                s.partitions
                    .iter()
                    .map(|p| partition_row(p, &s.group, &s.consumer)),
            );
        }
        let mut widths = [0usize; HEADER.len()];
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for (i, row) in rows.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            let last = row.len() - 1;
            for (c, (cell, w)) in row.iter().zip(widths).enumerate() {
                if c == last {
                    f.write_str(cell)?;
                } else {
                    write!(f, "{cell:<w$}  ")?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
