//! # backstop-sqlite
//!
//! The embedded SQLite backend of backstop: a [`TaskStore`] on a local database file,
//! with SQLite bundled (no system library, no server).
//!
//! - **WAL** journal and a busy timeout on every connection; every write runs under
//!   `BEGIN IMMEDIATE`, so a transaction never fails to upgrade from read to write
//!   (the `SQLITE_BUSY` that `busy_timeout` cannot absorb).
//! - **No blocking of the async runtime**: reads run on pooled connections on tokio's
//!   blocking pool; writes run one after another on the file's writer thread (one per
//!   file in the process, with its own connection), see [`SqliteOptions::queue_writers`].
//! - **Transactional enqueue**: [`SqliteStore::enqueue_tx`] writes the task on the
//!   caller's own [`rusqlite::Transaction`], so it commits or rolls back with the business
//!   rows; [`SqliteStore::transaction`] runs such a transaction on the store's pool.
//! - **Time**: SQLite runs in this process, so "database time" is this machine's clock,
//!   read once per statement (after the write lock is taken) and stored as Unix
//!   milliseconds.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use backstop_core::{NewTask, TaskStore};
//! use backstop_sqlite::SqliteStore;
//!
//! let store = SqliteStore::open("app.db").await?;
//! store.migrate().await?;
//! let enq = store
//!     .transaction(|tx| {
//!         // business rows and the task: one local transaction
//!         tx.execute("INSERT INTO orders (id) VALUES (42)", [])?;
//!         Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
//!             tx.enqueue(&NewTask::new("PAY_ORDER", "42"))?,
//!         )
//!     })
//!     .await?;
//! assert!(enq.created);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod inbox;
mod pool;
mod sql;
mod writer;

pub use inbox::{sqlite_handler, SqliteHandler};
/// The rusqlite this backend is built on, for the caller's own statements in
/// [`SqliteStore::transaction`].
pub use rusqlite;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;
use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction};

use pool::{Pool, Settings};
use sql::{Sql, PRIORITY_LEVELS};
use writer::Writer;

/// How durable a commit is (SQLite's `PRAGMA synchronous` in WAL mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Synchronous {
    /// Every commit is synced to disk before it returns: survives power loss. The default.
    #[default]
    Full,
    /// Commits survive a crash of the process but the last ones may be lost on power
    /// loss or an OS crash. Much faster on slow disks.
    Normal,
}

/// Options of a [`SqliteStore`]: `Default`, then the setters named after the fields.
///
/// ```
/// use std::time::Duration;
/// use backstop_sqlite::{SqliteOptions, Synchronous};
///
/// let options = SqliteOptions::default()
///     .table("orders_outbox")
///     .synchronous(Synchronous::Normal)
///     .busy_timeout(Duration::from_secs(10));
/// assert_eq!(options.config.table, "orders_outbox");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// Table name and payload limit.
    pub config: StoreConfig,
    /// Most pooled connections open at once (default 8). Reads run on them in parallel;
    /// writes take turns on SQLite's single write lock (on the writer thread's own
    /// connection when writers are queued).
    pub max_connections: usize,
    /// How long a statement waits for the write lock before failing with a temporary
    /// `Unavailable` error (default 5 s).
    pub busy_timeout: Duration,
    /// Commit durability (default [`Synchronous::Full`]).
    pub synchronous: Synchronous,
    /// Queue this process's writes of the database file in FIFO order on one writer
    /// thread, before they ask SQLite for the write lock (default `true`). SQLite's busy
    /// handler waits in steps of milliseconds, so writers that meet on the lock lose far
    /// more time than the lock is held; queueing in-process avoids that, and the thread
    /// runs queued writes back to back. The store's own writes that are queued together
    /// share one transaction (group commit: each in a savepoint of its own, so one
    /// failing write never undoes another; every one answered after the commit), so a
    /// claim and the marks queued next to it cost one commit. Every store on the same
    /// file in this process shares the thread and its connection (each write runs with
    /// its own store's `busy_timeout` and `synchronous`); other processes still meet on
    /// SQLite's lock (`BEGIN IMMEDIATE`, `busy_timeout`), which is what keeps them
    /// correct. With `false`, writes run on the pool like reads, one transaction each.
    /// An in-memory store never queues (its one connection is the database).
    pub queue_writers: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            config: StoreConfig::default(),
            max_connections: 8,
            busy_timeout: Duration::from_secs(5),
            synchronous: Synchronous::Full,
            queue_writers: true,
        }
    }
}

impl SqliteOptions {
    backstop_core::driver::setters! {
        /// See [`config`](Self::config).
        config: StoreConfig,
        /// See [`max_connections`](Self::max_connections).
        max_connections: usize,
        /// See [`busy_timeout`](Self::busy_timeout).
        busy_timeout: Duration,
        /// See [`synchronous`](Self::synchronous).
        synchronous: Synchronous,
        /// See [`queue_writers`](Self::queue_writers).
        queue_writers: bool,
    }

