//! The store's own connection for core's transactions, and statement helpers.

use std::time::Duration;

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;
use sqlx::{MySql, MySqlPool};

use crate::connect::my_err;

/// A pooled connection of the store's own, on which core runs the statements of a
/// release of order keys in transactions it opens and ends ([`OwnConnection`]), as
/// `BEGIN`, `COMMIT` and `ROLLBACK` on a [`Held`] connection: dropped inside one, the
/// connection is closed (the server rolls it back).
pub(crate) struct MySqlOwnConnection {
    pub(crate) pool: MySqlPool,
    pub(crate) conn: Option<Held>,
}

impl MySqlOwnConnection {
    fn conn(&mut self) -> Result<&mut Held> {
        self.conn
            .as_mut()
            .ok_or_else(|| Error::new(ErrorKind::Unexpected, "mysql", "no transaction was begun"))
    }

    /// End the transaction with `statement` (`COMMIT` or `ROLLBACK`).
    async fn end(&mut self, statement: &'static str) -> Result<()> {
        let conn = self.conn()?;
        sqlx::Executor::execute(&mut **conn, statement)
            .await
            .map_err(my_err)?;
        conn.settled();
        self.conn = None;
        Ok(())
    }
}

#[async_trait]
impl TxConnection for MySqlOwnConnection {
    fn dialect(&self) -> Dialect {
        Dialect::MySql
    }

    async fn run(&mut self, statement: &Statement<'_>) -> Result<Answer> {
        let conn: &mut sqlx::MySqlConnection = self.conn()?;
        conn.run(statement).await
    }
}

#[async_trait]
impl OwnConnection for MySqlOwnConnection {
    async fn begin(&mut self) -> Result<()> {
        let mut conn = Held::new(self.pool.acquire().await.map_err(my_err)?);
        conn.open = true;
        sqlx::Executor::execute(&mut *conn, "BEGIN")
            .await
            .map_err(my_err)?;
        self.conn = Some(conn);
        Ok(())
    }
    async fn commit(&mut self) -> Result<()> {
        self.end("COMMIT").await
    }
    async fn rollback(&mut self) -> Result<()> {
        self.end("ROLLBACK").await
    }
}

/// A pooled connection ([`MySqlDriver::conn`](crate::driver::MySqlDriver)) that is
/// closed instead of pooled when it is dropped inside a transaction it began
/// ([`begin`](Self::begin)) that did not end in an answered commit or rollback
/// ([`settled`](Self::settled)).
///
/// A future dropped mid-transaction (an engine's shutdown aborting a claim, a caller's
/// timeout) leaves sqlx to roll back at the connection's next use, or not at all when it
/// was dropped while its `BEGIN` was on the wire (sqlx counts the transaction only once
/// the server answered). Pooled, such a connection sits idle with the transaction open
/// on the server, holding its locks — rows no claim can take, a table no DDL can
/// change — until the pool hands it out again. Closed, the server rolls it back at once.
pub(crate) struct Held {
    conn: sqlx::pool::PoolConnection<MySql>,
    open: bool,
}

impl Held {
    /// `conn`, with no transaction of ours open.
    pub(crate) fn new(conn: sqlx::pool::PoolConnection<MySql>) -> Self {
        Held { conn, open: false }
    }

    /// Begin a transaction (with `BEGIN`, or `statement`): from now until
    /// [`settled`](Self::settled), dropping the connection closes it.
    pub(crate) async fn begin(
        &mut self,
        statement: Option<&str>,
    ) -> std::result::Result<sqlx::Transaction<'_, MySql>, sqlx::Error> {
        self.open = true;
        match statement {
            None => sqlx::Connection::begin(&mut *self.conn).await,
            Some(s) => sqlx::Connection::begin_with(&mut *self.conn, sqlx::AssertSqlSafe(s)).await,
        }
    }

    /// The transaction ended in a commit or rollback the server answered: the connection
    /// goes back to the pool when dropped.
    pub(crate) fn settled(&mut self) {
        self.open = false;
    }
}

impl std::ops::Deref for Held {
    type Target = sqlx::MySqlConnection;
    fn deref(&self) -> &Self::Target {
        &self.conn
    }
}

impl std::ops::DerefMut for Held {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.conn
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.open {
            self.conn.close_on_drop();
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::mysql::MySqlPoolOptions;
    use sqlx::Executor;

    /// The connection's id on the server.
    async fn id(conn: &mut sqlx::MySqlConnection) -> u64 {
        sqlx::query_scalar("SELECT CONNECTION_ID()")
            .fetch_one(conn)
            .await
            .expect("connection id")
    }

    /// A connection dropped inside a transaction sqlx does not count (as one whose
    /// `BEGIN` was cut off on the wire) is closed: the pool's next connection is
    /// another, and the server holds no transaction of it. One whose transaction
    /// settled goes back to the pool.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_dropped_inside_its_transaction_is_closed() {
        let url = match backstop_testkit::server_url("BACKSTOP_TEST_MYSQL_URL") {
            Ok(url) => url,
            Err(why) if !backstop_testkit::required("mysql") => {
                eprintln!("skipped: {why:?}");
                return;
            }
            Err(why) => panic!("mysql is named in BACKSTOP_TEST_REQUIRE: {why:?}"),
        };
        let pool = MySqlPoolOptions::new()
            .max_connections(1)
            .connect(&url)
            .await
            .expect("connect");
        let mut held = Held::new(pool.acquire().await.expect("acquire"));
        let first = id(&mut held).await;
        held.open = true;
        held.execute("START TRANSACTION").await.expect("begin");
        drop(held);
        let mut next = pool.acquire().await.expect("acquire");
        let second = id(&mut next).await;
        assert_ne!(first, second, "the connection was closed, not pooled");
        let open: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = ?",
        )
        .bind(first)
        .fetch_one(&mut *next)
        .await
        .expect("transactions");
        assert_eq!(open, 0, "its transaction ended with it");
        drop(next);

        let mut held = Held::new(pool.acquire().await.expect("acquire"));
        let tx = held.begin(None).await.expect("begin");
        tx.commit().await.expect("commit");
        held.settled();
        drop(held);
        let mut again = pool.acquire().await.expect("acquire");
        assert_eq!(
            id(&mut again).await,
            second,
            "a settled connection is pooled"
        );
    }
}
