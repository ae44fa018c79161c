//! The consumer's inbox on PostgreSQL (see [`backstop_core::inbox`]).

use std::time::Duration;
use tokio_postgres::types::Type;

use backstop_core::driver::millis;
use backstop_core::inbox::{inbox_key, inbox_purge};
use backstop_core::{async_trait, Error, HandlerError, Inbox, Message, Processed, Result};
use deadpool_postgres::Transaction;
use futures_util::future::BoxFuture;

use crate::connect::pg_err;
use crate::PgStore;

backstop_core::inbox_handler! {
    /// A message handler of a consumer on PostgreSQL: it gets the inbox's transaction for
    /// its business writes. Make one with [`pg_handler`].
    ///
    /// ```
    /// use backstop_postgres::pg_handler;
    /// let handler = pg_handler(|tx, message| {
    ///     Box::pin(async move {
    ///         tx.execute("UPDATE orders SET paid = true WHERE id = $1", &[&message.biz_key])
    ///             .await?;
    ///         Ok(())
    ///     })
    /// });
    /// # let _ = handler;
    /// ```
    PgHandler, pg_handler, for<'a> &'a Transaction<'a>
}

impl PgStore {
    /// [`run_idempotent`](backstop_core::inbox#run_idempotent-on-every-backend) on a
    /// deadpool transaction of the store's pool: `f` gets it for its business writes.
    ///
    /// ```no_run
    /// # async fn demo(store: backstop_postgres::PgStore) -> backstop_core::Result<()> {
    /// let done = store
    ///     .run_idempotent("payments", "msg-7f3a", |tx| {
    ///         Box::pin(async move {
    ///             tx.execute("UPDATE orders SET paid = true WHERE id = 42", &[])
    ///                 .await
    ///                 .map_err(|e| backstop_core::Error::new(
    ///                     backstop_core::ErrorKind::Unexpected, "pay", e.to_string()))?;
    ///             Ok::<_, backstop_core::Error>(())
    ///         })
    ///     })
    ///     .await?;
    /// # let _ = done;
    /// # Ok(()) }
    /// ```
    pub async fn run_idempotent<T, E, F>(
        &self,
        consumer: &str,
        message_id: &str,
        f: F,
    ) -> std::result::Result<Processed<T>, E>
    where
        E: From<Error>,
        F: for<'a> FnOnce(&'a Transaction<'a>) -> BoxFuture<'a, std::result::Result<T, E>>,
    {
        let mut client = self.client().await?;
        let Some(tx) = self.begin_inbox(&mut client, consumer, message_id).await? else {
            return Ok(Processed::Duplicate);
        };
        let value = f(&tx).await?;
        commit(tx).await?;
        Ok(Processed::Done(value))
    }

    /// Open the inbox transaction on `client` and insert the row of
    /// `(consumer, message_id)`; `None` (and nothing written) when it exists.
    async fn begin_inbox<'c>(
        &self,
        client: &'c mut deadpool_postgres::Object,
        consumer: &str,
        message_id: &str,
    ) -> Result<Option<Transaction<'c>>> {
        let key = inbox_key(consumer, message_id)?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg_err(e).with_operation(OP))?;
        let sql = &self.inner.sql.inbox_insert;
        let inserted = if self.inner.prepared() {
            let stmt = tx
                .prepare_cached(sql)
                .await
                .map_err(|e| pg_err(e).with_operation(OP))?;
            tx.execute(&stmt, &[&key.consumer, &key.message_id]).await
        } else {
            // behind a transaction pooler: unnamed, with the parameters' types
            tx.execute_typed(
                sql,
                &[(&key.consumer, Type::TEXT), (&key.message_id, Type::TEXT)],
            )
            .await
        }
        .map_err(|e| pg_err(e).with_operation(OP))?;
        // dropping the transaction rolls it back: nothing was written
        Ok((inserted == 1).then_some(tx))
    }
}

const OP: &str = "run_idempotent";

async fn commit(tx: Transaction<'_>) -> Result<()> {
    tx.commit().await.map_err(|e| pg_err(e).with_operation(OP))
}

#[async_trait]
impl Inbox for PgStore {
    type Handler = PgHandler;

    async fn process(
        &self,
        consumer: &str,
        message: &Message,
        handler: &PgHandler,
    ) -> std::result::Result<Processed<()>, HandlerError> {
        let call = message
            .branch()
            .map_err(|e| HandlerError::from(e).permanent())?;
        let mut client = self.client().await?;
        let Some(tx) = self.begin_inbox(&mut client, consumer, &message.id).await? else {
            return Ok(Processed::Duplicate);
        };
        // a relayed saga step: the barrier decides, on the inbox's transaction
        let runs = match &call {
            Some(call) => self.barrier_tx(&tx, call).await?.should_run(),
            None => true,
        };
        if runs {
            handler(&tx, message).await?;
        }
        commit(tx).await?;
        Ok(Processed::Done(()))
    }

    async fn purge_inbox(&self, older_than: Duration, limit: usize) -> Result<u64> {
        let Some(batch) = inbox_purge(older_than, limit)? else {
            return Ok(0);
        };
        self.inner
            .execute(
                &self.inner.sql.inbox_purge,
                &[&millis(batch.older_than), &(batch.limit as i64)],
            )
            .await
            .map_err(|e| e.with_operation("purge_inbox"))
    }
}
