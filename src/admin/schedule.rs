//! Scheduled entries of a stream: scheduled, counted, cancelled.

use std::time::{Duration, SystemTime};

use super::Admin;
use crate::error::Error;
use crate::schedule::{self, ScheduleId, Scheduled, When};

impl Admin {
    /// Schedules an entry of `fields` to be added to `stream` `delay` from
    /// now (the server's clock), as
    /// [`Broker::publish_after`](crate::Broker::publish_after) does: one
    /// script writes it beside the stream (`ZADD` and `HSET` in the
    /// stream's hash slot), and a process consuming the stream adds it
    /// when due. The stream's length cap is not known here: none is
    /// applied when it is added.
    ///
    /// # Errors
    /// [`Error::Config`] for no fields, more than 1,000, or a delay over 10
    /// years; a connection or Redis error (the entry may be scheduled when
    /// the reply was lost).
    pub async fn schedule_after<F, V>(
        &self,
        stream: &str,
        fields: &[(F, V)],
        delay: Duration,
    ) -> Result<ScheduleId, Error>
    where
        F: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        self.schedule(stream, fields, When::After(delay)).await
    }

    /// As [`schedule_after`](Self::schedule_after), due at `at` (this
    /// machine's clock; a time already past is due at once).
    ///
    /// # Errors
    /// As [`schedule_after`](Self::schedule_after).
    pub async fn schedule_at<F, V>(
        &self,
        stream: &str,
        fields: &[(F, V)],
        at: SystemTime,
    ) -> Result<ScheduleId, Error>
    where
        F: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        self.schedule(stream, fields, When::At(at)).await
    }

    async fn schedule<F, V>(
        &self,
        stream: &str,
        fields: &[(F, V)],
        when: When,
    ) -> Result<ScheduleId, Error>
    where
        F: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        schedule::check(stream, when, fields.len())?;
        let id = ScheduleId::batch(1).remove(0);
        let mut call = schedule::SCHEDULE.prepare_invoke();
        for k in schedule::keys(stream) {
            call.key(k);
        }
        for a in schedule::schedule_args(when, None, &[(&id, fields)]) {
            call.arg(a);
        }
        let mut conn = self.conn.clone();
        let _: redis::Value = call
            .invoke_async(&mut conn)
            .await
            .map_err(Error::from_redis)?;
        Ok(id)
    }

    /// Cancels a scheduled entry of `stream`: `true` when it was still
    /// scheduled, `false` when it was already added, cancelled or never
    /// scheduled there (`ZREM` and `HDEL` in one script).
    ///
    /// # Errors
    /// A connection or Redis error; cancelling again is safe.
    pub async fn cancel_scheduled(&self, stream: &str, id: &ScheduleId) -> Result<bool, Error> {
        let mut call = schedule::CANCEL.prepare_invoke();
        for k in schedule::keys(stream) {
            call.key(k);
        }
        call.arg(id.as_str());
        let mut conn = self.conn.clone();
        let n: i64 = call
            .invoke_async(&mut conn)
            .await
            .map_err(Error::from_redis)?;
        Ok(n == 1)
    }

    /// How many entries are scheduled on `stream` and when the first is
    /// due: `ZCARD` and `ZRANGE … 0 0 WITHSCORES` of its sorted set.
    ///
    /// # Errors
    /// A connection or Redis error.
    pub async fn scheduled(&self, stream: &str) -> Result<Scheduled, Error> {
        let key = schedule::due_key(stream);
        let mut pipe = redis::pipe();
        pipe.cmd("ZCARD")
            .arg(&key)
            .cmd("ZRANGE")
            .arg(&key)
            .arg(0)
            .arg(0)
            .arg("WITHSCORES");
        let mut conn = self.conn.clone();
        let (count, first): (u64, Vec<(String, f64)>) = pipe
            .query_async(&mut conn)
            .await
            .map_err(Error::from_redis)?;
        Ok(schedule::parse_scheduled(count, &first))
    }
}
