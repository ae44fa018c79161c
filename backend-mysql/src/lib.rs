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
//!   there), the seed's *ordered update* waits (`FOR UPDATE`; every version).
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

mod sql;

use std::collections::HashSet;
use std::future::Future;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use backstop_core::async_trait;
use backstop_core::batch::mark_rounds;
use backstop_core::limits::{self, bounded_error, millis};
use backstop_core::{
    Backoff, Enqueued, Error, ErrorKind, Lease, Mark, MarkAction, NewTask, Owner, Recycled, Result,
    RetryPolicy, Stats, Status, StatusCount, StoreConfig, Task, TaskFilter, TaskId, TaskStore,
};
use chrono::NaiveDateTime;
use sqlx::mysql::{MySqlConnectOptions, MySqlDatabaseError, MySqlPoolOptions, MySqlRow};
use sqlx::{Executor, MySql, MySqlConnection, MySqlPool, Row};

use sql::{LockWait, Sql};

/// A pooled connection idle at least this long is pinged before it is handed out.
const IDLE_PING_AFTER: Duration = Duration::from_secs(1);

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
pub enum ClaimStrategy {
    /// Queue-then-skip on MariaDB ≥ 10.6, skip locked on MySQL ≥ 8.0.1 (which has no
    /// `WAIT n`), else ordered update. The default.
    #[default]
    Auto,
    /// `SELECT … ORDER BY next_run_at, id LIMIT n FOR UPDATE` + `UPDATE … WHERE id IN
    /// (…)` in one transaction: the seed's ordered update, in two statements. Works on
    /// every version; concurrent claimers queue behind each other's row locks. (The
    /// seed's single `UPDATE … ORDER BY … LIMIT` changes a column of the index it scans,
    /// so the server collects every due row before applying the limit: a claim's cost
    /// would grow with the backlog.)
    OrderedUpdate,
    /// `SELECT … FOR UPDATE SKIP LOCKED` + `UPDATE … WHERE id IN (…)` in one transaction:
    /// concurrent claimers pass each other.
    SkipLocked,
    /// Claimers take turns at the head of the queue and pass only a stalled one: the
    /// ordered claim's locking read waits up to 1 s for another claim's row locks
    /// (`FOR UPDATE WAIT 1`); past that, the claim starts over with `SKIP LOCKED`.
    ///
    /// Under contention claims queue instead of running side by side over the same
    /// index head, which keeps several instances at least as fast as one (measured on
    /// MariaDB: 8 engines 1.1× one engine where skip locked fell to 0.5×), while a
    /// claimer that stalls mid-claim (a paused VM, a partitioned host) holds the others
    /// up by a second, not `innodb_lock_wait_timeout`. Needs MariaDB ≥ 10.6 (`WAIT n`
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

/// Options of a [`MySqlStore`].
#[derive(Debug, Clone)]
pub struct MySqlOptions {
    /// Table name and payload limit (the payload column is `MEDIUMTEXT`).
    pub config: StoreConfig,
    /// The claim strategy (default [`ClaimStrategy::Auto`]).
    pub claim_strategy: ClaimStrategy,
    /// Most pooled connections (default 16).
    pub max_connections: u32,
    /// How long to wait for a pooled connection (default 10 s).
    pub acquire_timeout: Duration,
    /// How many times a deadlock (1213) or lock-wait timeout (1205) is retried before it
    /// is reported (default 5).
    pub lock_retries: u32,
}

impl Default for MySqlOptions {
    fn default() -> Self {
        Self {
            config: StoreConfig::default(),
            claim_strategy: ClaimStrategy::Auto,
            max_connections: 16,
            acquire_timeout: Duration::from_secs(10),
            lock_retries: 5,
        }
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
    /// Claim tokens: a random start, then +1 per claim (unique per store).
    next_token: AtomicU64,
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

/// Whether a server version string supports `SKIP LOCKED`.
///
/// ```
/// use backstop_mysql::supports_skip_locked;
/// assert!(supports_skip_locked("8.0.36"));
/// assert!(!supports_skip_locked("8.0.0"));
/// assert!(!supports_skip_locked("5.7.44-log"));
/// assert!(supports_skip_locked("10.11.14-MariaDB-0+deb12u2"));
/// assert!(!supports_skip_locked("10.5.23-MariaDB"));
/// assert!(supports_skip_locked("11.4.2-MariaDB"));
/// ```
pub fn supports_skip_locked(version: &str) -> bool {
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
            .map_err(|e| my_err(OP, e))?;
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
            .map_err(|e| my_err(OP, e))?;
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
                server_version: version,
                next_token: AtomicU64::new(seed >> 2),
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

    fn token(&self) -> i64 {
        (self.inner.next_token.fetch_add(1, Ordering::Relaxed) & (i64::MAX as u64)) as i64
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
    ///   returned as is.
    pub async fn enqueue_tx(&self, conn: &mut MySqlConnection, task: &NewTask) -> Result<Enqueued> {
        const OP: &str = "enqueue";
        task.validate(self.inner.options.config.max_payload_bytes)?;
        let retry = task.retry_policy();
        let inserted = sqlx::query(safe(&self.inner.sql.insert))
            .bind(task.event_type())
            .bind(task.biz_key())
            .bind(task.payload())
            .bind(i64::from(retry.max_attempts))
            .bind(retry.backoff.strategy())
            .bind(millis(retry.backoff.interval()))
            .bind(millis(retry.backoff.max_interval()))
            .bind(micros(task.due_delay()))
            .execute(&mut *conn)
            .await;
        let (id, created) = match inserted {
            Ok(done) => (
                i64::try_from(done.last_insert_id()).unwrap_or(i64::MAX),
                true,
            ),
            Err(e) if error_number(&e) == Some(1062) => {
                let id: Option<i64> = sqlx::query_scalar(safe(&self.inner.sql.find_by_key))
                    .bind(task.event_type())
                    .bind(task.biz_key())
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(|e| my_err(OP, e))?;
                let id = id.ok_or_else(|| {
                    Error::new(
                        ErrorKind::Conflict,
                        OP,
                        format!(
                            "task {}/{} conflicted but then vanished; retry",
                            task.event_type(),
                            task.biz_key()
                        ),
                    )
                    .with_temporary(true)
                })?;
                (id, false)
            }
            Err(e) => return Err(my_err(OP, e)),
        };
        Ok(Enqueued {
            id,
            created,
            event_type: task.event_type().to_owned(),
        })
    }

    /// Run `f` on a pooled connection, retrying deadlocks and lock-wait timeouts.
    async fn retrying<T, F, Fut>(&self, op: &'static str, mut f: F) -> Result<T>
    where
        F: FnMut(sqlx::pool::PoolConnection<MySql>) -> Fut,
        Fut: Future<Output = std::result::Result<T, sqlx::Error>>,
    {
        let mut backoff = Duration::from_millis(5);
        let mut attempt = 0;
        loop {
            let conn = self.inner.pool.acquire().await.map_err(|e| my_err(op, e))?;
            match f(conn).await {
                Ok(v) => return Ok(v),
                Err(e) if is_lock_conflict(&e) && attempt < self.inner.options.lock_retries => {
                    attempt += 1;
                    // A little jitter so that two victims do not collide again.
                    let jitter =
                        Duration::from_micros(u64::from((self.token() as u32) % 1000 * (attempt)));
                    tokio::time::sleep(backoff + jitter).await;
                    backoff *= 2;
                }
                Err(e) => return Err(my_err(op, e)),
            }
        }
    }

    /// Apply marks round by round on `ex` (a transaction, or a connection when one
    /// statement does it all).
    async fn apply_marks(
        &self,
        ex: &mut MySqlConnection,
        marks: &[Mark],
        rounds: &[Vec<usize>],
    ) -> std::result::Result<Vec<bool>, sqlx::Error> {
        let sql = &self.inner.sql;
        let mut flags = vec![false; marks.len()];
        for round in rounds {
            // Successes — the hot path — go in one set-based statement per chunk.
            let successes: Vec<usize> = round
                .iter()
                .copied()
                .filter(|&i| marks[i].action == MarkAction::Success)
                .collect();
            for chunk in successes.chunks(SET_CHUNK) {
                // a fresh token per statement: it tags exactly the rows it changed
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
                        .bind(bounded_error(error)),
                    MarkAction::Fail { error } => {
                        sqlx::query(safe(&sql.mark_fail)).bind(bounded_error(error))
                    }
                    MarkAction::Release => sqlx::query(safe(&sql.release)),
                };
                let done = q.bind(task_id).bind(token).execute(&mut *ex).await?;
                flags[i] = done.rows_affected() == 1;
            }
        }
        Ok(flags)
    }

    async fn fetch_task(
        &self,
        op: &'static str,
        conn: &mut MySqlConnection,
        id: TaskId,
    ) -> Result<Option<Task>> {
        let row = sqlx::query(safe(&self.inner.sql.get))
            .bind(id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| my_err(op, e))?;
        row.as_ref().map(decode).transpose()
    }
}

/// How long a [`ClaimStrategy::QueueThenSkip`] claim queues behind another (seconds).
const QUEUE_WAIT_S: u32 = 1;

/// The claim's locking read of due task ids, in claim order.
async fn pick(
    sql: &Sql,
    conn: &mut MySqlConnection,
    wait: LockWait,
    event_types: &[String],
    limit: usize,
) -> std::result::Result<Vec<i64>, sqlx::Error> {
    let text = sql.pick(event_types.len(), wait);
    let mut q = sqlx::query_scalar::<_, i64>(safe(&text));
    for t in event_types {
        q = q.bind(t);
    }
    q.bind(limit as i64).fetch_all(&mut *conn).await
}

#[async_trait]
impl TaskStore for MySqlStore {
    async fn migrate(&self) -> Result<()> {
        const OP: &str = "migrate";
        let mut conn = self.inner.pool.acquire().await.map_err(|e| my_err(OP, e))?;
        // Serialize concurrent migrations across instances.
        let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 60)")
            .bind(&self.inner.sql.lock_name)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| my_err(OP, e))?;
        if got != Some(1) {
            return Err(Error::new(
                ErrorKind::Unavailable,
                OP,
                "another instance held the migration lock for 60 s",
            ));
        }
        let result = conn.execute(safe(&self.inner.sql.schema)).await;
        let _ = sqlx::query("SELECT RELEASE_LOCK(?)")
            .bind(&self.inner.sql.lock_name)
            .execute(&mut *conn)
            .await;
        result.map(|_| ()).map_err(|e| my_err(OP, e))
    }

    async fn enqueue(&self, task: NewTask) -> Result<Enqueued> {
        // Refuse bad input before taking a connection: a clear InvalidInput even when the
        // database is down (enqueue_tx checks again; the check is cheap).
        task.validate(self.inner.options.config.max_payload_bytes)?;
        let mut conn = self
            .inner
            .pool
            .acquire()
            .await
            .map_err(|e| my_err("enqueue", e))?;
        self.enqueue_tx(&mut conn, &task).await
    }

    async fn grab_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<Task>> {
        const OP: &str = "grab_by_id";
        let sql = &self.inner.sql;
        let claimed = self
            .retrying(OP, |mut conn| async move {
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
        claimed.as_ref().map(decode).transpose()
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
        let sql = &self.inner.sql;
        let strategy = self.inner.strategy;
        let rows = self
            .retrying(OP, |mut conn| {
                let token = self.token();
                async move {
                    let first = match strategy {
                        ClaimStrategy::SkipLocked => LockWait::Skip,
                        ClaimStrategy::QueueThenSkip => LockWait::UpTo(QUEUE_WAIT_S),
                        _ => LockWait::Queue,
                    };
                    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                    let ids = match pick(sql, &mut tx, first, event_types, limit).await {
                        // Held past the wait: a stalled claimer. Start over, passing it.
                        Err(e)
                            if matches!(first, LockWait::UpTo(_))
                                && error_number(&e) == Some(1205) =>
                        {
                            tx.rollback().await?;
                            tx = sqlx::Connection::begin(&mut *conn).await?;
                            pick(sql, &mut tx, LockWait::Skip, event_types, limit).await?
                        }
                        picked => picked?,
                    };
                    if ids.is_empty() {
                        tx.commit().await?;
                        return Ok(Vec::new());
                    }
                    let text = sql.claim_ids(bucket(ids.len()));
                    let mut q = sqlx::query(safe(&text)).bind(owner.as_str()).bind(token);
                    for id in padded(&ids) {
                        q = q.bind(id);
                    }
                    q.execute(&mut *tx).await?;
                    // Exactly the rows this call claimed: tagged with its token.
                    let rows = sqlx::query(safe(&sql.select_by_token))
                        .bind(token)
                        .fetch_all(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(rows)
                }
            })
            .await?;
        let mut tasks = rows.iter().map(decode).collect::<Result<Vec<_>>>()?;
        backstop_core::batch::oldest_first(&mut tasks);
        Ok(tasks)
    }

    async fn recycle_dead(&self, older_than: Duration, limit: usize) -> Result<Recycled> {
        const OP: &str = "recycle_dead";
        if !limits::check_aged_batch(OP, older_than, limit)? {
            return Ok(Recycled::default());
        }
        let sql = &self.inner.sql;
        let counts = self
            .retrying(OP, |mut conn| {
                let token = self.token();
                async move {
                    // Look before locking. The UPDATE below is a locking scan of the
                    // running rows' index: it waits on any row a concurrent mark or claim
                    // is changing there, and the poller waits with it, though there is
                    // almost never a dead task to find. The look takes no locks; a task
                    // that dies right after it is found on the next round.
                    let any: Option<i64> = sqlx::query_scalar(safe(&sql.any_dead))
                        .bind(micros(older_than))
                        .fetch_optional(&mut *conn)
                        .await?;
                    if any.is_none() {
                        return Ok(Vec::new());
                    }
                    let done = sqlx::query(safe(&sql.recycle_dead))
                        .bind(token)
                        .bind(micros(older_than))
                        .bind(limit as i64)
                        .execute(&mut *conn)
                        .await?;
                    if done.rows_affected() == 0 {
                        return Ok(Vec::new());
                    }
                    sqlx::query_as::<_, (i8, i64)>(safe(&sql.count_by_token))
                        .bind(token)
                        .fetch_all(&mut *conn)
                        .await
                }
            })
            .await?;
        let mut r = Recycled::default();
        for (status, n) in counts {
            let n = u64::try_from(n).unwrap_or(0);
            if i16::from(status) == Status::Pending.code() {
                r.to_pending += n;
            } else {
                r.to_failed += n;
            }
        }
        Ok(r)
    }

    async fn heartbeat(&self, leases: &[Lease]) -> Result<Vec<bool>> {
        const OP: &str = "heartbeat";
        limits::check_leases(OP, leases)?;
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let sql = &self.inner.sql;
        self.retrying(OP, |mut conn| async move {
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

    async fn mark(&self, marks: &[Mark]) -> Result<Vec<bool>> {
        const OP: &str = "mark";
        limits::check_marks(OP, marks)?;
        if marks.is_empty() {
            return Ok(Vec::new());
        }
        let rounds = mark_rounds(marks);
        let rounds = &rounds;
        // A lone mark, or successes that fit one statement, need no transaction.
        let one_statement = marks.len() == 1
            || (rounds.len() == 1
                && marks.len() <= SET_CHUNK
                && marks.iter().all(|m| m.action == MarkAction::Success));
        self.retrying(OP, |mut conn| async move {
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

    async fn manual_reset(&self, id: TaskId, stuck_after: Duration) -> Result<Task> {
        const OP: &str = "manual_reset";
        limits::check_duration(OP, "stuck_after", stuck_after)?;
        let sql = &self.inner.sql;
        // The reset row is read back inside the reset's transaction: our row lock keeps a
        // claimer (a poller sees the task due at once) out until commit, so the task
        // returned is the task as reset, never as already claimed again.
        let (row, status) = self
            .retrying(OP, |mut conn| async move {
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                let done = sqlx::query(safe(&sql.manual_reset))
                    .bind(id)
                    .bind(micros(stuck_after))
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
        match (row, status) {
            (Some(row), _) => decode(&row),
            (None, Some(code)) => Err(Error::reset_refused(
                OP,
                id,
                Status::from_code(code.into())?,
            )),
            (None, None) => Err(Error::task_not_found(OP, id)),
        }
    }

    async fn get(&self, id: TaskId) -> Result<Option<Task>> {
        let mut conn = self
            .inner
            .pool
            .acquire()
            .await
            .map_err(|e| my_err("get", e))?;
        self.fetch_task("get", &mut conn, id).await
    }

    async fn list(&self, filter: &TaskFilter) -> Result<Vec<Task>> {
        const OP: &str = "list";
        limits::check_filter(filter)?;
        let status = filter.status.map(Status::code);
        let older = filter.older_than.map(micros);
        let rows = sqlx::query(safe(&self.inner.sql.list))
            .bind(status)
            .bind(status)
            .bind(filter.event_type.as_deref())
            .bind(filter.event_type.as_deref())
            .bind(filter.after_id.unwrap_or(i64::MIN))
            .bind(older)
            .bind(older)
            .bind(filter.limit as i64)
            .fetch_all(&self.inner.pool)
            .await
            .map_err(|e| my_err(OP, e))?;
        rows.iter().map(decode).collect()
    }

    async fn stats(&self) -> Result<Stats> {
        const OP: &str = "stats";
        let rows = sqlx::query_as::<_, (String, i8, i64)>(safe(&self.inner.sql.stats_counts))
            .fetch_all(&self.inner.pool)
            .await
            .map_err(|e| my_err(OP, e))?;
        let counts = rows
            .into_iter()
            .map(|(event_type, status, count)| {
                Ok(StatusCount {
                    event_type,
                    status: Status::from_code(status.into())?,
                    count: u64::try_from(count).unwrap_or(0),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let oldest: Option<i64> = sqlx::query_scalar(safe(&self.inner.sql.stats_oldest_due))
            .fetch_one(&self.inner.pool)
            .await
            .map_err(|e| my_err(OP, e))?;
        Ok(Stats {
            counts,
            oldest_due_pending: oldest
                .map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
        })
    }

    async fn purge_succeeded(&self, older_than: Duration, limit: usize) -> Result<u64> {
        const OP: &str = "purge_succeeded";
        if !limits::check_aged_batch(OP, older_than, limit)? {
            return Ok(0);
        }
        let sql = &self.inner.sql;
        self.retrying(OP, |mut conn| async move {
            sqlx::query(safe(&sql.purge_succeeded))
                .bind(micros(older_than))
                .bind(limit as i64)
                .execute(&mut *conn)
                .await
                .map(|d| d.rows_affected())
        })
        .await
    }

    async fn delete_succeeded(&self, ids: &[TaskId]) -> Result<u64> {
        const OP: &str = "delete_succeeded";
        limits::check_ids(OP, ids)?;
        if ids.is_empty() {
            return Ok(0);
        }
        let text = self.inner.sql.delete_succeeded(bucket(ids.len()));
        let text = &text;
        self.retrying(OP, |mut conn| async move {
            let mut q = sqlx::query(safe(text));
            for id in padded(ids) {
                q = q.bind(id);
            }
            q.execute(&mut *conn).await.map(|d| d.rows_affected())
        })
        .await
    }
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

/// A deadlock (1213) or lock-wait timeout (1205): retry the whole operation.
fn is_lock_conflict(e: &sqlx::Error) -> bool {
    matches!(error_number(e), Some(1213 | 1205))
}

/// Map a sqlx error to a backstop error of operation `op`, classifying transient ones
/// as temporary.
pub fn my_err(op: &'static str, e: sqlx::Error) -> Error {
    let (kind, what) = match &e {
        sqlx::Error::Database(_) => {
            let n = error_number(&e).unwrap_or(0);
            let kind = match n {
                1213 | 1205 | 1040 | 1053 | 2006 | 2013 | 1927 => ErrorKind::Unavailable,
                1062 => ErrorKind::Conflict,
                1146 | 1049 | 1142 | 1044 | 1045 => ErrorKind::Config,
                1406 | 1366 | 1292 | 1264 => ErrorKind::InvalidInput,
                _ => ErrorKind::Unexpected,
            };
            let hint = match n {
                1213 => " (deadlock, retried)",
                1205 => " (lock wait timeout, retried)",
                1146 => " (has `migrate` run?)",
                _ => "",
            };
            (kind, format!("MySQL error {n}{hint}"))
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => {
            (ErrorKind::Unavailable, "MySQL connection failed".to_owned())
        }
        sqlx::Error::Configuration(_) => (ErrorKind::Config, "MySQL configuration".to_owned()),
        _ => (ErrorKind::Unexpected, "MySQL driver error".to_owned()),
    };
    Error::new(kind, op, format!("{what}: {e}")).with_source(e)
}

/// Decode a row of [`sql::COLUMNS`].
fn decode(r: &MySqlRow) -> Result<Task> {
    fn col<'r, T>(r: &'r MySqlRow, i: usize) -> Result<T>
    where
        T: sqlx::Decode<'r, MySql> + sqlx::Type<MySql>,
    {
        r.try_get(i).map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                "decode_row",
                format!("column {i} does not decode: {e}"),
            )
            .with_source(e)
        })
    }
    let id: i64 = col(r, 0)?;
    let bad = |what: &str| {
        Error::new(
            ErrorKind::Unexpected,
            "decode_task",
            format!("task {id} has an invalid {what}"),
        )
    };
    let dur = |ms: i64, what: &str| -> Result<Duration> {
        u64::try_from(ms)
            .map(Duration::from_millis)
            .map_err(|_| bad(what))
    };
    let time = |i: usize| -> Result<chrono::DateTime<chrono::Utc>> {
        Ok(col::<NaiveDateTime>(r, i)?.and_utc())
    };
    Ok(Task {
        id,
        event_type: col(r, 1)?,
        biz_key: col(r, 2)?,
        payload: col(r, 3)?,
        status: Status::from_code(col::<i8>(r, 4)?.into())?,
        attempts: u32::try_from(col::<i32>(r, 5)?).map_err(|_| bad("attempts"))?,
        retry: RetryPolicy {
            max_attempts: u32::try_from(col::<i32>(r, 6)?).map_err(|_| bad("max_attempts"))?,
            backoff: Backoff::from_parts(
                &col::<String>(r, 7)?,
                dur(col(r, 8)?, "retry_interval_ms")?,
                dur(col(r, 9)?, "retry_max_interval_ms")?,
            )?,
        },
        next_run_at: time(10)?,
        owner: col(r, 11)?,
        lease: col(r, 12)?,
        last_error: col(r, 13)?,
        created_at: time(14)?,
        updated_at: time(15)?,
    })
}
