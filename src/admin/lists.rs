//! Reliable lists from outside: what a list and its consumers hold
//! ([`Admin::list_status`], [`Admin::lists`]), and the dead letters of a
//! list: read ([`Admin::list_dead_letters`]), put back
//! ([`Admin::redrive_list`]) or deleted ([`Admin::purge_list`]).
//!
//! A list's dead letters are JSON documents in a list (`<list>-dlq`, under
//! a cluster `{<list>}-dlq`), newest on the left (`LPUSH`): `{"list",
//! "item" | "item_bytes", "error", "consumer", "attempts",
//! "dead_lettered_at_ms"}`. They have no ids: one is named by its place
//! counted from the oldest (0), which a newer dead letter does not change.

use std::sync::LazyLock;

use serde::Deserialize;

use super::Admin;
use crate::error::Error;
use crate::keys::{ListKeys, slot_prefix};

/// A reliable list and its consumers, as the server holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListStatus {
    /// The list.
    pub list: String,
    /// Items waiting (`LLEN`).
    pub length: u64,
    /// Its dead-letter list.
    pub dlq: String,
    /// Dead letters in it (`LLEN`).
    pub dead_letters: u64,
    /// Its registered consumers, by name.
    pub consumers: Vec<ListConsumer>,
}

/// One registered consumer of a reliable list.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListConsumer {
    /// Its name.
    pub name: String,
    /// Items it holds (its processing list's `LLEN`).
    pub processing: u64,
    /// Its heartbeat is live: its record's expiry is after the server's
    /// `TIME`. A dead one's items go back to the list when a live consumer
    /// recovers them.
    pub alive: bool,
}

/// One dead letter of a list, read apart.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListDeadLetter {
    /// Its place, counted from the oldest (0).
    pub index: u64,
    /// The dead letter as stored (the JSON document).
    pub raw: Vec<u8>,
    /// The list it came from (`None` when the document is not one rillkit
    /// wrote).
    pub list: Option<String>,
    /// The item, verbatim.
    pub item: Option<Vec<u8>>,
    /// Why it failed.
    pub error: Option<String>,
    /// The consumer whose handler failed it last.
    pub consumer: Option<String>,
    /// How many times it ran.
    pub attempts: Option<u64>,
    /// When it was moved, in ms since the Unix epoch.
    pub dead_lettered_at_ms: Option<u64>,
}

#[derive(Deserialize)]
struct Stored {
    list: String,
    #[serde(default)]
    item: Option<String>,
    #[serde(default)]
    item_bytes: Option<Vec<u8>>,
    error: String,
    consumer: String,
    attempts: u64,
    dead_lettered_at_ms: u64,
}

impl ListDeadLetter {
    fn read(index: u64, raw: Vec<u8>) -> Self {
        let stored: Option<Stored> = serde_json::from_slice(&raw).ok();
        match stored {
            Some(s) => ListDeadLetter {
                index,
                list: Some(s.list),
                item: s.item.map(String::into_bytes).or(s.item_bytes),
                error: Some(s.error),
                consumer: Some(s.consumer),
                attempts: Some(s.attempts),
                dead_lettered_at_ms: Some(s.dead_lettered_at_ms),
                raw,
            },
            None => ListDeadLetter {
                index,
                raw,
                list: None,
                item: None,
                error: None,
                consumer: None,
                attempts: None,
                dead_lettered_at_ms: None,
            },
        }
    }
}

/// What [`Admin::redrive_list`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListRedriveReport {
    /// The dead letters put back (by their place), each onto its list.
    pub redriven: Vec<u64>,
    /// The dead letters left where they are, with the reason.
    pub skipped: Vec<(u64, String)>,
}

/// KEYS: dead-letter list, origin list. ARGV: the dead letter as read, the
/// item. Checks the origin is a list (or none) and that both writes are
/// allowed, then removes the dead letter (the oldest copy) and `LPUSH`es
/// the item onto its list, where it waits behind what is there. Answers 1,
/// or a reason (a string) when it changes nothing.
const REDRIVE_LIST_LUA: &str = r#"
local t = redis.call('TYPE', KEYS[2])['ok']
if t ~= 'list' and t ~= 'none' then return 'its list ' .. KEYS[2] .. ' is a ' .. t end
if not redis.acl_check_cmd('LPUSH', KEYS[2], 'x') then
  return redis.error_reply('NOPERM this user has no permissions to run the lpush command on ' .. KEYS[2])
