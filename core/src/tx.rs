//! Enqueue in the caller's transaction, on any connection and any backend.
//!
//! The transactional enqueue is the heart of the pattern: the task row commits or rolls
//! back with the business rows. [`Transactional::enqueue_in`] writes it on whatever
//! connection holds the caller's transaction, the same call on every backend:
//!
//! - **sqlx** (features `sqlx-postgres`, `sqlx-mysql`, `sqlx-sqlite`, `sqlx-any` of
//!   `backstop-core`, turned on by the facade's `postgres-sqlx`, `mysql`, `sqlite-sqlx`
//!   and `any-sqlx`): pass `&mut *tx` for a `sqlx::Transaction`, or a `&mut` connection.
//!   On sqlx's `Any` the same code runs on whichever database the URL names.
//! - **Any other driver** (diesel, sea-orm, `postgres`, `mysql_async`…): implement
//!   [`TxConnection`] for a wrapper of your connection. Its one method runs a
//!   [`Statement`]: SQL text in the store's dialect, its parameters as [`Value`]s, and
//!   what it [`Returns`]. The store validates the task first (bad input runs nothing),
//!   then hands over its statements one by one; an enqueue is one statement unless the
//!   task has an order key or meets a duplicate.
//!
//! ```no_run
//! # #[cfg(feature = "sqlx-postgres")]
//! # async fn demo<S: backstop_core::Transactional>(store: S, pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use backstop_core::{NewTask, Transactional};
//!
//! let mut tx = pool.begin().await?;
//! sqlx::query("INSERT INTO orders (id) VALUES (42)").execute(&mut *tx).await?;
//! let enqueued = store.enqueue_in(&mut *tx, &NewTask::new("PAY_ORDER", "42")).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! # Running the statements yourself
//!
//! An adapter for a driver without built-in support runs each statement and answers
//! with what the statement asks for:
//!
//! | [`Returns`] | run it | answer |
//! |---|---|---|
//! | `Row` | as a query | [`Answer::Row`] with the first row's columns (each a 64-bit integer), or `None` |
//! | `Rows` | as a query | [`Answer::Rows`] with every row's columns (each a 64-bit integer); on MySQL [`Answer::DuplicateKey`] when it fails with a duplicate key (error 1062) |
//! | `RowsAffected` | as an update | [`Answer::RowsAffected`] |
//! | `InsertId` (MySQL) | as an insert | [`Answer::InsertId`] with the new row's `AUTO_INCREMENT` id, or [`Answer::DuplicateKey`] when it fails with a duplicate key (error 1062) |
//!
//! Placeholders are the dialect's: `$1, $2…` on PostgreSQL, `?` on MySQL, `?1, ?2…` on
//! SQLite. Text parameters are UTF-8 strings; a `None` is SQL `NULL` of the value's type.
//! The statements leave the transaction open: the caller commits or rolls back.
//!
//! ```
//! use backstop_core::tx::{Answer, Dialect, Returns, Statement, TxConnection, Value};
//! use backstop_core::{async_trait, Error, ErrorKind};
//!
//! /// A connection of some driver, inside the caller's transaction.
//! struct MyConn { /* … */ }
//!
//! #[async_trait]
//! impl TxConnection for MyConn {
//!     fn dialect(&self) -> Dialect {
//!         Dialect::Postgres
//!     }
//!     async fn run(&mut self, statement: &Statement<'_>) -> backstop_core::Result<Answer> {
//!         for value in statement.params() {
//!             match value {
//!                 Value::Text(text) => { /* bind text (Option<&str>) */ }
//!                 Value::BigInt(n) => { /* bind n (Option<i64>) */ }
//!                 _ => { /* and so on for each kind of value */ }
//!             }
//!         }
//!         // run statement.sql() and answer as statement.returns() asks; a driver
//!         // error becomes a backstop error (kind Unavailable when retrying may help)
//!         Err(Error::new(ErrorKind::Unavailable, "enqueue", "no database in this example"))
//!     }
//! }
//! ```

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::driver::{
    check_task, check_tasks, enqueued, enqueued_all, millis, Backend, Checked, Existing,
    InsertStep, Inserted, KeyRelease, KeyedInsert, ReleaseStep,
};
use crate::error::{Error, ErrorKind, Result};
use crate::model::{Enqueued, Lease, NewTask, Owner, TaskId, WhenParked};

mod batch;
#[cfg(any(
    feature = "sqlx-postgres",
    feature = "sqlx-mysql",
    feature = "sqlx-sqlite"
))]
mod sqlx;
#[cfg(any(
    feature = "sqlx-postgres",
    feature = "sqlx-mysql",
    feature = "sqlx-sqlite"
))]
pub use self::sqlx::sqlx_error;

