//! # backstop-mysql
//!
//! The MySQL 8 / MariaDB 10.6+ backend of backstop: a [`TaskStore`] on sqlx's MySQL
//! driver (InnoDB).
//!
//! - **Three claim strategies** ([`ClaimStrategy`]), one transaction each: a locking
//!   read of the oldest due ids, then `UPDATE … WHERE id IN (…)` tagging the rows with a
//!   per-call claim token, then a `SELECT` of exactly those rows. They differ in what the
//!   read does with rows another claim holds: *queue then skip* waits its turn up to
//!   1 s, then passes them (`FOR UPDATE WAIT 1`, then `SKIP LOCKED`; MariaDB ≥ 10.6, the
//!   default there), *skip locked* passes them at once (MySQL ≥ 8.0.1, the default
//!   there), the *ordered update* waits (`FOR UPDATE`; every version).
//! - **READ COMMITTED** on every pooled connection (no gap locks to deadlock with
//!   inserts); claim indexes that match the `ORDER BY` exactly.
//! - **Deadlocks (1213) and lock-wait timeouts (1205)** are retried a few times with
//!   backoff, then reported as temporary `Unavailable` errors.
//! - **Database time** (`NOW(3)`, `DATETIME(3)`, session time zone UTC) everywhere.
//! - **Transactional enqueue** on the caller's `sqlx::Transaction<MySql>` or
//!   `&mut MySqlConnection`: [`MySqlStore::enqueue_tx`]. A duplicate returns the existing
//!   id; any other error is reported, never swallowed.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use backstop_core::{NewTask, TaskStore};
//! use backstop_mysql::MySqlStore;
//!
//! let store = MySqlStore::connect("mysql://app:secret@localhost/app").await?;
//! store.migrate().await?;
//! let mut tx = store.pool().begin().await?;
//! sqlx::query("INSERT INTO orders (id) VALUES (42)").execute(&mut *tx).await?;
//! let enqueued = store.enqueue_tx(&mut tx, &NewTask::new("PAY_ORDER", "42")).await?;
//! tx.commit().await?;
//! assert!(enqueued.created);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod inbox;
mod sql;

use std::collections::HashSet;
use std::future::Future;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;
use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::mysql::{MySqlConnectOptions, MySqlDatabaseError, MySqlPoolOptions, MySqlRow};
use sqlx::{Executor, MySql, MySqlConnection, MySqlPool, Row};

use sql::{LockWait, Sql, PRIORITY_LEVELS};

/// A pooled connection idle at least this long is pinged before it is handed out.
const IDLE_PING_AFTER: Duration = Duration::from_secs(1);

pub use inbox::{mysql_handler, MySqlHandler};
pub use sqlx;

/// Most rows one set-based statement names (keeps statements and their plans small).
const SET_CHUNK: usize = 128;

/// The statement size for `n` rows: the next power of two. Statements whose text varies
/// with every batch size would churn the driver's prepared-statement cache (each eviction
/// is a `COM_STMT_CLOSE` round trip); a handful of sizes stay cached.
fn bucket(n: usize) -> usize {
    n.max(1).next_power_of_two()
}

/// `items`, then its last item repeated up to [`bucket`]`(items.len())`. Repeating a row in
/// an `IN (…)` list or a `CASE id WHEN …` changes nothing.
fn padded<T>(items: &[T]) -> impl Iterator<Item = &T> {
    let extra = bucket(items.len()) - items.len();
    items
        .iter()
        .chain(items.last().into_iter().cycle().take(extra))
}

/// How a batch of tasks is claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ClaimStrategy {
    /// Queue-then-skip on MariaDB ≥ 10.6, skip locked on MySQL ≥ 8.0.1 (which has no
    /// `WAIT n`), else ordered update. The default.
    #[default]
    Auto,
    /// `SELECT … ORDER BY next_run_at, id LIMIT n FOR UPDATE` + `UPDATE … WHERE id IN
    /// (…)` in one transaction: an ordered update, in two statements. Works on every
    /// version; concurrent claimers queue behind each other's row locks, and behind an
    /// application's transaction that has enqueued a task and not committed yet (InnoDB's
    /// locking read waits on an uncommitted insert it meets near the head of the queue:
    /// keep such transactions short, or claims wait up to `innodb_lock_wait_timeout`).
    /// (A single
    /// `UPDATE … ORDER BY … LIMIT` changes a column of the index it scans, so the server
    /// collects every due row before applying the limit: a claim's cost would grow with
    /// the backlog.)
    OrderedUpdate,
    /// `SELECT … FOR UPDATE SKIP LOCKED` + `UPDATE … WHERE id IN (…)` in one transaction:
    /// concurrent claimers pass each other.
    SkipLocked,
    /// Claimers take turns at the head of the queue and pass only a stalled one: the
    /// ordered claim's locking read waits up to 1 s for another claim's row locks
    /// (`FOR UPDATE WAIT 1`); past that, the claim starts over with `SKIP LOCKED`.
    ///
    /// Under contention claims queue instead of running side by side over the same
    /// index head, which keeps several instances at least as fast as one (where skip
    /// locked slows down as instances are added; see the README's benchmarks), while a
    /// claimer that stalls mid-claim (a paused VM, a partitioned host) holds the others
    /// up by a second, not `innodb_lock_wait_timeout`. Once a claim has waited out that
    /// second, the store's claims skip locked rows at once for the next 10 s, then queue
    /// again: a holder that does not let go — a stalled claimer, or an application's
    /// transaction that enqueued a task and has not committed (InnoDB's locking read
    /// waits on an uncommitted insert near the head of the queue, due or not) — costs
    /// one claim a second every 10 s, not every claim. Needs MariaDB ≥ 10.6 (`WAIT n`
    /// and `SKIP LOCKED`); the default there.
    QueueThenSkip,
}

impl ClaimStrategy {
    /// What [`Auto`](Self::Auto) resolves to on a server reporting `version`
    /// (`SELECT VERSION()`).
    ///
    /// ```
    /// use backstop_mysql::ClaimStrategy;
    /// assert_eq!(ClaimStrategy::auto_for("10.11.14-MariaDB"), ClaimStrategy::QueueThenSkip);
    /// assert_eq!(ClaimStrategy::auto_for("8.0.36"), ClaimStrategy::SkipLocked);
    /// assert_eq!(ClaimStrategy::auto_for("10.5.23-MariaDB"), ClaimStrategy::OrderedUpdate);
    /// assert_eq!(ClaimStrategy::auto_for("5.7.44-log"), ClaimStrategy::OrderedUpdate);
    /// ```
    pub fn auto_for(version: &str) -> ClaimStrategy {
        if supports_queue_then_skip(version) {
            ClaimStrategy::QueueThenSkip
        } else if supports_skip_locked(version) {
            ClaimStrategy::SkipLocked
        } else {
            ClaimStrategy::OrderedUpdate
        }
    }
}

/// Options of a [`MySqlStore`]: `Default`, then the setters named after the fields.
///
/// ```
/// use backstop_mysql::{ClaimStrategy, MySqlOptions};
/// let options = MySqlOptions::default().claim_strategy(ClaimStrategy::SkipLocked);
/// assert_eq!(options.max_connections, 16);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MySqlOptions {
    /// Table name, payload limit (the payload column is `MEDIUMTEXT`), retries.
    pub config: StoreConfig,
    /// The claim strategy (default [`ClaimStrategy::Auto`]).
    pub claim_strategy: ClaimStrategy,
    /// Most pooled connections (default 16).
    pub max_connections: u32,
    /// How long to wait for a pooled connection (default 10 s).
    pub acquire_timeout: Duration,
}

