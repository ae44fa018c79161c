//! The consumer's inbox: process each message exactly once in effect.
//!
//! A message from a broker (or an HTTP callback, or any at-least-once source) may arrive
//! twice. The inbox is a table of `(consumer, message_id)` rows, one per message a
//! consumer has processed, written **in the same database transaction as the handler's
//! business writes**: the row is inserted first; if it already exists (zero rows
//! inserted) the message is a duplicate and nothing runs; otherwise the handler runs and
//! its writes commit together with the row, or roll back together with it. The database
//! is the arbiter: a second delivery racing the first waits on the first's row lock and
//! then sees it as a duplicate (or takes over if the first rolled back).
//!
//! The key includes the consumer, so two consumer groups reading the same stream each
//! process every message once (keyed by message id alone, the second group would skip
//! what the first processed).
//!
//! Each backend offers `run_idempotent(consumer, message_id, f)` with its native
//! transaction, and implements [`Inbox`] for consumers generic over the backend (the
//! Redis Streams consumer of `backstop-redis`).
//!
//! # `run_idempotent`, on every backend
//!
//! Runs `f` once per `(consumer, message_id)` in effect: in one transaction, it inserts
//! the inbox row, then runs `f` on the same transaction for the business writes, then
//! commits. A message already processed by `consumer` runs nothing and answers
//! [`Processed::Duplicate`]; when `f` fails everything rolls back, the inbox row too, so
//! a redelivery runs it again. A concurrent run of the same key waits for this one,
//! then sees a duplicate. For messages from any source: a broker, an HTTP callback. An
//! empty or over-long consumer or message id is `InvalidInput` ([`inbox_key`]), and
//! nothing is written. The error type is the caller's, as long as a backstop
//! [`Error`] converts into it. The inbox table is `<task table>_inbox`,
//! created by `migrate`; its rows are purged by [`Inbox::purge_inbox`] once older than
//! any redelivery can be (longer than the outbox's retry horizon plus the stream's
//! retention).

use std::time::Duration;

use async_trait::async_trait;

use crate::driver::{AgedBatch, Checked};
use crate::engine::HandlerError;
use crate::error::{Error, Result};
use crate::limits;

/// Longest consumer name, in bytes.
pub const MAX_CONSUMER_BYTES: usize = 128;
/// Longest message id, in bytes.
pub const MAX_MESSAGE_ID_BYTES: usize = 191;

/// What an idempotent run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processed<T> {
    /// The message was new: the work ran and committed with its inbox row.
    Done(T),
    /// The consumer had already processed this message: nothing ran.
    Duplicate,
}

impl<T> Processed<T> {
    /// Whether the message was a duplicate.
    pub fn is_duplicate(&self) -> bool {
        matches!(self, Processed::Duplicate)
    }
}

/// A message as a consumer hands it to its handler.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Message {
    /// The message's own id: the same across redeliveries and re-publications (the
    /// inbox key, with the consumer).
    pub id: String,
    /// The event type it was published as.
    pub event_type: String,
    /// The business key (an order id, say).
    pub biz_key: String,
    /// The payload.
    pub payload: String,
    /// Further headers, in order.
    pub headers: Vec<(String, String)>,
    /// How many times it has been delivered, this delivery included (1 the first time).
    pub deliveries: u64,
}

impl Message {
    /// The participant barrier's call this message carries in its headers
    /// ([`BranchCall::HEADERS`](crate::BranchCall::HEADERS)), if any: a saga's step (or a
    /// TCC branch) relayed to this participant. Every backend's
    /// [`Inbox::process`] applies it: in the inbox transaction, before the handler, the
    /// barrier decides whether the handler runs (a compensation that arrives first
    /// leaves a record and runs nothing; a forward call after its compensation, or a
    /// second delivery of a call under a new message id, runs nothing); the verdict
    /// commits with the inbox row either way. `InvalidInput` when the headers carry a
    /// partial or invalid call.
    pub fn branch(&self) -> Result<Option<crate::BranchCall>> {
        crate::BranchCall::from_headers(&self.headers)
    }

    /// A message with no headers, delivered once (for tests and other sources).
    pub fn new(
        id: impl Into<String>,
        event_type: impl Into<String>,
        biz_key: impl Into<String>,
        payload: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            event_type: event_type.into(),
            biz_key: biz_key.into(),
            payload: payload.into(),
            headers: Vec::new(),
            deliveries: 1,
        }
    }
}

