//! The fleet from outside: the fleet-wide pause and concurrency of a
//! consumer group or a list (its control hash), and the live processes'
//! records.

use super::Admin;
use crate::error::{ConfigError, Error};
use crate::fleet::control::{self, FleetControl, MAX_CONCURRENCY};
use crate::fleet::registry::{self, FleetProcess};
use crate::kind::SourceKind;

impl Admin {
    /// Pauses the consumer group `group` of `stream` in every rillkit
    /// process that consumes it, within a second, and for processes started
    /// later, until [`resume_group`](Self::resume_group): `HSET
    /// {<stream>}:rillkit:control:<group> paused_at_ms <now>` (the group's
    /// control hash, which every process reads every 500 ms and before its
    /// consumers start). A paused consumer starts no read and claims
    /// nothing; what it holds runs, is acked or dead-lettered, and its lease
    /// is kept. The group need not exist yet.
    ///
    /// # Errors
    /// [`Error::Redis`] when the control key holds another type or the ACL
    /// user may not `HSET` it; a connection error.
    pub async fn pause_group(&self, stream: &str, group: &str) -> Result<(), Error> {
        self.control(SourceKind::Stream, stream, group, control::pause_cmd, true)
            .await
    }

    /// Resumes the group `group` of `stream` in every process (`HDEL
    /// <control> paused_at_ms`). A process paused in itself
    /// ([`Broker::pause_local`](crate::Broker::pause_local)) stays paused.
    ///
    /// # Errors
    /// As [`pause_group`](Self::pause_group).
    pub async fn resume_group(&self, stream: &str, group: &str) -> Result<(), Error> {
        self.control(SourceKind::Stream, stream, group, control::pause_cmd, false)
            .await
    }

    /// Pauses every consumer of the list `list`, as
    /// [`pause_group`](Self::pause_group) does for a group:
    /// `HSET {<list>}:rillkit:control paused_at_ms <now>`. A paused list
    /// consumer starts no pop.
    ///
    /// # Errors
    /// As [`pause_group`](Self::pause_group).
    pub async fn pause_list(&self, list: &str) -> Result<(), Error> {
        self.control(SourceKind::List, list, "", control::pause_cmd, true)
            .await
    }

    /// Resumes every consumer of the list `list`.
    ///
    /// # Errors
    /// As [`pause_group`](Self::pause_group).
    pub async fn resume_list(&self, list: &str) -> Result<(), Error> {
        self.control(SourceKind::List, list, "", control::pause_cmd, false)
            .await
    }

    /// Sets the concurrency of every process of the group `group` of
    /// `stream` (handlers each runs at once) to `concurrency`, within a
    /// second and without a restart; `None` gives each its own back. `HSET
    /// <control> concurrency <n>` (`HDEL` for `None`). A batch subscription
    /// and an ordered stream keep theirs (their concurrency sizes their
    /// reads or is shared by partitions). A lower value lets the handlers
    /// running finish; no new one starts until fewer run.
    ///
    /// # Errors
    /// [`Error::Config`] when `concurrency` is not within 1 and
    /// [`MAX_CONCURRENCY`]; as [`pause_group`](Self::pause_group).
    pub async fn scale_group(
        &self,
        stream: &str,
        group: &str,
        concurrency: Option<usize>,
    ) -> Result<(), Error> {
        check(SourceKind::Stream, stream, concurrency)?;
        self.control(
            SourceKind::Stream,
            stream,
            group,
            control::scale_cmd,
            concurrency,
        )
        .await
    }

    /// Sets the concurrency of every consumer of the list `list`, as
    /// [`scale_group`](Self::scale_group) does for a group.
    ///
    /// # Errors
    /// As [`scale_group`](Self::scale_group).
    pub async fn scale_list(&self, list: &str, concurrency: Option<usize>) -> Result<(), Error> {
        check(SourceKind::List, list, concurrency)?;
        self.control(SourceKind::List, list, "", control::scale_cmd, concurrency)
            .await
    }