pub use self::batch::{
    insert_document, rows_params, values_rows, EnqueueBatch, InsertTexts, INSERT_ROW_KEYS,
    MAX_INSERT_BYTES, MAX_INSERT_ROWS,
};

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
/// `NULL` of that type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

/// What a [`Statement`] answers with, and so how to run it (see the [module
/// docs](self)). Non-exhaustive: an adapter answers what it does not know with an
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
}

/// One statement of an enqueue (or of a completion), for a [`TxConnection`] to run on
/// the caller's transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement<'a> {
    sql: &'a str,
    params: Vec<Value<'a>>,
    returns: Returns,
}

impl<'a> Statement<'a> {
    /// A statement (for backends: see [`EnqueueSql`]).
    pub fn new(sql: &'a str, params: Vec<Value<'a>>, returns: Returns) -> Self {
        Statement {
            sql,
            params,
            returns,
        }
    }

    /// The SQL text, in the store's [`Dialect`].
    pub fn sql(&self) -> &'a str {
        self.sql
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
}

/// A connection inside the caller's transaction that runs a store's [`Statement`]s: the
/// way [`Transactional::enqueue_in`] reaches any driver. Implemented for sqlx's
/// connections and transactions (features `sqlx-*`); implement it for a wrapper of any
/// other driver's connection (see the [module docs](self)).
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

/// [`TxConnection`] for a blocking driver (rusqlite, diesel, the `postgres` crate):
/// the same statements and answers, run by a call that blocks. Use it through
/// [`Transactional::enqueue_blocking`] (off the async runtime's threads, or in
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

/// The transactional enqueue and completion, on any store and any [`TxConnection`]: the
/// same call on every backend. Implemented for every backend's store (and `AnyStore`).
///
/// The native forms of each backend (`PgStore::enqueue_tx` on tokio-postgres,
/// `SqliteStore::transaction` on rusqlite) run the same statements.
#[async_trait]
pub trait Transactional: Backend {
    /// The SQL the store writes: for an application that picks its own SQL text per
    /// database (placeholders, say).
    fn dialect(&self) -> Dialect {
        self.driver().enqueue_sql().dialect()
    }

