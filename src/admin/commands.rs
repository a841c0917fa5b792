//! What each master has of the newer stream commands, and idempotent
//! adds.

use std::time::Duration;

use super::Admin;
use crate::error::Error;
use crate::redis::commands::{self, ServerCommands};
use crate::redis::idempotent::{self, AddOnce};
use crate::stream::{EntryId, MessageKey};

impl Admin {
    /// The newer stream commands each master has (`COMMAND DOCS`), and so
    /// the paths rillkit takes on it: `XACKDEL` acks and `XTRIM … ACKED`
    /// sweeps for streams kept with
    /// [`with_retain_acked`](crate::Stream::with_retain_acked), `XADD …
    /// IDMP` for idempotent publishes; the scripts that work everywhere
    /// otherwise. One row per master: `host:port` of `CLUSTER SLOTS` under
    /// a cluster, the server as the connection describes it otherwise. A
    /// server that refuses the question shows none.
    ///
    /// # Errors
    /// A connection error; [`Error::Redis`] when `CLUSTER SLOTS` is
    /// refused.
    pub async fn server_commands(&self) -> Result<Vec<(String, ServerCommands)>, Error> {
        let mut rows = Vec::new();
        for node in self.masters().await? {
            let mut conn = self.conn.clone();
            let found = match conn.on_node(&commands::question(), node.as_deref()).await {
                Ok(reply) => commands::parse(&reply),
                Err(e) => {
                    let e = Error::from_redis(e);
                    if e.is_retryable() {
                        return Err(e);
                    }
                    ServerCommands::default()
                }
            };
            rows.push((node.unwrap_or_else(|| self.describe.clone()), found));
        }
        Ok(rows)
    }

    /// Adds an entry with `fields` to `stream` unless `key` was added to it
    /// within `window`; answers the entry's id (the first one's for a
    /// resend), or `None` when `create` is off and there is no stream
    /// `stream` (nothing is added).
    ///
    /// The mechanism of
    /// [`Broker::publish_idempotent`](crate::Broker::publish_idempotent)
    /// (`XADD … IDMP` on Redis 8.6 and later, a script with a marker key
    /// elsewhere), with the same window rules: 1 s to 24 h.
    ///
    /// # Errors
    /// [`Error::Config`] for a window out of range or more than 1,000
    /// fields; a connection error;
    /// [`Error::Redis`] when Redis refuses (the key is not a stream, the
    /// ACL, `OOM`). Trying again is safe.
    pub async fn add_idempotent<F, V>(
        &self,
        stream: &str,
        key: &MessageKey,
        fields: &[(F, V)],
        window: Duration,
        create: bool,
    ) -> Result<Option<EntryId>, Error>
    where
        F: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        if !(Duration::from_secs(1)..=Duration::from_secs(86_400)).contains(&window) {
            return Err(Error::Config(crate::ConfigError::Invalid {
                kind: Some(crate::SourceKind::Stream),
                key: stream.to_owned(),
                option: "idempotency_window",
                reason: "must be from 1 s to 24 h".into(),
            }));
        }
        if fields.len() > idempotent::MAX_FIELDS {
            return Err(Error::Config(crate::ConfigError::Invalid {
                kind: Some(crate::SourceKind::Stream),
                key: stream.to_owned(),
                option: "fields",
                reason: format!(
                    "an idempotent add takes at most {} field/value pairs",
                    idempotent::MAX_FIELDS
                ),
            }));
        }
        let fields: Vec<(&[u8], &[u8])> = fields
            .iter()
            .map(|(f, v)| (f.as_ref(), v.as_ref()))
            .collect();
        let add = AddOnce {
            stream,
            producer: key.producer(),
            message_id: key.id(),
            fields: &fields,
            max_len: None,
            window,
            create,
        };
        let mut conn = self.conn.clone();
        idempotent::add(&mut conn, &self.known, &add)
            .await
            .map_err(Error::from_redis)
    }
}
