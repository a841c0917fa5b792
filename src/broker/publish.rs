//! Publishing to lists and channels (publishing to streams is in
//! `mod.rs`, beside the handle).

use serde::Serialize;

use super::Broker;
use crate::error::{ConfigError, Error};
use crate::kind::SourceKind;
use crate::redis::Query;
use crate::source::channel::Channel;
use crate::source::list::List;
use crate::stream::Codec;

impl Broker {
    /// Pushes one item onto a list (`LPUSH`), encoded with the list's codec.
    /// Answers the list's length after the push. Runs in a
    /// `rillkit.publish` span (OpenTelemetry `send <list>`, kind producer);
    /// an item carries no `traceparent`.
    ///
    /// # Errors
    /// [`Error::Encode`]; otherwise as [`publish`](Self::publish).
    pub async fn publish_list<T: Serialize + ?Sized, C: Codec>(
        &self,
        list: &List<C>,
        value: &T,
    ) -> Result<u64, Error> {
        let item = encode_item(list, value)?;
        self.push(list, vec![item]).await
    }

    /// Pushes many items onto a list in one `LPUSH` (in the order given, so
    /// consumers pop them in that order). Answers the list's length after
    /// the push; nothing is sent when a value fails to encode or there is
    /// none. One `rillkit.publish` span covers the push
    /// (`messaging.batch.message_count` the number of items).
    ///
    /// # Errors
    /// As [`publish_list`](Self::publish_list).
    pub async fn publish_list_batch<T, C, I>(&self, list: &List<C>, values: I) -> Result<u64, Error>
    where
        T: Serialize,
        C: Codec,
        I: IntoIterator<Item = T>,
    {
        let items = values
            .into_iter()
            .map(|v| encode_item(list, &v))
            .collect::<Result<Vec<_>, _>>()?;
        if items.is_empty() {
            return Ok(0);
        }
        self.push(list, items).await
    }

    async fn push<C: Codec>(&self, list: &List<C>, items: Vec<Vec<u8>>) -> Result<u64, Error> {
        if list.name().is_empty() {
            return Err(Error::Config(ConfigError::Invalid {
                kind: Some(SourceKind::List),
                key: String::new(),
                option: "name",
                reason: "a list needs a name".into(),
            }));
        }
        let span = super::spans::send(list.name(), items.len());
        let mut cmd = redis::cmd("LPUSH");
        cmd.arg(list.name()).arg(items);
        let pushed = async {
            let v = self.query("lpush", cmd).await?;
            Ok(crate::status::int(&v).unwrap_or(0))
        };
        super::spans::run(&span, pushed).await
    }

    /// A command on a shared connection.
    pub(crate) async fn query(
        &self,
        acl: &'static str,
        cmd: redis::Cmd,
    ) -> Result<redis::Value, Error> {
        self.redis_addr()?
            .send(Query(acl, cmd))
            .await
            .map_err(|_| Error::ShutDown)?
    }
}

fn encode_item<T: Serialize + ?Sized, C: Codec>(
    list: &List<C>,
    value: &T,
) -> Result<Vec<u8>, Error> {
    list.codec().encode(value).map_err(|source| Error::Encode {
        kind: SourceKind::List,
        key: list.name().to_owned(),
        source,
    })
}

impl Broker {
    /// Publishes one message on a channel (`PUBLISH`), encoded with the
    /// channel's codec. Answers how many subscribers received it (in a
    /// cluster: those connected to the node that took the command). Runs in
    /// a `rillkit.publish` span (OpenTelemetry `send <channel>`, kind
    /// producer); a message carries no `traceparent`.
    ///
    /// # Errors
    /// [`Error::Encode`]; otherwise as [`publish`](Self::publish).
    pub async fn publish_channel<T: Serialize + ?Sized, C: Codec>(
        &self,
        channel: &Channel<C>,
        value: &T,
    ) -> Result<u64, Error> {
        let payload = channel
            .codec()
            .encode(value)
            .map_err(|source| Error::Encode {
                kind: SourceKind::Channel,
                key: channel.name().to_owned(),
                source,
            })?;
        let span = super::spans::send(channel.name(), 1);
        let mut cmd = redis::cmd("PUBLISH");
        cmd.arg(channel.name()).arg(payload);
        let published = async {
            let v = self.query("publish", cmd).await?;
            Ok(crate::status::int(&v).unwrap_or(0))
        };
        super::spans::run(&span, published).await
    }
}
