//! The one check of a stream ordered by key, shared by `ordered.rs` (runs
//! recorded in process) and `takeover.rs` (runs of `worker` processes, from
//! their `RILLKIT_PRINT_RUNS` lines): every key's first runs in publish
//! order, no re-run of an entry after a newer entry of its key ran, no two
//! runs of one key at once, and which entries ran more than once.
#![allow(dead_code)]

use std::collections::BTreeMap;

/// One run of one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub key: String,
    /// The entry's place among its key's entries (publish order).
    pub seq: u64,
    /// When it started: ms since the Unix epoch for processes (one machine,
    /// one clock), or any ordinal that orders the runs.
    pub start: u64,
    /// When it ended; `None` while it never did (for a killed process, put
    /// the kill's instant here: [`end_killed`]).
    pub end: Option<u64>,
    /// Who ran it (a worker's index).
    pub who: usize,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}#{} by {} at {}",
            self.key, self.seq, self.who, self.start
        )?;
        match self.end {
            Some(e) => write!(f, "..{e}"),
            None => write!(f, "..(never ended)"),
        }
    }
}

/// The runs in start order (ties keep their given order, so runs given in
/// the order one process made them stay so).
fn by_start(runs: &[Run]) -> Vec<&Run> {
    let mut v: Vec<&Run> = runs.iter().collect();
    v.sort_by_key(|r| r.start);
    v
}

/// The keys whose first runs did not come in publish order, each with its
/// seqs in the order they first started.
pub fn out_of_order(runs: &[Run]) -> Vec<String> {
    let mut first: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let mut started: std::collections::HashSet<(&str, u64)> = Default::default();
    for r in by_start(runs) {
        if started.insert((r.key.as_str(), r.seq)) {
            first.entry(r.key.as_str()).or_default().push(r.seq);
        }
    }
    first
        .into_iter()
        .filter(|(_, seqs)| seqs.windows(2).any(|w| w[0] > w[1]))
        .map(|(k, seqs)| format!("{k}: {seqs:?}"))
        .collect()
}

/// Re-runs of an entry that started after a newer entry of its key (a
/// higher seq) had started: what ordering promises never happens.
pub fn reruns_after_newer(runs: &[Run]) -> Vec<String> {
    let runs = by_start(runs);
    let mut bad = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let earlier = &runs[..i];
        let rerun = earlier.iter().any(|q| q.key == r.key && q.seq == r.seq);
        if !rerun {
            continue;
        }
        if let Some(q) = earlier
            .iter()
            .find(|q| q.key == r.key && q.seq > r.seq && q.start < r.start)
        {
            bad.push(format!("{r} after {q}"));
        }
    }
    bad
}

/// Pairs of runs of one key that overlapped in time (one started before
/// the other had ended; a run that never ended lasts for ever).
pub fn overlaps(runs: &[Run]) -> Vec<String> {
    let mut by_key: BTreeMap<&str, Vec<&Run>> = BTreeMap::new();
    for r in by_start(runs) {
        by_key.entry(r.key.as_str()).or_default().push(r);
    }
    let mut bad = Vec::new();
    for runs in by_key.values() {
        for (i, b) in runs.iter().enumerate() {
            for a in &runs[..i] {
                if a.end.is_none_or(|end| b.start < end) {
                    bad.push(format!("{a} and {b}"));
                }
            }
        }
    }
    bad
}

/// Every entry that ran more than once: (key, seq) with its runs in start
/// order.
pub fn reruns(runs: &[Run]) -> Vec<((String, u64), Vec<Run>)> {
    let mut by_entry: BTreeMap<(String, u64), Vec<Run>> = BTreeMap::new();
    for r in by_start(runs) {
        by_entry
            .entry((r.key.clone(), r.seq))
            .or_default()
            .push(r.clone());
    }
    by_entry.into_iter().filter(|(_, v)| v.len() > 1).collect()
}

/// Gives the runs of `who` that never ended the instant it was killed.
pub fn end_killed(runs: &mut [Run], who: usize, killed_at: u64) {
    for r in runs.iter_mut().filter(|r| r.who == who && r.end.is_none()) {
        r.end = Some(killed_at);
    }
}

/// One run as a `worker` printed it with `RILLKIT_PRINT_RUNS`.
#[derive(Clone, Debug)]
pub struct WorkerRun {
    pub id: u64,
    pub delivery: u64,
    pub start: u64,
    /// When it ended and how (`ok`, `failed`, `dropped`, `panicked`).
    pub end: Option<(u64, String)>,
}

/// The runs in a `worker`'s stdout (`start <id> delivery <n> at <ms>` and
/// `end <id> delivery <n> at <ms> <how>` lines), in the order they started;
/// an end goes with the earliest open start of its id.
pub fn worker_runs(lines: &[String]) -> Vec<WorkerRun> {
    let mut runs: Vec<WorkerRun> = Vec::new();
    for l in lines {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            ["start", id, "delivery", n, "at", ms] => {
                let (Ok(id), Ok(delivery), Ok(start)) = (id.parse(), n.parse(), ms.parse()) else {
                    continue;
                };
                runs.push(WorkerRun {
                    id,
                    delivery,
                    start,
                    end: None,
                });
            }
            ["end", id, "delivery", _, "at", ms, how] => {
                let (Ok(id), Ok(at)) = (id.parse::<u64>(), ms.parse()) else {
                    continue;
                };
                if let Some(r) = runs.iter_mut().find(|r| r.id == id && r.end.is_none()) {
                    r.end = Some((at, (*how).to_owned()));
                }
            }
            _ => {}
        }
    }
    runs
}
