//! What a handler receives ([`Message`]) and returns ([`HandlerResult`]), and
//! the type-erased form the consumer loop runs.

use std::fmt;
use std::sync::Arc;

use futures::future::LocalBoxFuture;
use serde::de::DeserializeOwned;

use crate::error::BoxError;
use crate::stream::{Codec, EntryId};

/// What a handler returns: `Ok(())` acks the entry.
pub type HandlerResult = Result<(), HandlerError>;

/// Why a handler did not succeed, and what rillkit does about it.
///
/// Anything that converts into a [`BoxError`] converts into
/// [`HandlerError::Retry`], so `?` works in handlers on every
/// `std::error::Error + Send + Sync`, `anyhow::Error`, `String`, `&str`, and
/// `BoxError` (what [`Message::decode`] returns):
///
/// ```
/// use rillkit::{BoxError, HandlerResult, Json, Message};
///
/// fn io() -> HandlerResult {
///     std::fs::read("/no/such/file")?;
///     Ok(())
/// }
/// fn any() -> HandlerResult {
///     Err(anyhow::anyhow!("the ledger is down"))?
/// }
/// fn text() -> HandlerResult {
///     Err(String::from("bad input"))?;
///     Err("bad input")?
/// }
/// fn boxed() -> HandlerResult {
///     Err::<(), BoxError>("boxed".into())?;
///     Ok(())
/// }
/// fn decode(msg: &Message) -> HandlerResult {
///     let _amount: u64 = msg.decode(&Json)?;
///     Ok(())
/// }
/// for r in [io(), any(), text(), boxed()] {
///     assert!(!r.unwrap_err().is_reject(), "`?` means retry");
/// }
/// # let _ = decode;
/// ```
///
/// Use [`HandlerError::reject`] for an entry that can never succeed.
#[derive(Debug)]
pub enum HandlerError {
    /// The entry stays pending (no XACK) and is handled again once it has been
    /// idle for `claim_idle`, until its delivery count passes `max_retries`;
    /// then it goes to the dead-letter stream.
    Retry(BoxError),
    /// The entry can never succeed: it is copied to the dead-letter stream and
    /// acked now, without further runs. (A list item goes to the dead-letter
    /// list at once; for a channel it is dropped like any failure.)
    Reject(BoxError),
}

impl HandlerError {
    /// A retryable failure with a message.
    pub fn retry(reason: impl Into<BoxError>) -> Self {
        HandlerError::Retry(reason.into())
    }

    /// A rejection with a message: the entry goes to the dead-letter stream now.
    pub fn reject(reason: impl Into<BoxError>) -> Self {
        HandlerError::Reject(reason.into())
    }

    /// `true` for [`HandlerError::Reject`].
    pub fn is_reject(&self) -> bool {
        matches!(self, HandlerError::Reject(_))
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandlerError::Retry(e) => write!(f, "{e}"),
            HandlerError::Reject(e) => write!(f, "rejected: {e}"),
        }
    }
}

impl<E: Into<BoxError>> From<E> for HandlerError {
    fn from(e: E) -> Self {
        HandlerError::Retry(e.into())
    }
}

/// One stream entry as a whole-message handler sees it.
#[derive(Debug, Clone)]
pub struct Message {
    /// The entry id.
    pub id: EntryId,
    /// The stream key.
    pub stream: Arc<str>,
    /// The consumer group it was read in.
    pub group: Arc<str>,
    /// The consumer that holds it in the pending entries list.
    pub consumer: Arc<str>,
    /// How many times Redis has delivered it to a consumer of this group,
    /// counting this delivery (1 on the first run). This is the server's count
    /// (XPENDING), so it also counts deliveries to other processes.
    pub delivery_count: u64,
    /// Every field/value pair of the entry, in stream order, as raw bytes
    /// (shared: cloning a `Message` does not copy them).
    pub fields: Arc<[(Vec<u8>, Vec<u8>)]>,
    pub(crate) data_field: Arc<str>,
}

impl Message {
    /// The value of the first field named `name`, if any.
    pub fn field(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(k, _)| k.as_slice() == name.as_bytes())
            .map(|(_, v)| v.as_slice())
    }

    /// The bytes of the stream's data field (`data` by default), if present.
    pub fn data(&self) -> Option<&[u8]> {
        self.field(&self.data_field)
    }

    /// Decodes the data field with a codec.
    ///
    /// # Errors
    /// When the data field is missing or does not decode into `T`.
    pub fn decode<T: DeserializeOwned, C: Codec>(&self, codec: &C) -> Result<T, BoxError> {
        let data = self
            .data()
            .ok_or_else(|| format!("entry has no {:?} field", &*self.data_field))?;
        codec.decode(data)
    }

    /// `true` when this is not the first delivery of the entry.
    pub fn is_redelivery(&self) -> bool {
        self.delivery_count > 1
    }
}

/// Why an entry cannot reach its handler. Such entries go to the dead-letter
/// stream at once and are acked.
#[derive(Debug)]
pub(crate) enum Undeliverable {
    NoData,
    EmptyData,
    Decode(BoxError),
}

impl fmt::Display for Undeliverable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Undeliverable::NoData => f.write_str("no data field"),
            Undeliverable::EmptyData => f.write_str("empty data field"),
            Undeliverable::Decode(e) => write!(f, "data does not decode: {e}"),
        }
    }
}

/// An entry made ready for its handler: the future to run, or why it cannot
/// reach the handler at all.
pub(crate) enum Prepared {
    Run(LocalBoxFuture<'static, HandlerResult>),
    Undeliverable(Undeliverable),
}

/// A type-erased handler: turns a message into the future that handles it.
/// (The broker binds the user's handler to its `Broker` handle, so the
/// loops that call it never carry one.)
pub(crate) type ErasedHandler = Arc<dyn Fn(&Message) -> Prepared + Send + Sync>;

/// The data field decoded into `T`, or why it cannot be.
pub(crate) fn decode_data<T: DeserializeOwned, C: Codec>(
    codec: &C,
    msg: &Message,
) -> Result<T, Undeliverable> {
    match msg.data() {
        None => Err(Undeliverable::NoData),
        Some([]) => Err(Undeliverable::EmptyData),
        Some(data) => codec.decode::<T>(data).map_err(Undeliverable::Decode),
    }
}

/// Where a list item or a channel message came from and which run this is:
/// what a handler with context learns beside the value.
pub(crate) struct ItemMeta {
    /// The list, or the channel the message was published on.
    pub source: Arc<str>,
    /// The pattern that matched (`PSUBSCRIBE`), else `None`.
    pub pattern: Option<Arc<str>>,
    /// The subscription's consumer name.
    pub consumer: Arc<str>,
    /// Which run of the item this is (1 on the first).
    pub attempt: u64,
}

/// A handler of a list item or a channel message: the item's bytes decoded
/// with the source's codec into the handler's type, then the future to run;
/// `Err` when the bytes do not decode (the handler is not called).
pub(crate) type ItemHandler = Arc<
    dyn Fn(&[u8], ItemMeta) -> Result<LocalBoxFuture<'static, HandlerResult>, BoxError>
        + Send
        + Sync,
>;

/// An item's bytes decoded into `T`; an empty item never decodes.
pub(crate) fn decode_item<T: DeserializeOwned, C: Codec>(
    codec: &C,
    bytes: &[u8],
) -> Result<T, BoxError> {
    if bytes.is_empty() {
        return Err("empty item".into());
    }
    codec.decode::<T>(bytes)
}