    /// Use another table name (a shortcut for [`StoreConfig::table`]).
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.config.table = table.into();
        self
    }

    /// The DDL [`migrate`](backstop_core::TaskStore::migrate) runs for these options, for
    /// a DBA to review or apply with their own tool: the version table, then every
    /// migration in order (task table, indexes, inbox and audit tables, and the changes
    /// since), each followed by the statement that records it. Apply it to an empty
    /// database; to upgrade one, apply the migrations after the newest version its
    /// `{table}_migrations` holds (or let `migrate` do it). No connection is needed.
    ///
    /// ```
    /// let ddl = backstop_sqlite::SqliteOptions::default().table("jobs").ddl().unwrap();
    /// assert!(ddl.contains("CREATE TABLE IF NOT EXISTS \"jobs\""));
    /// assert!(ddl.contains("INSERT INTO \"jobs_migrations\""));
    /// ```
    pub fn ddl(&self) -> Result<String> {
        self.config.validate()?;
        let sql = Sql::new(&self.config.table);
        let table = schema::version_table(&self.config.table);
        Ok(schema::script(&sql.versions_setup, &sql.migrations, |m| {
            format!(
                "INSERT INTO \"{table}\" (version, name, applied_at) \
                 VALUES ({}, '{}', CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))",
                m.version, m.name
            )
        }))
    }
}

/// A [`TaskStore`] on an SQLite database file. Cheap to clone (clones share the pool).
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    sql: Arc<Sql>,
    config: StoreConfig,
    settings: Settings,
    /// Runs every write of this store (see [`SqliteOptions::queue_writers`]); `None`:
    /// writes run on the pool and meet on SQLite's lock.
    writer: Option<Arc<Writer>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.pool.path())
            .field("table", &self.inner.config.table)
            .finish()
    }
}

impl SqliteStore {
    /// Open (creating if missing) the database file at `path` with default options.
    /// Call [`migrate`](TaskStore::migrate) before first use.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    /// Open the database file at `path` with `options`. The options are validated (a bad
    /// table name is a `Config` error) and one connection is opened to check the file.
    pub async fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self> {
        Self::build(Some(path.as_ref().to_path_buf()), options).await
    }

    /// A private in-memory database (one connection; gone when the store is dropped).
    /// Handy for tests and demos.
    pub async fn open_in_memory() -> Result<Self> {
        Self::build(None, SqliteOptions::default().max_connections(1)).await
    }

    async fn build(path: Option<PathBuf>, options: SqliteOptions) -> Result<Self> {
        options.config.validate()?;
        if options.max_connections == 0 {
            return Err(Error::config(
                "open_store",
                "max_connections must be at least 1",
            ));
        }
        // A missing directory is the caller's to create: retrying cannot help (SQLite
        // would report it as "unable to open database file", which reads as temporary).
        if let Some(dir) = path.as_deref().and_then(Path::parent) {
            if !dir.as_os_str().is_empty() && !dir.is_dir() {
                return Err(Error::config(
                    "open_store",
                    format!(
                        "no directory {} for the database file (create it first)",
                        dir.display()
                    ),
                ));
            }
        }
        let max = if path.is_none() {
            1
        } else {
            options.max_connections
        };
        let settings = Settings {
            busy_timeout: options.busy_timeout,
            synchronous: options.synchronous,
        };
        let pool = Pool::new(path.clone(), max, settings);
        // Open one connection now so a bad path fails here, not at first use (and the file
        // exists for the writer's key).
        pool.run("open_store", |_| Ok(())).await?;
        let writer = match (&path, options.queue_writers) {
            (Some(p), true) => Some(Writer::of(p)?),
            _ => None,
        };
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                pool,
                sql: Arc::new(Sql::new(&options.config.table)),
                config: options.config,
                settings,
                writer,
            }),
        })
    }

    /// The store's configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// Enqueue `task` on the caller's transaction: the task row commits or rolls back
    /// together with the caller's business rows. This is the heart of the pattern.
    ///
    /// - Same validation and idempotency as [`TaskStore::enqueue`]; invalid input is
    ///   refused before anything is written.
    /// - The transaction must be on the same database file as the store, with the table
    ///   migrated. Open it with `TransactionBehavior::Immediate` (as
    ///   [`transaction`](Self::transaction) does) so it cannot fail to upgrade to a write.
    /// - This is a blocking call, like every rusqlite call: in async code run it inside
    ///   [`transaction`](Self::transaction) or `spawn_blocking`.
    pub fn enqueue_tx(&self, tx: &Transaction<'_>, task: &NewTask) -> Result<Enqueued> {
        self.enqueue_blocking(&mut OnConn(tx), task)
    }

    /// The caller's transaction as a [`BlockingTxConnection`] (see
    /// [`SqliteTx::connection`]).
    pub fn tx_connection<'c>(&self, tx: &'c Transaction<'_>) -> impl BlockingTxConnection + 'c {
        OnConn(tx)
    }

    /// Enqueue many `tasks` on the caller's transaction, most of them in multi-row
    /// inserts (see [`Transactional::enqueue_many_in`]; answered as
    /// [`TaskStore::enqueue_many`]). Blocking, as [`enqueue_tx`](Self::enqueue_tx).
    pub fn enqueue_many_tx(
        &self,
        tx: &Transaction<'_>,
        tasks: &[NewTask],
    ) -> Result<Vec<Enqueued>> {
        self.enqueue_many_blocking(&mut OnConn(tx), tasks)
    }

    /// Run `f` in a `BEGIN IMMEDIATE` transaction where the store's writes run (the
    /// file's writer thread, or a pooled connection on tokio's blocking pool when writers
    /// are not queued); commit when it returns `Ok`, roll back when it returns `Err` or
    /// panics (a panic is reported as an `Unexpected` error). Keep `f` short: the file's
    /// other writes wait for it. `f` gets a [`SqliteTx`]: the [`rusqlite::Transaction`] (by
    /// `Deref`) for the business rows, plus [`SqliteTx::enqueue`] for the task.
    ///
    /// The error type is the caller's, as long as a backstop [`Error`] converts into it
    /// (a failed commit or an unavailable database is reported that way).
    pub async fn transaction<T, E, F>(&self, f: F) -> std::result::Result<T, E>
    where
        T: Send + 'static,
        E: From<Error> + Send + 'static,
        F: FnOnce(&SqliteTx<'_>) -> std::result::Result<T, E> + Send + 'static,
    {
        let store = self.clone();
        let out = self
            .inner
            .on_writer("transaction", move |conn| {
                let tx = match conn
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                {
                    Ok(tx) => tx,
                    Err(e) => return Ok(Err(E::from(db_err("transaction", e)))),
                };
                let handle = SqliteTx {
                    tx: &tx,
                    store: &store,
                    rollback: std::cell::Cell::new(false),
                };
                let r = f(&handle);
                Ok(match r {
                    Ok(v) if handle.rollback.get() => tx
                        .rollback()
                        .map(|()| v)
                        .map_err(|e| E::from(db_err("transaction", e))),
                    Ok(v) => tx
                        .commit()
                        .map(|()| v)
                        .map_err(|e| E::from(db_err("transaction", e))),
                    Err(e) => Err(e), // dropping tx rolls back
                })
            })
            .await;
        match out {
            Ok(inner) => inner,
            Err(e) => Err(E::from(e)),
        }
    }
}

