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

mod pool;
mod sql;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use backstop_core::async_trait;
use backstop_core::limits::{self, bounded_error, millis};
use backstop_core::{
    Backoff, Enqueued, Error, ErrorKind, Lease, Mark, MarkAction, NewTask, Owner, Recycled, Result,
    RetryPolicy, Stats, Status, StatusCount, StoreConfig, Task, TaskFilter, TaskId, TaskStore,
};
use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction};

use pool::{Pool, Settings};
use sql::Sql;
use writer::Writer;

/// How durable a commit is (SQLite's `PRAGMA synchronous` in WAL mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Every commit is synced to disk before it returns: survives power loss. The default.
    #[default]
    Full,
    /// Commits survive a crash of the process but the last ones may be lost on power
    /// loss or an OS crash. Much faster on slow disks.
    Normal,
}

/// Options of a [`SqliteStore`].
#[derive(Debug, Clone)]
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
    /// Use another table name.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.config.table = table.into();
        self
    }
}

/// A [`TaskStore`] on an SQLite database file. Cheap to clone (clones share the pool).
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    sql: Sql,
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
        Self::build(
            None,
            SqliteOptions {
                max_connections: 1,
                ..SqliteOptions::default()
            },
        )
        .await
    }

    async fn build(path: Option<PathBuf>, options: SqliteOptions) -> Result<Self> {
        options.config.validate()?;
        if options.max_connections == 0 {
            return Err(Error::config(
                "open_store",
                "max_connections must be at least 1",
            ));
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
                sql: Sql::new(&options.config.table),
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
        task.validate(self.inner.config.max_payload_bytes)?;
        enqueue_on(&self.inner.sql, tx, task, now_ms()).map_err(|e| db_err("enqueue", e))
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
            .on_writer("transaction", move |conn| {
                let tx = match conn
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                {
                    Ok(tx) => tx,
                    Err(e) => return Ok(Err(E::from(db_err("transaction", e)))),
                };
                let r = f(&SqliteTx {
                    tx: &tx,
                    store: &store,
                });
                Ok(match r {
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
        let inner = Arc::clone(&self.inner);
        match &self.inner.writer {
            Some(w) => {
                w.write(op, self.inner.settings, move |conn| {
                    f(&inner.sql, conn, now_ms()).map_err(|e| db_err(op, e))
                })
                .await
            }
            None => {
                self.inner
                    .pool
                    .run(op, move |conn| {
                        let tx = conn
                            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                            .map_err(|e| db_err(op, e))?;
                        let out = f(&inner.sql, &tx, now_ms()).map_err(|e| db_err(op, e))?;
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
        match &self.inner.writer {
            Some(w) => w.run(op, self.inner.settings, f).await,
            None => self.inner.pool.run(op, f).await,
        }
    }

    async fn read<T, F>(&self, op: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Sql, &Connection, i64) -> Result<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        self.inner
            .pool
            .run(op, move |conn| f(&inner.sql, conn, now_ms()))
            .await
    }
}

/// A transaction opened by [`SqliteStore::transaction`]: derefs to the
/// [`rusqlite::Transaction`] for the caller's own statements, and enqueues tasks in it.
pub struct SqliteTx<'a> {
    tx: &'a Transaction<'a>,
    store: &'a SqliteStore,
}

impl SqliteTx<'_> {
    /// Enqueue `task` in this transaction (see [`SqliteStore::enqueue_tx`]).
    pub fn enqueue(&self, task: &NewTask) -> Result<Enqueued> {
        self.store.enqueue_tx(self.tx, task)
    }
}

impl<'a> std::ops::Deref for SqliteTx<'a> {
    type Target = Transaction<'a>;
    fn deref(&self) -> &Transaction<'a> {
        self.tx
    }
}

fn enqueue_on(
    sql: &Sql,
    conn: &Connection,
    task: &NewTask,
    now: i64,
) -> rusqlite::Result<Enqueued> {
    let retry = task.retry_policy();
    let inserted: Option<i64> = conn
        .prepare_cached(&sql.insert)?
        .query_row(
            params![
                task.event_type(),
                task.biz_key(),
                task.payload(),
                i64::from(retry.max_attempts),
                retry.backoff.strategy(),
                millis(retry.backoff.interval()),
                millis(retry.backoff.max_interval()),
                now,
                millis(task.due_delay()),
            ],
            |r| r.get(0),
        )
        .optional()?;
    let (id, created) = match inserted {
        Some(id) => (id, true),
        None => (
            conn.prepare_cached(&sql.find_by_key)?
                .query_row(params![task.event_type(), task.biz_key()], |r| r.get(0))?,
            false,
        ),
    };
    Ok(Enqueued {
        id,
        created,
        event_type: task.event_type().to_owned(),
    })
}

#[async_trait]
impl TaskStore for SqliteStore {
    async fn migrate(&self) -> Result<()> {
        self.write("migrate", |sql, tx, _| tx.execute_batch(&sql.schema))
            .await
    }

    async fn enqueue(&self, task: NewTask) -> Result<Enqueued> {
        task.validate(self.inner.config.max_payload_bytes)?;
        self.write("enqueue", move |sql, tx, now| {
            enqueue_on(sql, tx, &task, now)
        })
        .await
    }

    async fn grab_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<Task>> {
        let owner = owner.as_str().to_owned();
        let row = self
            .write("grab_by_id", move |sql, tx, now| {
                tx.prepare_cached(&sql.grab_by_id)?
                    .query_row(params![owner, now, id], RawTask::from_row)
                    .optional()
            })
            .await?;
        row.map(RawTask::decode).transpose()
    }

    async fn grab_batch(
        &self,
        owner: &Owner,
        event_types: &[String],
        limit: usize,
    ) -> Result<Vec<Task>> {
        const OP: &str = "grab_batch";
        if !limits::check_grab_batch(event_types, limit)? {
            return Ok(Vec::new());
        }
        let owner = owner.as_str().to_owned();
        let types = event_types.to_vec();
        let rows = self
            .write(OP, move |sql, tx, now| {
                let text = sql.grab_batch(types.len());
                let mut stmt = tx.prepare_cached(&text)?;
                let limit = limit as i64;
                let mut values: Vec<&dyn rusqlite::ToSql> = vec![&owner, &now, &limit];
                values.extend(types.iter().map(|t| t as &dyn rusqlite::ToSql));
                let rows = stmt
                    .query_map(values.as_slice(), RawTask::from_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                Ok(rows)
            })
            .await?;
        let mut tasks = rows
            .into_iter()
            .map(RawTask::decode)
            .collect::<Result<Vec<_>>>()?;
        backstop_core::batch::oldest_first(&mut tasks);
        Ok(tasks)
    }

    async fn recycle_dead(&self, older_than: Duration, limit: usize) -> Result<Recycled> {
        const OP: &str = "recycle_dead";
        if !limits::check_aged_batch(OP, older_than, limit)? {
            return Ok(Recycled::default());
        }
        self.write(OP, move |sql, tx, now| {
            let cutoff = now.saturating_sub(millis(older_than));
            let mut stmt = tx.prepare_cached(&sql.recycle_dead)?;
            let statuses = stmt
                .query_map(params![now, cutoff, limit as i64], |r| r.get::<_, i64>(0))?
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

    async fn heartbeat(&self, leases: &[Lease]) -> Result<Vec<bool>> {
        const OP: &str = "heartbeat";
        limits::check_leases(OP, leases)?;
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let leases = leases.to_vec();
        self.write(OP, move |sql, tx, now| {
            let mut stmt = tx.prepare_cached(&sql.heartbeat)?;
            leases
                .iter()
                .map(|l| Ok(stmt.execute(params![now, l.task_id, l.token])? == 1))
                .collect()
        })
        .await
    }

    async fn mark(&self, marks: &[Mark]) -> Result<Vec<bool>> {
        const OP: &str = "mark";
        limits::check_marks(OP, marks)?;
        if marks.is_empty() {
            return Ok(Vec::new());
        }
        let marks = marks.to_vec();
        self.write(OP, move |sql, tx, now| {
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
                                bounded_error(error)
                            ])?
                        }
                        MarkAction::Fail { error } => tx
                            .prepare_cached(&sql.mark_fail)?
                            .execute(params![now, task_id, token, bounded_error(error)])?,
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

    async fn manual_reset(&self, id: TaskId, stuck_after: Duration) -> Result<Task> {
        const OP: &str = "manual_reset";
        limits::check_duration(OP, "stuck_after", stuck_after)?;
        let outcome = self
            .write(OP, move |sql, tx, now| {
                let cutoff = now.saturating_sub(millis(stuck_after));
                let reset = tx
                    .prepare_cached(&sql.manual_reset)?
                    .query_row(params![now, id, cutoff], RawTask::from_row)
                    .optional()?;
                if let Some(raw) = reset {
                    return Ok(Ok(raw));
                }
                let status: Option<i64> = tx
                    .prepare_cached(&sql.status_of)?
                    .query_row(params![id], |r| r.get(0))
                    .optional()?;
                Ok(Err(status))
            })
            .await?;
        match outcome {
            Ok(raw) => raw.decode(),
            Err(None) => Err(Error::task_not_found(OP, id)),
            Err(Some(code)) => Err(Error::reset_refused(OP, id, Status::from_code(code)?)),
        }
    }

    async fn get(&self, id: TaskId) -> Result<Option<Task>> {
        self.read("get", move |sql, conn, _| {
            conn.prepare_cached(&sql.get)
                .and_then(|mut s| s.query_row(params![id], RawTask::from_row).optional())
                .map_err(|e| db_err("get", e))?
                .map(RawTask::decode)
                .transpose()
        })
        .await
    }

    async fn list(&self, filter: &TaskFilter) -> Result<Vec<Task>> {
        const OP: &str = "list";
        limits::check_filter(filter)?;
        let filter = filter.clone();
        self.read(OP, move |sql, conn, now| {
            let status = filter.status.map(|s| i64::from(s.code()));
            let cutoff = filter.older_than.map(|d| now.saturating_sub(millis(d)));
            let rows = conn
                .prepare_cached(&sql.list)
                .and_then(|mut s| {
                    s.query_map(
                        params![
                            status,
                            filter.event_type,
                            filter.after_id.unwrap_or(i64::MIN),
                            filter.limit as i64,
                            cutoff
                        ],
                        RawTask::from_row,
                    )?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(|e| db_err(OP, e))?;
            rows.into_iter().map(RawTask::decode).collect()
        })
        .await
    }

    async fn stats(&self) -> Result<Stats> {
        const OP: &str = "stats";
        self.read(OP, |sql, conn, now| {
            let counts = conn
                .prepare_cached(&sql.stats_counts)
                .and_then(|mut s| {
                    s.query_map([], |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, i64>(1)?,
                            r.get::<_, i64>(2)?,
                        ))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(|e| db_err(OP, e))?;
            let oldest: Option<i64> = conn
                .prepare_cached(&sql.stats_oldest_due)
                .and_then(|mut s| s.query_row(params![now], |r| r.get(0)))
                .map_err(|e| db_err(OP, e))?;
            let counts = counts
                .into_iter()
                .map(|(event_type, code, count)| {
                    Ok(StatusCount {
                        event_type,
                        status: Status::from_code(code)?,
                        count: u64::try_from(count).unwrap_or(0),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(Stats {
                counts,
                oldest_due_pending: oldest
                    .map(|t| Duration::from_millis(u64::try_from(now - t).unwrap_or(0))),
            })
        })
        .await
    }

    async fn purge_succeeded(&self, older_than: Duration, limit: usize) -> Result<u64> {
        const OP: &str = "purge_succeeded";
        if !limits::check_aged_batch(OP, older_than, limit)? {
            return Ok(0);
        }
        self.write(OP, move |sql, tx, now| {
            let cutoff = now.saturating_sub(millis(older_than));
            let n = tx
                .prepare_cached(&sql.purge_succeeded)?
                .execute(params![cutoff, limit as i64])?;
            Ok(n as u64)
        })
        .await
    }

    async fn delete_succeeded(&self, ids: &[TaskId]) -> Result<u64> {
        const OP: &str = "delete_succeeded";
        limits::check_ids(OP, ids)?;
        if ids.is_empty() {
            return Ok(0);
        }
        let ids = ids.to_vec();
        self.write(OP, move |sql, tx, _| {
            let mut stmt = tx.prepare_cached(&sql.delete_succeeded)?;
            let mut n = 0u64;
            for id in &ids {
                n += stmt.execute(params![id])? as u64;
            }
            Ok(n)
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
    use rusqlite::ErrorCode;
    let (kind, msg) = match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => (
            ErrorKind::Unavailable,
            "the database is busy (locked by another writer)",
        ),
        Some(ErrorCode::CannotOpen | ErrorCode::SystemIoFailure | ErrorCode::DiskFull) => {
            (ErrorKind::Unavailable, "the database file is not usable")
        }
        Some(ErrorCode::ReadOnly | ErrorCode::PermissionDenied) => {
            (ErrorKind::Config, "the database is read-only")
        }
        Some(ErrorCode::ConstraintViolation) => (ErrorKind::Conflict, "a constraint was violated"),
        _ => (ErrorKind::Unexpected, "SQLite failed"),
    };
    Error::new(kind, op, format!("{msg}: {e}")).with_source(e)
}

/// A task row as read, before decoding into a [`Task`].
struct RawTask {
    id: i64,
    event_type: String,
    biz_key: String,
    payload: String,
    status: i64,
    attempts: i64,
    max_attempts: i64,
    retry_strategy: String,
    retry_interval_ms: i64,
    retry_max_interval_ms: i64,
    next_run_at: i64,
    owner: Option<String>,
    lease: i64,
    last_error: Option<String>,
    created_at: i64,
    updated_at: i64,
}

impl RawTask {
    /// Read the columns in [`sql::COLUMNS`] order.
    fn from_row(r: &Row<'_>) -> rusqlite::Result<RawTask> {
        Ok(RawTask {
            id: r.get(0)?,
            event_type: r.get(1)?,
            biz_key: r.get(2)?,
            payload: r.get(3)?,
            status: r.get(4)?,
            attempts: r.get(5)?,
            max_attempts: r.get(6)?,
            retry_strategy: r.get(7)?,
            retry_interval_ms: r.get(8)?,
            retry_max_interval_ms: r.get(9)?,
            next_run_at: r.get(10)?,
            owner: r.get(11)?,
            lease: r.get(12)?,
            last_error: r.get(13)?,
            created_at: r.get(14)?,
            updated_at: r.get(15)?,
        })
    }

    fn decode(self) -> Result<Task> {
        let bad = |what: &str| {
            Error::new(
                ErrorKind::Unexpected,
                "decode_task",
                format!("task {} has an invalid {what}", self.id),
            )
        };
        let time = |ms: i64, what: &str| -> Result<DateTime<Utc>> {
            DateTime::from_timestamp_millis(ms).ok_or_else(|| bad(what))
        };
        let dur = |ms: i64, what: &str| -> Result<Duration> {
            u64::try_from(ms)
                .map(Duration::from_millis)
                .map_err(|_| bad(what))
        };
        Ok(Task {
            id: self.id,
            status: Status::from_code(self.status)?,
            attempts: u32::try_from(self.attempts).map_err(|_| bad("attempts"))?,
            retry: RetryPolicy {
                max_attempts: u32::try_from(self.max_attempts).map_err(|_| bad("max_attempts"))?,
                backoff: Backoff::from_parts(
                    &self.retry_strategy,
                    dur(self.retry_interval_ms, "retry_interval_ms")?,
                    dur(self.retry_max_interval_ms, "retry_max_interval_ms")?,
                )?,
            },
            next_run_at: time(self.next_run_at, "next_run_at")?,
            created_at: time(self.created_at, "created_at")?,
            updated_at: time(self.updated_at, "updated_at")?,
            event_type: self.event_type,
            biz_key: self.biz_key,
            payload: self.payload,
            owner: self.owner,
            lease: self.lease,
            last_error: self.last_error,
        })
    }
}
