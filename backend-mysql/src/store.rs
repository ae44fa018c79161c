//! [`MySqlStore`]: what applications open, and its native forms of the transactional
//! enqueue and completion on sqlx.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{MySqlConnection, MySqlPool};

use crate::claim::{
    supports_queue_then_skip, supports_returning, supports_skip_locked, ClaimStrategy,
};
use crate::connect::{first_connection, is_galera, my_err, session_setup, IDLE_PING_AFTER};
use crate::driver::MySqlDriver;
use crate::hosts::{self, Ring};
use crate::options::MySqlOptions;
use crate::sql::Sql;

/// A [`TaskStore`] on MySQL or MariaDB. Cheap to clone (clones share the pool).
#[derive(Clone)]
pub struct MySqlStore {
    pub(crate) inner: Arc<MySqlDriver>,
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

impl MySqlStore {
    /// Connect to `url` (`mysql://user:pass@host:port/db`) with default options. A URL
    /// may name several servers, the nodes of a Galera cluster
    /// (`mysql://user:pass@db1:3306,db2:3306,db3:3306/db`): the pool's connections go
    /// to the first that serves, to the next when it fails, and back to the first once it
    /// serves again (or round them all, with
    /// [`MySqlOptions::every_node`]).
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
        let ring = Arc::new(Ring::new(hosts::parse(url, OP)?, options.every_node));
        // the first node that answers (a URL of one server: why it does not); the
        // pool's connections start there
        let mut refused = None;
        let mut up = None;
        for (i, node) in ring.nodes().iter().enumerate() {
            match first_connection(node, options.acquire_timeout).await {
                Ok(()) => {
                    up = Some(i);
                    break;
                }
                Err(e) => {
                    refused.get_or_insert(e);
                }
            }
        }
        let Some(up) = up else {
            return Err(refused.unwrap_or_else(|| Error::config(OP, "the URL names no server")));
        };
        ring.start_at(up);
        let on_connect = ring.clone();
        let on_acquire = ring.clone();
        let pool = MySqlPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            // sqlx pings every connection it hands out by default: one more round trip
            // per statement, a third of a run-ahead claim. Ping only a connection that sat
            // idle long enough for the server or a proxy to have dropped it; a connection
            // that breaks anyway fails its statement with a temporary error.
            .test_before_acquire(false)
            .before_acquire(move |conn, meta| {
                // back to the URL's first node once it serves again
                on_acquire.fail_back();
                // opened before the pool last moved: maybe on a failed node
                let stale = on_acquire.stale(meta.age);
                Box::pin(async move {
                    if stale {
                        return Ok(false);
                    }
                    if meta.idle_for >= IDLE_PING_AFTER {
                        sqlx::Connection::ping(conn).await?;
                    }
                    Ok(true)
                })
            })
            .after_connect(move |conn, _meta| {
                // a node that refuses to serve moves the pool on (as an acquire that
                // timed out does, in `conn`); spread over every node, so does each
                // connection opened
                let ring = on_connect.clone();
                let at = ring.at();
                ring.opened();
                Box::pin(async move {
                    let setup = session_setup(conn, ring.every_node()).await;
                    if setup.is_err() {
                        ring.failed(at).await;
                    }
                    setup
                })
            })
            .connect_lazy_with(ring.nodes()[up].clone());
        ring.attach(&pool);
        Self::open(pool, options, Some(ring)).await
    }

    /// A store on an existing pool. Its connections should run at READ COMMITTED (see
    /// the crate docs), and on a Galera node with `wsrep_sync_wait = 7` (see the guide's
    /// Scale-out chapter); [`connect_with`](Self::connect_with) sets that up.
    pub async fn from_pool(pool: MySqlPool, options: MySqlOptions) -> Result<Self> {
        Self::open(pool, options, None).await
    }

