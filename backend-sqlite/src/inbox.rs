//! The consumer's inbox on SQLite (see [`backstop_core::inbox`]).

use std::sync::Arc;
use std::time::Duration;

use backstop_core::inbox::{inbox_key, inbox_purge};
use backstop_core::{async_trait, Error, HandlerError, Inbox, Message, Processed, Result};
use rusqlite::params;

use crate::conn::db_err;
use crate::sql::now_ms;
use crate::{SqliteStore, SqliteTx};

/// A message handler of a consumer on SQLite: it gets the inbox's transaction for its
/// business writes, on the thread where the file's writes run (so it is synchronous:
/// keep it short). Make one with [`sqlite_handler`].
pub type SqliteHandler =
    Arc<dyn Fn(&SqliteTx<'_>, &Message) -> std::result::Result<(), HandlerError> + Send + Sync>;

/// Wrap a closure as a [`SqliteHandler`].
///
/// ```
/// use backstop_sqlite::sqlite_handler;
/// let handler = sqlite_handler(|tx, message| {
///     tx.execute("UPDATE orders SET paid = 1 WHERE id = ?1", [&message.biz_key])?;
///     Ok(())
/// });
/// # let _ = handler;
/// ```
pub fn sqlite_handler<F>(f: F) -> SqliteHandler
where
    F: Fn(&SqliteTx<'_>, &Message) -> std::result::Result<(), HandlerError> + Send + Sync + 'static,
{
    Arc::new(f)
}

impl SqliteStore {
    /// [`run_idempotent`](backstop_core::inbox#run_idempotent-on-every-backend) in one
    /// `BEGIN IMMEDIATE` transaction (see [`transaction`](Self::transaction)) on the
    /// file's writer: `f` runs there, synchronously, for its business writes. Runs of the
    /// same key are serialized by the file's write lock.
    ///
    /// ```no_run
    /// # async fn demo(store: backstop_sqlite::SqliteStore) -> backstop_core::Result<()> {
    /// use backstop_core::Processed;
    /// let done = store
    ///     .run_idempotent("payments", "msg-7f3a", |tx| {
    ///         tx.execute("UPDATE orders SET paid = 1 WHERE id = 42", [])
    ///             .map_err(|e| backstop_core::Error::new(
    ///                 backstop_core::ErrorKind::Unexpected, "pay", e.to_string()))?;
    ///         Ok::<_, backstop_core::Error>(())
    ///     })
    ///     .await?;
    /// assert!(matches!(done, Processed::Done(()) | Processed::Duplicate));
    /// # Ok(()) }
    /// ```
    pub async fn run_idempotent<T, E, F>(
        &self,
        consumer: &str,
        message_id: &str,
        f: F,
    ) -> std::result::Result<Processed<T>, E>
    where
        T: Send + 'static,
        E: From<Error> + Send + 'static,
        F: FnOnce(&SqliteTx<'_>) -> std::result::Result<T, E> + Send + 'static,
    {
        const OP: &str = "run_idempotent";
        let key = inbox_key(consumer, message_id)?;
        let (consumer, message_id) = (key.consumer.to_owned(), key.message_id.to_owned());
        let sql = Arc::clone(&self.inner.sql);
        self.transaction(move |tx| {
            let inserted = tx
                .prepare_cached(&sql.inbox_insert)
                .and_then(|mut s| s.execute(params![consumer, message_id, now_ms()]))
                .map_err(|e| E::from(db_err(OP, e)))?;
            if inserted == 0 {
                return Ok(Processed::Duplicate); // nothing written: the commit is empty
            }
            f(tx).map(Processed::Done)
        })
        .await
    }
}

#[async_trait]
impl Inbox for SqliteStore {
    type Handler = SqliteHandler;

    async fn process(
        &self,
        consumer: &str,
        message: &Message,
        handler: &SqliteHandler,
    ) -> std::result::Result<Processed<()>, HandlerError> {
        let call = message
            .branch()
            .map_err(|e| HandlerError::from(e).permanent())?;
        let (handler, owned) = (Arc::clone(handler), message.clone());
        self.run_idempotent(consumer, &message.id, move |tx| {
            // a relayed saga step: the barrier decides, on the inbox's transaction
            if let Some(call) = &call {
                if !tx.barrier(call)?.should_run() {
                    return Ok(());
                }
            }
            handler(tx, &owned)
        })
        .await
    }

    async fn purge_inbox(&self, older_than: Duration, limit: usize) -> Result<u64> {
        let Some(batch) = inbox_purge(older_than, limit)? else {
            return Ok(0);
        };
        self.inner
            .purge("purge_inbox", |sql| &sql.inbox_purge, batch)
            .await
    }
}