impl Backend for SqliteStore {
    fn driver(&self) -> &dyn Driver {
        &*self.inner
    }
}

impl Inner {
    /// Run the store's write `f` in a `BEGIN IMMEDIATE` transaction: on the file's writer
    /// thread, where it may share its transaction with the writes queued next to it (group
    /// commit, see the `writer` module), or on a pooled connection when writes are not
    /// queued. `f` reads the clock (`now`) after the write lock is held, so it is never
    /// stale; its result comes back once its changes are committed.
    async fn write<T, F>(&self, op: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Sql, &Connection, i64) -> rusqlite::Result<T> + Send + 'static,
    {
        let sql = Arc::clone(&self.sql);
        match &self.writer {
            Some(w) => {
                w.write(op, self.settings, move |conn| {
                    f(&sql, conn, now_ms()).map_err(|e| db_err(op, e))
                })
                .await
            }
            None => {
                self.pool
                    .run(op, move |conn| {
                        let tx = conn
                            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                            .map_err(|e| db_err(op, e))?;
                        let out = f(&sql, &tx, now_ms()).map_err(|e| db_err(op, e))?;
                        tx.commit().map_err(|e| db_err(op, e))?;
                        Ok(out)
                    })
                    .await
            }
        }
    }

    /// Run `f` where this store's writes run: on the file's writer thread (after the
    /// writes queued before it), or on the pool when writers are not queued.
    async fn on_writer<T, F>(&self, op: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        match &self.writer {
            Some(w) => w.run(op, self.settings, f).await,
            None => self.pool.run(op, f).await,
        }
    }

    /// Run the read `f` on a pooled connection.
    async fn read<T, F>(&self, op: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Sql, &Connection, i64) -> rusqlite::Result<T> + Send + 'static,
    {
        let sql = Arc::clone(&self.sql);
        self.pool
            .run(op, move |conn| {
                f(&sql, conn, now_ms()).map_err(|e| db_err(op, e))
            })
            .await
    }
}

/// A transaction opened by [`SqliteStore::transaction`]: derefs to the
/// [`rusqlite::Transaction`] for the caller's own statements, and enqueues tasks in it.
pub struct SqliteTx<'a> {
    tx: &'a Transaction<'a>,
    store: &'a SqliteStore,
    rollback: std::cell::Cell<bool>,
}

