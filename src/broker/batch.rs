//! Batch handlers' options, and their per-entry form for the partitions of
//! an ordered stream (plain streams and lists run batches natively in their
//! loops): each entry still runs as one handler run of its own (its key
//! gate, lease, delivery count, retry, XACK or dead letter, and the drain's
//! wait, exactly as for any handler), but the runs of up to `max_entries`
//! entries, from every partition the consumer owns, meet in one
//! [`Gatherer`], whose first run calls the batch handler once for all of
//! them and hands each its own result.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::LocalBoxFuture;
use tokio::sync::{Notify, Semaphore, oneshot};

use crate::handler::{BatchEntry, BatchOutcome, HandlerError, HandlerResult};

/// How a batch handler's batches are made: at most
/// [`max_entries`](Self::max_entries) entries, and a batch starts when it is
/// full or when its first entry has waited [`max_wait`](Self::max_wait),
/// whichever comes first.
///
/// ```
/// use std::time::Duration;
/// use rillkit::BatchOptions;
///
/// // Up to 500 entries per batch; a batch starts at the latest 200 ms after
/// // its first entry arrived.
/// let batches = BatchOptions::new()
///     .with_max_entries(500)
///     .with_max_wait(Duration::from_millis(200));
/// assert_eq!(batches.max_entries(), 500);
/// assert_eq!(batches.max_wait(), Duration::from_millis(200));
/// ```
///
/// It is given to [`BrokerBuilder::subscribe_batch`](crate::BrokerBuilder::subscribe_batch)
/// (and the list and context variants), which shows a whole batch handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOptions {
    max_entries: usize,
    max_wait: Duration,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            max_entries: 100,
            max_wait: Duration::from_millis(50),
        }
    }
}

impl BatchOptions {
    /// Batches of up to 100 entries, started after at most 50 ms.
    pub fn new() -> Self {
        Self::default()
    }

    /// The most entries in one batch (default 100; at least 1).
    #[must_use]
    pub fn with_max_entries(mut self, entries: usize) -> Self {
        self.max_entries = entries.max(1);
        self
    }

    /// How long a batch's first entry waits for more before the batch
    /// starts anyway (default 50 ms).
    #[must_use]
    pub fn with_max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }

    /// The most entries in one batch, set with
    /// [`with_max_entries`](Self::with_max_entries).
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// The wait, set with [`with_max_wait`](Self::with_max_wait).
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }
}

/// Where the runs of one subscription's entries meet to form batches.
pub(crate) struct Gatherer<T> {
    options: BatchOptions,
    /// The batch still taking entries.
    open: Mutex<Option<Arc<Batch<T>>>>,
    /// One permit per batch that may run at once: the next batch gathers
    /// (its entries fetched) while these run.
    running: Arc<Semaphore>,
}

/// One batch being gathered: its entries with the way back to each run.
struct Batch<T> {
    entries: Mutex<Vec<(BatchEntry<T>, oneshot::Sender<HandlerResult>)>>,
    /// Woken when the batch is full.
    full: Notify,
}

impl<T: 'static> Gatherer<T> {
    /// A gatherer whose batches run `concurrency` at a time.
    pub(crate) fn new(options: BatchOptions, concurrency: usize) -> Self {
        Gatherer {
            options,
            open: Mutex::new(None),
            running: Arc::new(Semaphore::new(concurrency.max(1))),
        }
    }

    /// The run of one entry: it joins the open batch (or opens one, and then
    /// leads it: waits until it is full or `max_wait` has passed, calls
    /// `handler` with every entry, and answers each run its result), and
    /// resolves with this entry's result.
    pub(crate) fn join<F, Fut, O>(
        self: &Arc<Self>,
        entry: BatchEntry<T>,
        handler: Arc<F>,
    ) -> LocalBoxFuture<'static, HandlerResult>
    where
        F: Fn(Vec<BatchEntry<T>>) -> Fut + 'static,
        Fut: Future<Output = O> + 'static,
        O: Into<BatchOutcome>,
    {
        let (tx, rx) = oneshot::channel();
        let max = self.options.max_entries;
        let led = {
            let mut open = self.open.lock().expect("batch lock");
            match open.as_ref() {
                Some(batch) => {
                    let mut entries = batch.entries.lock().expect("batch lock");
                    entries.push((entry, tx));
                    if entries.len() >= max {
                        // Full: closed to newcomers, and its leader wakes.
                        batch.full.notify_one();
                        drop(entries);
                        *open = None;
                    }
                    None
                }
                None => {
                    let batch = Arc::new(Batch {
                        entries: Mutex::new(vec![(entry, tx)]),
                        full: Notify::new(),
                    });
                    if max > 1 {
                        *open = Some(batch.clone());
                    }
                    Some(batch)
                }
            }
        };
        let me = self.clone();
        Box::pin(async move {
            if let Some(batch) = led {
                if max > 1 {
                    tokio::select! {
                        () = batch.full.notified() => {}
                        () = tokio::time::sleep(me.options.max_wait) => {}
                    }
                    let mut open = me.open.lock().expect("batch lock");
                    if open.as_ref().is_some_and(|o| Arc::ptr_eq(o, &batch)) {
                        *open = None;
                    }
                }
                // Closed to newcomers now; it waits for its turn to run.
                let _turn = me.running.clone().acquire_owned().await;
                let taken = std::mem::take(&mut *batch.entries.lock().expect("batch lock"));
                let (entries, answers): (Vec<_>, Vec<_>) = taken.into_iter().unzip();
                let n = entries.len();
                // A panic here is this run's (the loop catches it); the other
                // runs learn it from their dropped answer.
                let results = handler(entries).await.into().split(n);
                for (answer, result) in answers.into_iter().zip(results) {
                    let _ = answer.send(result);
                }
            }
            rx.await.unwrap_or_else(|_| {
                Err(HandlerError::retry(
                    "the batch handler panicked before it answered",
                ))
            })
        })
    }
}
