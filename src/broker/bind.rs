//! The handler binding: a user's closure turned into the type-erased
//! handler a consumer loop calls, decoding first, and given the [`Broker`]
//! handle its context carries. The loops below never hold a `Broker`.

use std::future::Future;
use std::sync::{Arc, OnceLock, Weak};

use futures::future::LocalBoxFuture;
use serde::de::DeserializeOwned;

use super::batch::BatchOptions;
use super::delivery::{Delivery, ItemDelivery};
use super::{Broker, Inner};
use crate::handler::{
    BatchCall, BatchEntry, BatchHandler, BatchInput, BatchOutcome, ErasedBatch, ErasedHandler,
    HandlerError, HandlerResult, ItemHandler, Message, Prepared, PreparedBatch, Undeliverable,
    decode_data, decode_field, decode_item,
};
use crate::stream::Codec;

/// The broker a handler is bound to, known once `build()` has made it
/// (handlers are subscribed before). Weak, so a handler held by the broker's
/// own subscriptions does not keep the broker alive.
#[derive(Clone, Default)]
pub(crate) struct BrokerCell(Arc<OnceLock<Weak<Inner>>>);

impl BrokerCell {
    /// A cell already holding `broker` (subscriptions added at run time).
    pub(crate) fn of(broker: &Broker) -> Self {
        let cell = BrokerCell::default();
        cell.set(broker);
        cell
    }

    pub(crate) fn set(&self, broker: &Broker) {
        let _ = self.0.set(Arc::downgrade(&broker.inner));
    }

    /// The broker. A handler runs only in a running broker, which its
    /// lifecycle driver keeps alive.
    ///
    /// # Panics
    /// Before `build()` or after the broker was dropped (a handler never runs
    /// then; the loop catches the panic like a handler's).
    fn broker(&self) -> Broker {
        let inner = self
            .0
            .get()
            .and_then(Weak::upgrade)
            .expect("a handler runs only while its broker exists");
        Broker { inner }
    }
}

/// A handler's future, boxed, its error made a [`HandlerError`].
fn erase<Fut, E>(fut: Fut) -> LocalBoxFuture<'static, HandlerResult>
where
    Fut: Future<Output = Result<(), E>> + 'static,
    E: Into<HandlerError> + 'static,
{
    Box::pin(async move { fut.await.map_err(Into::into) })
}

pub(crate) fn typed<T, C, F, Fut, E>(codec: C, f: F) -> ErasedHandler
where
    T: DeserializeOwned + 'static,
    C: Codec,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + 'static,
    E: Into<HandlerError> + 'static,
{
    Arc::new(move |msg: &Message| match decode_data(&codec, msg) {
        Ok(value) => Prepared::Run(erase(f(value))),
        Err(why) => Prepared::Undeliverable(why),
    })
}

pub(crate) fn typed_with_context<T, C, F, Fut, E>(codec: C, f: F, cell: BrokerCell) -> ErasedHandler
where
    T: DeserializeOwned + 'static,
    C: Codec,
    F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + 'static,
    E: Into<HandlerError> + 'static,
{
    Arc::new(move |msg: &Message| match decode_data(&codec, msg) {
        Ok(value) => Prepared::Run(erase(f(value, Delivery::of(msg, &cell.broker())))),
        Err(why) => Prepared::Undeliverable(why),
    })
}

pub(crate) fn whole<F, Fut, E>(f: F) -> ErasedHandler
where
    F: Fn(Message) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + 'static,
    E: Into<HandlerError> + 'static,
{
    Arc::new(move |msg: &Message| Prepared::Run(erase(f(msg.clone()))))
}

pub(crate) fn typed_item<T, C, F, Fut, E>(codec: C, f: F) -> ItemHandler
where
    T: DeserializeOwned + 'static,
    C: Codec,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + 'static,
    E: Into<HandlerError> + 'static,
{
    Arc::new(move |bytes: &[u8], _| {
        let value = decode_item::<T, C>(&codec, bytes)?;
        Ok(erase(f(value)))
    })
}