impl SqliteTx<'_> {
    /// Roll the transaction back when the closure returns, even with `Ok` (returning
    /// `Err` rolls back too): for a dry run, or a decision made after the writes.
    ///
    /// ```no_run
    /// # async fn demo(store: backstop_sqlite::SqliteStore) -> backstop_core::Result<()> {
    /// use backstop_core::TaskStore;
    /// let e = store
    ///     .transaction(|tx| {
    ///         let e = tx.enqueue(&backstop_core::NewTask::new("PAY", "order-1"))?;
    ///         tx.rollback(); // nothing of this transaction is kept
    ///         Ok::<_, backstop_core::Error>(e)
    ///     })
    ///     .await?;
    /// assert!(store.get(e.id).await?.is_none());
    /// # Ok(()) }
    /// ```
    pub fn rollback(&self) {
        self.rollback.set(true);
    }

    /// Enqueue `task` in this transaction (see [`SqliteStore::enqueue_tx`]).
    pub fn enqueue(&self, task: &NewTask) -> Result<Enqueued> {
        self.store.enqueue_tx(self.tx, task)
    }

    /// This transaction as a [`BlockingTxConnection`], for what takes one:
    /// [`Engine::claim_blocking`](backstop_core::Engine::claim_blocking) above all,
    /// which claims a task enqueued here in the same commit.
    ///
    /// ```no_run
    /// # async fn demo(store: backstop_sqlite::SqliteStore, engine: backstop_core::Engine<backstop_sqlite::SqliteStore>) -> backstop_core::Result<()> {
    /// use backstop_core::NewTask;
    /// let e = engine.clone();
    /// let claimed = store
    ///     .transaction(move |tx| {
    ///         let enqueued = tx.enqueue(&NewTask::new("PAY_ORDER", "42"))?;
    ///         e.claim_blocking(&mut tx.connection(), &enqueued)
    ///     })
    ///     .await?;
    /// engine.run_claimed(claimed).await;
    /// # Ok(()) }
    /// ```
    pub fn connection(&self) -> impl BlockingTxConnection + '_ {
        OnConn(self.tx)
    }

    /// Enqueue many `tasks` in this transaction (see [`SqliteStore::enqueue_many_tx`]).
    ///
    /// ```no_run
    /// # async fn demo(store: backstop_sqlite::SqliteStore) -> backstop_core::Result<()> {
    /// use backstop_core::NewTask;
    /// let tasks: Vec<_> = (1..=500).map(|i| NewTask::new("PAY_ORDER", i.to_string())).collect();
    /// let enqueued = store.transaction(move |tx| tx.enqueue_many(&tasks)).await?;
    /// assert_eq!(enqueued.len(), 500);
    /// # Ok(()) }
    /// ```
    pub fn enqueue_many(&self, tasks: &[NewTask]) -> Result<Vec<Enqueued>> {
        self.store.enqueue_many_tx(self.tx, tasks)
    }

    /// Inside a handler: record the running task's success in this transaction, with the
    /// handler's business writes and the follow-up tasks it enqueued here — all commit
    /// together or not at all (see [`complete_on`]).
    /// `Conflict` when the attempt's lease is gone: return the error and the transaction
    /// rolls back.
    ///
    /// ```no_run
    /// # use backstop_core::{Context, HandlerError, NewTask};
    /// # async fn handler(store: backstop_sqlite::SqliteStore, cx: Context) -> Result<(), HandlerError> {
    /// store
    ///     .transaction(move |tx| {
    ///         tx.execute("UPDATE orders SET shipped = 1 WHERE id = 42", [])?;
    ///         tx.enqueue(&NewTask::new("NOTIFY_CUSTOMER", "order-42"))?;
    ///         tx.complete(&cx)?;
    ///         Ok::<_, HandlerError>(())
    ///     })
    ///     .await
    /// # }
    /// ```
    pub fn complete(&self, cx: &backstop_core::Context) -> Result<()> {
        self.store.complete_blocking(&mut OnConn(self.tx), cx)
    }
}

impl<'a> std::ops::Deref for SqliteTx<'a> {
    type Target = Transaction<'a>;
    fn deref(&self) -> &Transaction<'a> {
        self.tx
    }
}

/// The enqueue's statements in SQLite's SQL (run by core's [`EnqueuePlan`]). Times are
/// this machine's clock in milliseconds, read when each statement is made (inside the
/// write transaction).
impl EnqueueSql for Sql {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn run_at(&self) -> RunAt {
        RunAt::Millis
    }

    fn statement<'a>(
        &'a self,
        step: EnqueueStep<'a>,
        mut params: Vec<Value<'a>>,
        _task: Checked<&'a NewTask>,
    ) -> Statement<'a> {
        // (SQL, result, whether the clock follows the step's parameters)
        let (text, returns, clock) = match step {
            EnqueueStep::Insert { .. } => (&self.insert, Returns::Row, true),
            EnqueueStep::ReadExisting => (&self.existing, Returns::Row, true),
            EnqueueStep::Release(_) => (&self.release_key, Returns::RowsAffected, false),
            EnqueueStep::Replace(_) => (&self.replace_payload, Returns::RowsAffected, true),
            // the write transaction holds the whole file: the key needs no lock of its own
            EnqueueStep::LockKey(_) => (&self.key_insert, Returns::RowsAffected, false),
            EnqueueStep::KeyBlocker(_) => (&self.key_blocker, Returns::Row, false),
            EnqueueStep::KeyNext(_) => (&self.key_next, Returns::Row, false),
            EnqueueStep::KeyPromote(_) => (&self.key_promote, Returns::RowsAffected, true),
            EnqueueStep::KeyDrop(_) => (&self.key_drop, Returns::RowsAffected, false),
        };
        if clock {
            params.push(Value::BigInt(Some(now_ms())));
        }
        Statement::new(text, params, returns)
    }

    fn insert_rows<'a>(
        &'a self,
        _doc: &'a str,
        tasks: &[Checked<&'a NewTask>],
    ) -> Option<Statement<'a>> {
        // (no tasks: core asking whether there is a multi-row insert at all)
        let text = self.insert_rows.get(tasks.len().max(1))?;
        let mut params = rows_params(tasks, RunAt::Millis);
        params.push(Value::BigInt(Some(now_ms())));
        Some(Statement::new(text, params, Returns::Rows))
    }

    /// Every value bound: no document.
    fn insert_rows_document(&self) -> bool {
        false
    }

    /// The row counts there is a text for.
    fn insert_rows_take(&self, n: usize) -> usize {
        self.insert_rows.take(n)
    }

    fn claim<'a>(&'a self, id: TaskId, owner: &'a str) -> Option<Statement<'a>> {
        Some(Statement::new(
            &self.claim_in,
            vec![
                Value::Text(Some(owner)),
                Value::BigInt(Some(now_ms())),
                Value::BigInt(Some(id)),
            ],
            Returns::RowsAffected,
        ))
    }

    fn complete(&self, lease: Lease) -> Statement<'_> {
        Statement::new(
            &self.mark_success,
            vec![
                Value::BigInt(Some(now_ms())),
                Value::BigInt(Some(lease.task_id)),
                Value::BigInt(Some(lease.token)),
            ],
            Returns::RowsAffected,
        )
    }
}