impl Default for MySqlOptions {
    fn default() -> Self {
        Self {
            config: StoreConfig::default(),
            claim_strategy: ClaimStrategy::Auto,
            max_connections: 16,
            acquire_timeout: Duration::from_secs(10),
        }
    }
}

impl MySqlOptions {
    backstop_core::driver::setters! {
        /// See [`config`](Self::config).
        config: StoreConfig,
        /// See [`claim_strategy`](Self::claim_strategy).
        claim_strategy: ClaimStrategy,
        /// See [`max_connections`](Self::max_connections).
        max_connections: u32,
        /// See [`acquire_timeout`](Self::acquire_timeout).
        acquire_timeout: Duration,
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
    /// let ddl = backstop_mysql::MySqlOptions::default().table("jobs").ddl().unwrap();
    /// assert!(ddl.contains("CREATE TABLE IF NOT EXISTS `jobs`"));
    /// assert!(ddl.contains("INSERT INTO `jobs_migrations`"));
    /// ```
    pub fn ddl(&self) -> Result<String> {
        self.config.validate()?;
        let sql = Sql::new(&self.config.table);
        let table = schema::version_table(&self.config.table);
        Ok(schema::script(&sql.versions_setup, &sql.migrations, |m| {
            format!(
                "INSERT INTO `{table}` (version, name, applied_at) VALUES ({}, '{}', NOW(3))",
                m.version, m.name
            )
        }))
    }
}

/// A [`TaskStore`] on MySQL or MariaDB. Cheap to clone (clones share the pool).
#[derive(Clone)]
pub struct MySqlStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: MySqlPool,
    sql: Sql,
    options: MySqlOptions,
    /// The strategy in force (never `Auto`).
    strategy: ClaimStrategy,
    server_version: String,
    /// Whether inserts can return their rows (`INSERT … RETURNING`: MariaDB ≥ 10.5), so
    /// a batch enqueue goes in multi-row inserts.
    returning: bool,
    /// Claim tokens: a random start, then +1 per claim (unique per store).
    next_token: AtomicU64,
    /// [`ClaimStrategy::QueueThenSkip`]: until when (ms after `opened`) claims skip
    /// locked rows without queueing first, because a queued claim of this store timed out
    /// (see [`QUEUE_PAUSE`]); 0 when they queue.
    skip_until_ms: AtomicU64,
    /// When the store was made: the origin of `skip_until_ms`.
    opened: std::time::Instant,
}

impl std::fmt::Debug for MySqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlStore")
            .field("table", &self.inner.options.config.table)
            .field("strategy", &self.inner.strategy)
            .field("server", &self.inner.server_version)
            .finish()
    }
}

/// Whether a server version string supports `INSERT … RETURNING` (MariaDB ≥ 10.5).
fn supports_returning(version: &str) -> bool {
    matches!(parse_version(version), (true, v) if v >= (10, 5, 0))
}

/// Whether a server version string supports `SKIP LOCKED`.
fn supports_skip_locked(version: &str) -> bool {
    match parse_version(version) {
        (true, v) => v >= (10, 6, 0),
        (false, v) => v >= (8, 0, 1),
    }
}

/// Whether the server runs [`ClaimStrategy::QueueThenSkip`]: MariaDB ≥ 10.6 (MySQL has
/// no `SELECT … FOR UPDATE WAIT n`).
fn supports_queue_then_skip(version: &str) -> bool {
    matches!(parse_version(version), (true, v) if v >= (10, 6, 0))
}

/// (is MariaDB, (major, minor, patch)) of a `VERSION()` string.
fn parse_version(version: &str) -> (bool, (u32, u32, u32)) {
    let nums: Vec<u32> = version
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|p| p.parse().unwrap_or(0))
        .collect();
    let v = (
        nums.first().copied().unwrap_or(0),
        nums.get(1).copied().unwrap_or(0),
        nums.get(2).copied().unwrap_or(0),
    );
    (version.to_ascii_lowercase().contains("mariadb"), v)
}

