//! Entries handled per second, per stream, over the last minutes: sampled
//! in memory from the broker's status counters (no Redis I/O).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rillkit::Broker;

/// How often the counters are sampled.
pub(super) const PERIOD: Duration = Duration::from_secs(5);
/// Samples kept: 10 minutes.
const KEEP: usize = 120;

/// The samples, shared by every worker thread's copy of the dashboard.
#[derive(Default)]
pub(super) struct Rates {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The last counter reading per stream, and when.
    last: HashMap<String, (u64, Instant)>,
    /// Entries handled per second, oldest first.
    series: HashMap<String, VecDeque<f64>>,
    /// Whether a sampler runs.
    started: bool,
}

impl Rates {
    /// Reads the handled counters once and appends a rate per stream.
    pub(super) fn sample(&self, broker: &Broker) {
        let now = Instant::now();
        let mut totals: HashMap<String, u64> = HashMap::new();
        for s in broker.status().subscriptions {
            *totals.entry(s.key).or_default() += s.handled;
        }
        let mut inner = self.inner.lock().expect("rates lock");
        for (stream, total) in totals {
            if let Some((before, at)) = inner.last.get(&stream).copied() {
                let dt = now.duration_since(at).as_secs_f64().max(1e-3);
                let rate = total.saturating_sub(before) as f64 / dt;
                let series = inner.series.entry(stream.clone()).or_default();
                series.push_back(rate);
                if series.len() > KEEP {
                    series.pop_front();
                }
            }
            inner.last.insert(stream, (total, now));
        }
    }

    /// The rates of `stream`, oldest first.
    pub(super) fn of(&self, stream: &str) -> Vec<f64> {
        let inner = self.inner.lock().expect("rates lock");
        inner
            .series
            .get(stream)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Starts the sampler on the current actix runtime, once.
    pub(super) fn start(self: &std::sync::Arc<Self>, broker: &Broker) {
        {
            let mut inner = self.inner.lock().expect("rates lock");
            if inner.started {
                return;
            }
            inner.started = true;
        }
        let (rates, broker) = (self.clone(), broker.clone());
        actix_rt::spawn(async move {
            let mut tick = tokio::time::interval(PERIOD);
            loop {
                tick.tick().await;
                rates.sample(&broker);
            }
        });
    }
}
