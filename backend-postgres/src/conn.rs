//! Connections: tokio-postgres and deadpool clients as core's connection adapters, and
//! statements sent prepared or unnamed with their types.

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;
use chrono::{DateTime, Utc};
use deadpool_postgres::Object;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{GenericClient, Row};

use crate::connect::pg_err;
use crate::rows::col;

/// A tokio-postgres or deadpool connection as a [`TxConnection`] (see [`PgExecutor`]),
/// its statements prepared once per pooled connection unless the flag is off (behind a
/// transaction pooler).
pub(crate) struct OnClient<'c, C: ?Sized>(pub(crate) &'c C, pub(crate) bool);

#[async_trait]
impl<C: PgExecutor + ?Sized> TxConnection for OnClient<'_, C> {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    async fn run(&mut self, statement: &Statement<'_>) -> Result<Answer> {
        let params = statement
            .params()
            .iter()
            .map(typed_value)
            .collect::<Result<Vec<_>>>()?;
        let columns = |r: &Row| (0..r.len()).map(|i| col(r, i)).collect::<Result<Vec<_>>>();
        let (sql, prepared) = (statement.sql(), self.1);
        match statement.returns() {
            Returns::Rows => {
                let rows = self.0.query_all_typed(sql, &params, prepared).await;
                let rows = rows.map_err(pg_err)?;
                Ok(Answer::Rows(
                    rows.iter().map(columns).collect::<Result<_>>()?,
                ))
            }
            Returns::KeyRows => {
                let rows = self.0.query_all_typed(sql, &params, prepared).await;
                let key_row = |r: &Row| -> Result<(String, Option<i64>)> {
                    let id = if r.len() > 1 { Some(col(r, 1)?) } else { None };
                    Ok((col(r, 0)?, id))
                };
                let rows = rows.map_err(pg_err)?;
                Ok(Answer::KeyRows(
                    rows.iter().map(key_row).collect::<Result<_>>()?,
                ))
            }
            // every statement of the store returns its rows (`RETURNING`)
            _ => {
                let row = self.0.query_opt_typed(sql, &params, prepared).await;
                let row = row.map_err(pg_err)?;
                Ok(Answer::Row(row.as_ref().map(columns).transpose()?))
            }
        }
    }
}

/// A statement's value with its PostgreSQL type.
pub(crate) fn typed_value<'v>(value: &'v Value<'_>) -> Result<(&'v (dyn ToSql + Sync), Type)> {
    Ok(match value {
        Value::SmallInt(v) => (v, Type::INT2),
        Value::Int(v) => (v, Type::INT4),
        Value::BigInt(v) => (v, Type::INT8),
        Value::Timestamp(v) => (v, Type::TIMESTAMPTZ),
        Value::Text(v) => (v, Type::TEXT),
        Value::TextList(v) => (v, Type::TEXT_ARRAY),
        Value::BigIntList(v) => (v, Type::INT8_ARRAY),
        other => {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "postgres",
                format!("a value the PostgreSQL adapter cannot bind: {other:?}"),
            ))
        }
    })
}

/// A pooled connection of the store's own, on which core runs the statements of a
/// release of order keys in transactions it opens and ends ([`OwnConnection`]). Dropped
/// inside a transaction (a cancelled call), the connection is closed rather than put
/// back in the pool with the transaction open: the server rolls it back.
pub(crate) struct PgConnection {
    pub(crate) client: Option<Object>,
    pub(crate) prepared: bool,
    pub(crate) in_transaction: bool,
}

impl PgConnection {
    pub(crate) fn client(&self) -> Result<&Object> {
        self.client.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::Unexpected,
                "postgres",
                "the connection was given up",
            )
        })
    }

    pub(crate) async fn simple(&mut self, command: &str, in_transaction: bool) -> Result<()> {
        self.client()?
            .batch_execute(command)
            .await
            .map_err(pg_err)?;
        self.in_transaction = in_transaction;
        Ok(())
    }
}

impl Drop for PgConnection {
    fn drop(&mut self) {
        if let (true, Some(client)) = (self.in_transaction, self.client.take()) {
            drop(Object::take(client));
        }
    }
}

#[async_trait]
impl TxConnection for PgConnection {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    async fn run(&mut self, statement: &Statement<'_>) -> Result<Answer> {
        let prepared = self.prepared;
        OnClient(self.client()?, prepared).run(statement).await
    }
}

#[async_trait]
impl OwnConnection for PgConnection {
    async fn begin(&mut self) -> Result<()> {
        self.simple("BEGIN", true).await
    }
    async fn commit(&mut self) -> Result<()> {
        self.simple("COMMIT", false).await
    }
    async fn rollback(&mut self) -> Result<()> {
        self.simple("ROLLBACK", false).await
    }
}

/// A statement as a store sends it: prepared once per pooled connection, or unnamed with
/// its parameters' types (see `PgDriver::prepared`).
pub(crate) enum Stmt<'s> {
    Cached(tokio_postgres::Statement),
    Unnamed(&'s str),
}

