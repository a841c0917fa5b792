//! Delayed delivery: publishing an entry for later, and cancelling it.

use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::publish::{encode, encode_all, entry_fields, traceparent_for, unordered};
use super::{Broker, spans};
use crate::error::Error;
use crate::redis::Eval;
use crate::schedule::{self, ScheduleId, When};
use crate::stream::{Codec, Stream};

impl Broker {
    /// Schedules `value` (encoded with the stream's codec) to be added to
    /// the stream `delay` from now, by the server's clock. Returns the
    /// schedule id, which [`cancel_scheduled`](Self::cancel_scheduled)
    /// takes.
    ///
    /// The entry waits in Redis, beside the stream and in its hash slot:
    /// a sorted set of schedule ids by due time
    /// (`<stream slot>:rillkit:scheduled:<stream>`) and a hash of the entries
    /// (`<stream slot>:rillkit:scheduled-entries:<stream>`), written by one script.
    /// When it is due, one of the processes that consume the stream (the
    /// holder of the stream's mover lease, `<stream slot>:rillkit:due-mover:<stream>`,
    /// 5 s) adds it (`XADD <stream> [MAXLEN ~ n] * data <bytes>`) and removes
    /// it from the schedule in the same script, so it is added exactly
    /// once. The holder looks every 50 ms, so an entry normally appears
    /// within about 50 ms of its time; if the holder dies, another consuming
    /// process takes the lease within 7 s and adds what fell due
    /// meanwhile. The schedule lives in Redis: it survives restarts of
    /// every process, and of Redis as far as its persistence (AOF) keeps
    /// writes. Entries scheduled on a stream no rillkit broker consumes
    /// wait until one does. A `traceparent` is stored with the entry as for
    /// [`publish`](Self::publish).
    ///
    /// ```no_run
    /// # async fn f(broker: rillkit::Broker) -> Result<(), rillkit::Error> {
    /// use std::time::Duration;
    /// use rillkit::Stream;
    ///
    /// let reminders = Stream::new("reminders", "mailer");
    /// let id = broker
    ///     .publish_after(&reminders, &"cart-7", Duration::from_secs(30 * 60))
    ///     .await?;
    /// // The customer checked out: the reminder is not needed.
    /// let cancelled = broker.cancel_scheduled(&reminders, &id).await?;
    /// # let _ = cancelled; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Config`] for a stream ordered by key (not supported), or a
    /// delay over 10 years; else as [`publish`](Self::publish). The script
    /// is sent once: after a retryable error the entry may be scheduled.
    pub async fn publish_after<T: Serialize + ?Sized, C: Codec>(
        &self,
        stream: &Stream<C>,
        value: &T,
        delay: Duration,
    ) -> Result<ScheduleId, Error> {
        let payload = encode(stream, value)?;
        let mut ids = self
            .schedule(stream, vec![payload], When::After(delay))
            .await?;
        ids.pop().ok_or(Error::ShutDown)
    }

    /// As [`publish_after`](Self::publish_after), due at `at` (this
    /// machine's clock; ms precision). A time already past is due at once.
    ///
    /// # Errors
    /// As [`publish_after`](Self::publish_after).
    pub async fn publish_at<T: Serialize + ?Sized, C: Codec>(
        &self,
        stream: &Stream<C>,
        value: &T,
        at: SystemTime,
    ) -> Result<ScheduleId, Error> {
        let payload = encode(stream, value)?;
        let mut ids = self.schedule(stream, vec![payload], When::At(at)).await?;
        ids.pop().ok_or(Error::ShutDown)
    }

    /// Schedules one entry per value, all `delay` from now, pipelined.
    /// Returns their schedule ids in the order of `values`. Nothing is sent
    /// when a value fails to encode.
    ///
    /// # Errors
    /// As [`publish_after`](Self::publish_after); after an error some of
    /// them may be scheduled.
    pub async fn publish_batch_after<T, C, I>(
        &self,
        stream: &Stream<C>,
        values: I,
        delay: Duration,
    ) -> Result<Vec<ScheduleId>, Error>
    where
        T: Serialize,
        C: Codec,
        I: IntoIterator<Item = T>,
    {
        let payloads = encode_all(stream, values)?;
        self.schedule(stream, payloads, When::After(delay)).await
    }

    /// Schedules one entry per value, all due at `at`, pipelined.
    ///
    /// # Errors
    /// As [`publish_batch_after`](Self::publish_batch_after).
    pub async fn publish_batch_at<T, C, I>(
        &self,
        stream: &Stream<C>,
        values: I,
        at: SystemTime,
    ) -> Result<Vec<ScheduleId>, Error>
    where
        T: Serialize,
        C: Codec,
        I: IntoIterator<Item = T>,
    {
        let payloads = encode_all(stream, values)?;
        self.schedule(stream, payloads, When::At(at)).await
    }

    /// Cancels a scheduled entry: answers `true` when it was still
    /// scheduled (it will not be added), `false` when it was already added
    /// to the stream, cancelled, or never scheduled there. One script
    /// (`ZREM`, then `HDEL`), so a cancel and the move of the entry never
    /// both succeed.
    ///
    /// # Errors
    /// [`Error::NotStarted`] before `start()`, [`Error::ShutDown`] once the
    /// connections are closed; a connection or Redis error (the entry may
    /// have been cancelled when the reply was lost: cancelling again is
    /// safe).
    pub async fn cancel_scheduled<C: Codec>(
        &self,
        stream: &Stream<C>,
        id: &ScheduleId,
    ) -> Result<bool, Error> {
        let redis = self.redis_addr()?;
        let answer = redis
            .send(Eval {
                script: &schedule::CANCEL,
                keys: schedule::keys(stream.name()),
                args: vec![id.as_str().as_bytes().to_vec()],
            })
            .await
            .map_err(|_| Error::ShutDown)??;
        Ok(matches!(answer, redis::Value::Int(1)))
    }

    async fn schedule<C: Codec>(
        &self,
        stream: &Stream<C>,
        payloads: Vec<Vec<u8>>,
        when: When,
    ) -> Result<Vec<ScheduleId>, Error> {
        let names = unordered(stream, "a delayed publish")?;
        schedule::check(&names.name, when, 1)?;
        if payloads.is_empty() {
            return Ok(Vec::new());
        }
        let redis = self.redis_addr()?;
        let span = spans::send(&names.name, payloads.len());
        let traceparent = traceparent_for(&span);
        let keys = schedule::keys(&names.name);
        let ids = ScheduleId::batch(payloads.len());
        let fields: Vec<_> = payloads
            .into_iter()
            .map(|p| entry_fields(&names, p, traceparent.as_ref()))
            .collect();
        let send = async {
            // One script per chunk, in order: every entry of a chunk is due
            // at the same ms, and added in the order given.
            for (ids, fields) in ids
                .chunks(schedule::PER_CALL)
                .zip(fields.chunks(schedule::PER_CALL))
            {
                let entries: Vec<_> = ids.iter().zip(fields.iter().map(Vec::as_slice)).collect();
                redis
                    .send(Eval {
                        script: &schedule::SCHEDULE,
                        keys: keys.clone(),
                        args: schedule::schedule_args(when, names.max_len, &entries),
                    })
                    .await
                    .map_err(|_| Error::ShutDown)??;
            }
            Ok(ids.clone())
        };
        spans::run(&span, send).await
    }
}