/// A rusqlite connection (the store's writer, or the caller's transaction) as a
/// [`BlockingTxConnection`].
struct OnConn<'c>(&'c Connection);

impl BlockingTxConnection for OnConn<'_> {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn run(&mut self, statement: &Statement<'_>) -> Result<Answer> {
        run_statement(self.0, statement).map_err(|e| db_err("enqueue", e))
    }
}

/// One [`Statement`] on a rusqlite connection.
fn run_statement(conn: &Connection, statement: &Statement<'_>) -> rusqlite::Result<Answer> {
    let mut st = conn.prepare_cached(statement.sql())?;
    for (i, value) in statement.params().iter().enumerate() {
        let at = i + 1;
        match *value {
            Value::SmallInt(v) => st.raw_bind_parameter(at, v)?,
            Value::Int(v) => st.raw_bind_parameter(at, v)?,
            Value::BigInt(v) => st.raw_bind_parameter(at, v)?,
            Value::Text(v) => st.raw_bind_parameter(at, v)?,
            Value::Timestamp(v) => st.raw_bind_parameter(at, v.map(|t| t.timestamp_millis()))?,
        }
    }
    let columns = |row: &rusqlite::Row<'_>| {
        (0..row.as_ref().column_count())
            .map(|i| row.get::<_, i64>(i))
            .collect::<rusqlite::Result<Vec<_>>>()
    };
    match statement.returns() {
        Returns::Rows => {
            let mut rows = st.raw_query();
            let mut all = Vec::new();
            while let Some(row) = rows.next()? {
                all.push(columns(row)?);
            }
            Ok(Answer::Rows(all))
        }
        Returns::Row => {
            let mut rows = st.raw_query();
            Ok(Answer::Row(rows.next()?.map(columns).transpose()?))
        }
        // RowsAffected (SQLite's statements ask for nothing else)
        _ => {
            let n = st.raw_execute()?;
            Ok(Answer::RowsAffected(n as u64))
        }
    }
}

/// [`KeyRelease`] for order key `key`, inside the write transaction (which is the key's
/// lock: one writer at a time).
fn release_key(sql: &Sql, conn: &Connection, key: &str, now: i64) -> Result<Option<TaskId>> {
    let mut release = KeyRelease::new();
    let mut step = release.first();
    let err = |e| db_err("release_order_keys", e);
    loop {
        step = match step {
            ReleaseStep::LockKey => {
                conn.prepare_cached(&sql.key_insert)
                    .and_then(|mut st| st.execute(params![key]))
                    .map_err(err)?;
                release.locked(true)?
            }
            ReleaseStep::ReadBlocker => {
                let row: Option<i64> = conn
                    .prepare_cached(&sql.key_blocker)
                    .and_then(|mut st| st.query_row(params![key], |r| r.get(0)).optional())
                    .map_err(err)?;
                release.blocker(row.is_some())
            }
            ReleaseStep::ReadNext => {
                let row: Option<i64> = conn
                    .prepare_cached(&sql.key_next)
                    .and_then(|mut st| st.query_row(params![key], |r| r.get(0)).optional())
                    .map_err(err)?;
                release.next(row)
            }
            ReleaseStep::Promote(id) => {
                let n = conn
                    .prepare_cached(&sql.key_promote)
                    .and_then(|mut st| st.execute(params![id, now]))
                    .map_err(err)?;
                release.promoted(n == 1)?
            }
            ReleaseStep::DropKey => {
                conn.prepare_cached(&sql.key_drop)
                    .and_then(|mut st| st.execute(params![key]))
                    .map_err(err)?;
                release.dropped()
            }
            ReleaseStep::Done(promoted) => return Ok(promoted),
        };
    }
}

/// Rows of `stmt` run with `params`, read as tasks.
fn tasks(
    stmt: &mut rusqlite::Statement<'_>,
    params: impl rusqlite::Params,
) -> rusqlite::Result<Vec<RawTask>> {
    stmt.query_map(params, raw_task)?.collect()
}

#[async_trait]
impl Driver for Inner {
    fn config(&self) -> &StoreConfig {
        &self.config
    }

    async fn migrate(&self, target: u32) -> Result<()> {
        let table = self.config.table.clone();
        // One transaction under the write lock: SQLite's DDL is transactional, so the
        // schema moves from one version to the target or not at all.
        self.write("migrate", move |sql, tx, now| {
            tx.execute_batch(&sql.versions_setup)?;
            let applied = tx
                .prepare(&sql.versions_read)?
                .query_map([], |r| r.get::<_, i64>(0))?
                .collect::<rusqlite::Result<Vec<i64>>>()?;
            let todo = match schema::pending(&table, &applied, &sql.migrations, target) {
                Ok(todo) => todo,
                Err(e) => return Ok(Err(e)),
            };
            for m in todo {
                for statement in &m.statements {
                    tx.execute_batch(statement)?;
                }
                tx.execute(
                    &sql.version_record,
                    rusqlite::params![m.version, m.name, now],
                )?;
                tracing::info!(
                    table,
                    version = m.version,
                    name = m.name,
                    "migration applied"
                );
            }
            Ok(Ok(()))
        })
        .await?
    }