impl MySqlStore {
    /// Connect to `url` (`mysql://user:pass@host:port/db`) with default options.
    /// Call [`migrate`](TaskStore::migrate) before first use.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, MySqlOptions::default()).await
    }

    /// Connect to `url` with `options`: validates them (a bad table name is a `Config`
    /// error), makes one connection, reads the server version and settles the claim
    /// strategy (forcing [`ClaimStrategy::SkipLocked`] on a server without it is a
    /// `Config` error).
    pub async fn connect_with(url: &str, options: MySqlOptions) -> Result<Self> {
        const OP: &str = "open_store";
        options.config.validate()?;
        if options.max_connections == 0 {
            return Err(Error::config(OP, "max_connections must be at least 1"));
        }
        let connect = MySqlConnectOptions::from_str(url)
            .map_err(|e| Error::config(OP, format!("invalid MySQL URL: {e}")).with_source(e))?;
        first_connection(&connect, options.acquire_timeout).await?;
        let pool = MySqlPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            // sqlx pings every connection it hands out by default: one more round trip
            // per statement, a third of a run-ahead claim. Ping only a connection that sat
            // idle long enough for the server or a proxy to have dropped it; a connection
            // that breaks anyway fails its statement with a temporary error.
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= IDLE_PING_AFTER {
                        sqlx::Connection::ping(conn).await?;
                    }
                    Ok(true)
                })
            })
            .after_connect(|conn, _meta| {
                Box::pin(async move {
                    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        .await?;
                    Ok(())
                })
            })
            .connect_with(connect)
            .await
            .map_err(|e| my_err(e).with_operation(OP))?;
        Self::from_pool(pool, options).await
    }

    /// A store on an existing pool. Its connections should run at READ COMMITTED (see
    /// the crate docs); [`connect_with`](Self::connect_with) sets that up.
    pub async fn from_pool(pool: MySqlPool, options: MySqlOptions) -> Result<Self> {
        const OP: &str = "open_store";
        options.config.validate()?;
        let version: String = sqlx::query_scalar("SELECT VERSION()")
            .fetch_one(&pool)
            .await
            .map_err(|e| my_err(e).with_operation(OP))?;
        let skip = supports_skip_locked(&version);
        let queue = supports_queue_then_skip(&version);
        let strategy = match options.claim_strategy {
            ClaimStrategy::Auto => ClaimStrategy::auto_for(&version),
            ClaimStrategy::SkipLocked if !skip => {
                return Err(Error::config(
                    OP,
                    format!("server {version} does not support SKIP LOCKED (needs MySQL 8.0.1+ or MariaDB 10.6+)"),
                ))
            }
            ClaimStrategy::QueueThenSkip if !queue => {
                return Err(Error::config(
                    OP,
                    format!("server {version} does not support queue-then-skip claims (needs MariaDB 10.6+)"),
                ))
            }
            s => s,
        };
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            ^ (u64::from(std::process::id()) << 40);
        Ok(MySqlStore {
            inner: Arc::new(Inner {
                sql: Sql::new(&options.config.table),
                pool,
                options,
                strategy,
                returning: supports_returning(&version),
                server_version: version,
                next_token: AtomicU64::new(seed >> 2),
                skip_until_ms: AtomicU64::new(0),
                opened: std::time::Instant::now(),
            }),
        })
    }

    /// The pool, for the application's own queries and transactions.
    pub fn pool(&self) -> &MySqlPool {
        &self.inner.pool
    }

    /// The claim strategy in force (never `Auto`).
    pub fn claim_strategy(&self) -> ClaimStrategy {
        self.inner.strategy
    }

    /// The server's `VERSION()`.
    pub fn server_version(&self) -> &str {
        &self.inner.server_version
    }

    /// Enqueue `task` on the caller's transaction (pass `&mut tx` for a
    /// `sqlx::Transaction<MySql>`) or connection: the task row commits or rolls back
    /// together with the caller's business rows. This is the heart of the pattern.
    ///
    /// - Same validation and idempotency as [`TaskStore::enqueue`]; invalid input is
    ///   refused before anything is sent.
    /// - A duplicate key (error 1062, which MySQL rolls back as one statement, leaving the
    ///   caller's transaction intact) is answered with the existing task's id, read with a
    ///   locking read so it is seen whatever the isolation level. Any other error is
    ///   returned as is (and never retried here: a deadlock rolled back the caller's
    ///   whole transaction, which only the caller can run again).
    pub async fn enqueue_tx(&self, conn: &mut MySqlConnection, task: &NewTask) -> Result<Enqueued> {
        self.enqueue_in(conn, task).await
    }

    /// Enqueue many `tasks` on the caller's transaction, in multi-row inserts on MariaDB
    /// (one by one on MySQL, which cannot return the rows an insert made); see
    /// [`Transactional::enqueue_many_in`], answered as [`TaskStore::enqueue_many`].
    ///
    /// ```no_run
    /// # async fn demo(store: backstop_mysql::MySqlStore) -> Result<(), Box<dyn std::error::Error>> {
    /// use backstop_core::NewTask;
    /// let mut tx = store.pool().begin().await?;
    /// let tasks: Vec<_> = (1..=500).map(|i| NewTask::new("PAY_ORDER", i.to_string())).collect();
    /// let enqueued = store.enqueue_many_tx(&mut tx, &tasks).await?;
    /// tx.commit().await?;
    /// assert_eq!(enqueued.len(), 500);
    /// # Ok(()) }
    /// ```
    pub async fn enqueue_many_tx(
        &self,
        conn: &mut MySqlConnection,
        tasks: &[NewTask],
    ) -> Result<Vec<Enqueued>> {
        self.enqueue_many_in(conn, tasks).await
    }

    /// Inside a handler: record the running task's success on the handler's transaction,
    /// with its business writes and the follow-up tasks it enqueued there
    /// ([`enqueue_tx`](Self::enqueue_tx)) — all commit together or not at all (see
    /// [`complete_on`]). `Conflict` when the
    /// attempt's lease is gone: return the error and the transaction rolls back.
    ///
    /// ```no_run
    /// # use backstop_core::{Context, HandlerError, NewTask};
    /// # async fn handler(store: backstop_mysql::MySqlStore, cx: Context) -> Result<(), HandlerError> {
    /// let mut tx = store.pool().begin().await?;
    /// sqlx::query("UPDATE orders SET shipped = TRUE WHERE id = 42").execute(&mut *tx).await?;
    /// store.enqueue_tx(&mut tx, &NewTask::new("NOTIFY_CUSTOMER", "order-42")).await?;
    /// store.complete_tx(&mut tx, &cx).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn complete_tx(
        &self,
        conn: &mut MySqlConnection,
        cx: &backstop_core::Context,
    ) -> Result<()> {
        self.complete_in(conn, cx).await
    }
}

impl Backend for MySqlStore {
    fn driver(&self) -> &dyn Driver {
        &*self.inner
    }
}

/// The enqueue's statements in MySQL's SQL (run by core's [`EnqueuePlan`] on sqlx). The
/// insert fails on a duplicate key (error 1062, which MySQL rolls back as one statement,
/// leaving the caller's transaction intact), answered as [`Answer::DuplicateKey`]; the
/// existing task is then read with a locking read, so it is seen whatever the isolation
/// level.
impl EnqueueSql for Inner {
    fn dialect(&self) -> Dialect {
        Dialect::MySql
    }

    fn statement<'a>(
        &'a self,
        step: EnqueueStep<'a>,
        params: Vec<Value<'a>>,
        _task: Checked<&'a NewTask>,
    ) -> Statement<'a> {
        let sql = &self.sql;
        let (text, returns) = match step {
            EnqueueStep::Insert { .. } => (&sql.insert, Returns::InsertId),
            EnqueueStep::ReadExisting => (&sql.existing, Returns::Row),
            EnqueueStep::Release(_) => (&sql.release_key, Returns::RowsAffected),
            EnqueueStep::Replace(_) => (&sql.replace_payload, Returns::RowsAffected),
            // the upsert holds the row's exclusive lock whether it inserted or found it
            EnqueueStep::LockKey(_) => (&sql.key_insert, Returns::RowsAffected),
            EnqueueStep::KeyBlocker(_) => (&sql.key_blocker, Returns::Row),
            EnqueueStep::KeyNext(_) => (&sql.key_next, Returns::Row),
            EnqueueStep::KeyPromote(_) => (&sql.key_promote, Returns::RowsAffected),
            EnqueueStep::KeyDrop(_) => (&sql.key_drop, Returns::RowsAffected),
        };
        Statement::new(text, params, returns)
    }

    /// MariaDB's multi-row `INSERT IGNORE … VALUES … RETURNING id` of `tasks` (a count
    /// [`insert_rows_take`](EnqueueSql::insert_rows_take) gave): a row whose key is held
    /// is skipped. MySQL cannot return the rows: `None`, and a batch enqueues its tasks
    /// one by one.
    fn insert_rows<'a>(
        &'a self,
        _doc: &'a str,
        tasks: &[Checked<&'a NewTask>],
    ) -> Option<Statement<'a>> {
        if !self.returning {
            return None;
        }
        // (no tasks: core asking whether there is a multi-row insert at all)
        let text = self.sql.insert_rows.get(tasks.len().max(1))?;
        let params = rows_params(tasks, self.run_at());
        Some(Statement::new(text, params, Returns::Rows))
    }

    /// Every value bound: no document.
    fn insert_rows_document(&self) -> bool {
        false
    }

    /// The row counts there is a text for.
    fn insert_rows_take(&self, n: usize) -> usize {
        self.sql.insert_rows.take(n)
    }

    fn complete(&self, lease: Lease) -> Statement<'_> {
        Statement::new(
            &self.sql.complete,
            vec![
                Value::BigInt(Some(lease.task_id)),
                Value::BigInt(Some(lease.token)),
            ],
            Returns::RowsAffected,
        )
    }

    fn claim<'a>(&'a self, id: TaskId, owner: &'a str) -> Option<Statement<'a>> {
        Some(Statement::new(
            &self.sql.claim_in,
            vec![Value::Text(Some(owner)), Value::BigInt(Some(id))],
            Returns::RowsAffected,
        ))
    }
}

/// Lock order key `key` (its row in the keys table, inserted if missing) until the
/// transaction `conn` is in ends; `false` when the row went away meanwhile.
async fn lock_key(sql: &Sql, conn: &mut MySqlConnection, key: &str) -> Result<bool> {
    // the upsert holds the row's exclusive lock whether it inserted or found it
    sqlx::query(safe(&sql.key_insert))
        .bind(key)
        .execute(&mut *conn)
        .await
        .map_err(my_err)?;
    Ok(true)
}

