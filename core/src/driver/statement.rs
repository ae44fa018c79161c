//! The statements core hands a connection and the answers it reads back: the interface
//! of a connection adapter ([`TxConnection`], [`BlockingTxConnection`]), with nothing
//! above it.

use std::borrow::Cow;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::{Error, ErrorKind, Result};
use crate::model::TaskId;

/// The SQL a store writes and a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// PostgreSQL: placeholders `$1, $2…`.
    Postgres,
    /// MySQL 8 / MariaDB: placeholders `?`.
    MySql,
    /// SQLite: placeholders `?1, ?2…`.
    Sqlite,
    /// A database backstop has no backend for (a sqlx `Any` connection to one): no
    /// store speaks it.
    Other,
}

impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Dialect::Postgres => "PostgreSQL",
            Dialect::MySql => "MySQL",
            Dialect::Sqlite => "SQLite",
            Dialect::Other => "another database",
        })
    }
}

/// A value bound to one parameter of a [`Statement`], in order. Typed, so a driver with
/// strictly typed parameters (PostgreSQL's binary protocol) can declare each; `None` is a
/// `NULL` of that type. Non-exhaustive: an adapter answers a value it cannot bind with
/// an `Unexpected` error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Value<'a> {
    /// A 16-bit integer (`smallint`).
    SmallInt(Option<i16>),
    /// A 32-bit integer (`integer`).
    Int(Option<i32>),
    /// A 64-bit integer (`bigint`).
    BigInt(Option<i64>),
    /// UTF-8 text.
    Text(Option<&'a str>),
    /// A point in time (PostgreSQL `timestamptz`; MySQL `DATETIME` in UTC). Never used
    /// on SQLite, whose times are integers.
    Timestamp(Option<DateTime<Utc>>),
    /// A list of texts, bound as one array (PostgreSQL `text[]`). Only a store's own
    /// statements on its own connection bind lists (a set-based key release); a backend
    /// whose SQL has a placeholder per item binds each item as [`Value::Text`] instead.
    TextList(&'a [String]),
    /// A list of 64-bit integers, bound as one array (PostgreSQL `bigint[]`); see
    /// [`Value::TextList`].
    BigIntList(&'a [i64]),
}

/// What a [`Statement`] answers with, and so how to run it (see the [module
/// docs](crate::tx)). Non-exhaustive: an adapter answers what it does not know with an
/// `Unexpected` error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Returns {
    /// A query: answer [`Answer::Row`] with its first row, if any.
    Row,
    /// A query returning many rows (a batch enqueue's multi-row insert): answer
    /// [`Answer::Rows`] with all of them, or on MySQL [`Answer::DuplicateKey`] when it
    /// fails with a duplicate key (error 1062, which rolls back this statement only).
    Rows,
    /// An update: answer [`Answer::RowsAffected`].
    RowsAffected,
    /// A MySQL insert: answer [`Answer::InsertId`], or [`Answer::DuplicateKey`] when it
    /// fails with a duplicate key (error 1062, which rolls back this statement only).
    InsertId,
    /// A query whose rows are an order key (text), then maybe a task id: answer
    /// [`Answer::KeyRows`] with all of them. Only a store's own statements ask for it (a
    /// set-based key release).
    KeyRows,
}

/// One statement of an enqueue (or of a completion), for a [`TxConnection`] to run on
/// the caller's transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement<'a> {
    sql: Cow<'a, str>,
    params: Vec<Value<'a>>,
    returns: Returns,
}

impl<'a> Statement<'a> {
    /// A statement (for backends: see [`EnqueueSql`](crate::driver::EnqueueSql)).
    pub fn new(sql: &'a str, params: Vec<Value<'a>>, returns: Returns) -> Self {
        Statement {
            sql: Cow::Borrowed(sql),
            params,
            returns,
        }
    }

    /// A statement whose text was made for it (a list's placeholders, say).
    pub fn owned(sql: String, params: Vec<Value<'a>>, returns: Returns) -> Self {
        Statement {
            sql: Cow::Owned(sql),
            params,
            returns,
        }
    }

    /// The SQL text, in the store's [`Dialect`].
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The parameters, in placeholder order.
    pub fn params(&self) -> &[Value<'a>] {
        &self.params
    }

    /// What to answer with.
    pub fn returns(&self) -> Returns {
        self.returns
    }
}

/// What running a [`Statement`] gave, as its [`Returns`] asks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answer {
    /// The first row's columns (every column of these statements is a 64-bit
    /// integer), or `None` when the query returned no row.
    Row(Option<Vec<i64>>),
    /// Every row's columns (each a 64-bit integer), in the order the database sent them.
    Rows(Vec<Vec<i64>>),
    /// How many rows an update changed.
    RowsAffected(u64),
    /// The id of the row a MySQL insert made (`LAST_INSERT_ID()`).
    InsertId(i64),
    /// A MySQL insert failed on a duplicate key (error 1062).
    DuplicateKey,
    /// Every row as its order key and, when the row has a second column, a task id.
    KeyRows(Vec<(String, Option<i64>)>),
}

/// A connection inside the caller's transaction that runs a store's [`Statement`]s: the
/// way [`Transactional::enqueue_in`](crate::driver::Transactional::enqueue_in) reaches any driver. Implemented for sqlx's
/// connections and transactions (features `sqlx-*`); implement it for a wrapper of any
/// other driver's connection (see the [module docs](crate::tx)).
#[async_trait]
pub trait TxConnection: Send {
    /// The SQL this connection speaks; an enqueue for a store of another dialect is
    /// refused with a `Config` error before anything runs.
    fn dialect(&self) -> Dialect;

