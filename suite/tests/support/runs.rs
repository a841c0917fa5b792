//! Handlers that count their runs per job id, for tests that check that
//! nothing ran twice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rillkit::HandlerResult;
use serde::{Deserialize, Serialize};

/// A job with an id; other fields of the payload are ignored.
#[derive(Debug, Serialize, Deserialize)]
pub struct Job {
    pub id: u64,
}

/// Runs per job id, filled by [`recording`] handlers.
#[derive(Clone, Default)]
pub struct Runs(Arc<Mutex<HashMap<u64, u32>>>);

impl Runs {
    /// Counts one run of `id`.
    pub fn record(&self, id: u64) {
        *self.0.lock().unwrap().entry(id).or_default() += 1;
    }

    /// How many times `id` ran.
    pub fn of(&self, id: u64) -> u32 {
        self.0.lock().unwrap().get(&id).copied().unwrap_or(0)
    }

    /// Whether every id in `ids` ran.
    pub fn all(&self, ids: impl IntoIterator<Item = u64>) -> bool {
        let runs = self.0.lock().unwrap();
        ids.into_iter().all(|id| runs.contains_key(&id))
    }

    /// How many distinct ids ran.
    pub fn ids(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// The ids that ran more than once, sorted.
    pub fn reruns(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(id, _)| *id)
            .collect();
        v.sort_unstable();
        v
    }
}

/// A handler that records each run in `runs` and succeeds.
pub fn recording(
    runs: &Runs,
) -> impl Fn(Job) -> std::future::Ready<HandlerResult> + Send + Sync + use<> {
    let runs = runs.clone();
    move |job: Job| {
        runs.record(job.id);
        std::future::ready(Ok(()))
    }
}