    /// Enqueue `task` on the caller's transaction `conn`: the task row commits or rolls
    /// back together with the caller's business rows.
    ///
    /// - Same validation and idempotency as [`TaskStore::enqueue`](crate::TaskStore::enqueue):
    ///   invalid input is refused (`InvalidInput`) before anything runs, and so is a
    ///   connection of another [`Dialect`] than the store's (`Config`).
    /// - A duplicate returns the existing task's id with `created: false` and writes
    ///   nothing; the caller's transaction stays usable.
    /// - Never retried: a deadlock or serialization failure rolled back the caller's
    ///   whole transaction, which only the caller can run again (the error is
    ///   `Contention`).
    /// - `conn` must reach the store's database and table (same schema, migrated). On
    ///   SQLite, open the transaction with `BEGIN IMMEDIATE` so it never fails to
    ///   upgrade to a write; on MySQL, the session time zone must be UTC (sqlx's
    ///   default).
    async fn enqueue_in<C>(&self, conn: &mut C, task: &NewTask) -> Result<Enqueued>
    where
        C: TxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        let checked = check_task(self.driver().config(), task)?;
        same_dialect(sql.dialect(), conn.dialect(), "enqueue")?;
        let inserted = EnqueuePlan::new(sql, checked)
            .run(conn)
            .await
            .map_err(|e| e.with_operation("enqueue"))?;
        enqueued(inserted, task)
    }

    /// Enqueue many `tasks` on the caller's transaction `conn`, most of them in
    /// multi-row inserts: they commit or roll back with the caller's business rows.
    ///
    /// - Answered, validated and ordered as
    ///   [`TaskStore::enqueue_many`](crate::TaskStore::enqueue_many): one invalid task
    ///   refuses the batch before anything runs.
    /// - An error part way leaves some of the batch written on the caller's
    ///   transaction: roll it back.
    /// - Otherwise as [`enqueue_in`](Self::enqueue_in) (never retried; the same
    ///   requirements on `conn`).
    async fn enqueue_many_in<C>(&self, conn: &mut C, tasks: &[NewTask]) -> Result<Vec<Enqueued>>
    where
        C: TxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        let checked = check_tasks(self.driver().config(), tasks)?;
        same_dialect(sql.dialect(), conn.dialect(), "enqueue_many")?;
        let inserted = EnqueueBatch::new(sql, checked)
            .run(conn)
            .await
            .map_err(|e| e.with_operation("enqueue_many"))?;
        enqueued_all(inserted, tasks)
    }

    /// [`enqueue_many_in`](Self::enqueue_many_in) on a blocking driver's connection.
    fn enqueue_many_blocking<C>(&self, conn: &mut C, tasks: &[NewTask]) -> Result<Vec<Enqueued>>
    where
        C: BlockingTxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        let checked = check_tasks(self.driver().config(), tasks)?;
        same_dialect(sql.dialect(), conn.dialect(), "enqueue_many")?;
        let inserted = EnqueueBatch::new(sql, checked)
            .run_blocking(conn)
            .map_err(|e| e.with_operation("enqueue_many"))?;
        enqueued_all(inserted, tasks)
    }

    /// [`enqueue_in`](Self::enqueue_in) on a blocking driver's connection.
    fn enqueue_blocking<C>(&self, conn: &mut C, task: &NewTask) -> Result<Enqueued>
    where
        C: BlockingTxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        let checked = check_task(self.driver().config(), task)?;
        same_dialect(sql.dialect(), conn.dialect(), "enqueue")?;
        let inserted = EnqueuePlan::new(sql, checked)
            .run_blocking(conn)
            .map_err(|e| e.with_operation("enqueue"))?;
        enqueued(inserted, task)
    }

    /// Claim task `id` for `owner` on the caller's transaction `conn`, so the claim
    /// commits with the enqueue instead of after it: one commit fewer per task run ahead.
    /// For a task enqueued on this same transaction (any task never claimed before
    /// works). Returns the claim's lease (token 1), or `None` when the task was not
    /// claimed: missing (rolled back), not pending (waiting behind its order key), not
    /// due (delayed), or claimed before.
    ///
    /// Most callers want [`Engine::claim_in`](crate::Engine::claim_in), which reserves
    /// the executor's room first and runs the task after the commit.
    ///
    /// - Nothing is retried (as [`enqueue_in`](Self::enqueue_in)); on an error, roll the
    ///   transaction back (PostgreSQL has aborted it).
    /// - The claim's lease clock starts at this statement: a transaction still open
    ///   `dead_after` later commits a task the sweep takes as dead at once (the lease
    ///   fence keeps the late run from writing over the next attempt).
    async fn claim_in<C>(&self, conn: &mut C, id: TaskId, owner: &Owner) -> Result<Option<Lease>>
    where
        C: TxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        same_dialect(sql.dialect(), conn.dialect(), "claim_in")?;
        let statement = claim_statement(sql, id, owner)?;
        let answer = conn.run(&statement).await?;
        claimed_lease(&answer, id)
    }

    /// [`claim_in`](Self::claim_in) on a blocking driver's connection.
    fn claim_blocking<C>(&self, conn: &mut C, id: TaskId, owner: &Owner) -> Result<Option<Lease>>
    where
        C: BlockingTxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        same_dialect(sql.dialect(), conn.dialect(), "claim_in")?;
        let statement = claim_statement(sql, id, owner)?;
        let answer = conn.run(&statement)?;
        claimed_lease(&answer, id)
    }

    /// [`complete_in`](Self::complete_in) on a blocking driver's connection.
    fn complete_blocking<C>(&self, conn: &mut C, cx: &crate::Context) -> Result<()>
    where
        C: BlockingTxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        same_dialect(sql.dialect(), conn.dialect(), "complete_tx")?;
        crate::driver::complete_on_blocking(cx, |lease| {
            applied(&conn.run(&sql.complete(lease))?, "complete")
        })
    }

    /// Inside a handler: record the running task's success on the handler's transaction
    /// `conn`, with its business writes and the follow-up tasks it enqueued there
    /// ([`enqueue_in`](Self::enqueue_in)): all commit together or not at all (see
    /// [`complete_on`](crate::driver::complete_on)). `Conflict` when the attempt's lease
    /// is gone: return the error and the transaction rolls back.
    async fn complete_in<C>(&self, conn: &mut C, cx: &crate::Context) -> Result<()>
    where
        C: TxConnection + ?Sized,
    {
        let sql = self.driver().enqueue_sql();
        same_dialect(sql.dialect(), conn.dialect(), "complete_tx")?;
        crate::driver::complete_on(cx, |lease| async move {
            let answer = conn.run(&sql.complete(lease)).await?;
            applied(&answer, "complete")
        })
        .await
    }
}

impl<B: Backend + ?Sized> Transactional for B {}

/// The backend's claim on the caller's transaction, or the `Config` error of a backend
/// without one.
fn claim_statement<'a>(
    sql: &'a dyn EnqueueSql,
    id: TaskId,
    owner: &'a Owner,
) -> Result<Statement<'a>> {
    sql.claim(id, owner.as_str()).ok_or_else(|| {
        Error::config(
            "claim_in",
            "this backend does not claim on the caller's transaction",
        )
    })
}