    /// What the control hash of the group `group` of `stream` asks of the
    /// fleet (`HMGET <control> paused_at_ms concurrency`): nothing when it
    /// does not exist.
    ///
    /// # Errors
    /// [`Error::Redis`] when the key holds another type; a connection error.
    pub async fn group_control(&self, stream: &str, group: &str) -> Result<FleetControl, Error> {
        let key = control::control_key(SourceKind::Stream, stream, group);
        Ok(FleetControl::from_reply(
            &self.query(&control::read_cmd(&key)).await?,
        ))
    }

    /// What the control hash of the list `list` asks of its consumers.
    ///
    /// # Errors
    /// As [`group_control`](Self::group_control).
    pub async fn list_control(&self, list: &str) -> Result<FleetControl, Error> {
        let key = control::control_key(SourceKind::List, list, "");
        Ok(FleetControl::from_reply(
            &self.query(&control::read_cmd(&key)).await?,
        ))
    }

    /// The live rillkit processes (those with a stream or list
    /// subscription), each as its record says: host, pid, version, start,
    /// and per subscription its concurrency, handlers in flight, state and
    /// pause. A process renews its record every 500 ms; one that stopped is
    /// gone at once, one that died within 5 s. Sorted by consumer name, then
    /// host and pid. `ZRANGEBYSCORE {rillkit:fleet}:processes <now> +inf`,
    /// then `MGET` of the records.
    ///
    /// # Errors
    /// A connection error; [`Error::Redis`] when the ACL user may not read
    /// the keys.
    pub async fn fleet(&self) -> Result<Vec<FleetProcess>, Error> {
        let mut live = redis::cmd("ZRANGEBYSCORE");
        live.arg(registry::PROCESSES)
            .arg(registry::now_ms())
            .arg("+inf");
        let keys: Vec<String> = redis::from_redis_value(self.query(&live).await?)
            .map_err(|e| Error::unparsable("ZRANGEBYSCORE reply", e.to_string()))?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut get = redis::cmd("MGET");
        get.arg(&keys);
        let records: Vec<Option<String>> = redis::from_redis_value(self.query(&get).await?)
            .map_err(|e| Error::unparsable("MGET reply", e.to_string()))?;
        let mut fleet = registry::parse(records);
        fleet.sort_by(|a, b| (&a.consumer, &a.host, a.pid).cmp(&(&b.consumer, &b.host, b.pid)));
        Ok(fleet)
    }

    /// The type of the key `key` (`TYPE`): `stream`, `list`, `hash`…, or
    /// `None` when there is no such key.
    ///
    /// # Errors
    /// A connection error; [`Error::Redis`] when the ACL refuses `TYPE`.
    pub async fn key_type(&self, key: &str) -> Result<Option<String>, Error> {
        let mut cmd = redis::cmd("TYPE");
        cmd.arg(key);
        let t: String = redis::from_redis_value(self.query(&cmd).await?)
            .map_err(|e| Error::unparsable("TYPE reply", e.to_string()))?;
        Ok((t != "none").then_some(t))
    }

    async fn control<A>(
        &self,
        kind: SourceKind,
        key: &str,
        group: &str,
        cmd: fn(&str, A) -> redis::Cmd,
        arg: A,
    ) -> Result<(), Error> {
        let control = control::control_key(kind, key, group);
        self.query(&cmd(&control, arg)).await.map(drop)
    }
}

/// A concurrency within 1 and [`MAX_CONCURRENCY`], or `None`.
fn check(kind: SourceKind, key: &str, concurrency: Option<usize>) -> Result<(), Error> {
    match concurrency {
        Some(n) if !(1..=MAX_CONCURRENCY).contains(&n) => {
            Err(Error::Config(ConfigError::Invalid {
                kind: Some(kind),
                key: key.to_owned(),
                option: "concurrency",
                reason: format!("must be within 1 and {MAX_CONCURRENCY}, not {n}"),
            }))
        }
        _ => Ok(()),
    }
}