    /// Run `statement` on the caller's transaction and answer as it
    /// [`returns`](Statement::returns). A driver error is a backstop [`Error`]: kind
    /// `Unavailable` (temporary) when the connection failed, `Contention` when the
    /// database rolled the transaction back (deadlock, serialization failure),
    /// `Unexpected` otherwise.
    async fn run(&mut self, statement: &Statement<'_>) -> Result<Answer>;
}

#[async_trait]
impl<C: TxConnection + ?Sized> TxConnection for &mut C {
    fn dialect(&self) -> Dialect {
        (**self).dialect()
    }
    async fn run(&mut self, statement: &Statement<'_>) -> Result<Answer> {
        (**self).run(statement).await
    }
}

/// A connection of the store's own on which core runs statements in transactions it
/// opens and ends itself (a release of order keys: a set-based try, then one key per
/// transaction). A backend implements it once, on an owned pooled connection.
///
/// # Contract
///
/// - [`begin`](Self::begin) starts a transaction; [`commit`](Self::commit) and
///   [`rollback`](Self::rollback) end it. Core never nests them and never runs a
///   statement outside one.
/// - A connection dropped inside a transaction must not go back to a pool with that
///   transaction open: roll it back, or close the connection.
#[async_trait]
pub trait OwnConnection: TxConnection {
    /// Start a transaction.
    async fn begin(&mut self) -> Result<()>;
    /// Commit the transaction.
    async fn commit(&mut self) -> Result<()>;
    /// Roll the transaction back.
    async fn rollback(&mut self) -> Result<()>;
}

/// [`TxConnection`] for a blocking driver (rusqlite, diesel, the `postgres` crate):
/// the same statements and answers, run by a call that blocks. Use it through
/// [`Transactional::enqueue_blocking`](crate::driver::Transactional::enqueue_blocking) (off the async runtime's threads, or in
/// `spawn_blocking`).
pub trait BlockingTxConnection {
    /// See [`TxConnection::dialect`].
    fn dialect(&self) -> Dialect;

    /// See [`TxConnection::run`].
    fn run(&mut self, statement: &Statement<'_>) -> Result<Answer>;
}

impl<C: BlockingTxConnection + ?Sized> BlockingTxConnection for &mut C {
    fn dialect(&self) -> Dialect {
        (**self).dialect()
    }
    fn run(&mut self, statement: &Statement<'_>) -> Result<Answer> {
        (**self).run(statement)
    }
}

pub(crate) fn wrong_answer(answer: &Answer, wanted: &str) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        "enqueue",
        format!("the statement was answered with {answer:?}; it returns {wanted}"),
    )
}

/// The row of a `Returns::Row` answer.
pub(crate) fn row(answer: &Answer) -> Result<Option<&[i64]>> {
    match answer {
        Answer::Row(r) => Ok(r.as_deref()),
        other => Err(wrong_answer(other, "a row")),
    }
}

pub(crate) fn column(row: &[i64], i: usize) -> Result<i64> {
    row.get(i).copied().ok_or_else(|| {
        Error::new(
            ErrorKind::Unexpected,
            "enqueue",
            format!("the row has {} columns; column {i} was read", row.len()),
        )
    })
}

pub(crate) fn first_column(answer: &Answer) -> Result<Option<TaskId>> {
    row(answer)?.map(|r| column(r, 0)).transpose()
}

/// Whether a key lock held: a row returned, or an upsert ran (it locks whatever it did).
pub(crate) fn locked(answer: &Answer) -> Result<bool> {
    match answer {
        Answer::Row(r) => Ok(r.is_some()),
        Answer::RowsAffected(_) => Ok(true),
        other => Err(wrong_answer(other, "a row or a count")),
    }
}

/// Whether a fenced change applied: a row returned, or a row changed.
pub(crate) fn applied(answer: &Answer, what: &str) -> Result<bool> {
    match answer {
        Answer::Row(r) => Ok(r.is_some()),
        Answer::RowsAffected(n) => Ok(*n > 0),
        other => Err(wrong_answer(other, what)),
    }
}

/// The keys of a [`Returns::KeyRows`] answer.
pub(crate) fn keys(answer: Answer) -> Result<Vec<String>> {
    match answer {
        Answer::KeyRows(rows) => Ok(rows.into_iter().map(|(k, _)| k).collect()),
        other => Err(wrong_answer(&other, "order keys")),
    }
}

/// The `(key, id)` rows of a [`Returns::KeyRows`] answer, each with its id.
pub(crate) fn key_ids(answer: Answer) -> Result<Vec<(String, TaskId)>> {
    match answer {
        Answer::KeyRows(rows) => rows
            .into_iter()
            .map(|(k, id)| match id {
                Some(id) => Ok((k, id)),
                None => Err(Error::new(
                    ErrorKind::Unexpected,
                    "release_order_keys",
                    format!("order key {k:?} was answered without its task id"),
                )),
            })
            .collect(),
        other => Err(wrong_answer(&other, "order keys with task ids")),
    }
}

/// How many rows a statement changed or returned.
pub(crate) fn count(answer: &Answer) -> Result<u64> {
    Ok(match answer {
        Answer::RowsAffected(n) => *n,
        Answer::Rows(rows) => rows.len() as u64,
        Answer::KeyRows(rows) => rows.len() as u64,
        Answer::Row(row) => u64::from(row.is_some()),
        other => return Err(wrong_answer(other, "a count")),
    })
}