/// [`KeyRelease`] for order key `key` on `conn`, which must be inside a transaction.
async fn release_key(sql: &Sql, conn: &mut MySqlConnection, key: &str) -> Result<Option<TaskId>> {
    let mut release = KeyRelease::new();
    let mut step = release.first();
    loop {
        step = match step {
            ReleaseStep::LockKey => release.locked(lock_key(sql, conn, key).await?)?,
            ReleaseStep::ReadBlocker => {
                let row: Option<i64> = sqlx::query_scalar(safe(&sql.key_blocker))
                    .bind(key)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(my_err)?;
                release.blocker(row.is_some())
            }
            ReleaseStep::ReadNext => {
                let row: Option<i64> = sqlx::query_scalar(safe(&sql.key_next))
                    .bind(key)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(my_err)?;
                release.next(row)
            }
            ReleaseStep::Promote(id) => {
                let done = sqlx::query(safe(&sql.key_promote))
                    .bind(id)
                    .execute(&mut *conn)
                    .await
                    .map_err(my_err)?;
                release.promoted(done.rows_affected() == 1)?
            }
            ReleaseStep::DropKey => {
                sqlx::query(safe(&sql.key_drop))
                    .bind(key)
                    .execute(&mut *conn)
                    .await
                    .map_err(my_err)?;
                release.dropped()
            }
            ReleaseStep::Done(promoted) => return Ok(promoted),
        };
    }
}

/// [`KeysRelease`] for `keys` (sorted, distinct) on `conn`, which must be inside a
/// transaction; the caller commits. Lists are padded to a few statement sizes
/// ([`padded`]); a repeated key or id changes nothing.
async fn release_keys_at_once(
    sql: &Sql,
    conn: &mut MySqlConnection,
    keys: &[String],
) -> Result<KeysRelease> {
    // each statement binds one padded list: its text for the list's bucket, then the list
    fn list<'q, T>(
        text: &'q str,
        items: &'q [T],
    ) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>
    where
        T: sqlx::Encode<'q, sqlx::MySql> + sqlx::Type<sqlx::MySql> + Sync,
    {
        padded(items).fold(sqlx::query(safe(text)), |q, item| q.bind(item))
    }
    let mut release = KeysRelease::new(keys.to_vec());
    let mut step = release.first();
    loop {
        step = match step {
            KeysStep::InsertKeys(k) => {
                let text = sql.keys_upsert(bucket(k.len()));
                list(&text, &k).execute(&mut *conn).await.map_err(my_err)?;
                release.inserted()
            }
            // the upsert holds every key's exclusive lock, whether it inserted it or not
            KeysStep::LockKeys(k) => release.locked(k),
            KeysStep::ReadBlockers(k) => {
                let text = sql.keys_blockers(bucket(k.len()));
                let rows = list(&text, &k)
                    .fetch_all(&mut *conn)
                    .await
                    .map_err(my_err)?;
                let blocked = rows
                    .iter()
                    .map(|r| r.try_get::<String, _>(0))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(my_err)?;
                release.blockers(blocked)
            }
            KeysStep::ReadNext(k) => {
                let text = sql.keys_next(bucket(k.len()));
                let rows = list(&text, &k)
                    .fetch_all(&mut *conn)
                    .await
                    .map_err(my_err)?;
                let first = rows
                    .iter()
                    .map(|r| Ok((r.try_get::<String, _>(0)?, r.try_get::<i64, _>(1)?)))
                    .collect::<std::result::Result<Vec<_>, sqlx::Error>>()
                    .map_err(my_err)?;
                release.next(first)
            }
            KeysStep::Promote(ids) => {
                let text = sql.keys_promote(bucket(ids.len()));
                let done = list(&text, &ids)
                    .execute(&mut *conn)
                    .await
                    .map_err(my_err)?;
                release.promoted(done.rows_affected())?
            }
            KeysStep::DropKeys(k) => {
                let text = sql.keys_drop(bucket(k.len()));
                list(&text, &k).execute(&mut *conn).await.map_err(my_err)?;
                release.dropped()
            }
            KeysStep::Done => return Ok(release),
        };
    }
}

impl Inner {
    /// Whether a queued claim timed out less than [`QUEUE_PAUSE`] ago, so claims skip.
    fn queue_paused(&self) -> bool {
        let now = self.opened.elapsed().as_millis() as u64;
        now < self.skip_until_ms.load(Ordering::Relaxed)
    }

    /// A queued claim timed out: skip locked rows for [`QUEUE_PAUSE`].
    fn pause_queueing(&self) {
        let until = (self.opened.elapsed() + QUEUE_PAUSE).as_millis() as u64;
        self.skip_until_ms.fetch_max(until, Ordering::Relaxed);
        tracing::debug!(
            pause_ms = QUEUE_PAUSE.as_millis() as u64,
            "a queued claim waited out its lock wait: claims skip locked rows for a while"
        );
    }

    /// A fresh claim token: tags the rows one statement changes.
    fn token(&self) -> i64 {
        (self.next_token.fetch_add(1, Ordering::Relaxed) & (i64::MAX as u64)) as i64
    }

    /// Run `f` on a pooled connection.
    async fn on_conn<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnOnce(sqlx::pool::PoolConnection<MySql>) -> Fut,
        Fut: Future<Output = std::result::Result<T, sqlx::Error>>,
    {
        let conn = self.pool.acquire().await.map_err(my_err)?;
        f(conn).await.map_err(my_err)
    }