/// The lease of a claim on the caller's transaction: token 1, the first claim's.
fn claimed_lease(answer: &Answer, id: TaskId) -> Result<Option<Lease>> {
    Ok(applied(answer, "claim_in")?.then_some(Lease {
        task_id: id,
        token: 1,
    }))
}

fn same_dialect(store: Dialect, conn: Dialect, op: &'static str) -> Result<()> {
    if store == conn {
        return Ok(());
    }
    Err(Error::config(
        op,
        format!("the store is on {store} but the transaction's connection is {conn}"),
    ))
}

/// A statement an enqueue runs (see [`EnqueueSql`]), with what it works on, and the
/// parameters core binds to it, in this order ([`EnqueueSql::statement`] gets them made).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnqueueStep<'a> {
    /// [`InsertStep::Insert`] with this initial status code: [`insert_params`].
    Insert {
        /// pending (0), or waiting (5) behind its order key.
        status: i16,
    },
    /// [`InsertStep::ReadExisting`]: event type, business key.
    ReadExisting,
    /// [`InsertStep::Release`]: the id.
    Release(TaskId),
    /// [`InsertStep::Replace`]: the new payload, the id.
    Replace(TaskId),
    /// [`ReleaseStep::LockKey`] (also [`InsertStep::LockKey`]) of this order key: the key.
    LockKey(&'a str),
    /// [`ReleaseStep::ReadBlocker`]: the key.
    KeyBlocker(&'a str),
    /// [`ReleaseStep::ReadNext`]: the key.
    KeyNext(&'a str),
    /// [`ReleaseStep::Promote`]: the id.
    KeyPromote(TaskId),
    /// [`ReleaseStep::DropKey`]: the key.
    KeyDrop(&'a str),
}

impl<'a> EnqueueStep<'a> {
    /// The step's parameters for `task` (see each variant), its run-at time as `run_at`.
    pub fn params(self, task: Checked<&'a NewTask>, run_at: RunAt) -> Vec<Value<'a>> {
        let t = task.into_inner();
        match self {
            EnqueueStep::Insert { status } => insert_params(task, status, run_at),
            EnqueueStep::ReadExisting => vec![
                Value::Text(Some(t.event_type())),
                Value::Text(Some(t.biz_key())),
            ],
            EnqueueStep::Replace(id) => {
                vec![Value::Text(Some(t.payload())), Value::BigInt(Some(id))]
            }
            EnqueueStep::Release(id) | EnqueueStep::KeyPromote(id) => {
                vec![Value::BigInt(Some(id))]
            }
            EnqueueStep::LockKey(key)
            | EnqueueStep::KeyBlocker(key)
            | EnqueueStep::KeyNext(key)
            | EnqueueStep::KeyDrop(key) => vec![Value::Text(Some(key))],
        }
    }
}

/// How a backend stores the time a task was asked to run at ([`insert_params`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunAt {
    /// As a timestamp ([`Value::Timestamp`]).
    Timestamp,
    /// As milliseconds since the Unix epoch ([`Value::BigInt`]).
    Millis,
}

/// How many parameters [`insert_params`] makes for one task.
pub const INSERT_PARAMS: usize = 15;

/// **For backend authors**: the parameters of [`EnqueueStep::Insert`], the same on every
/// backend, in this order: 1 event type, 2 business key, 3 payload, 4 most attempts,
/// 5 backoff strategy, 6 backoff interval (ms), 7 backoff cap (ms), 8 delay (ms; zero
/// when 9 is set), 9 run at (`NULL`: use the delay; a time already past: now), 10
/// priority, 11 jitter (%), 12 initial status, 13 order key, 14 whether a parked task
/// blocks its key (0/1), 15 attempt timeout (ms). A backend appends what only it needs
/// (SQLite its clock; PostgreSQL the `NOTIFY` channel).
///
/// ```
/// use backstop_core::tx::{insert_params, RunAt, Value};
/// # use backstop_core::NewTask;
/// # fn demo(task: backstop_core::driver::Checked<&NewTask>) {
/// let params = insert_params(task, 0, RunAt::Millis);
/// assert_eq!(params.len(), backstop_core::tx::INSERT_PARAMS);
/// assert_eq!(params[0], Value::Text(Some(task.event_type())));
/// # }
/// ```
pub fn insert_params<'a>(task: Checked<&'a NewTask>, status: i16, run_at: RunAt) -> Vec<Value<'a>> {
    let task = task.into_inner();
    let retry = task.retry_policy();
    // a run-at already past is due at once, whatever its value: one before the epoch is
    // sent as the epoch, which every database stores (MySQL's DATETIME starts at year
    // 1000, and sqlx refuses years before 0)
    let due_at = task
        .due_at()
        .map(|t| t.max(chrono::DateTime::<chrono::Utc>::UNIX_EPOCH));
    vec![
        Value::Text(Some(task.event_type())),
        Value::Text(Some(task.biz_key())),
        Value::Text(Some(task.payload())),
        Value::BigInt(Some(i64::from(retry.max_attempts))),
        Value::Text(Some(retry.backoff.strategy())),
        Value::BigInt(Some(millis(retry.backoff.interval()))),
        Value::BigInt(Some(millis(retry.backoff.max_interval()))),
        Value::BigInt(Some(millis(task.due_delay()))),
        match run_at {
            RunAt::Timestamp => Value::Timestamp(due_at),
            RunAt::Millis => Value::BigInt(due_at.map(|t| t.timestamp_millis())),
        },
        Value::SmallInt(Some(i16::from(task.claim_priority().get()))),
        Value::SmallInt(Some(i16::from(retry.jitter_pct))),
        Value::SmallInt(Some(status)),
        Value::Text(task.order()),
        Value::SmallInt(Some(i16::from(task.parked_policy() == WhenParked::Block))),
        Value::BigInt(task.attempt_timeout().map(millis)),
    ]
}

/// **For backend authors**: the statements of an enqueue in the backend's SQL, so core
/// runs the one enqueue protocol ([`KeyedInsert`], [`KeyRelease`]) on any
/// [`TxConnection`] ([`Driver::enqueue_sql`](crate::driver::Driver::enqueue_sql)).
///
/// Every statement whose [`Returns`] is `Row` selects only 64-bit integer columns:
/// [`EnqueueStep::ReadExisting`] `(id, status, age in ms)`, the others the row's id.
pub trait EnqueueSql: Send + Sync {
    /// The backend's SQL dialect.
    fn dialect(&self) -> Dialect;

    /// How the backend stores the time a task is asked to run at (default: a
    /// timestamp).
    fn run_at(&self) -> RunAt {
        RunAt::Timestamp
    }

    /// The statement of `step` for `task`: the backend's SQL, binding `params` (the
    /// step's, as [`EnqueueStep::params`] made them) and what only it needs after them
    /// (SQLite its clock; PostgreSQL the `NOTIFY` channel).
    fn statement<'a>(
        &'a self,
        step: EnqueueStep<'a>,
        params: Vec<Value<'a>>,
        task: Checked<&'a NewTask>,
    ) -> Statement<'a>;

    /// The fenced success mark of `lease`'s task (`complete_tx`): a row changed, or
    /// returned, when it applied.
    fn complete(&self, lease: Lease) -> Statement<'_>;

    /// A multi-row insert for a batch enqueue ([`EnqueueBatch`]): the rows of `doc`
    /// ([`insert_document`]: one object per task of `tasks`, in order), pending, no order
    /// key, each business key once, bound as one text parameter; the backend appends
    /// what only it needs, as for [`EnqueueStep::Insert`].
    ///
    /// It returns ([`Returns::Rows`]) the id of each row it inserted, one column per row;
    /// the database assigns the ids in increasing order down the document. A row whose
    /// key is held is skipped (`ON CONFLICT DO NOTHING`, MariaDB's `INSERT IGNORE`); or
    /// the whole statement fails with [`Answer::DuplicateKey`]. Core then finds out which
    /// tasks were inserted and enqueues the others one by one.
    ///
    /// `None` (the default): the backend has no multi-row insert, and every task of the
    /// batch is enqueued on its own, on the same transaction. Core asks once with no
    /// tasks (`doc` `[]`) to learn which.
    fn insert_rows<'a>(
        &'a self,
        doc: &'a str,
        tasks: &[Checked<&'a NewTask>],
    ) -> Option<Statement<'a>> {
        let _ = (doc, tasks);
        None
    }

    /// The claim of task `id` for `owner` on the caller's transaction
    /// ([`Transactional::claim_in`]), for a task never claimed before (lease 0): as
    /// [`grab_by_id`](crate::TaskStore::grab_by_id) changes it — pending and due
    /// (`next_run_at <= now`) → running, `owner` set, `attempts + 1`, `updated_at` the
    /// time of this statement — with the lease set to 1. A row changed, or returned,
    /// when it applied; none when the task is missing, not pending, not due, or was
    /// claimed before.
    ///
    /// `None` (the default): the backend does not claim on the caller's transaction, and
    /// `claim_in` answers a `Config` error.
    fn claim<'a>(&'a self, id: TaskId, owner: &'a str) -> Option<Statement<'a>> {
        let _ = (id, owner);
        None
    }

    /// Whether [`insert_rows`](Self::insert_rows) reads its rows from `doc` (the
    /// default); `false` for a backend that binds each task's values
    /// ([`rows_params`]), which then gets an empty `doc` and
    /// core does not build one.
    fn insert_rows_document(&self) -> bool {
        true
    }

    /// How many of `n` tasks ready for a multi-row insert the next
    /// [`insert_rows`](Self::insert_rows) takes (1 to `n`; default all of them): a
    /// backend that binds every value, with a text per row count, takes the largest
    /// count it has. The rest follow in later inserts.
    fn insert_rows_take(&self, n: usize) -> usize {
        n
    }
}