impl Stmt<'_> {
    pub(crate) async fn query<C: GenericClient + Sync>(
        &self,
        client: &C,
        params: &[&dyn Param],
    ) -> Result<Vec<Row>> {
        match self {
            Stmt::Cached(stmt) => {
                let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.value()).collect();
                client.query(stmt, &values).await
            }
            Stmt::Unnamed(sql) => client.query_typed(sql, &typed(params)).await,
        }
        .map_err(pg_err)
    }

    pub(crate) async fn execute<C: GenericClient + Sync>(
        &self,
        client: &C,
        params: &[&dyn Param],
    ) -> Result<u64> {
        match self {
            Stmt::Cached(stmt) => {
                let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p.value()).collect();
                client.execute(stmt, &values).await
            }
            Stmt::Unnamed(sql) => client.execute_typed(sql, &typed(params)).await,
        }
        .map_err(pg_err)
    }
}

pub(crate) fn typed<'p>(params: &[&'p dyn Param]) -> Vec<(&'p (dyn ToSql + Sync), Type)> {
    params.iter().map(|p| (p.value(), p.pg_type())).collect()
}

/// A statement parameter with its PostgreSQL type, so a statement can be sent unnamed
/// with its types declared as well as prepared.
pub(crate) trait Param: Sync {
    fn value(&self) -> &(dyn ToSql + Sync);
    fn pg_type(&self) -> Type;
}

/// A Rust type's PostgreSQL type, as the store's statements bind it.
pub(crate) trait Typed: ToSql + Sync {
    const TYPE: Type;
}

impl<T: Typed> Param for T {
    fn value(&self) -> &(dyn ToSql + Sync) {
        self
    }
    fn pg_type(&self) -> Type {
        T::TYPE
    }
}

impl<T: Typed> Typed for Option<T> {
    const TYPE: Type = T::TYPE;
}

macro_rules! typed {
    ($($t:ty => $pg:ident),+ $(,)?) => {$(
        impl Typed for $t {
            const TYPE: Type = Type::$pg;
        }
    )+};
}

typed!(
    bool => BOOL,
    i16 => INT2,
    i32 => INT4,
    i64 => INT8,
    String => TEXT,
    &str => TEXT,
    DateTime<Utc> => TIMESTAMPTZ,
    Vec<i16> => INT2_ARRAY,
    Vec<i32> => INT4_ARRAY,
    Vec<&str> => TEXT_ARRAY,
    Vec<i64> => INT8_ARRAY,
    &[i64] => INT8_ARRAY,
    Vec<String> => TEXT_ARRAY,
    &[String] => TEXT_ARRAY,
    Vec<Option<&str>> => TEXT_ARRAY,
);

/// Where [`PgStore::enqueue_tx`](crate::PgStore::enqueue_tx) can write: a transaction or a client of `tokio_postgres`
/// or of `deadpool_postgres` (the store's pool). Sealed: implemented for exactly those.
///
/// On the deadpool types the statement is prepared once per pooled connection (their
/// statement cache), so an enqueue is one round trip with no parse or plan on the
/// server; on the plain `tokio_postgres` types it is an unnamed statement, parsed and
/// planned each time (still one round trip).
#[async_trait]
pub trait PgExecutor: sealed::Sealed + Send + Sync {
    /// Run `sql` with typed `params`, every row; on the deadpool types prepared once per
    /// pooled connection when `prepared` (else unnamed, as behind a transaction pooler).
    #[doc(hidden)]
    async fn query_all_typed(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
        prepared: bool,
    ) -> std::result::Result<Vec<Row>, tokio_postgres::Error>;

    /// As `query_all_typed`, the first row.
    #[doc(hidden)]
    async fn query_opt_typed(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
        prepared: bool,
    ) -> std::result::Result<Option<Row>, tokio_postgres::Error> {
        let rows = self.query_all_typed(sql, params, prepared).await?;
        Ok(rows.into_iter().next())
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for tokio_postgres::Client {}
    impl Sealed for tokio_postgres::Transaction<'_> {}
    impl Sealed for deadpool_postgres::ClientWrapper {}
    impl Sealed for deadpool_postgres::Object {}
    impl Sealed for deadpool_postgres::Transaction<'_> {}
}

macro_rules! unprepared_executor {
    ($($t:ty),+) => {$(
        #[async_trait]
        impl PgExecutor for $t {
            async fn query_all_typed(
                &self,
                sql: &str,
                params: &[(&(dyn ToSql + Sync), Type)],
                _prepared: bool,
            ) -> std::result::Result<Vec<Row>, tokio_postgres::Error> {
                self.query_typed(sql, params).await
            }
        }
    )+};
}

macro_rules! cached_executor {
    ($($t:ty),+) => {$(
        #[async_trait]
        impl PgExecutor for $t {
            async fn query_all_typed(
                &self,
                sql: &str,
                params: &[(&(dyn ToSql + Sync), Type)],
                prepared: bool,
            ) -> std::result::Result<Vec<Row>, tokio_postgres::Error> {
                if !prepared {
                    return self.query_typed(sql, params).await;
                }
                let types: Vec<Type> = params.iter().map(|(_, t)| t.clone()).collect();
                let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
                let stmt = self.prepare_typed_cached(sql, &types).await?;
                self.query(&stmt, &values).await
            }
        }
    )+};
}

unprepared_executor!(tokio_postgres::Client, tokio_postgres::Transaction<'_>);
cached_executor!(
    deadpool_postgres::ClientWrapper,
    deadpool_postgres::Transaction<'_>
);

#[async_trait]
impl PgExecutor for deadpool_postgres::Object {
    async fn query_all_typed(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
        prepared: bool,
    ) -> std::result::Result<Vec<Row>, tokio_postgres::Error> {
        let client: &deadpool_postgres::ClientWrapper = self;
        client.query_all_typed(sql, params, prepared).await
    }
}