    /// The store on `pool`, whose connections `ring` turns over the URL's servers.
    async fn open(pool: MySqlPool, options: MySqlOptions, ring: Option<Arc<Ring>>) -> Result<Self> {
        const OP: &str = "open_store";
        options.config.validate()?;
        let version: String = sqlx::query_scalar("SELECT VERSION()")
            .fetch_one(&pool)
            .await
            .map_err(|e| my_err(e).with_operation(OP))?;
        let galera = is_galera(&pool)
            .await
            .map_err(|e| my_err(e).with_operation(OP))?;
        let skip = supports_skip_locked(&version);
        let queue = supports_queue_then_skip(&version);
        let strategy = match options.claim_strategy {
            ClaimStrategy::Auto if galera && skip => ClaimStrategy::SkipLocked,
            ClaimStrategy::Auto => ClaimStrategy::auto_for(&version),
            // row locks order claimers on one node only: across nodes the ordered and
            // queueing claims meet at the head of the queue and fail certification
            // again and again (measured: see the guide's Scale-out chapter)
            s @ (ClaimStrategy::OrderedUpdate | ClaimStrategy::QueueThenSkip) if galera => {
                return Err(Error::config(
                    OP,
                    format!(
                        "the {s:?} claim does not suit a Galera cluster (its claimers queue \
                         on row locks, which hold on one node only); use SkipLocked or Auto"
                    ),
                ))
            }
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
            inner: Arc::new(MySqlDriver {
                sql: Sql::new(&options.config.table),
                pool,
                options,
                strategy,
                returning: supports_returning(&version),
                server_version: version,
                next_token: AtomicU64::new(seed >> 2),
                skip_until_ms: AtomicU64::new(0),
                opened: std::time::Instant::now(),
                ring,
                galera,
                skip_locked: skip,
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

    /// The participant barrier's verdict on `call`, decided on the caller's transaction
    /// (see [`Transactional::barrier_in`]): run the business logic only when it
    /// [`should_run`](backstop_core::Barrier::should_run), then commit whatever it says.
    ///
    /// ```no_run
    /// # async fn demo(store: backstop_mysql::MySqlStore) -> Result<(), Box<dyn std::error::Error>> {
    /// use backstop_core::{BranchCall, BranchOp};
    /// let mut tx = store.pool().begin().await?;
    /// let call = BranchCall::new("order-42", "stock", BranchOp::Action)?;
    /// if store.barrier_tx(&mut tx, &call).await?.should_run() {
    ///     sqlx::query("UPDATE stock SET held = held + 1 WHERE sku = 'A'").execute(&mut *tx).await?;
    /// }
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn barrier_tx(
        &self,
        conn: &mut MySqlConnection,
        call: &BranchCall,
    ) -> Result<Barrier> {
        self.barrier_in(conn, call).await
    }

    /// Start a saga on the caller's transaction, with the business writes that call for
    /// it (see [`Transactional::start_in`]): the saga commits with them, or not at all.
    ///
    /// ```no_run
    /// # async fn demo(store: backstop_mysql::MySqlStore) -> Result<(), Box<dyn std::error::Error>> {
    /// use backstop_core::{SagaDef, SagaStep};
    /// let def = SagaDef::builder("order").step(SagaStep::new("pay")).build()?;
    /// let mut tx = store.pool().begin().await?;
    /// sqlx::query("INSERT INTO orders (id) VALUES (42)").execute(&mut *tx).await?;
    /// store.start_saga_tx(&mut tx, &def.start("order-42", &42)?).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn start_saga_tx(
        &self,
        conn: &mut MySqlConnection,
        start: &SagaStart,
    ) -> Result<SagaStarted> {
        self.start_in(conn, start).await
    }

    /// Record a saga step's report on the caller's transaction, with the step's business
    /// writes (see [`Transactional::saga_step_in`]): they commit together, or not at all.
    /// A step's code gets its report from
    /// [`StepContext::report`](backstop_core::StepContext::report).
    pub async fn saga_step_tx(
        &self,
        conn: &mut MySqlConnection,
        def: &SagaDef,
        report: &StepReport,
    ) -> Result<StepApplied> {
        self.saga_step_in(conn, def, report).await
    }
}

impl Backend for MySqlStore {
    fn driver(&self) -> &dyn Driver {
        &*self.inner
    }
}