/// **For backend authors**: one enqueue as a sequence of [`Statement`]s, without I/O:
/// take the [`next_statement`](Self::next_statement) statement, run it, [`answer`](Self::answer), until
/// `next` says there is none; then [`finish`](Self::finish). [`run`](Self::run) does
/// this on a [`TxConnection`]; a blocking driver loops itself.
pub struct EnqueuePlan<'a> {
    sql: &'a dyn EnqueueSql,
    task: Checked<&'a NewTask>,
    keyed: KeyedInsert<'a>,
    step: InsertStep,
    release: Option<(KeyRelease, ReleaseStep)>,
}

impl<'a> EnqueuePlan<'a> {
    /// The plan of `task` (checked) in `sql`'s statements.
    pub fn new(sql: &'a dyn EnqueueSql, task: Checked<&'a NewTask>) -> Self {
        let keyed = KeyedInsert::new(task.into_inner());
        let step = keyed.first();
        EnqueuePlan {
            sql,
            task,
            keyed,
            step,
            release: None,
        }
    }

    /// The next statement to run, or `None` when the enqueue is done.
    pub fn next_statement(&mut self) -> Result<Option<Statement<'a>>> {
        let task = self.task;
        let order = task.into_inner().order();
        let key = || {
            order.ok_or_else(|| {
                Error::new(
                    ErrorKind::Unexpected,
                    "enqueue",
                    "an order key step without a key",
                )
            })
        };
        loop {
            let releasing = self.release.as_ref().map(|(_, step)| *step);
            let step = if let Some(release) = releasing {
                match release {
                    ReleaseStep::LockKey => EnqueueStep::LockKey(key()?),
                    ReleaseStep::ReadBlocker => EnqueueStep::KeyBlocker(key()?),
                    ReleaseStep::ReadNext => EnqueueStep::KeyNext(key()?),
                    ReleaseStep::Promote(id) => EnqueueStep::KeyPromote(id),
                    ReleaseStep::DropKey => EnqueueStep::KeyDrop(key()?),
                    ReleaseStep::Done(promoted) => {
                        self.release = None;
                        self.step = self.keyed.promoted(promoted)?;
                        continue;
                    }
                }
            } else {
                match self.step {
                    InsertStep::LockKey => EnqueueStep::LockKey(key()?),
                    InsertStep::Insert => EnqueueStep::Insert {
                        status: self.keyed.initial_status(),
                    },
                    InsertStep::ReadExisting => EnqueueStep::ReadExisting,
                    InsertStep::Release(id) => EnqueueStep::Release(id),
                    InsertStep::Replace(id) => EnqueueStep::Replace(id),
                    InsertStep::ReleaseKey => {
                        if order.is_some() {
                            let release = KeyRelease::new();
                            let first = release.first();
                            self.release = Some((release, first));
                        } else {
                            self.step = self.keyed.promoted(None)?;
                        }
                        continue;
                    }
                    InsertStep::Done(_) => return Ok(None),
                }
            };
            let params = step.params(task, self.sql.run_at());
            return Ok(Some(self.sql.statement(step, params, task)));
        }
    }

    /// The answer of the statement [`next_statement`](Self::next_statement) gave last.
    pub fn answer(&mut self, answer: Answer) -> Result<()> {
        if let Some((release, step)) = &mut self.release {
            *step = match *step {
                ReleaseStep::LockKey => release.locked(locked(&answer)?)?,
                ReleaseStep::ReadBlocker => release.blocker(row(&answer)?.is_some()),
                ReleaseStep::ReadNext => release.next(first_column(&answer)?),
                ReleaseStep::Promote(_) => release.promoted(applied(&answer, "promote")?)?,
                ReleaseStep::DropKey => release.dropped(),
                ReleaseStep::Done(_) => return Err(no_statement()),
            };
            return Ok(());
        }
        self.step = match self.step {
            InsertStep::LockKey => self.keyed.key_locked(locked(&answer)?)?,
            InsertStep::Insert => {
                let id = match answer {
                    Answer::InsertId(id) => Some(id),
                    Answer::DuplicateKey => None,
                    ref other => first_column(other)?,
                };
                self.keyed.inserted(id)?
            }
            InsertStep::ReadExisting => {
                let existing = match row(&answer)? {
                    Some(r) => Some(Existing {
                        id: column(r, 0)?,
                        status: column(r, 1)?,
                        age_ms: column(r, 2)?,
                    }),
                    None => None,
                };
                self.keyed.existing(existing)?
            }
            InsertStep::Release(_) => self.keyed.released()?,
            InsertStep::Replace(_) => self.keyed.replaced(applied(&answer, "replace")?)?,
            InsertStep::ReleaseKey | InsertStep::Done(_) => return Err(no_statement()),
        };
        Ok(())
    }

    /// What the enqueue did, once [`next_statement`](Self::next_statement) said it is done.
    pub fn finish(self) -> Result<Inserted> {
        match self.step {
            InsertStep::Done(inserted) if self.release.is_none() => Ok(inserted),
            _ => Err(Error::new(
                ErrorKind::Unexpected,
                "enqueue",
                "the enqueue's statements were not all run",
            )),
        }
    }

    /// Run the plan on a blocking driver's `conn`.
    pub fn run_blocking<C: BlockingTxConnection + ?Sized>(
        mut self,
        conn: &mut C,
    ) -> Result<Inserted> {
        while let Some(statement) = self.next_statement()? {
            let answer = conn.run(&statement)?;
            self.answer(answer)?;
        }
        self.finish()
    }

    /// Run the plan on `conn`.
    pub async fn run<C: TxConnection + ?Sized>(mut self, conn: &mut C) -> Result<Inserted> {
        while let Some(statement) = self.next_statement()? {
            let answer = conn.run(&statement).await?;
            self.answer(answer)?;
        }
        self.finish()
    }
}