    /// An operator's change of task `id`: the `update` (fenced by status), its audit
    /// entry and the row read back, in one transaction (the row lock keeps a claimer out
    /// until commit); or the status that refused it.
    async fn audited_update<'q, F>(
        &'q self,
        id: TaskId,
        action: &'static str,
        audit: &'q Audit,
        update: F,
    ) -> Result<Reset>
    where
        F: FnOnce(&'q Sql) -> sqlx::query::Query<'q, MySql, sqlx::mysql::MySqlArguments>,
    {
        let sql = &self.sql;
        let (row, status) = self
            .on_conn(|mut conn| async move {
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                let done = update(sql).execute(&mut *tx).await?;
                if done.rows_affected() != 1 {
                    let status: Option<i8> = sqlx::query_scalar(safe(&sql.status_of))
                        .bind(id)
                        .fetch_optional(&mut *tx)
                        .await?;
                    return Ok((None, status));
                }
                audit_entry(sql, &mut tx, id, action, audit).await?;
                let row = sqlx::query(safe(&sql.get))
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok((row, None))
            })
            .await?;
        changed(row, status)
    }

    /// Apply marks round by round on `ex` (a transaction, or a connection when one
    /// statement does it all).
    async fn apply_marks(
        &self,
        ex: &mut MySqlConnection,
        marks: &[Mark],
        rounds: &[Vec<usize>],
    ) -> std::result::Result<Vec<bool>, sqlx::Error> {
        let sql = &self.sql;
        let mut flags = vec![false; marks.len()];
        for round in rounds {
            // Successes — the hot path — go in one set-based statement per chunk.
            let successes: Vec<usize> = round
                .iter()
                .copied()
                .filter(|&i| marks[i].action == MarkAction::Success)
                .collect();
            for chunk in successes.chunks(SET_CHUNK) {
                // a fresh token per statement: it tags exactly the rows it changed (a
                // succeeded row is never claimed again, so nothing overwrites the tag)
                let token = self.token();
                let text = sql.mark_success_many(bucket(chunk.len()));
                let mut q = sqlx::query(safe(&text)).bind(token);
                for &i in padded(chunk) {
                    q = q.bind(marks[i].lease.task_id);
                }
                for &i in padded(chunk) {
                    q = q.bind(marks[i].lease.task_id).bind(marks[i].lease.token);
                }
                let done = q.execute(&mut *ex).await?;
                if done.rows_affected() == chunk.len() as u64 {
                    for &i in chunk {
                        flags[i] = true;
                    }
                    continue;
                }
                let text = sql.ids_with_token(bucket(chunk.len()));
                let mut q = sqlx::query_scalar::<_, i64>(safe(&text)).bind(token);
                for &i in padded(chunk) {
                    q = q.bind(marks[i].lease.task_id);
                }
                let applied: HashSet<i64> = q.fetch_all(&mut *ex).await?.into_iter().collect();
                for &i in chunk {
                    flags[i] = applied.contains(&marks[i].lease.task_id);
                }
            }
            for &i in round {
                let m = &marks[i];
                let Lease { task_id, token } = m.lease;
                let q = match &m.action {
                    MarkAction::Success => continue,
                    MarkAction::Retry { delay, error } => sqlx::query(safe(&sql.mark_retry))
                        .bind(micros(*delay))
                        .bind(error.as_str()),
                    MarkAction::Fail { error } => {
                        sqlx::query(safe(&sql.mark_fail)).bind(error.as_str())
                    }
                    MarkAction::Release => sqlx::query(safe(&sql.release)),
                };
                let done = q.bind(task_id).bind(token).execute(&mut *ex).await?;
                flags[i] = done.rows_affected() == 1;
            }
        }
        Ok(flags)
    }

    /// Claim the rows [`pick`] locked (`at`: its read's `NOW(3)`): one update, and the
    /// rows as it left them, without reading them back. The claim's locks keep every
    /// picked row pending until commit, so the update applies to all of them; if it ever
    /// did not, the rows are read back by this claim's token.
    async fn claim_picked(
        &self,
        tx: &mut MySqlConnection,
        owner: &Owner,
        mut rows: Vec<RawTask>,
        at: NaiveDateTime,
    ) -> std::result::Result<Vec<RawTask>, sqlx::Error> {
        let sql = &self.sql;
        let token = self.token();
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let text = sql.claim_ids(bucket(ids.len()));
        let mut q = sqlx::query(safe(&text))
            .bind(owner.as_str())
            .bind(token)
            .bind(at);
        for id in padded(&ids) {
            q = q.bind(id);
        }
        let done = q.execute(&mut *tx).await?;
        if done.rows_affected() == ids.len() as u64 {
            for r in &mut rows {
                r.status = i64::from(Status::Running.code());
                r.owner = Some(owner.as_str().to_owned());
                r.attempts += 1;
                r.lease += 1;
                r.updated_at = at.and_utc();
            }
            return Ok(rows);
        }
        // Exactly the rows this call claimed: tagged with its token (inside the claim's
        // transaction, so no other claim can have re-tagged them).
        let text = sql.rows_with_token(bucket(ids.len()));
        let mut q = sqlx::query(safe(&text)).bind(token);
        for id in padded(&ids) {
            q = q.bind(id);
        }
        let rows = q.fetch_all(&mut *tx).await?;
        rows.iter().map(raw_task).collect()
    }
}

/// How long a [`ClaimStrategy::QueueThenSkip`] claim queues behind another (seconds).
const QUEUE_WAIT_S: u32 = 1;

/// How long a [`ClaimStrategy::QueueThenSkip`] store's claims skip locked rows without
/// queueing first, after one of its queued claims timed out.
///
/// Claims hold their rows for milliseconds, so a queued claim that waits out
/// [`QUEUE_WAIT_S`] met a holder that does not let go: a stalled claimer, or an
/// application's transaction that enqueued a task and has not committed yet. InnoDB's
/// locking read meets an uncommitted insert near the head of the queue (a due task of
/// the type, a delayed one, or one of the next type in the index) and waits on it; the
/// holder may keep it for as long as its transaction lasts. Without the pause every
/// claim would wait a second again while it does; with it, one claim per pause does.
const QUEUE_PAUSE: Duration = Duration::from_secs(10);

/// The claim's locking read of due tasks, in claim order `(priority, next_run_at, id)`,
/// whole (the claim's update then needs no read back), with the read's `NOW(3)`: for
/// each event type, one ordered walk of the `(status, event_type, priority, next_run_at,
/// id)` index per level the transaction's opening found due (see [`Sql::pick`]), each
/// stopping at `limit`, merged. The rows of a walk beyond the merged limit stay locked
/// (unclaimed) until the claim's transaction ends.
async fn pick(
    sql: &Sql,
    conn: &mut MySqlConnection,
    wait: LockWait,
    event_types: &[String],
    limit: usize,
) -> std::result::Result<(Vec<RawTask>, Option<NaiveDateTime>), sqlx::Error> {
    let mut due: Vec<RawTask> = Vec::new();
    let mut at = None;
    // Of several types, only those the opening probe found due are read: one statement
    // for the probe's answers instead of a locking read per type (an idle engine's poll
    // of many types costs a few statements, not one per type).
    let mut wanted = vec![true; event_types.len()];
    if event_types.len() > 1 {
        let row = sqlx::query(safe(&sql.due_types(event_types.len())))
            .fetch_one(&mut *conn)
            .await?;
        for (i, w) in wanted.iter_mut().enumerate() {
            *w = row.try_get::<i64, _>(i)? != 0;
        }
    }
    for (i, t) in event_types.iter().enumerate() {
        if !wanted[i] {
            continue;
        }
        let text = sql.pick(wait, i);
        let mut q = sqlx::query(safe(&text));
        for _ in 0..PRIORITY_LEVELS {
            q = q.bind(t).bind(limit as i64);
        }
        for row in q.fetch_all(&mut *conn).await? {
            due.push(raw_task(&row)?);
            // the last read's time: no earlier than any picked row's due time
            at = Some(row.try_get::<NaiveDateTime, _>(COLUMN_COUNT)?);
        }
    }
    due.sort_unstable_by_key(|r| (r.priority, r.next_run_at, r.id));
    due.truncate(limit);
    Ok((due, at))
}

impl Inner {
    /// [`Driver::migrate`] under the migration lock. MySQL commits each DDL statement by
    /// itself: each migration is recorded right after its statements, and a migration
    /// whose one `ALTER TABLE` had applied before a crash (so its column or key exists
    /// and the `ALTER` fails as a whole) is recorded as applied.
    async fn migrate_locked(&self, conn: &mut sqlx::MySqlConnection, target: u32) -> Result<()> {
        conn.execute(safe(&self.sql.versions_setup))
            .await
            .map_err(my_err)?;
        let applied: Vec<i64> = sqlx::query_scalar(safe(&self.sql.versions_read))
            .fetch_all(&mut *conn)
            .await
            .map_err(my_err)?;
        let table = &self.options.config.table;
        for m in schema::pending(table, &applied, &self.sql.migrations, target)? {
            for statement in &m.statements {
                match conn.execute(safe(statement)).await {
                    Ok(_) => {}
                    // duplicate column, duplicate key name, no such column or key to drop
                    Err(e)
                        if m.version > 1
                            && matches!(error_number(&e), Some(1060 | 1061 | 1091)) =>
                    {
                        tracing::warn!(table, version = m.version, error = %e,
                            "migration had applied before (the process stopped before recording it); recording it now");
                    }
                    Err(e) => return Err(my_err(e)),
                }
            }
            sqlx::query(safe(&self.sql.version_record))
                .bind(m.version)
                .bind(m.name)
                .execute(&mut *conn)
                .await
                .map_err(my_err)?;
            tracing::info!(
                table,
                version = m.version,
                name = m.name,
                "migration applied"
            );
        }
        Ok(())
    }
}

