//! The consumer's inbox on MySQL / MariaDB (see [`backstop_core::inbox`]).

use std::time::Duration;

use backstop_core::driver::retry_contention;
use backstop_core::inbox::{inbox_key, inbox_purge};
use backstop_core::{async_trait, Error, HandlerError, Inbox, Message, Processed, Result};
use futures_util::future::BoxFuture;
use sqlx::{MySql, MySqlConnection, Transaction};

use crate::conn::safe;
use crate::connect::my_err;
use crate::MySqlStore;

const OP: &str = "run_idempotent";

backstop_core::inbox_handler! {
    /// A message handler of a consumer on MySQL: it gets the inbox's transaction (a
    /// connection inside it) for its business writes. Make one with [`mysql_handler`].
    ///
    /// ```
    /// use backstop_mysql::mysql_handler;
    /// let handler = mysql_handler(|conn, message| {
    ///     Box::pin(async move {
    ///         sqlx::query("UPDATE orders SET paid = 1 WHERE id = ?")
    ///             .bind(&message.biz_key)
    ///             .execute(conn)
    ///             .await?;
    ///         Ok(())
    ///     })
    /// });
    /// # let _ = handler;
    /// ```
    MySqlHandler, mysql_handler, for<'a> &'a mut MySqlConnection
}

impl MySqlStore {
    /// [`run_idempotent`](backstop_core::inbox#run_idempotent-on-every-backend) on a sqlx
    /// transaction of the store's pool: `f` gets a connection inside it for its business
    /// writes.
    ///
    /// The inbox row is inserted with `INSERT IGNORE`, whose gap locks can deadlock when
    /// several runs of one key race one that rolled back: that first statement is run
    /// again on a deadlock (the store's `contention_retries`), before `f` ever runs. A
    /// deadlock inside `f` is `f`'s to handle: keep the transaction short.
    pub async fn run_idempotent<T, E, F>(
        &self,
        consumer: &str,
        message_id: &str,
        f: F,
    ) -> std::result::Result<Processed<T>, E>
    where
        E: From<Error>,
        F: for<'a> FnOnce(&'a mut MySqlConnection) -> BoxFuture<'a, std::result::Result<T, E>>,
    {
        let Some(mut tx) = self.begin_inbox(consumer, message_id).await? else {
            return Ok(Processed::Duplicate);
        };
        let value = f(&mut tx).await?;
        tx.commit()
            .await
            .map_err(|e| my_err(e).with_operation(OP))?;
        Ok(Processed::Done(value))
    }

    /// Begin the inbox transaction and insert the row of `(consumer, message_id)`;
    /// `None` (and nothing written) when it exists.
    async fn begin_inbox(
        &self,
        consumer: &str,
        message_id: &str,
    ) -> Result<Option<Transaction<'static, MySql>>> {
        let key = inbox_key(consumer, message_id)?;
        let sql = &self.inner.sql;
        retry_contention(&self.inner.options.config, OP, || async {
            let mut tx = self.inner.pool.begin().await.map_err(my_err)?;
            let inserted = sqlx::query(safe(&sql.inbox_insert))
                .bind(key.consumer)
                .bind(key.message_id)
                .execute(&mut *tx)
                .await
                .map_err(my_err)?
                .rows_affected();
            // dropping the transaction rolls it back: nothing was written
            Ok((inserted == 1).then_some(tx))
        })
        .await
    }
}

#[async_trait]
impl Inbox for MySqlStore {
    type Handler = MySqlHandler;

    async fn process(
        &self,
        consumer: &str,
        message: &Message,
        handler: &MySqlHandler,
    ) -> std::result::Result<Processed<()>, HandlerError> {
        let call = message
            .branch()
            .map_err(|e| HandlerError::from(e).permanent())?;
        let Some(mut tx) = self.begin_inbox(consumer, &message.id).await? else {
            return Ok(Processed::Duplicate);
        };
        // a relayed saga step: the barrier decides, on the inbox's transaction
        let runs = match &call {
            Some(call) => self.barrier_tx(&mut tx, call).await?.should_run(),
            None => true,
        };
        if runs {
            handler(&mut tx, message).await?;
        }
        tx.commit()
            .await
            .map_err(|e| my_err(e).with_operation(OP))?;
        Ok(Processed::Done(()))
    }

    async fn purge_inbox(&self, older_than: Duration, limit: usize) -> Result<u64> {
        let Some(batch) = inbox_purge(older_than, limit)? else {
            return Ok(0);
        };
        self.inner
            .purge(&self.inner.sql.inbox_purge, batch)
            .await
            .map_err(|e| e.with_operation("purge_inbox"))
    }
}