fn no_statement() -> Error {
    Error::new(
        ErrorKind::Unexpected,
        "enqueue",
        "an answer with no statement pending",
    )
}

fn wrong_answer(answer: &Answer, wanted: &str) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        "enqueue",
        format!("the statement was answered with {answer:?}; it returns {wanted}"),
    )
}

/// The row of a `Returns::Row` answer.
fn row(answer: &Answer) -> Result<Option<&[i64]>> {
    match answer {
        Answer::Row(r) => Ok(r.as_deref()),
        other => Err(wrong_answer(other, "a row")),
    }
}

fn column(row: &[i64], i: usize) -> Result<i64> {
    row.get(i).copied().ok_or_else(|| {
        Error::new(
            ErrorKind::Unexpected,
            "enqueue",
            format!("the row has {} columns; column {i} was read", row.len()),
        )
    })
}

fn first_column(answer: &Answer) -> Result<Option<TaskId>> {
    row(answer)?.map(|r| column(r, 0)).transpose()
}

/// Whether a key lock held: a row returned, or an upsert ran (it locks whatever it did).
fn locked(answer: &Answer) -> Result<bool> {
    match answer {
        Answer::Row(r) => Ok(r.is_some()),
        Answer::RowsAffected(_) => Ok(true),
        other => Err(wrong_answer(other, "a row or a count")),
    }
}