#[async_trait]
impl Driver for Inner {
    fn config(&self) -> &StoreConfig {
        &self.options.config
    }

    async fn migrate(&self, target: u32) -> Result<()> {
        let mut conn = self.pool.acquire().await.map_err(my_err)?;
        // Serialize concurrent migrations across instances.
        let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 60)")
            .bind(&self.sql.lock_name)
            .fetch_one(&mut *conn)
            .await
            .map_err(my_err)?;
        if got != Some(1) {
            return Err(Error::new(
                ErrorKind::Unavailable,
                "migrate",
                "another instance held the migration lock for 60 s",
            ));
        }
        let result = self.migrate_locked(&mut conn, target).await;
        let _ = sqlx::query("SELECT RELEASE_LOCK(?)")
            .bind(&self.sql.lock_name)
            .execute(&mut *conn)
            .await;
        result
    }

    fn enqueue_sql(&self) -> &dyn EnqueueSql {
        self
    }

    async fn insert(&self, task: Checked<&NewTask>) -> Result<Inserted> {
        let mut conn = self.pool.acquire().await.map_err(my_err)?;
        if task.order().is_none() {
            return EnqueuePlan::new(self, task).run(&mut *conn).await;
        }
        // a task with an order key in a transaction, so its key's lock is held throughout
        let mut tx = sqlx::Connection::begin(&mut *conn).await.map_err(my_err)?;
        let inserted = EnqueuePlan::new(self, task).run(&mut *tx).await?;
        tx.commit().await.map_err(my_err)?;
        Ok(inserted)
    }

    async fn insert_many(&self, tasks: Checked<&[NewTask]>) -> Result<Vec<Inserted>> {
        let mut conn = self.pool.acquire().await.map_err(my_err)?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await.map_err(my_err)?;
        let inserted = EnqueueBatch::new(self, tasks).run(&mut *tx).await?;
        tx.commit().await.map_err(my_err)?;
        Ok(inserted)
    }

    async fn claim_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<RawTask>> {
        let sql = &self.sql;
        let row = self
            .on_conn(|mut conn| async move {
                let done = sqlx::query(safe(&sql.grab_by_id))
                    .bind(owner.as_str())
                    .bind(id)
                    .execute(&mut *conn)
                    .await?;
                if done.rows_affected() == 0 {
                    return Ok(None);
                }
                // The row is ours: read it back on the same connection.
                sqlx::query(safe(&sql.get))
                    .bind(id)
                    .fetch_optional(&mut *conn)
                    .await
            })
            .await?;
        row.as_ref().map(raw_task).transpose().map_err(my_err)
    }

    async fn claim_batch(&self, claim: Checked<Claim<'_>>) -> Result<Vec<RawTask>> {
        let sql = &self.sql;
        let Claim {
            owner,
            event_types: types,
            limit,
        } = *claim;
        let first = match self.strategy {
            ClaimStrategy::SkipLocked => LockWait::Skip,
            ClaimStrategy::QueueThenSkip if self.queue_paused() => LockWait::Skip,
            ClaimStrategy::QueueThenSkip => LockWait::UpTo(QUEUE_WAIT_S),
            _ => LockWait::Queue,
        };
        let Some(begin) = sql.claim_begin(types) else {
            return Err(Error::invalid_input(
                "claim",
                "an event type has a character outside letters, digits, '_', '.', ':' and '-'",
            ));
        };
        let begin = begin.as_str();
        self.on_conn(|mut conn| async move {
            let mut tx = sqlx::Connection::begin_with(&mut *conn, safe(begin)).await?;
            let (picked, at) = match pick(sql, &mut tx, first, types, limit).await {
                // Held past the wait: a stalled claimer, or an open transaction's
                // uncommitted insert. Start over, passing it, and pass for a while.
                Err(e) if matches!(first, LockWait::UpTo(_)) && error_number(&e) == Some(1205) => {
                    self.pause_queueing();
                    tx.rollback().await?;
                    tx = sqlx::Connection::begin_with(&mut *conn, safe(begin)).await?;
                    pick(sql, &mut tx, LockWait::Skip, types, limit).await?
                }
                picked => picked?,
            };
            let rows = match at {
                Some(at) if !picked.is_empty() => {
                    self.claim_picked(&mut tx, owner, picked, at).await?
                }
                _ => Vec::new(),
            };
            tx.commit().await?;
            Ok(rows)
        })
        .await
    }

    async fn recycle_dead(&self, batch: Checked<AgedBatch>) -> Result<Recycled> {
        let sql = &self.sql;
        let (age, limit) = (micros(batch.older_than), batch.limit as i64);
        let wait = if self.strategy == ClaimStrategy::OrderedUpdate {
            LockWait::Queue
        } else {
            LockWait::Skip
        };
        self.on_conn(|mut conn| async move {
            // Look before locking. The locking read below waits on any running row a
            // concurrent mark or claim is changing, and the recycler with it, though there
            // is almost never a dead task to find. The look takes no locks; a task that
            // dies right after it is found on the next sweep.
            let any: Option<i64> = sqlx::query_scalar(safe(&sql.any_dead))
                .bind(age)
                .fetch_optional(&mut *conn)
                .await?;
            if any.is_none() {
                return Ok(Recycled::default());
            }
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            // The oldest dead rows, locked until commit, each with whether it has attempts
            // left; then one update per outcome, whose affected rows are the counts.
            let dead: Vec<(i64, bool)> = sqlx::query_as(safe(&sql.pick_dead(wait)))
                .bind(age)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
            let mut recycled = Recycled::default();
            for (to_pending, count) in [
                (true, &mut recycled.to_pending),
                (false, &mut recycled.to_failed),
            ] {
                let ids: Vec<i64> = dead
                    .iter()
                    .filter(|(_, left)| *left == to_pending)
                    .map(|(id, _)| *id)
                    .collect();
                for chunk in ids.chunks(SET_CHUNK) {
                    let text = sql.recycle(to_pending, bucket(chunk.len()));
                    let mut q = sqlx::query(safe(&text)).bind(age);
                    for id in padded(chunk) {
                        q = q.bind(id);
                    }
                    *count += q.execute(&mut *tx).await?.rows_affected();
                }
            }
            tx.commit().await?;
            Ok(recycled)
        })
        .await
    }

    async fn heartbeat(&self, leases: Checked<&[Lease]>) -> Result<Vec<bool>> {
        let sql = &self.sql;
        let leases = *leases;
        self.on_conn(|mut conn| async move {
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            let mut flags = Vec::with_capacity(leases.len());
            for chunk in leases.chunks(SET_CHUNK) {
                let text = sql.heartbeat_many(bucket(chunk.len()));
                let mut q = sqlx::query(safe(&text));
                for l in padded(chunk) {
                    q = q.bind(l.task_id);
                }
                for l in padded(chunk) {
                    q = q.bind(l.task_id).bind(l.token);
                }
                let done = q.execute(&mut *tx).await?;
                if done.rows_affected() == chunk.len() as u64 {
                    // every lease matched (affected rows count matched rows): all refreshed
                    flags.extend(std::iter::repeat_n(true, chunk.len()));
                    continue;
                }
                // Some lease is gone: those still held are exactly the running rows whose
                // lease is the one we named (and those were just refreshed).
                let text = sql.running_leases(bucket(chunk.len()));
                let mut q = sqlx::query_as::<_, (i64, i64)>(safe(&text));
                for l in padded(chunk) {
                    q = q.bind(l.task_id);
                }
                let held: HashSet<(i64, i64)> = q.fetch_all(&mut *tx).await?.into_iter().collect();
                flags.extend(chunk.iter().map(|l| held.contains(&(l.task_id, l.token))));
            }
            tx.commit().await?;
            Ok(flags)
        })
        .await
    }

    async fn mark(&self, marks: Checked<&[Mark]>) -> Result<Vec<bool>> {
        let marks = *marks;
        let rounds = mark_rounds(marks);
        let rounds = &rounds;
        // A lone mark, or successes that fit one statement, need no transaction.
        let one_statement = marks.len() == 1
            || (rounds.len() == 1
                && marks.len() <= SET_CHUNK
                && marks.iter().all(|m| m.action == MarkAction::Success));
        self.on_conn(|mut conn| async move {
            if one_statement {
                return self.apply_marks(&mut conn, marks, rounds).await;
            }
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            let flags = self.apply_marks(&mut tx, marks, rounds).await?;
            tx.commit().await?;
            Ok(flags)
        })
        .await
    }

    async fn reset(&self, id: TaskId, stuck_after: Checked<Duration>) -> Result<Reset> {
        let sql = &self.sql;
        let stuck_after = micros(*stuck_after);
        // The reset row is read back inside the reset's transaction: our row lock keeps a
        // claimer (a poller sees the task due at once) out until commit, so the task
        // returned is the task as reset, never as already claimed again.
        let (row, status) = self
            .on_conn(|mut conn| async move {
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                let done = sqlx::query(safe(&sql.manual_reset))
                    .bind(id)
                    .bind(stuck_after)
                    .execute(&mut *tx)
                    .await?;
                let found = if done.rows_affected() == 1 {
                    let row = sqlx::query(safe(&sql.get))
                        .bind(id)
                        .fetch_optional(&mut *tx)
                        .await?;
                    (row, None)
                } else {
                    let status: Option<i8> = sqlx::query_scalar(safe(&sql.status_of))
                        .bind(id)
                        .fetch_optional(&mut *tx)
                        .await?;
                    (None, status)
                };
                tx.commit().await?;
                Ok(found)
            })
            .await?;
        changed(row, status)
    }

    async fn cancel(&self, id: TaskId, audit: Checked<&Audit>) -> Result<Reset> {
        self.audited_update(id, "cancel", *audit, |sql| {
            sqlx::query(safe(&sql.cancel)).bind(id)
        })
        .await
    }

    async fn retry(&self, id: TaskId, expected: [i16; 2], audit: Checked<&Audit>) -> Result<Reset> {
        self.audited_update(id, "reset", *audit, |sql| {
            sqlx::query(safe(&sql.retry))
                .bind(id)
                .bind(expected[0])
                .bind(expected[1])
        })
        .await
    }

    async fn delete(&self, id: TaskId, audit: Checked<&Audit>) -> Result<Reset> {
        let sql = &self.sql;
        let audit = *audit;
        let (row, status) = self
            .on_conn(|mut conn| async move {
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                let Some(row) = sqlx::query(safe(&sql.get_for_update))
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?
                else {
                    return Ok((None, None));
                };
                let status: i8 = row.try_get("status")?;
                if status == Status::Running.code() as i8 {
                    return Ok((None, Some(status)));
                }
                sqlx::query(safe(&sql.delete))
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                audit_entry(sql, &mut tx, id, "delete", audit).await?;
                tx.commit().await?;
                Ok((Some(row), None))
            })
            .await?;
        changed(row, status)
    }

    async fn audit_log(&self, id: TaskId) -> Result<Vec<RawAudit>> {
        sqlx::query(safe(&self.sql.audit_log))
            .bind(id)
            .fetch_all(&self.pool)
            .await
            .map_err(my_err)?
            .iter()
            .map(|r| RawAudit::read(&Cols(r)).map_err(my_err))
            .collect()
    }

    async fn get(&self, id: TaskId) -> Result<Option<RawTask>> {
        let row = sqlx::query(safe(&self.sql.get))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(my_err)?;
        row.as_ref().map(raw_task).transpose().map_err(my_err)
    }

    async fn list(&self, filter: Checked<&TaskFilter>) -> Result<Vec<RawTask>> {
        let (sql, args) = list_sql(&self.sql.list_select, &sql::LIST, &filter);
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for a in args {
            query = match a {
                ListArg::Status(s) => query.bind(s),
                ListArg::Text(t) => query.bind(t),
                ListArg::Age(d) => query.bind(micros(d)),
                ListArg::Int(i) => query.bind(i),
            };
        }
        let rows = query.fetch_all(&self.pool).await.map_err(my_err)?;
        rows.iter()
            .map(raw_task)
            .collect::<std::result::Result<_, _>>()
            .map_err(my_err)
    }

    async fn stats(&self, backlog_only: bool) -> Result<RawStats> {
        let counts_sql = if backlog_only {
            &self.sql.backlog_counts
        } else {
            &self.sql.stats_counts
        };
        let counts = sqlx::query_as::<_, (String, i8, i64)>(safe(counts_sql))
            .fetch_all(&self.pool)
            .await
            .map_err(my_err)?
            .into_iter()
            .map(|(event_type, status, count)| (event_type, status.into(), count))
            .collect();
        let oldest_due_pending_ms = sqlx::query_scalar(safe(&self.sql.stats_oldest_due))
            .fetch_one(&self.pool)
            .await
            .map_err(my_err)?;
        Ok(RawStats {
            counts,
            oldest_due_pending_ms,
        })
    }

    async fn throughput(&self, b: Checked<Buckets>) -> Result<Vec<(String, i64, i64, i64)>> {
        Ok(
            sqlx::query_as::<_, (String, i8, i64, i64)>(safe(&self.sql.throughput))
                .bind(millis(b.bucket))
                .bind(micros(b.window))
                .bind(b.cap as i64)
                .bind(micros(b.window))
                .bind(b.cap as i64)
                .fetch_all(&self.pool)
                .await
                .map_err(my_err)?
                .into_iter()
                .map(|(event_type, status, bucket, count)| {
                    (event_type, status.into(), bucket, count)
                })
                .collect(),
        )
    }

    async fn purge_succeeded(&self, batch: Checked<AgedBatch>) -> Result<u64> {
        sqlx::query(safe(&self.sql.purge_succeeded))
            .bind(micros(batch.older_than))
            .bind(batch.limit as i64)
            .execute(&self.pool)
            .await
            .map(|d| d.rows_affected())
            .map_err(my_err)
    }

    async fn delete_succeeded(&self, ids: Checked<&[TaskId]>) -> Result<u64> {
        let text = self.sql.delete_succeeded(bucket(ids.len()));
        let mut q = sqlx::query(safe(&text));
        for id in padded(*ids) {
            q = q.bind(id);
        }
        q.execute(&self.pool)
            .await
            .map(|d| d.rows_affected())
            .map_err(my_err)
    }

    async fn release_keys(&self, keys: Checked<&[String]>) -> Result<Vec<TaskId>> {
        let mut conn = self.pool.acquire().await.map_err(my_err)?;
        let mut promoted = Vec::new();
        let mut one_by_one = keys.to_vec();
        if keys.len() > 1 {
            let mut tx = sqlx::Connection::begin(&mut *conn).await.map_err(my_err)?;
            match release_keys_at_once(&self.sql, &mut tx, &keys).await {
                Ok(release) => {
                    tx.commit().await.map_err(my_err)?;
                    promoted.extend_from_slice(release.promoted_ids());
                    one_by_one = release.leftover().to_vec();
                }
                // a deadlock the server broke, a lost race: one key at a time instead
                Err(e) if e.is_temporary() => {
                    tracing::debug!(error = %e, keys = keys.len(),
                        "releasing order keys together failed; releasing them one by one");
                    tx.rollback().await.map_err(my_err)?;
                }
                Err(e) => return Err(e),
            }
        }
        for key in &one_by_one {
            let mut tx = sqlx::Connection::begin(&mut *conn).await.map_err(my_err)?;
            let id = release_key(&self.sql, &mut tx, key).await?;
            tx.commit().await.map_err(my_err)?;
            promoted.extend(id);
        }
        Ok(promoted)
    }

    async fn register_types(&self, event_types: Checked<&[String]>) -> Result<()> {
        let mut conn = self.pool.acquire().await.map_err(my_err)?;
        for t in event_types.iter() {
            sqlx::query(safe(&self.sql.types_register))
                .bind(t)
                .execute(&mut *conn)
                .await
                .map_err(my_err)?;
        }
        Ok(())
    }

    async fn types(&self) -> Result<Vec<(String, DateTime<Utc>, DateTime<Utc>)>> {
        let mut conn = self.pool.acquire().await.map_err(my_err)?;
        let rows: Vec<(String, NaiveDateTime, NaiveDateTime)> =
            sqlx::query_as(safe(&self.sql.types_list))
                .fetch_all(&mut *conn)
                .await
                .map_err(my_err)?;
        Ok(rows
            .into_iter()
            .map(|(t, f, l)| (t, f.and_utc(), l.and_utc()))
            .collect())
    }

    async fn order_keys(&self, after: Option<&str>, limit: Checked<usize>) -> Result<Vec<String>> {
        let mut conn = self.pool.acquire().await.map_err(my_err)?;
        sqlx::query_scalar(safe(&self.sql.keys_page))
            .bind(after.unwrap_or(""))
            .bind(i64::try_from(*limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *conn)
            .await
            .map_err(my_err)
    }
}

