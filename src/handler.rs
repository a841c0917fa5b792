//! What a handler receives ([`Message`]) and returns ([`HandlerResult`]), and
//! the type-erased form the consumer loop runs.

use std::fmt;
use std::sync::Arc;

use futures::future::LocalBoxFuture;
use serde::de::DeserializeOwned;

use crate::error::BoxError;
use crate::stream::{Codec, EntryId};

/// What a handler returns: `Ok(())` acks the entry.
///
/// A handler may return any `Result<(), E>` whose error converts into a
/// [`HandlerError`] (every `std::error::Error + Send + Sync`,
/// `anyhow::Error`, `Box<dyn Error + Send + Sync>`, `String`, `&str`):
/// `anyhow::Result<()>` with `bail!`, `ensure!` and `.context(…)?` works.
/// This alias is the one that says what rillkit does with the error.
pub type HandlerResult = Result<(), HandlerError>;

/// Error text kept for logs, dead letters and status: longer text is cut
/// (at a character boundary) and ends in `…`.
pub(crate) const MAX_ERROR_TEXT: usize = 4096;

/// Why a handler did not succeed, and what rillkit does about it.
///
/// Anything that converts into a [`BoxError`] converts into a
/// `HandlerError`: [`HandlerError::Retry`], or [`HandlerError::Reject`] when
/// a [`Reject`] is anywhere in its source chain. So `?` works in handlers on
/// every `std::error::Error + Send + Sync`, `anyhow::Error`, `String`,
/// `&str`, and `BoxError` (what [`Message::decode`] returns):
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
/// Its text (in logs, the dead letter's `error` field and status) is the
/// whole chain: the error's message, then each of its `source()`s that says
/// something new, joined by `": "` (what `{:#}` prints for an
/// `anyhow::Error`), at most 4096 bytes.
///
/// Use [`HandlerError::reject`] (or a [`Reject`] in a handler that returns
/// its own error type) for an entry that can never succeed.
#[derive(Debug)]
pub enum HandlerError {
    /// The entry stays pending (no XACK) and runs again after the
    /// subscription's retry backoff, until its delivery count passes
    /// `max_retries`; then it goes to the dead-letter stream.
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
            HandlerError::Retry(e) => f.write_str(&chain(&**e)),
            HandlerError::Reject(e) => write!(f, "rejected: {}", chain(&**e)),
        }
    }
}

impl<E: Into<BoxError>> From<E> for HandlerError {
    fn from(e: E) -> Self {
        let e = e.into();
        if Reject::is_in(&*e) {
            HandlerError::Reject(e)
        } else {
            HandlerError::Retry(e)
        }
    }
}

/// An error that rejects the entry, for handlers that return their own
/// error type (`anyhow::Result<()>`, an application's error enum): found
/// anywhere in the returned error's source chain (also under
/// `.context(…)`), it makes the error a [`HandlerError::Reject`]: the entry
/// goes to the dead-letter stream now, without further runs.
///
/// ```
/// use rillkit::{HandlerError, Reject};
///
/// fn check(qty: i64) -> anyhow::Result<()> {
///     if qty < 0 {
///         anyhow::bail!(Reject::new(format!("negative quantity {qty}")));
///     }
///     Ok(())
/// }
/// let e = HandlerError::from(anyhow::Context::context(check(-1), "order 7").unwrap_err());
/// assert!(e.is_reject());
/// assert_eq!(e.to_string(), "rejected: order 7: negative quantity -1");
/// ```
#[derive(Debug)]
pub struct Reject(BoxError);

impl Reject {
    /// A rejection for `reason` (a message or an error; its own sources stay
    /// in the chain).
    pub fn new(reason: impl Into<BoxError>) -> Self {
        Reject(reason.into())
    }