/// The key of an inbox row; only core checks and makes it (see [`inbox_key`]).
#[derive(Debug, Clone, Copy)]
pub struct InboxKey<'a> {
    /// The consumer (1 to [`MAX_CONSUMER_BYTES`] bytes).
    pub consumer: &'a str,
    /// The message (1 to [`MAX_MESSAGE_ID_BYTES`] bytes).
    pub message_id: &'a str,
}

/// Check an inbox key at the API boundary: an empty or over-long consumer or message id
/// is `InvalidInput`, and nothing is written.
pub fn inbox_key<'a>(consumer: &'a str, message_id: &'a str) -> Result<Checked<InboxKey<'a>>> {
    const OP: &str = "run_idempotent";
    for (what, value, max) in [
        ("consumer", consumer, MAX_CONSUMER_BYTES),
        ("message id", message_id, MAX_MESSAGE_ID_BYTES),
    ] {
        if value.is_empty() || value.len() > max {
            return Err(Error::invalid_input(
                OP,
                format!("the {what} must be 1 to {max} bytes, got {}", value.len()),
            ));
        }
    }
    Ok(Checked::new(InboxKey {
        consumer,
        message_id,
    }))
}

/// Check the arguments of [`Inbox::purge_inbox`]; `None` when `limit` is 0 (nothing to
/// do, as for the store's other batches).
pub fn inbox_purge(older_than: Duration, limit: usize) -> Result<Option<Checked<AgedBatch>>> {
    const OP: &str = "purge_inbox";
    limits::check_duration(OP, "older_than", older_than)?;
    limits::check_limit(OP, limit)?;
    Ok((limit > 0).then(|| Checked::new(AgedBatch { older_than, limit })))
}

/// A backend's inbox, for consumers generic over the backend.
///
/// # Contract
/// - [`process`](Self::process) inserts the `(consumer, message.id)` row, then runs
///   `handler` in the same transaction, then commits. When the row exists it runs
///   nothing and answers [`Processed::Duplicate`]. When the handler fails (or the commit
///   does) everything rolls back — the inbox row too — and the error is returned, so a
///   redelivery runs it again.
/// - A concurrent `process` of the same key waits for the first and then answers
///   `Duplicate` (or runs, if the first rolled back): the effect happens once.
/// - Store failures are returned as retryable [`HandlerError`]s naming the operation.
#[async_trait]
pub trait Inbox: Send + Sync + 'static {
    /// A message handler in this backend's native form (it gets the transaction).
    type Handler: Send + Sync + 'static;

    /// Process `message` once for `consumer` (see the contract).
    async fn process(
        &self,
        consumer: &str,
        message: &Message,
        handler: &Self::Handler,
    ) -> std::result::Result<Processed<()>, HandlerError>;

    /// Delete at most `limit` inbox rows processed more than `older_than` ago, oldest
    /// first; returns how many. Keep rows longer than a message can be redelivered.
    async fn purge_inbox(&self, older_than: Duration, limit: usize) -> Result<u64>;
}

/// The boxed future of a backend's message handler (see [`inbox_handler!`]).
#[doc(hidden)]
pub use futures_util::future::BoxFuture;

/// **For backend authors**: declares a backend's message handler for [`Inbox`] (a boxed
/// closure given the inbox's transaction, in the backend's native form, and the
/// message) and the function that boxes one, from the transaction's type:
///
/// ```ignore
/// backstop_core::inbox_handler! {
///     /// A message handler of a consumer on MySQL.
///     MySqlHandler, mysql_handler, for<'a> &'a mut sqlx::MySqlConnection
/// }
/// ```
#[macro_export]
macro_rules! inbox_handler {
    ($(#[$doc:meta])* $alias:ident, $ctor:ident, for<'a> $tx:ty) => {
        $(#[$doc])*
        pub type $alias = ::std::boxed::Box<
            dyn for<'a> Fn(
                    $tx,
                    &'a $crate::Message,
                ) -> $crate::inbox::BoxFuture<'a, ::std::result::Result<(), $crate::HandlerError>>
                + Send
                + Sync,
        >;

        #[doc = concat!("Box a closure as a [`", stringify!($alias), "`].")]
        pub fn $ctor<F>(f: F) -> $alias
        where
            F: for<'a> Fn(
                    $tx,
                    &'a $crate::Message,
                ) -> $crate::inbox::BoxFuture<'a, ::std::result::Result<(), $crate::HandlerError>>
                + Send
                + Sync
                + 'static,
        {
            ::std::boxed::Box::new(f)
        }
    };
}