    fn enqueue_sql(&self) -> &dyn EnqueueSql {
        &*self.sql
    }

    async fn insert(&self, task: Checked<&NewTask>) -> Result<Inserted> {
        let task = task.cloned();
        self.write("enqueue", move |sql, tx, _| {
            Ok(EnqueuePlan::new(sql, task.as_ref()).run_blocking(&mut OnConn(tx)))
        })
        .await?
    }

    async fn insert_many(&self, tasks: Checked<&[NewTask]>) -> Result<Vec<Inserted>> {
        let tasks = tasks.cloned_vec();
        self.write("enqueue_many", move |sql, tx, _| {
            Ok(EnqueueBatch::new(sql, tasks.as_slice()).run_blocking(&mut OnConn(tx)))
        })
        .await?
    }

    async fn claim_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<RawTask>> {
        let owner = owner.as_str().to_owned();
        self.write("grab_by_id", move |sql, tx, now| {
            tx.prepare_cached(&sql.grab_by_id)?
                .query_row(params![owner, now, id], raw_task)
                .optional()
        })
        .await
    }

    async fn claim_batch(&self, claim: Checked<Claim<'_>>) -> Result<Vec<RawTask>> {
        let owner = claim.owner.as_str().to_owned();
        let types = claim.event_types.to_vec();
        let limit = claim.limit as i64;
        self.write("grab_batch", move |sql, tx, now| {
            // which (event type, level) pairs have due tasks; then walk only those
            let mut probe = tx.prepare_cached(&sql.due_levels)?;
            let mut bound: Vec<&String> = Vec::new();
            let mut walks = Vec::new();
            for t in &types {
                let levels = probe.query_row(params![t, now], |r| {
                    (0..PRIORITY_LEVELS)
                        .map(|i| r.get::<_, Option<i64>>(i))
                        .collect::<rusqlite::Result<Vec<_>>>()
                })?;
                let present: Vec<usize> = levels
                    .into_iter()
                    .flatten()
                    .filter_map(|l| usize::try_from(l).ok())
                    .collect();
                if !present.is_empty() {
                    walks.extend(present.into_iter().map(|l| (bound.len(), l)));
                    bound.push(t);
                }
            }
            if walks.is_empty() {
                return Ok(Vec::new());
            }
            let mut stmt = tx.prepare_cached(&sql.grab_batch(&walks))?;
            let mut values: Vec<&dyn rusqlite::ToSql> = vec![&owner, &now, &limit];
            values.extend(bound.iter().map(|t| *t as &dyn rusqlite::ToSql));
            tasks(&mut stmt, values.as_slice())
        })
        .await
    }

