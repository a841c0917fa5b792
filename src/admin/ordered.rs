//! Streams ordered by key, seen from outside a broker: the partition count
//! recorded for a stream, who owns each partition, and publishing into the
//! partitions by key.

use std::collections::BTreeMap;

use redis::Value;

use super::Admin;
use crate::error::Error;
use crate::order::{partition_name, partition_of};
use crate::source::stream::ordered::{check_recorded, record_command};
use crate::stream::EntryId;

impl Admin {
    /// The partition count recorded for the stream `name` if it is
    /// [ordered by key](crate::Stream::ordered_by) (`GET
    /// {<name>}:rillkit:partitions`), else `None`.
    ///
    /// # Errors
    /// A connection error; an unparsable record.
    pub async fn partitions(&self, name: &str) -> Result<Option<u16>, Error> {
        let (record, _) = crate::keys::ordered_keys(name, "");
        let mut cmd = redis::cmd("GET");
        cmd.arg(&record);
        match self.query(&cmd).await? {
            Value::Nil => Ok(None),
            v => {
                let text: String = redis::from_redis_value(v)
                    .map_err(|e| Error::unparsable("partition count record", e.to_string()))?;
                text.trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| Error::unparsable("partition count record", text))
            }
        }
    }

    /// Records `partitions` as the partition count of the ordered stream
    /// `name` when none is (`SET … NX`), or checks it against the one
    /// recorded.
    ///
    /// # Errors
    /// [`Error::Config`] naming both counts when another is recorded; a
    /// connection error.
    pub async fn record_partitions(&self, name: &str, partitions: u16) -> Result<(), Error> {
        let (record, _) = crate::keys::ordered_keys(name, "");
        let answer = self.query(&record_command(&record, partitions)).await?;
        check_recorded(name, &record, partitions, &answer)
    }

    /// The consumer of `group` that owns partition `partition` (a stream
    /// key `<name>:p<i>`) now: the holder of its lease, or `None` when
    /// nobody holds it.
    ///
    /// # Errors
    /// A connection error.
    pub async fn partition_owner(
        &self,
        partition: &str,
        group: &str,
    ) -> Result<Option<String>, Error> {
        let (lease, _) = crate::keys::partition_keys(partition, group);
        let mut cmd = redis::cmd("GET");
        cmd.arg(&lease);
        let holder: Option<String> = redis::from_redis_value(self.query(&cmd).await?)
            .map_err(|e| Error::unparsable("partition lease", e.to_string()))?;
        // The lease holds `<consumer> <process token>`.
        Ok(holder.map(|h| match h.rsplit_once(' ') {
            Some((consumer, _)) => consumer.to_owned(),
            None => h,
        }))
    }

    /// Adds entries to the ordered stream `name` of `partitions`
    /// partitions, each into its key's partition
    /// ([`partition_of`]): `XADD <name>:p<i> *
    /// <data_field> <data> <key_field> <key>`, pipelined, one pipeline per
    /// partition (a cluster routes each to its master). `entries` are (key,
    /// data) pairs; the ids come back in their order.
    ///
    /// # Errors
    /// A connection error (some entries may have been added); [`Error::Redis`]
    /// when a partition key is not a stream.
    pub async fn add_keyed(
        &self,
        name: &str,
        partitions: u16,
        key_field: &str,
        data_field: &str,
        entries: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<Vec<EntryId>, Error> {
        let mut by_partition: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (i, (key, _)) in entries.iter().enumerate() {
            by_partition
                .entry(partition_of(key, partitions))
                .or_default()
                .push(i);
        }
        let mut ids = vec![EntryId(String::new()); entries.len()];
        for (p, indexes) in by_partition {
            let stream = partition_name(name, p);
            for chunk in indexes.chunks(1000) {
                let mut pipe = redis::pipe();
                for &i in chunk {
                    let (key, data) = &entries[i];
                    pipe.cmd("XADD")
                        .arg(&stream)
                        .arg("*")
                        .arg(data_field)
                        .arg(data.as_slice())
                        .arg(key_field)
                        .arg(key.as_slice());
                }
                let mut conn = self.conn.clone();
                let answer: Vec<String> = pipe
                    .query_async(&mut conn)
                    .await
                    .map_err(Error::from_redis)?;
                for (&i, id) in chunk.iter().zip(answer) {
                    ids[i] = EntryId(id);
                }
            }
        }
        Ok(ids)
    }
}