pub(crate) fn typed_item_with_context<T, C, F, Fut, E>(
    codec: C,
    f: F,
    cell: BrokerCell,
) -> ItemHandler
where
    T: DeserializeOwned + 'static,
    C: Codec,
    F: Fn(T, ItemDelivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + 'static,
    E: Into<HandlerError> + 'static,
{
    Arc::new(move |bytes: &[u8], meta| {
        let value = decode_item::<T, C>(&codec, bytes)?;
        let d = ItemDelivery::of(meta, cell.broker());
        Ok(erase(f(value, d)))
    })
}

/// A batch handler of stream entries, run natively by the stream's
/// consumer loop (a plain stream's, each partition's of an ordered one):
/// one future per batch; an entry that does not decode never joins a batch.
pub(crate) fn typed_batch<T, C, F, Fut, O>(codec: C, options: BatchOptions, f: F) -> BatchHandler
where
    T: DeserializeOwned + Send + 'static,
    C: Codec,
    F: Fn(Vec<BatchEntry<T>>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = O> + 'static,
    O: Into<BatchOutcome>,
{
    BatchHandler {
        handler: native_batch(codec, Arc::new(f), decode_field),
        max_entries: options.max_entries(),
        max_wait: options.max_wait(),
    }
}

/// The native form of a batch handler: decodes the entries offered (with
/// `decode`: a stream entry's data field, a list item), and calls `f` once
/// with those that decoded, its outcome split into one result per entry.
fn native_batch<T, C, F, Fut, O>(
    codec: C,
    f: Arc<F>,
    decode: fn(&C, Option<&[u8]>) -> Result<T, Undeliverable>,
) -> ErasedBatch
where
    T: DeserializeOwned + Send + 'static,
    C: Codec,
    F: Fn(Vec<BatchEntry<T>>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = O> + 'static,
    O: Into<BatchOutcome>,
{
    Arc::new(move |inputs: &[BatchInput<'_>]| {
        let mut undeliverable = Vec::new();
        let mut entries = Vec::with_capacity(inputs.len());
        for (i, input) in inputs.iter().enumerate() {
            match decode(&codec, input.data) {
                Ok(value) => entries.push(BatchEntry::new(
                    value,
                    input.id.cloned(),
                    input.delivery_count,
                )),
                Err(why) => undeliverable.push((i, why)),
            }
        }
        let call = (!entries.is_empty()).then(|| {
            let f = f.clone();
            Box::new(move || {
                let n = entries.len();
                let fut = f(entries);
                Box::pin(async move { fut.await.into().split(n) })
                    as LocalBoxFuture<'static, Vec<HandlerResult>>
            }) as BatchCall
        });
        PreparedBatch {
            undeliverable,
            call,
        }
    })
}

/// [`typed_batch`] whose handler also gets the [`Broker`], to publish
/// onward.
pub(crate) fn typed_batch_with_context<T, C, F, Fut, O>(
    codec: C,
    options: BatchOptions,
    f: F,
    cell: BrokerCell,
) -> BatchHandler
where
    T: DeserializeOwned + Send + 'static,
    C: Codec,
    F: Fn(Vec<BatchEntry<T>>, Broker) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = O> + 'static,
    O: Into<BatchOutcome>,
{
    let bound = move |entries: Vec<BatchEntry<T>>| f(entries, cell.broker());
    typed_batch(codec, options, bound)
}

/// A batch handler of list items, run natively by the list's consumer
/// loop: as [`typed_batch`]'s native form, an item's run count as its
/// delivery count; an item that does not decode never joins a batch.
pub(crate) fn typed_item_batch<T, C, F, Fut, O>(
    codec: C,
    options: BatchOptions,
    f: F,
) -> BatchHandler
where
    T: DeserializeOwned + Send + 'static,
    C: Codec,
    F: Fn(Vec<BatchEntry<T>>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = O> + 'static,
    O: Into<BatchOutcome>,
{
    BatchHandler {
        handler: native_batch(codec, Arc::new(f), item_value),
        max_entries: options.max_entries(),
        max_wait: options.max_wait(),
    }
}

/// A list item's value, decoded as a handler of its own decodes it.
fn item_value<T: DeserializeOwned, C: Codec>(
    codec: &C,
    item: Option<&[u8]>,
) -> Result<T, Undeliverable> {
    decode_item::<T, C>(codec, item.unwrap_or_default()).map_err(Undeliverable::Decode)
}