    async fn recycle_dead(&self, batch: Checked<AgedBatch>) -> Result<Recycled> {
        let (older_than, limit) = (batch.older_than, batch.limit as i64);
        self.write("recycle_dead", move |sql, tx, now| {
            let cutoff = now.saturating_sub(millis(older_than));
            let mut stmt = tx.prepare_cached(&sql.recycle_dead)?;
            let statuses = stmt
                .query_map(params![now, cutoff, limit], |r| r.get::<_, i64>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let to_pending = statuses
                .iter()
                .filter(|s| **s == i64::from(Status::Pending.code()))
                .count() as u64;
            Ok(Recycled {
                to_pending,
                to_failed: statuses.len() as u64 - to_pending,
            })
        })
        .await
    }

    async fn heartbeat(&self, leases: Checked<&[Lease]>) -> Result<Vec<bool>> {
        let leases = leases.to_vec();
        self.write("heartbeat", move |sql, tx, now| {
            let mut stmt = tx.prepare_cached(&sql.heartbeat)?;
            leases
                .iter()
                .map(|l| Ok(stmt.execute(params![now, l.task_id, l.token])? == 1))
                .collect()
        })
        .await
    }

    async fn mark(&self, marks: Checked<&[Mark]>) -> Result<Vec<bool>> {
        let marks = marks.to_vec();
        self.write("mark", move |sql, tx, now| {
            marks
                .iter()
                .map(|m| {
                    let Lease { task_id, token } = m.lease;
                    let n = match &m.action {
                        MarkAction::Success => tx
                            .prepare_cached(&sql.mark_success)?
                            .execute(params![now, task_id, token])?,
                        MarkAction::Retry { delay, error } => {
                            tx.prepare_cached(&sql.mark_retry)?.execute(params![
                                now,
                                task_id,
                                token,
                                now.saturating_add(millis(*delay)),
                                error
                            ])?
                        }
                        MarkAction::Fail { error } => tx
                            .prepare_cached(&sql.mark_fail)?
                            .execute(params![now, task_id, token, error])?,
                        MarkAction::Release => tx
                            .prepare_cached(&sql.release)?
                            .execute(params![now, task_id, token])?,
                    };
                    Ok(n == 1)
                })
                .collect()
        })
        .await
    }

    async fn reset(&self, id: TaskId, stuck_after: Checked<Duration>) -> Result<Reset> {
        let stuck_after = *stuck_after;
        self.write("manual_reset", move |sql, tx, now| {
            let cutoff = now.saturating_sub(millis(stuck_after));
            let reset = tx
                .prepare_cached(&sql.manual_reset)?
                .query_row(params![now, id, cutoff], raw_task)
                .optional()?;
            changed(sql, tx, id, reset)
        })
        .await
    }

    async fn cancel(&self, id: TaskId, audit: Checked<&Audit>) -> Result<Reset> {
        let audit = audit.cloned();
        self.write("cancel", move |sql, tx, now| {
            let row = tx
                .prepare_cached(&sql.cancel)?
                .query_row(params![now, id], raw_task)
                .optional()?;
            audited(sql, tx, id, "cancel", &audit.as_ref(), now, row)
        })
        .await
    }

    async fn retry(&self, id: TaskId, expected: [i16; 2], audit: Checked<&Audit>) -> Result<Reset> {
        let audit = audit.cloned();
        self.write("reset", move |sql, tx, now| {
            let row = tx
                .prepare_cached(&sql.retry)?
                .query_row(params![now, id, expected[0], expected[1]], raw_task)
                .optional()?;
            audited(sql, tx, id, "reset", &audit.as_ref(), now, row)
        })
        .await
    }

    async fn delete(&self, id: TaskId, audit: Checked<&Audit>) -> Result<Reset> {
        let audit = audit.cloned();
        self.write("delete", move |sql, tx, now| {
            let row = tx
                .prepare_cached(&sql.delete)?
                .query_row(params![id], raw_task)
                .optional()?;
            audited(sql, tx, id, "delete", &audit.as_ref(), now, row)
        })
        .await
    }

    async fn audit_log(&self, id: TaskId) -> Result<Vec<RawAudit>> {
        self.read("audit_log", move |sql, conn, _| {
            conn.prepare_cached(&sql.audit_log)?
                .query_map(params![id], |r| RawAudit::read(&Cols(r)))?
                .collect()
        })
        .await
    }

    async fn get(&self, id: TaskId) -> Result<Option<RawTask>> {
        self.read("get", move |sql, conn, _| {
            conn.prepare_cached(&sql.get)?
                .query_row(params![id], raw_task)
                .optional()
        })
        .await
    }

    async fn list(&self, filter: Checked<&TaskFilter>) -> Result<Vec<RawTask>> {
        let filter = filter.into_inner().clone();
        self.read("list", move |sql, conn, now| {
            let (text, args) = list_sql(&sql.list_select, &sql::LIST, &filter);
            let values: Vec<rusqlite::types::Value> = args
                .into_iter()
                .map(|a| match a {
                    ListArg::Status(s) => i64::from(s).into(),
                    ListArg::Text(t) => t.to_owned().into(),
                    ListArg::Age(d) => now.saturating_sub(millis(d)).into(),
                    ListArg::Int(i) => i.into(),
                })
                .collect();
            // not cached: up to 64 shapes would push the hot statements out of the cache
            tasks(
                &mut conn.prepare(&text)?,
                rusqlite::params_from_iter(values),
            )
        })
        .await
    }

    async fn stats(&self, backlog_only: bool) -> Result<RawStats> {
        self.read("stats", move |sql, conn, now| {
            let counts_sql = if backlog_only {
                &sql.backlog_counts
            } else {
                &sql.stats_counts
            };
            let counts = conn
                .prepare_cached(counts_sql)?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let oldest_due_pending_ms = conn
                .prepare_cached(&sql.stats_oldest_due)?
                .query_row(params![now], |r| r.get(0))?;
            Ok(RawStats {
                counts,
                oldest_due_pending_ms,
            })
        })
        .await
    }

    async fn throughput(&self, b: Checked<Buckets>) -> Result<Vec<(String, i64, i64, i64)>> {
        let (window, bucket) = (millis(b.window), millis(b.bucket));
        let cap = i64::try_from(b.cap).unwrap_or(i64::MAX);
        self.read("throughput", move |sql, conn, now| {
            conn.prepare_cached(&sql.throughput)?
                .query_map(params![now, window, bucket, cap], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .await
    }

    async fn purge_succeeded(&self, batch: Checked<AgedBatch>) -> Result<u64> {
        let (older_than, limit) = (batch.older_than, batch.limit as i64);
        self.write("purge_succeeded", move |sql, tx, now| {
            let cutoff = now.saturating_sub(millis(older_than));
            let n = tx
                .prepare_cached(&sql.purge_succeeded)?
                .execute(params![cutoff, limit])?;
            Ok(n as u64)
        })
        .await
    }

    async fn delete_succeeded(&self, ids: Checked<&[TaskId]>) -> Result<u64> {
        let ids = ids.to_vec();
        self.write("delete_succeeded", move |sql, tx, _| {
            let mut stmt = tx.prepare_cached(&sql.delete_succeeded)?;
            let mut n = 0u64;
            for id in &ids {
                n += stmt.execute(params![id])? as u64;
            }
            Ok(n)
        })
        .await
    }

    async fn release_keys(&self, keys: Checked<&[String]>) -> Result<Vec<TaskId>> {
        let keys = keys.to_vec();
        self.write("release_order_keys", move |sql, tx, now| {
            let mut promoted = Vec::new();
            for key in &keys {
                match release_key(sql, tx, key, now) {
                    Ok(id) => promoted.extend(id),
                    Err(e) => return Ok(Err(e)),
                }
            }
            Ok(Ok(promoted))
        })
        .await?
    }

    async fn register_types(&self, event_types: Checked<&[String]>) -> Result<()> {
        let types = event_types.to_vec();
        self.write("register_event_types", move |sql, tx, now| {
            let mut stmt = tx.prepare_cached(&sql.types_register)?;
            for t in &types {
                stmt.execute(params![t, now])?;
            }
            Ok(())
        })
        .await
    }

    async fn types(&self) -> Result<Vec<(String, DateTime<Utc>, DateTime<Utc>)>> {
        let rows: Vec<(String, i64, i64)> = self
            .read("event_types", |sql, conn, _| {
                conn.prepare_cached(&sql.types_list)?
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect()
            })
            .await?;
        rows.into_iter()
            .map(|(t, f, l)| {
                let time = |ms: i64| {
                    DateTime::from_timestamp_millis(ms).ok_or_else(|| {
                        Error::new(
                            ErrorKind::Unexpected,
                            "event_types",
                            format!("bad time {ms}"),
                        )
                    })
                };
                Ok((t, time(f)?, time(l)?))
            })
            .collect()
    }

    async fn order_keys(&self, after: Option<&str>, limit: Checked<usize>) -> Result<Vec<String>> {
        let after = after.unwrap_or("").to_owned();
        let limit = i64::try_from(*limit).unwrap_or(i64::MAX);
        self.read("order_keys", move |sql, conn, _| {
            conn.prepare_cached(&sql.keys_page)?
                .query_map(params![after, limit], |r| r.get(0))?
                .collect()
        })
        .await
    }
}

/// This machine's clock in Unix milliseconds: SQLite's "database time".
fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

/// Map a rusqlite error to a backstop error of operation `op`.
fn db_err(op: &'static str, e: rusqlite::Error) -> Error {
    let code = match &e {
        rusqlite::Error::SqliteFailure(f, _) => f.extended_code,
        _ => 0,
    };
    let (kind, msg) = backstop_core::driver::sqlite_error_kind(code);
    Error::new(kind, op, format!("{msg}: {e}")).with_source(e)
}

/// Read a row of [`COLUMNS`](backstop_core::driver::COLUMNS).
/// The answer of a fenced change of task `id` whose statement returned `row` (in the
/// change's transaction): the row, or why there was none.
fn changed(
    sql: &Sql,
    tx: &Connection,
    id: TaskId,
    row: Option<RawTask>,
) -> rusqlite::Result<Reset> {
    if let Some(row) = row {
        return Ok(Reset::Done(Box::new(row)));
    }
    let status: Option<i64> = tx
        .prepare_cached(&sql.status_of)?
        .query_row(params![id], |r| r.get(0))
        .optional()?;
    Ok(status.map_or(Reset::Missing, Reset::Refused))
}

/// [`changed`], with the operator's audit entry appended when the change was made.
fn audited(
    sql: &Sql,
    tx: &Connection,
    id: TaskId,
    action: &str,
    audit: &Audit,
    now: i64,
    row: Option<RawTask>,
) -> rusqlite::Result<Reset> {
    if row.is_some() {
        tx.prepare_cached(&sql.audit_insert)?.execute(params![
            id,
            action,
            audit.operator,
            audit.reason,
            now
        ])?;
    }
    changed(sql, tx, id, row)
}

fn raw_task(r: &Row<'_>) -> rusqlite::Result<RawTask> {
    RawTask::read(&Cols(r))
}

/// A row's columns (times are Unix milliseconds).
struct Cols<'a, 'r>(&'a Row<'r>);

impl TaskRow for Cols<'_, '_> {
    type Error = rusqlite::Error;
    fn int(&self, i: usize) -> rusqlite::Result<i64> {
        self.0.get(i)
    }
    fn text(&self, i: usize) -> rusqlite::Result<String> {
        self.0.get(i)
    }
    fn opt_text(&self, i: usize) -> rusqlite::Result<Option<String>> {
        self.0.get(i)
    }
    fn opt_int(&self, i: usize) -> rusqlite::Result<Option<i64>> {
        self.0.get(i)
    }
    fn time(&self, i: usize) -> rusqlite::Result<DateTime<Utc>> {
        let ms: i64 = self.0.get(i)?;
        DateTime::from_timestamp_millis(ms).ok_or(rusqlite::Error::IntegralValueOutOfRange(i, ms))
    }
}

#[cfg(test)]
mod tests {
    use backstop_core::driver::Backend;

    use super::SqliteStore;

    /// The store hands core a multi-row insert for batches, in counts it has a text for.
    #[tokio::test]
    async fn batches_go_in_multi_row_inserts() {
        let store = SqliteStore::open_in_memory().await.unwrap();
        let sql = store.driver().enqueue_sql();
        assert!(sql.insert_rows("[]", &[]).is_some());
        assert!(
            !sql.insert_rows_document(),
            "every value bound, no document"
        );
        assert_eq!(
            (sql.insert_rows_take(1000), sql.insert_rows_take(3)),
            (256, 2)
        );
    }
}