    /// Whether a `Reject` is `e` or one of its sources.
    fn is_in(e: &(dyn std::error::Error + 'static)) -> bool {
        let mut cur = Some(e);
        while let Some(e) = cur {
            if e.is::<Reject>() {
                return true;
            }
            cur = e.source();
        }
        false
    }
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Reject {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// `e`'s message and each of its sources that adds something (a source
/// whose text the message already holds, as error types that print their
/// cause do, is left out), joined by `": "`, at most [`MAX_ERROR_TEXT`]
/// bytes.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cur = e.source();
    while let Some(source) = cur {
        if text.len() >= MAX_ERROR_TEXT {
            break;
        }
        let part = source.to_string();
        if !part.is_empty() && !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cur = source.source();
    }
    bounded(text)
}

/// `text` cut to at most [`MAX_ERROR_TEXT`] bytes at a character boundary,
/// ending in `…` when cut.
pub(crate) fn bounded(mut text: String) -> String {
    if text.len() > MAX_ERROR_TEXT {
        let mut end = MAX_ERROR_TEXT - '…'.len_utf8();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
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
    decode_field(codec, msg.data())
}

/// A data field's bytes (`None`: the entry has none) decoded into `T`, or
/// why they cannot be.
pub(crate) fn decode_field<T: DeserializeOwned, C: Codec>(
    codec: &C,
    data: Option<&[u8]>,
) -> Result<T, Undeliverable> {
    match data {
        None => Err(Undeliverable::NoData),
        Some([]) => Err(Undeliverable::EmptyData),
        Some(data) => codec.decode::<T>(data).map_err(Undeliverable::Decode),
    }
}

/// One entry or item offered to a batch handler: its id (a stream entry's;
/// a list item has none), its data (`None`: an entry without a data field)
/// and its delivery count (a list item's run count).
pub(crate) struct BatchInput<'a> {
    pub id: Option<&'a EntryId>,
    pub data: Option<&'a [u8]>,
    pub delivery_count: u64,
}

/// The call of a batch handler with the entries that decoded: its future
/// answers one result per entry, in the order it got them.
pub(crate) type BatchCall =
    Box<dyn FnOnce() -> LocalBoxFuture<'static, Vec<HandlerResult>> + 'static>;

/// A batch made ready for its handler: the entries that cannot reach it
/// (by their index in the batch offered, in order, with why), and the call
/// with the others (`None`: no entry decoded).
pub(crate) struct PreparedBatch {
    pub undeliverable: Vec<(usize, Undeliverable)>,
    pub call: Option<BatchCall>,
}

impl PreparedBatch {
    /// Sorts the entries offered (`offered`, in the order the handler was
    /// offered them) into those that cannot reach it, each with why, and
    /// those the call gets, in order; and the call.
    pub(crate) fn sort<T>(
        self,
        offered: Vec<T>,
    ) -> (Vec<(T, Undeliverable)>, Vec<T>, Option<BatchCall>) {
        let mut bad = self.undeliverable.into_iter().peekable();
        let (mut undeliverable, mut good) = (Vec::new(), Vec::with_capacity(offered.len()));
        for (i, entry) in offered.into_iter().enumerate() {
            match bad.next_if(|(j, _)| *j == i) {
                Some((_, why)) => undeliverable.push((entry, why)),
                None => good.push(entry),
            }
        }
        (undeliverable, good, self.call)
    }
}

/// A type-erased batch handler: decodes the entries (or list items)
/// offered and makes the call for those that decoded.
pub(crate) type ErasedBatch = Arc<dyn Fn(&[BatchInput<'_>]) -> PreparedBatch + Send + Sync>;

/// A batch handler as a consumer loop runs it natively (a plain stream's, a
/// list's): one handler future per batch of up to `max_entries` queued
/// entries (a batch starts when it is full or its first entry has waited
/// `max_wait`, see [`Gathering`](crate::delivery::batch::Gathering)), as
/// many batches at once as the subscription's `concurrency`.
#[derive(Clone)]
pub(crate) struct BatchHandler {
    pub handler: ErasedBatch,
    pub max_entries: usize,
    pub max_wait: std::time::Duration,
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

/// One entry of a batch, as a batch handler sees it: the decoded value, its
/// entry id (or, for a list item, none) and its own delivery count.
#[derive(Debug, Clone)]
pub struct BatchEntry<T> {
    value: T,
    id: Option<EntryId>,
    delivery_count: u64,
}

impl<T> BatchEntry<T> {
    pub(crate) fn new(value: T, id: Option<EntryId>, delivery_count: u64) -> Self {
        BatchEntry {
            value,
            id,
            delivery_count,
        }
    }

    /// The decoded value.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The decoded value, taken out.
    pub fn into_value(self) -> T {
        self.value
    }

    /// The stream entry's id; `None` for a list item.
    pub fn id(&self) -> Option<&EntryId> {
        self.id.as_ref()
    }

    /// How many times this entry has been delivered, counting this run (1
    /// on the first): the server's count for a stream entry (XPENDING), the
    /// run for a list item.
    pub fn delivery_count(&self) -> u64 {
        self.delivery_count
    }
}

/// What a batch handler answers: one result for the whole batch, or one per
/// entry, in the order the entries were given.
///
/// Entries whose result is `Ok` are acked; the others are retried (or
/// dead-lettered) each by its own delivery count, exactly as if a handler
/// of their own had failed; a [`Reject`] dead-letters only its entry. An
/// entry that succeeded never runs again because another failed.
///
/// ```
/// use rillkit::{BatchOutcome, HandlerError};
///
/// // One result for all (any `Result<(), E>` whose error converts).
/// let all: BatchOutcome = Ok::<(), anyhow::Error>(()).into();
/// // One per entry: the second failed.
/// let each = BatchOutcome::each([Ok(()), Err(HandlerError::retry("timeout")), Ok(())]);
/// # let _ = (all, each);
/// ```
#[derive(Debug)]
pub struct BatchOutcome(Outcome);

#[derive(Debug)]
enum Outcome {
    All(HandlerResult),
    Each(Vec<HandlerResult>),
}

impl BatchOutcome {
    /// Every entry succeeded.
    pub fn ok() -> Self {
        BatchOutcome(Outcome::All(Ok(())))
    }

    /// One result per entry, in the order the handler got them. An entry
    /// without a result (the list is shorter) counts as failed.
    pub fn each<I, E>(results: I) -> Self
    where
        I: IntoIterator<Item = Result<(), E>>,
        E: Into<HandlerError>,
    {
        BatchOutcome(Outcome::Each(
            results.into_iter().map(|r| r.map_err(Into::into)).collect(),
        ))
    }

    /// The results, one per entry of a batch of `len`.
    pub(crate) fn split(self, len: usize) -> Vec<HandlerResult> {
        match self.0 {
            Outcome::All(Ok(())) => (0..len).map(|_| Ok(())).collect(),
            Outcome::All(Err(e)) => {
                // Each entry gets the same failure, as text (an error is not
                // `Clone`), its whole chain kept.
                let (reject, text) = match &e {
                    HandlerError::Retry(b) => (false, chain(&**b)),
                    HandlerError::Reject(b) => (true, chain(&**b)),
                };
                (0..len)
                    .map(|_| {
                        let e: BoxError = text.clone().into();
                        Err(if reject {
                            HandlerError::Reject(e)
                        } else {
                            HandlerError::Retry(e)
                        })
                    })
                    .collect()
            }
            Outcome::Each(mut each) => {
                let missing = len.saturating_sub(each.len());
                each.truncate(len);
                each.extend((0..missing).map(|_| {
                    Err(HandlerError::retry(
                        "the batch handler gave no result for this entry",
                    ))
                }));
                each
            }
        }
    }
}

impl<E: Into<HandlerError>> From<Result<(), E>> for BatchOutcome {
    fn from(r: Result<(), E>) -> Self {
        BatchOutcome(Outcome::All(r.map_err(Into::into)))
    }
}