/// Append an operator's audit entry on `tx`.
async fn audit_entry(
    sql: &Sql,
    tx: &mut MySqlConnection,
    id: TaskId,
    action: &str,
    audit: &Audit,
) -> std::result::Result<(), sqlx::Error> {
    sqlx::query(safe(&sql.audit_insert))
        .bind(id)
        .bind(action)
        .bind(&audit.operator)
        .bind(&audit.reason)
        .execute(tx)
        .await
        .map(|_| ())
}

/// The answer of a fenced change: the row, or the status that refused it, or missing.
fn changed(row: Option<MySqlRow>, status: Option<i8>) -> Result<Reset> {
    Ok(match (row, status) {
        (Some(row), _) => Reset::Done(Box::new(raw_task(&row).map_err(my_err)?)),
        (None, Some(code)) => Reset::Refused(code.into()),
        (None, None) => Reset::Missing,
    })
}

/// Our SQL: built once from a validated identifier and fixed text; values are always bound.
fn safe(sql: &str) -> sqlx::AssertSqlSafe<&str> {
    sqlx::AssertSqlSafe(sql)
}

/// Microseconds of `d`, saturating (MySQL's `INTERVAL … MICROSECOND`).
fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// The MySQL error number of a database error.
fn error_number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(|e| e.number()),
        _ => None,
    }
}