/// Whether a fenced change applied: a row returned, or a row changed.
fn applied(answer: &Answer, what: &str) -> Result<bool> {
    match answer {
        Answer::Row(r) => Ok(r.is_some()),
        Answer::RowsAffected(n) => Ok(*n > 0),
        other => Err(wrong_answer(other, what)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Dedup;

    /// Statements named after their step, so the test reads the sequence, with their
    /// parameters; a multi-row insert is `rows`, its document its one parameter.
    pub(super) struct Names;

    impl EnqueueSql for Names {
        fn dialect(&self) -> Dialect {
            Dialect::Postgres
        }
        fn statement<'a>(
            &'a self,
            step: EnqueueStep<'a>,
            params: Vec<Value<'a>>,
            _: Checked<&'a NewTask>,
        ) -> Statement<'a> {
            let name = match step {
                EnqueueStep::Insert { status: 5 } => "insert waiting",
                EnqueueStep::Insert { .. } => "insert",
                EnqueueStep::ReadExisting => "existing",
                EnqueueStep::Release(_) => "release",
                EnqueueStep::Replace(_) => "replace",
                EnqueueStep::LockKey(_) => "lock",
                EnqueueStep::KeyBlocker(_) => "blocker",
                EnqueueStep::KeyNext(_) => "next",
                EnqueueStep::KeyPromote(_) => "promote",
                EnqueueStep::KeyDrop(_) => "drop",
            };
            Statement::new(name, params, Returns::Row)
        }
        fn complete(&self, _: Lease) -> Statement<'_> {
            Statement::new("complete", Vec::new(), Returns::Row)
        }
        fn insert_rows<'a>(
            &'a self,
            doc: &'a str,
            _: &[Checked<&'a NewTask>],
        ) -> Option<Statement<'a>> {
            let params = vec![Value::Text(Some(doc))];
            Some(Statement::new("rows", params, Returns::Rows))
        }
    }

    fn walk(task: &NewTask, answers: Vec<Answer>) -> (Vec<String>, Result<Inserted>) {
        let mut plan = EnqueuePlan::new(&Names, Checked::new(task));
        let mut seen = Vec::new();
        let mut answers = answers.into_iter();
        while let Some(st) = plan.next_statement().unwrap() {
            seen.push(st.sql().to_owned());
            plan.answer(answers.next().expect("an answer for every statement"))
                .unwrap();
        }
        (seen, plan.finish())
    }

    #[test]
    fn a_new_task_is_one_insert() {
        let task = NewTask::new("E", "k");
        let (seen, done) = walk(&task, vec![Answer::Row(Some(vec![7]))]);
        assert_eq!(seen, ["insert"]);
        assert_eq!(done.unwrap(), Inserted::created(7));
        // MySQL's insert answers with the insert id
        let (_, done) = walk(&task, vec![Answer::InsertId(8)]);
        assert_eq!(done.unwrap().id, 8);
    }

    #[test]
    fn a_duplicate_reads_the_existing_task() {
        let task = NewTask::new("E", "k");
        for conflict in [Answer::Row(None), Answer::DuplicateKey] {
            let (seen, done) = walk(&task, vec![conflict, Answer::Row(Some(vec![3, 0, 10]))]);
            assert_eq!(seen, ["insert", "existing"]);
            let done = done.unwrap();
            assert_eq!((done.id, done.created, done.status), (3, false, 0));
        }
        // a finished task's key is freed and the insert tried again
        let task = NewTask::new("E", "k").dedup(Dedup::WhileActive);
        let (seen, done) = walk(
            &task,
            vec![
                Answer::Row(None),
                Answer::Row(Some(vec![3, 1, 10])),
                Answer::RowsAffected(1),
                Answer::Row(Some(vec![4])),
            ],
        );
        assert_eq!(seen, ["insert", "existing", "release", "insert"]);
        assert_eq!(done.unwrap(), Inserted::created(4));
    }

    #[test]
    fn an_ordered_task_locks_its_key_then_releases_it() {
        let task = NewTask::new("E", "k").order_key("o");
        let (seen, done) = walk(
            &task,
            vec![
                Answer::RowsAffected(1), // lock (an upsert)
                Answer::Row(Some(vec![9])),
                Answer::Row(Some(vec![1])), // lock again, for the release
                Answer::Row(None),          // no blocker
                Answer::Row(Some(vec![9])), // the next task is the new one
                Answer::RowsAffected(1),    // promoted
            ],
        );
        assert_eq!(
            seen,
            [
                "lock",
                "insert waiting",
                "lock",
                "blocker",
                "next",
                "promote"
            ]
        );
        let done = done.unwrap();
        assert_eq!((done.id, done.created, done.status), (9, true, 0));
    }

    /// every step's parameters, in the documented order
    #[test]
    fn core_makes_each_steps_parameters() {
        let task = NewTask::new("E", "k").payload_raw(r#"{"a":1}"#);
        let t = Checked::new(&task);
        assert_eq!(
            EnqueueStep::Replace(7).params(t, RunAt::Timestamp),
            [Value::Text(Some(r#"{"a":1}"#)), Value::BigInt(Some(7))]
        );
        assert_eq!(
            EnqueueStep::ReadExisting.params(t, RunAt::Timestamp),
            [Value::Text(Some("E")), Value::Text(Some("k"))]
        );
        assert_eq!(
            EnqueueStep::KeyNext("o").params(t, RunAt::Millis),
            [Value::Text(Some("o"))]
        );
        let insert = EnqueueStep::Insert { status: 5 }.params(t, RunAt::Millis);
        assert_eq!(insert.len(), 15);
        assert_eq!(
            insert[8],
            Value::BigInt(None),
            "no run-at: NULL, in milliseconds"
        );
        assert_eq!(insert[11], Value::SmallInt(Some(5)));
        let at = chrono::Utc::now();
        let timed = NewTask::new("E", "k").run_at(at);
        let insert =
            EnqueueStep::Insert { status: 0 }.params(Checked::new(&timed), RunAt::Timestamp);
        assert_eq!(insert[7], Value::BigInt(Some(0)), "no delay with a run-at");
        assert_eq!(insert[8], Value::Timestamp(Some(at)));
    }

    #[test]
    fn a_wrong_answer_is_an_error_not_a_guess() {
        let task = NewTask::new("E", "k");
        let mut plan = EnqueuePlan::new(&Names, Checked::new(&task));
        plan.next_statement().unwrap();
        let e = plan.answer(Answer::RowsAffected(1)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unexpected);
        let unfinished = EnqueuePlan::new(&Names, Checked::new(&task));
        assert_eq!(
            unfinished.finish().unwrap_err().kind(),
            ErrorKind::Unexpected
        );
    }
}
