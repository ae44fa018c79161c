//! The store's own connection for core's transactions, and statement helpers.

use std::time::Duration;

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;
use sqlx::{MySql, MySqlPool};

use crate::connect::my_err;

/// A pooled connection of the store's own, on which core runs the statements of a
/// release of order keys in transactions it opens and ends ([`OwnConnection`]): each
/// transaction a sqlx one (dropped unfinished, sqlx rolls it back).
pub(crate) struct MySqlOwnConnection {
    pub(crate) pool: MySqlPool,
    pub(crate) tx: Option<sqlx::Transaction<'static, MySql>>,
}

impl MySqlOwnConnection {
    pub(crate) fn tx(&mut self) -> Result<sqlx::Transaction<'static, MySql>> {
        self.tx
            .take()
            .ok_or_else(|| Error::new(ErrorKind::Unexpected, "mysql", "no transaction was begun"))
    }
}

#[async_trait]
impl TxConnection for MySqlOwnConnection {
    fn dialect(&self) -> Dialect {
        Dialect::MySql
    }

    async fn run(&mut self, statement: &Statement<'_>) -> Result<Answer> {
        match &mut self.tx {
            Some(tx) => tx.run(statement).await,
            None => Err(Error::new(
                ErrorKind::Unexpected,
                "mysql",
                "no transaction was begun",
            )),
        }
    }
}

#[async_trait]
impl OwnConnection for MySqlOwnConnection {
    async fn begin(&mut self) -> Result<()> {
        self.tx = Some(self.pool.begin().await.map_err(my_err)?);
        Ok(())
    }
    async fn commit(&mut self) -> Result<()> {
        self.tx()?.commit().await.map_err(my_err)
    }
    async fn rollback(&mut self) -> Result<()> {
        self.tx()?.rollback().await.map_err(my_err)
    }
}

/// Our SQL: built once from a validated identifier and fixed text; values are always bound.
pub(crate) fn safe(sql: &str) -> sqlx::AssertSqlSafe<&str> {
    sqlx::AssertSqlSafe(sql)
}

/// Microseconds of `d`, saturating (MySQL's `INTERVAL … MICROSECOND`).
pub(crate) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}