end
if not redis.acl_check_cmd('LREM', KEYS[1], '-1', 'x') then
  return redis.error_reply('NOPERM this user has no permissions to run the lrem command on ' .. KEYS[1])
end
if redis.call('LREM', KEYS[1], -1, ARGV[1]) == 0 then return 'no longer in the dead-letter list' end
redis.call('LPUSH', KEYS[2], ARGV[2])
return 1
"#;

static REDRIVE_LIST: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(REDRIVE_LIST_LUA));

impl Admin {
    /// The reliable lists on the server whose names match `pattern`: those
    /// with a registry of consumers (`<slot>:rillkit:consumers`, a set
    /// written by their consumers' heartbeats), sorted. At-most-once lists
    /// keep nothing beside them and are not found. `SCAN … TYPE set`, as
    /// [`streams`](Self::streams).
    ///
    /// # Errors
    /// As [`streams`](Self::streams).
    pub async fn lists(&self, pattern: &str) -> Result<Vec<String>, Error> {
        let registries = self.scan("*:rillkit:consumers", "set").await?;
        let mut lists: Vec<String> = registries
            .iter()
            .filter_map(|r| r.strip_suffix(":rillkit:consumers"))
            .map(|prefix| {
                // `{<list>}` for a list without a hash tag, else the list.
                match prefix.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                    Some(inner) if slot_prefix(inner) == prefix => inner.to_owned(),
                    _ => prefix.to_owned(),
                }
            })
            .filter(|l| glob(pattern, l))
            .collect();
        lists.sort();
        lists.dedup();
        Ok(lists)
    }

    /// A reliable list's length, dead letters and registered consumers,
    /// each with the items it holds and whether its heartbeat is live
    /// (`LLEN`, `SMEMBERS`, `GET` of each heartbeat record, `TIME`).
    ///
    /// # Errors
    /// [`Error::Redis`] when a key holds another type; a connection error.
    pub async fn list_status(&self, list: &str) -> Result<ListStatus, Error> {
        let dlq = self.dlq_of(list);
        let keys = ListKeys::new(list.into(), dlq.as_str().into(), "");
        let length = self.llen(list).await?;
        let dead_letters = self.llen(&dlq).await?;
        let mut members = redis::cmd("SMEMBERS");
        members.arg(&keys.registry);
        let mut names: Vec<String> = redis::from_redis_value(self.query(&members).await?)
            .map_err(|e| Error::unparsable("SMEMBERS reply", e.to_string()))?;
        names.sort();
        let now = self.server_ms().await?;
        let mut consumers = Vec::new();
        for name in names {
            let own = ListKeys::new(list.into(), dlq.as_str().into(), &name);
            let mut get = redis::cmd("GET");
            get.arg(&own.heartbeat);
            let record: Option<String> = redis::from_redis_value(self.query(&get).await?)
                .map_err(|e| Error::unparsable("GET reply", e.to_string()))?;
            let alive = record
                .as_deref()
                .and_then(|r| r.split_once(' '))
                .and_then(|(token, expiry)| Some((token, expiry.parse::<u64>().ok()?)))
                .is_some_and(|(token, expiry)| token != "?" && expiry > now);
            consumers.push(ListConsumer {
                processing: self.llen(&own.processing).await?,
                name,
                alive,
            });
        }
        Ok(ListStatus {
            list: list.to_owned(),
            length,
            dlq,
            dead_letters,
            consumers,
        })
    }

    /// The dead letters of a list's dead-letter list `dlq`, oldest first,
    /// read apart (see [`ListDeadLetter`]), those whose error contains
    /// `error` when given, at most `count` (`LRANGE`, all of it).
    ///
    /// # Errors
    /// [`Error::Redis`] when `dlq` is not a list; a connection error.
    pub async fn list_dead_letters(
        &self,
        dlq: &str,
        error: Option<&str>,
        count: Option<usize>,
    ) -> Result<Vec<ListDeadLetter>, Error> {
        let mut range = redis::cmd("LRANGE");
        range.arg(dlq).arg(0).arg(-1);
        let mut all: Vec<Vec<u8>> = redis::from_redis_value(self.query(&range).await?)
            .map_err(|e| Error::unparsable("LRANGE reply", e.to_string()))?;
        // Newest on the left: the oldest is the last.
        all.reverse();
        Ok(all
            .into_iter()
            .enumerate()
            .map(|(i, raw)| ListDeadLetter::read(i as u64, raw))
            .filter(|d| error.is_none_or(|e| d.error.as_deref().is_some_and(|x| x.contains(e))))
            .take(count.unwrap_or(usize::MAX))
            .collect())
    }

    /// Puts `letters` (read with [`list_dead_letters`](Self::list_dead_letters)
    /// from `dlq`) back: each item onto its list (`LPUSH`, behind what waits
    /// there) and out of `dlq` (`LREM`), in one script each. It runs again
    /// with its attempts counted afresh. Skipped, with the reason: one not
    /// written by rillkit, one whose list key holds another type, one gone
    /// from `dlq` meanwhile, and under a cluster one whose list is in
    /// another hash slot than `dlq`.
    ///
    /// # Errors
    /// [`Error::Redis`] when the ACL user may not `LPUSH` the list or `LREM`
    /// `dlq` (`NOPERM`: nothing of that dead letter was written); a
    /// connection error. Dead letters redriven before it stay redriven.
    pub async fn redrive_list(
        &self,
        dlq: &str,
        letters: &[ListDeadLetter],
    ) -> Result<ListRedriveReport, Error> {
        let mut report = ListRedriveReport::default();
        for d in letters {
            let (Some(list), Some(item)) = (&d.list, &d.item) else {
                report
                    .skipped
                    .push((d.index, "not a dead letter rillkit wrote".into()));
                continue;
            };
            if self.cluster
                && crate::keys::key_slot(list.as_bytes()) != crate::keys::key_slot(dlq.as_bytes())
            {
                report.skipped.push((
                    d.index,
                    format!("its list {list:?} is in another hash slot than {dlq:?}"),
                ));
                continue;
            }
            let mut call = REDRIVE_LIST.key(dlq);
            call.key(list).arg(&d.raw).arg(item);
            let mut conn = self.conn.clone();
            let answer: redis::Value = call
                .invoke_async(&mut conn)
                .await
                .map_err(Error::from_redis)?;
            match answer {
                redis::Value::Int(1) => report.redriven.push(d.index),
                other => {
                    let reason: String = redis::from_redis_value(other)
                        .unwrap_or_else(|_| "unexpected reply".into());
                    report.skipped.push((d.index, reason));
                }
            }
        }
        Ok(report)
    }

    /// Deletes `letters` (read with
    /// [`list_dead_letters`](Self::list_dead_letters)) from `dlq` (`LREM`
    /// of each, the oldest copy). Answers how many were deleted.
    ///
    /// # Errors
    /// [`Error::Redis`] when `dlq` is not a list; a connection error.
    pub async fn purge_list(&self, dlq: &str, letters: &[ListDeadLetter]) -> Result<u64, Error> {
        let mut deleted = 0;
        for d in letters {
            let mut cmd = redis::cmd("LREM");
            cmd.arg(dlq).arg(-1).arg(&d.raw);
            let n: u64 = redis::from_redis_value(self.query(&cmd).await?)
                .map_err(|e| Error::unparsable("LREM reply", e.to_string()))?;
            deleted += n;
        }
        Ok(deleted)
    }

    async fn llen(&self, key: &str) -> Result<u64, Error> {
        let mut cmd = redis::cmd("LLEN");
        cmd.arg(key);
        redis::from_redis_value(self.query(&cmd).await?)
            .map_err(|e| Error::unparsable("LLEN reply", e.to_string()))
    }

    /// The server's clock (`TIME`), in ms since the Unix epoch.
    async fn server_ms(&self) -> Result<u64, Error> {
        let (s, us): (u64, u64) = redis::from_redis_value(self.query(&redis::cmd("TIME")).await?)
            .map_err(|e| Error::unparsable("TIME reply", e.to_string()))?;
        Ok(s * 1000 + us / 1000)
    }
}

/// Whether `name` matches the glob `pattern` (`*` and `?` only).
fn glob(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

#[cfg(test)]
mod tests;