/// A sqlx error as a backstop error (core's table of MySQL's error numbers). The store
/// names the operation.
fn my_err(e: sqlx::Error) -> Error {
    backstop_core::tx::sqlx_error(e)
}

/// Open one connection outside the pool and close it, so a store that cannot connect
/// says why. The pool reports any failed connect as "pool timed out while waiting for an
/// open connection", and only after its acquire timeout. A refused connection is
/// temporary, and so is a connect timeout. A host that does not resolve, refused
/// credentials or a missing database are configuration errors. The message names the
/// server and the user, never the password.
async fn first_connection(connect: &MySqlConnectOptions, timeout: Duration) -> Result<()> {
    const OP: &str = "open_store";
    let server = format!(
        "{}:{} as user {:?}",
        connect.get_host(),
        connect.get_port(),
        connect.get_username()
    );
    let attempt = sqlx::ConnectOptions::connect(connect);
    let e = match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(conn)) => {
            let _ = sqlx::Connection::close(conn).await;
            return Ok(());
        }
        Ok(Err(e)) => e,
        Err(_) => {
            return Err(ConnectFailure::TimedOut.error(
                "MySQL",
                &server,
                format!("no answer in {timeout:?}"),
            ))
        }
    };
    let cause = match &e {
        sqlx::Error::Tls(_) => Some(ConnectFailure::Tls),
        sqlx::Error::Io(io) => {
            ConnectFailure::of_io(io).or_else(|| ConnectFailure::of_tls(&io.to_string()))
        }
        sqlx::Error::Database(_) => match error_number(&e) {
            Some(1045) => Some(ConnectFailure::AccessDenied),
            Some(1049) => Some(ConnectFailure::UnknownDatabase),
            _ => None,
        },
        _ => None,
    };
    Err(match cause {
        Some(cause) => {
            let detail = e.to_string();
            cause.error("MySQL", &server, detail).with_source(e)
        }
        None => my_err(e).with_operation(OP),
    })
}

/// Read a row of [`COLUMNS`](backstop_core::driver::COLUMNS).
fn raw_task(r: &MySqlRow) -> std::result::Result<RawTask, sqlx::Error> {
    RawTask::read(&Cols(r))
}

/// A row's columns (`DATETIME(3)` in UTC: the session time zone is `+00:00`).
struct Cols<'r>(&'r MySqlRow);

impl TaskRow for Cols<'_> {
    type Error = sqlx::Error;
    fn int(&self, i: usize) -> std::result::Result<i64, sqlx::Error> {
        self.0.try_get(i)
    }
    fn text(&self, i: usize) -> std::result::Result<String, sqlx::Error> {
        self.0.try_get(i)
    }
    fn opt_text(&self, i: usize) -> std::result::Result<Option<String>, sqlx::Error> {
        self.0.try_get(i)
    }
    fn opt_int(&self, i: usize) -> std::result::Result<Option<i64>, sqlx::Error> {
        self.0.try_get(i)
    }
    fn time(&self, i: usize) -> std::result::Result<chrono::DateTime<chrono::Utc>, sqlx::Error> {
        Ok(self.0.try_get::<NaiveDateTime, _>(i)?.and_utc())
    }
}

#[cfg(test)]
mod tests {
    use super::supports_returning;

    /// A batch goes in multi-row inserts only where an insert can return its rows.
    #[test]
    fn multi_row_inserts_need_mariadb_returning() {
        assert!(supports_returning("10.11.14-MariaDB-0+deb12u1"));
        assert!(supports_returning("10.5.0-MariaDB"));
        assert!(!supports_returning("10.4.32-MariaDB"));
        assert!(!supports_returning("8.0.36"));
        assert!(!supports_returning("8.4.0-log"));
    }
}
