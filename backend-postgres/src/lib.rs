//! # backstop-postgres
//!
//! The PostgreSQL backend of backstop: a [`TaskStore`] on tokio-postgres with a
//! deadpool-postgres pool.
//!
//! - **Claims** use a `MATERIALIZED` locking CTE with `FOR UPDATE SKIP LOCKED`, so
//!   concurrent pollers pass each other and a batch never takes more than its limit.
//! - **Database time** (`now()`) everywhere; delays are bound as milliseconds.
//! - **Prepared statements**, cached per pooled connection.
//! - **Batches are set-based**: a batch of marks or heartbeats is one statement over
//!   `unnest(…)` arrays, not one round trip per task.
//! - **Transactional enqueue**: [`PgStore::enqueue_tx`] writes the task on the caller's
//!   own transaction (a deadpool or tokio-postgres one, see [`PgExecutor`]), so it commits or rolls back
//!   with the business rows.
//! - **Migration** is safe to run from several instances at once (an advisory lock).
//! - **Errors**: lost connections, serialization failures (40001), deadlocks (40P01), lock
//!   timeouts and an exhausted pool are `Unavailable` and temporary.
//!
//! **TLS** (feature `tls`, rustls, no OpenSSL) follows libpq's URL parameters:
//! `sslmode=require|verify-ca|verify-full` and `sslrootcert=/path/ca.pem` (Mozilla's roots
//! when absent). Without `sslmode` a connection is plain. A certificate the CA did not
//! sign, a host name it does not name, or a server that refuses an unencrypted
//! connection is a `Config` error saying TLS failed.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use backstop_core::{NewTask, TaskStore};
//! use backstop_postgres::PgStore;
//!
//! let store = PgStore::connect("postgres://app@localhost/app").await?;
//! store.migrate().await?;
//!
//! let mut client = store.client().await?;
//! let tx = client.transaction().await?;
//! tx.execute("INSERT INTO orders (id) VALUES (42)", &[]).await?;
//! let enqueued = store.enqueue_tx(&tx, &NewTask::new("PAY_ORDER", "42")).await?;
//! tx.commit().await?;
//! assert!(enqueued.created);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Without `tls` the connector is `NoTls`, which is `Copy`: the clones are for the rustls one.
#![cfg_attr(not(feature = "tls"), allow(clippy::clone_on_copy))]

mod inbox;
mod listen;
mod sql;
mod tls;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use backstop_core::driver::prelude::*;
use backstop_core::driver::{Admit, Throttle};
use backstop_core::limits;
#[cfg(doc)]
use backstop_core::TaskStore;
use chrono::{DateTime, Utc};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{GenericClient, Row};

use sql::Sql;

pub use inbox::{pg_handler, PgHandler};
use listen::pg_notify;
pub use listen::PgListener;

pub use deadpool_postgres;
pub use tokio_postgres;

/// Options of a [`PgStore`]: `Default`, then the setters named after the fields.
///
/// ```
/// use backstop_postgres::PgOptions;
/// let options = PgOptions::default().schema("jobs").max_connections(8);
/// assert_eq!(options.schema, "jobs");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PgOptions {
    /// Table name, payload limit, retries.
    pub config: StoreConfig,
    /// The schema holding the table (default `public`; created by `migrate` if missing).
    pub schema: String,
    /// Most pooled connections (default 16).
    pub max_connections: usize,
    /// How long to wait for a pooled connection before failing with a temporary
    /// `Unavailable` error (default 10 s).
    pub acquire_timeout: Duration,
    /// Announce new tasks with `NOTIFY` inside the enqueue transaction (default `true`),
    /// so engines listening through [`PgStore::listener`] start them within
    /// milliseconds. Delivered only at commit; nothing for a duplicate. Turn it off
    /// behind PgBouncer in transaction pooling mode (`LISTEN` does not survive it), or
    /// when no engine listens.
    pub notify: bool,
    /// Each event type is announced at most once per this window per store (default
    /// 5 ms), plus one trailing announcement at its end when others were held back:
    /// `NOTIFY` takes a global lock at commit, so a burst of enqueues must not notify
    /// per row. Zero notifies every enqueue.
    pub notify_window: Duration,
    /// The server is reached through a pooler in transaction mode (PgBouncer's
    /// `pool_mode = transaction`, and poolers like it) (default `false`): statements are
    /// sent unnamed with their parameters' types, one round trip each, since a named
    /// prepared statement does not outlive its transaction there; and
    /// [`PgStore::listener`] refuses, since `LISTEN` does not survive it (engines then
    /// poll; or give a listener a direct URL with [`PgListener::with_config`], with
    /// `notify` kept on).
    pub transaction_pooling: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            config: StoreConfig::default(),
            schema: "public".to_owned(),
            max_connections: 16,
            acquire_timeout: Duration::from_secs(10),
            notify: true,
            notify_window: Duration::from_millis(5),
            transaction_pooling: false,
        }
    }
}

impl PgOptions {
    backstop_core::driver::setters! {
        /// See [`config`](Self::config).
        config: StoreConfig,
        /// See [`max_connections`](Self::max_connections).
        max_connections: usize,
        /// See [`acquire_timeout`](Self::acquire_timeout).
        acquire_timeout: Duration,
        /// See [`notify`](Self::notify).
        notify: bool,
        /// See [`notify_window`](Self::notify_window).
        notify_window: Duration,
        /// See [`transaction_pooling`](Self::transaction_pooling).
        transaction_pooling: bool,
    }

    /// Use another schema.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Use another table name (a shortcut for [`StoreConfig::table`]).
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.config.table = table.into();
        self
    }

    /// The DDL [`migrate`](backstop_core::TaskStore::migrate) runs for these options, for
    /// a DBA to review or apply with their own tool: the schema and the version table,
    /// then every migration in order (task table, indexes, inbox and audit tables, and
    /// the changes since), each followed by the statement that records it. Apply it to
    /// an empty schema; to upgrade one, apply the migrations after the newest version
    /// its `{table}_migrations` holds (or let `migrate` do it). No connection is needed.
    ///
    /// ```
    /// let ddl = backstop_postgres::PgOptions::default().table("jobs").ddl().unwrap();
    /// assert!(ddl.contains("CREATE TABLE IF NOT EXISTS \"public\".\"jobs\""));
    /// assert!(ddl.contains("INSERT INTO \"public\".\"jobs_migrations\""));
    /// ```
    pub fn ddl(&self) -> Result<String> {
        self.validate()?;
        let sql = Sql::new(&self.schema, &self.config.table);
        let table = format!(
            "\"{}\".\"{}\"",
            self.schema,
            schema::version_table(&self.config.table)
        );
        Ok(schema::script(&sql.versions_setup, &sql.migrations, |m| {
            format!(
                "INSERT INTO {table} (version, name, applied_at) VALUES ({}, '{}', now())",
                m.version, m.name
            )
        }))
    }

    fn validate(&self) -> Result<()> {
        self.config.validate()?;
        limits::check_identifier("open_store", "schema name", &self.schema)?;
        if self.max_connections == 0 {
            return Err(Error::config(
                "open_store",
                "max_connections must be at least 1",
            ));
        }
        Ok(())
    }
}

/// A [`TaskStore`] on PostgreSQL. Cheap to clone (clones share the pool).
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    sql: Sql,
    options: PgOptions,
    /// How the store's connections are made, with their TLS (for the listener's own
    /// connection); `None` for a store made from a pool.
    pg_config: Option<(tokio_postgres::Config, tls::Tls)>,
    throttle: Arc<Throttle>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("schema", &self.inner.options.schema)
            .field("table", &self.inner.options.config.table)
            .finish()
    }
}

impl PgStore {
    /// Connect to `url` (`postgres://user:pass@host:port/db`) with default options.
    /// Call [`migrate`](TaskStore::migrate) before first use.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, PgOptions::default()).await
    }

    /// Connect to `url` with `options`. The options are validated (a bad table or schema
    /// name is a `Config` error) and one connection is made to check the server.
    pub async fn connect_with(url: &str, options: PgOptions) -> Result<Self> {
        const OP: &str = "open_store";
        options.validate()?;
        let (pg_config, tls_settings) = tls::TlsSettings::split(url)?;
        let tls = tls::connector(&tls_settings)?;
        first_connection(&pg_config, &tls, options.acquire_timeout).await?;
        let manager = Manager::from_config(
            pg_config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.max_connections)
            .wait_timeout(Some(options.acquire_timeout))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|e| Error::config(OP, format!("cannot build the pool: {e}")))?;
        let store = Self::build(pool, options, Some((pg_config, tls)))?;
        drop(store.client().await?);
        Ok(store)
    }

    /// A store on an existing pool (for TLS, custom connection settings, or sharing the
    /// application's pool).
    ///
    /// Such a store has no URL of its own: give its listener one with
    /// [`PgListener::with_config`].
    pub fn from_pool(pool: Pool, options: PgOptions) -> Result<Self> {
        Self::build(pool, options, None)
    }

    fn build(
        pool: Pool,
        options: PgOptions,
        pg_config: Option<(tokio_postgres::Config, tls::Tls)>,
    ) -> Result<Self> {
        options.validate()?;
        Ok(PgStore {
            inner: Arc::new(Inner {
                sql: Sql::new(&options.schema, &options.config.table),
                throttle: Arc::new(Throttle::new(options.notify_window)),
                pool,
                options,
                pg_config,
            }),
        })
    }

    /// A [`Notifier`](backstop_core::Notifier) for engines on this store: it listens for the announcements the
    /// store makes inside enqueue transactions (see [`PgOptions::notify`]) on a
    /// dedicated connection of its own (not a pooled one), made like the store's.
    ///
    /// ```no_run
    /// # async fn demo(store: backstop_postgres::PgStore, h: impl backstop_core::Handler) -> backstop_core::Result<()> {
    /// use backstop_core::{Engine, HandlerOptions};
    /// let engine = Engine::builder(store.clone())
    ///     .handler("SEND_EMAIL", h, HandlerOptions::default())
    ///     .notifier(store.listener()?)
    ///     .start()?;
    /// # Ok(()) }
    /// ```
    ///
    /// A `Config` error for a store made with [`from_pool`](Self::from_pool): use
    /// [`PgListener::with_config`].
    pub fn listener(&self) -> Result<PgListener> {
        if self.inner.options.transaction_pooling {
            return Err(Error::config(
                "listen",
                "LISTEN does not survive a transaction pooler (transaction_pooling is on): \
                 give the listener a direct URL with PgListener::with_config, or let engines poll",
            ));
        }
        let (config, tls) = self.inner.pg_config.clone().ok_or_else(|| {
            Error::config(
                "listen",
                "a store made from a pool has no connection settings of its own: use PgListener::with_config",
            )
        })?;
        Ok(PgListener::with_config(self, config).tls(tls))
    }

    /// The pool, for the application's own queries.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// A pooled connection, e.g. to open the business transaction that
    /// [`enqueue_tx`](Self::enqueue_tx) writes the task in.
    pub async fn client(&self) -> Result<Object> {
        self.inner.client().await
    }

    /// The store's options.
    pub fn options(&self) -> &PgOptions {
        &self.inner.options
    }

    /// Enqueue `task` on the caller's transaction (or client): the task row commits or
    /// rolls back together with the caller's business rows. This is the heart of the
    /// pattern.
    ///
    /// - Same validation and idempotency as [`TaskStore::enqueue`]; invalid input is
    ///   refused before anything is sent.
    /// - `client` is any [`PgExecutor`]: a transaction (`deadpool_postgres` or
    ///   `tokio_postgres`), or a client (then the insert is its own transaction). On the
    ///   store's pooled connections (a deadpool transaction: pass `&tx`) the insert is a
    ///   statement prepared once per connection; on a plain `tokio_postgres` one it is
    ///   parsed and planned each time.
    /// - At READ COMMITTED (PostgreSQL's default) a concurrent enqueue of the same key
    ///   waits for the other transaction and then returns its task as the duplicate.
    pub async fn enqueue_tx<C>(&self, client: &C, task: &NewTask) -> Result<Enqueued>
    where
        C: PgExecutor + ?Sized,
    {
        let prepared = self.inner.prepared();
        self.enqueue_in(&mut OnClient(client, prepared), task).await
    }

    /// Enqueue many `tasks` on the caller's transaction, most of them in multi-row
    /// inserts (see [`Transactional::enqueue_many_in`]; answered as
    /// [`TaskStore::enqueue_many`]). On a client outside a transaction each statement
    /// commits on its own: pass a transaction for all or none.
    ///
    /// ```no_run
    /// # async fn demo(store: backstop_postgres::PgStore) -> Result<(), Box<dyn std::error::Error>> {
    /// use backstop_core::NewTask;
    /// let mut client = store.client().await?;
    /// let tx = client.transaction().await?;
    /// tx.execute("INSERT INTO orders (id) SELECT generate_series(1, 500)", &[]).await?;
    /// let tasks: Vec<_> = (1..=500).map(|i| NewTask::new("PAY_ORDER", i.to_string())).collect();
    /// let enqueued = store.enqueue_many_tx(&tx, &tasks).await?;
    /// tx.commit().await?;
    /// assert_eq!(enqueued.len(), 500);
    /// # Ok(()) }
    /// ```
    pub async fn enqueue_many_tx<C>(&self, client: &C, tasks: &[NewTask]) -> Result<Vec<Enqueued>>
    where
        C: PgExecutor + ?Sized,
    {
        let prepared = self.inner.prepared();
        self.enqueue_many_in(&mut OnClient(client, prepared), tasks)
            .await
    }

    /// The caller's transaction (any [`PgExecutor`]) as a [`TxConnection`], for what
    /// takes one: [`Engine::claim_in`](backstop_core::Engine::claim_in) above all, which
    /// claims a task enqueued there in the same commit. Its statements are prepared as
    /// [`enqueue_tx`](Self::enqueue_tx)'s.
    ///
    /// ```no_run
    /// # async fn demo(store: backstop_postgres::PgStore, engine: backstop_core::Engine<backstop_postgres::PgStore>) -> Result<(), Box<dyn std::error::Error>> {
    /// use backstop_core::NewTask;
    /// let mut client = store.client().await?;
    /// let tx = client.transaction().await?;
    /// tx.execute("INSERT INTO orders (id) VALUES (42)", &[]).await?;
    /// let enqueued = store.enqueue_tx(&tx, &NewTask::new("PAY_ORDER", "42")).await?;
    /// let claimed = engine.claim_in(&mut store.tx_connection(&tx), &enqueued).await?;
    /// tx.commit().await?;
    /// engine.run_claimed(claimed).await;
    /// # Ok(()) }
    /// ```
    pub fn tx_connection<'c, C>(&self, client: &'c C) -> impl TxConnection + 'c
    where
        C: PgExecutor + ?Sized,
    {
        OnClient(client, self.inner.prepared())
    }

    /// Inside a handler: record the running task's success on the handler's transaction,
    /// with its business writes and the follow-up tasks it enqueued there
    /// ([`enqueue_tx`](Self::enqueue_tx)) — all commit together or not at all (see
    /// [`complete_on`]). `Conflict` when the
    /// attempt's lease is gone: return the error and the transaction rolls back.
    ///
    /// ```no_run
    /// # use backstop_core::{Context, HandlerError, NewTask};
    /// # async fn handler(store: backstop_postgres::PgStore, cx: Context) -> Result<(), HandlerError> {
    /// let mut client = store.client().await?;
    /// let tx = client.transaction().await?;
    /// tx.execute("UPDATE orders SET shipped = true WHERE id = 42", &[]).await?;
    /// store.enqueue_tx(&tx, &NewTask::new("NOTIFY_CUSTOMER", "order-42")).await?;
    /// store.complete_tx(&tx, &cx).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn complete_tx<C>(&self, client: &C, cx: &backstop_core::Context) -> Result<()>
    where
        C: PgExecutor + ?Sized,
    {
        let prepared = self.inner.prepared();
        self.complete_in(&mut OnClient(client, prepared), cx).await
    }
}

impl Backend for PgStore {
    fn driver(&self) -> &dyn Driver {
        &*self.inner
    }
}

/// The enqueue's statements in PostgreSQL's SQL (run by core's [`EnqueuePlan`]). Every
/// statement returns a row (`RETURNING`), so each is answered with its first row.
impl EnqueueSql for Inner {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn statement<'a>(
        &'a self,
        step: EnqueueStep<'a>,
        mut params: Vec<Value<'a>>,
        task: Checked<&'a NewTask>,
    ) -> Statement<'a> {
        let sql = &self.sql;
        let text = match step {
            // announced at commit on the table's channel
            EnqueueStep::Insert { .. } if self.notify_now(task.event_type()) => {
                params.push(Value::Text(Some(&sql.channel)));
                &sql.insert_notify
            }
            EnqueueStep::Insert { .. } => &sql.insert,
            EnqueueStep::ReadExisting => &sql.existing,
            EnqueueStep::Release(_) => &sql.release_key,
            EnqueueStep::Replace(_) => &sql.replace_payload,
            EnqueueStep::LockKey(_) => &sql.key_lock,
            EnqueueStep::KeyBlocker(_) => &sql.key_blocker,
            EnqueueStep::KeyNext(_) => &sql.key_next,
            EnqueueStep::KeyPromote(_) => &sql.key_promote,
            EnqueueStep::KeyDrop(_) => &sql.key_drop,
        };
        Statement::new(text, params, Returns::Row)
    }

    fn insert_rows<'a>(
        &'a self,
        doc: &'a str,
        tasks: &[Checked<&'a NewTask>],
    ) -> Option<Statement<'a>> {
        // every type of the batch asks the throttle (each may be due an announcement)
        let mut types: Vec<&str> = tasks.iter().map(|t| t.event_type()).collect();
        types.sort_unstable();
        types.dedup();
        let notify = types
            .into_iter()
            .fold(false, |any, t| self.notify_now(t) | any);
        let mut params = vec![Value::Text(Some(doc))];
        let text = if notify {
            params.push(Value::Text(Some(&self.sql.channel)));
            &self.sql.insert_rows_notify
        } else {
            &self.sql.insert_rows
        };
        Some(Statement::new(text, params, Returns::Rows))
    }

    fn complete(&self, lease: Lease) -> Statement<'_> {
        Statement::new(
            &self.sql.complete,
            vec![
                Value::BigInt(Some(lease.task_id)),
                Value::BigInt(Some(lease.token)),
            ],
            Returns::Row,
        )
    }

    fn claim<'a>(&'a self, id: TaskId, owner: &'a str) -> Option<Statement<'a>> {
        Some(Statement::new(
            &self.sql.claim_in,
            vec![Value::BigInt(Some(id)), Value::Text(Some(owner))],
            Returns::Row,
        ))
    }
}

/// A tokio-postgres or deadpool connection as a [`TxConnection`] (see [`PgExecutor`]),
/// its statements prepared once per pooled connection unless the flag is off (behind a
/// transaction pooler).
struct OnClient<'c, C: ?Sized>(&'c C, bool);

#[async_trait]
impl<C: PgExecutor + ?Sized> TxConnection for OnClient<'_, C> {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    async fn run(&mut self, statement: &Statement<'_>) -> Result<Answer> {
        let params: Vec<(&(dyn ToSql + Sync), Type)> = statement
            .params()
            .iter()
            .map(|value| match value {
                Value::SmallInt(v) => (v as &(dyn ToSql + Sync), Type::INT2),
                Value::Int(v) => (v as &(dyn ToSql + Sync), Type::INT4),
                Value::BigInt(v) => (v as &(dyn ToSql + Sync), Type::INT8),
                Value::Timestamp(v) => (v as &(dyn ToSql + Sync), Type::TIMESTAMPTZ),
                Value::Text(v) => (v as &(dyn ToSql + Sync), Type::TEXT),
            })
            .collect();
        let columns = |r: &Row| (0..r.len()).map(|i| col(r, i)).collect::<Result<Vec<_>>>();
        if statement.returns() == Returns::Rows {
            let rows = self
                .0
                .query_all_typed(statement.sql(), &params, self.1)
                .await
                .map_err(pg_err)?;
            return Ok(Answer::Rows(
                rows.iter().map(columns).collect::<Result<_>>()?,
            ));
        }
        let row = self
            .0
            .query_opt_typed(statement.sql(), &params, self.1)
            .await
            .map_err(pg_err)?;
        Ok(Answer::Row(row.as_ref().map(columns).transpose()?))
    }
}

/// Lock order key `key` (its row in the keys table, inserted if missing) until the
/// transaction `client` is in ends; `false` when the row went away meanwhile.
async fn lock_key<C>(sql: &Sql, client: &C, key: &str, prepared: bool) -> Result<bool>
where
    C: PgExecutor + ?Sized,
{
    let row = client
        .query_opt_typed(
            &sql.key_lock,
            &[(&key as &(dyn ToSql + Sync), Type::VARCHAR)],
            prepared,
        )
        .await
        .map_err(pg_err)?;
    Ok(row.is_some())
}

/// [`KeyRelease`] for order key `key` on `client`, which must be inside a transaction.
async fn release_key<C>(sql: &Sql, client: &C, key: &str, prepared: bool) -> Result<Option<TaskId>>
where
    C: PgExecutor + ?Sized,
{
    let k = [(&key as &(dyn ToSql + Sync), Type::VARCHAR)];
    let mut release = KeyRelease::new();
    let mut step = release.first();
    loop {
        step = match step {
            ReleaseStep::LockKey => release.locked(lock_key(sql, client, key, prepared).await?)?,
            ReleaseStep::ReadBlocker => {
                let row = client
                    .query_opt_typed(&sql.key_blocker, &k, prepared)
                    .await
                    .map_err(pg_err)?;
                release.blocker(row.is_some())
            }
            ReleaseStep::ReadNext => {
                let row = client
                    .query_opt_typed(&sql.key_next, &k, prepared)
                    .await
                    .map_err(pg_err)?;
                release.next(row.map(|r| col(&r, 0)).transpose()?)
            }
            ReleaseStep::Promote(id) => {
                let row = client
                    .query_opt_typed(&sql.key_promote, &[(&id, Type::INT8)], prepared)
                    .await
                    .map_err(pg_err)?;
                release.promoted(row.is_some())?
            }
            ReleaseStep::DropKey => {
                client
                    .query_opt_typed(&sql.key_drop, &k, prepared)
                    .await
                    .map_err(pg_err)?;
                release.dropped()
            }
            ReleaseStep::Done(promoted) => return Ok(promoted),
        };
    }
}

/// [`KeysRelease`] for `keys` (sorted, distinct) on `tx`; the caller commits.
async fn release_keys_at_once(
    sql: &Sql,
    tx: &tokio_postgres::Transaction<'_>,
    keys: &[String],
) -> Result<KeysRelease> {
    // every statement takes one array: the keys (text[]) or the ids (bigint[])
    async fn run<T: ToSql + Sync>(
        tx: &tokio_postgres::Transaction<'_>,
        statement: &str,
        array: &T,
        array_type: Type,
    ) -> Result<Vec<Row>> {
        tx.query_typed(statement, &[(array, array_type)])
            .await
            .map_err(pg_err)
    }
    let keys_of =
        |rows: Vec<Row>| -> Result<Vec<String>> { rows.iter().map(|r| col(r, 0)).collect() };
    let mut release = KeysRelease::new(keys.to_vec());
    let mut step = release.first();
    loop {
        step = match step {
            KeysStep::InsertKeys(k) => {
                run(tx, &sql.keys_insert, &k, Type::TEXT_ARRAY).await?;
                release.inserted()
            }
            KeysStep::LockKeys(k) => release.locked(keys_of(
                run(tx, &sql.keys_lock, &k, Type::TEXT_ARRAY).await?,
            )?),
            KeysStep::ReadBlockers(k) => release.blockers(keys_of(
                run(tx, &sql.keys_blockers, &k, Type::TEXT_ARRAY).await?,
            )?),
            KeysStep::ReadNext(k) => {
                let rows = run(tx, &sql.keys_next, &k, Type::TEXT_ARRAY).await?;
                let first = rows
                    .iter()
                    .map(|r| Ok((col(r, 0)?, col(r, 1)?)))
                    .collect::<Result<Vec<_>>>()?;
                release.next(first)
            }
            KeysStep::Promote(ids) => {
                let rows = run(tx, &sql.keys_promote, &ids, Type::INT8_ARRAY).await?;
                release.promoted(rows.len() as u64)?
            }
            KeysStep::DropKeys(k) => {
                run(tx, &sql.keys_drop, &k, Type::TEXT_ARRAY).await?;
                release.dropped()
            }
            KeysStep::Done => return Ok(release),
        };
    }
}

impl Inner {
    /// Whether this enqueue announces its task (inside its transaction). When the
    /// throttle holds it back, a trailing `NOTIFY` is sent at the end of the window on a
    /// pooled connection, after this transaction has (most likely) committed; a
    /// transaction still open then is found by the next poll.
    fn notify_now(&self, event_type: &str) -> bool {
        if !self.options.notify {
            return false;
        }
        match self.throttle.admit(event_type) {
            Admit::Now => true,
            Admit::Covered => false,
            Admit::Later(after) => {
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    self.throttle.trailing_sent(event_type);
                    return false;
                };
                let (pool, throttle) = (self.pool.clone(), Arc::clone(&self.throttle));
                let (channel, event_type) = (self.sql.channel.clone(), event_type.to_owned());
                runtime.spawn(async move {
                    tokio::time::sleep(after).await;
                    throttle.trailing_sent(&event_type);
                    if let Err(e) = pg_notify(&pool, &channel, &event_type).await {
                        tracing::debug!(error = %e, %event_type, "trailing NOTIFY failed");
                    }
                });
                false
            }
        }
    }

    /// The answer of a fenced change of task `id` whose statement returned `rows`: the
    /// changed row, or why there was none (missing, or its status).
    async fn changed(&self, id: TaskId, rows: Vec<RawTask>) -> Result<Reset> {
        if let Some(row) = rows.into_iter().next() {
            return Ok(Reset::Done(Box::new(row)));
        }
        let rows = self.query(&self.sql.status_of, &[&id]).await?;
        Ok(match rows.first() {
            None => Reset::Missing,
            Some(r) => Reset::Refused(col::<i16>(r, 0)?.into()),
        })
    }

    /// Whether statements are prepared once per pooled connection (named, cached), or
    /// sent unnamed with their parameters' types each time (behind a transaction pooler,
    /// where a named statement does not outlive its transaction).
    fn prepared(&self) -> bool {
        !self.options.transaction_pooling
    }

    /// `sql` as this store sends it on `client` (see [`prepared`](Self::prepared)).
    async fn statement<'s>(&self, client: &Object, sql: &'s str) -> Result<Stmt<'s>> {
        Ok(if self.prepared() {
            Stmt::Cached(client.prepare_cached(sql).await.map_err(pg_err)?)
        } else {
            Stmt::Unnamed(sql)
        })
    }

    /// Run one statement on a pooled connection.
    async fn query(&self, sql: &str, params: &[&dyn Param]) -> Result<Vec<Row>> {
        let client = self.client().await?;
        let stmt = self.statement(&client, sql).await?;
        stmt.query(&**client, params).await
    }

    /// Run one statement on a pooled connection; the rows it changed.
    async fn execute(&self, sql: &str, params: &[&dyn Param]) -> Result<u64> {
        let client = self.client().await?;
        let stmt = self.statement(&client, sql).await?;
        stmt.execute(&**client, params).await
    }

    /// Run one statement that reads task rows.
    async fn tasks(&self, sql: &str, params: &[&dyn Param]) -> Result<Vec<RawTask>> {
        self.query(sql, params)
            .await?
            .iter()
            .map(raw_task)
            .collect()
    }

    async fn client(&self) -> Result<Object> {
        self.pool.get().await.map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                "connect",
                format!("no PostgreSQL connection: {e}"),
            )
            .with_source(e)
        })
    }
}

#[async_trait]
impl Driver for Inner {
    fn config(&self) -> &StoreConfig {
        &self.options.config
    }

    async fn migrate(&self, target: u32) -> Result<()> {
        let mut client = self.client().await?;
        // One transaction for the lot: PostgreSQL's DDL is transactional, so the schema
        // moves from one version to the target or not at all.
        let tx = client.transaction().await.map_err(pg_err)?;
        // Serialize concurrent migrations: CREATE … IF NOT EXISTS alone races on the
        // catalogs when two instances start together.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1))",
            &[&self.sql.lock_key],
        )
        .await
        .map_err(pg_err)?;
        tx.batch_execute(&self.sql.versions_setup)
            .await
            .map_err(pg_err)?;
        let applied: Vec<i64> = tx
            .query(&self.sql.versions_read, &[])
            .await
            .map_err(pg_err)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let table = &self.options.config.table;
        for m in schema::pending(table, &applied, &self.sql.migrations, target)? {
            for statement in &m.statements {
                tx.batch_execute(statement).await.map_err(pg_err)?;
            }
            let version = i32::try_from(m.version).unwrap_or(i32::MAX);
            tx.execute(&self.sql.version_record, &[&version, &m.name])
                .await
                .map_err(pg_err)?;
            tracing::info!(
                table,
                version = m.version,
                name = m.name,
                "migration applied"
            );
        }
        tx.commit().await.map_err(pg_err)
    }

    fn enqueue_sql(&self) -> &dyn EnqueueSql {
        self
    }

    async fn insert(&self, task: Checked<&NewTask>) -> Result<Inserted> {
        // One statement in autocommit (more on a conflict, each guarded on its own); a
        // task with an order key in a transaction, so its key's lock is held throughout.
        let mut client = self.client().await?;
        if task.order().is_none() {
            return EnqueuePlan::new(self, task)
                .run(&mut OnClient(&client, self.prepared()))
                .await;
        }
        let tx = client.transaction().await.map_err(pg_err)?;
        let inserted = EnqueuePlan::new(self, task)
            .run(&mut OnClient(&tx, self.prepared()))
            .await?;
        tx.commit().await.map_err(pg_err)?;
        Ok(inserted)
    }

    async fn insert_many(&self, tasks: Checked<&[NewTask]>) -> Result<Vec<Inserted>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_err)?;
        let inserted = EnqueueBatch::new(self, tasks)
            .run(&mut OnClient(&tx, self.prepared()))
            .await?;
        tx.commit().await.map_err(pg_err)?;
        Ok(inserted)
    }

    async fn claim_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<RawTask>> {
        let rows = self
            .tasks(&self.sql.grab_by_id, &[&id, &owner.as_str()])
            .await?;
        Ok(rows.into_iter().next())
    }

    async fn claim_batch(&self, claim: Checked<Claim<'_>>) -> Result<Vec<RawTask>> {
        let (owner, limit) = (claim.owner.as_str(), claim.limit as i64);
        match claim.event_types {
            [one] => {
                self.tasks(&self.sql.grab_one_type, &[&owner, one, &limit])
                    .await
            }
            many => {
                self.tasks(&self.sql.grab_many_types, &[&owner, &many, &limit])
                    .await
            }
        }
    }

    async fn recycle_dead(&self, batch: Checked<AgedBatch>) -> Result<Recycled> {
        let rows = self
            .query(
                &self.sql.recycle_dead,
                &[&millis(batch.older_than), &(batch.limit as i64)],
            )
            .await?;
        let mut to_pending = 0;
        for r in &rows {
            if col::<i16>(r, 0)? == Status::Pending.code() {
                to_pending += 1;
            }
        }
        Ok(Recycled {
            to_pending,
            to_failed: rows.len() as u64 - to_pending,
        })
    }

    async fn heartbeat(&self, leases: Checked<&[Lease]>) -> Result<Vec<bool>> {
        let ids: Vec<i64> = leases.iter().map(|l| l.task_id).collect();
        let tokens: Vec<i64> = leases.iter().map(|l| l.token).collect();
        let rows = self.query(&self.sql.heartbeat, &[&ids, &tokens]).await?;
        let refreshed = rows
            .iter()
            .map(|r| Ok((col::<i64>(r, 0)?, col::<i64>(r, 1)?)))
            .collect::<Result<HashSet<(i64, i64)>>>()?;
        Ok(leases
            .iter()
            .map(|l| refreshed.contains(&(l.task_id, l.token)))
            .collect())
    }

    async fn mark(&self, marks: Checked<&[Mark]>) -> Result<Vec<bool>> {
        let marks = *marks;
        let rounds = mark_rounds(marks);
        let mut client = self.client().await?;
        let stmt = self.statement(&client, &self.sql.mark).await?;
        let mut flags = vec![false; marks.len()];
        if let [round] = rounds.as_slice() {
            // One statement: no transaction needed (one round trip).
            mark_round(&**client, &stmt, marks, round, &mut flags).await?;
            return Ok(flags);
        }
        let tx = client.transaction().await.map_err(pg_err)?;
        for round in &rounds {
            mark_round(&*tx, &stmt, marks, round, &mut flags).await?;
        }
        tx.commit().await.map_err(pg_err)?;
        Ok(flags)
    }

    async fn reset(&self, id: TaskId, stuck_after: Checked<Duration>) -> Result<Reset> {
        let rows = self
            .tasks(&self.sql.manual_reset, &[&id, &millis(*stuck_after)])
            .await?;
        self.changed(id, rows).await
    }

    async fn cancel(&self, id: TaskId, audit: Checked<&Audit>) -> Result<Reset> {
        let rows = self
            .tasks(&self.sql.cancel, &[&id, &audit.operator, &audit.reason])
            .await?;
        self.changed(id, rows).await
    }

    async fn delete(&self, id: TaskId, audit: Checked<&Audit>) -> Result<Reset> {
        let rows = self
            .tasks(&self.sql.delete, &[&id, &audit.operator, &audit.reason])
            .await?;
        self.changed(id, rows).await
    }

    async fn retry(&self, id: TaskId, expected: [i16; 2], audit: Checked<&Audit>) -> Result<Reset> {
        let rows = self
            .tasks(
                &self.sql.retry,
                &[
                    &id,
                    &audit.operator,
                    &audit.reason,
                    &expected[0],
                    &expected[1],
                ],
            )
            .await?;
        self.changed(id, rows).await
    }

    async fn audit_log(&self, id: TaskId) -> Result<Vec<RawAudit>> {
        self.query(&self.sql.audit_log, &[&id])
            .await?
            .iter()
            .map(|r| RawAudit::read(&Cols(r)))
            .collect()
    }

    async fn get(&self, id: TaskId) -> Result<Option<RawTask>> {
        Ok(self.tasks(&self.sql.get, &[&id]).await?.into_iter().next())
    }

    async fn list(&self, filter: Checked<&TaskFilter>) -> Result<Vec<RawTask>> {
        let (sql, args) = list_sql(&self.sql.list_select, &sql::LIST, &filter);
        let values: Vec<Box<dyn Param + Send>> = args
            .into_iter()
            .map(|a| -> Box<dyn Param + Send> {
                match a {
                    ListArg::Status(s) => Box::new(s),
                    ListArg::Text(t) => Box::new(t.to_owned()),
                    ListArg::Age(d) => Box::new(millis(d)),
                    ListArg::Int(i) => Box::new(i),
                }
            })
            .collect();
        let params: Vec<&dyn Param> = values.iter().map(|v| &**v as &dyn Param).collect();
        self.tasks(&sql, &params).await
    }

    async fn stats(&self, backlog_only: bool) -> Result<RawStats> {
        let counts_sql = if backlog_only {
            &self.sql.backlog_counts
        } else {
            &self.sql.stats_counts
        };
        let counts = self
            .query(counts_sql, &[])
            .await?
            .iter()
            .map(|r| Ok((col(r, 0)?, i64::from(col::<i16>(r, 1)?), col::<i64>(r, 2)?)))
            .collect::<Result<Vec<_>>>()?;
        let rows = self.query(&self.sql.stats_oldest_due, &[]).await?;
        let oldest_due_pending_ms = match rows.first() {
            Some(r) => col(r, 0)?,
            None => None,
        };
        Ok(RawStats {
            counts,
            oldest_due_pending_ms,
        })
    }

    async fn throughput(&self, b: Checked<Buckets>) -> Result<Vec<(String, i64, i64, i64)>> {
        let cap = i64::try_from(b.cap).unwrap_or(i64::MAX);
        self.query(
            &self.sql.throughput,
            &[&millis(b.window), &millis(b.bucket), &cap],
        )
        .await?
        .iter()
        .map(|r| {
            Ok((
                col(r, 0)?,
                i64::from(col::<i16>(r, 1)?),
                col::<i64>(r, 2)?,
                col::<i64>(r, 3)?,
            ))
        })
        .collect()
    }

    async fn purge_succeeded(&self, batch: Checked<AgedBatch>) -> Result<u64> {
        self.execute(
            &self.sql.purge_succeeded,
            &[&millis(batch.older_than), &(batch.limit as i64)],
        )
        .await
    }

    async fn delete_succeeded(&self, ids: Checked<&[TaskId]>) -> Result<u64> {
        self.execute(&self.sql.delete_succeeded, &[&*ids]).await
    }

    async fn release_keys(&self, keys: Checked<&[String]>) -> Result<Vec<TaskId>> {
        let mut client = self.client().await?;
        let mut promoted = Vec::new();
        let mut one_by_one = keys.to_vec();
        if keys.len() > 1 {
            let tx = client.transaction().await.map_err(pg_err)?;
            match release_keys_at_once(&self.sql, &tx, &keys).await {
                Ok(release) => {
                    tx.commit().await.map_err(pg_err)?;
                    promoted.extend_from_slice(release.promoted_ids());
                    one_by_one = release.leftover().to_vec();
                }
                // a deadlock the server broke, a lost race: one key at a time instead
                Err(e) if e.is_temporary() => {
                    tracing::debug!(error = %e, keys = keys.len(),
                        "releasing order keys together failed; releasing them one by one");
                    tx.rollback().await.map_err(pg_err)?;
                }
                Err(e) => return Err(e),
            }
        }
        for key in &one_by_one {
            let tx = client.transaction().await.map_err(pg_err)?;
            let id = release_key(&self.sql, &tx, key, self.prepared()).await?;
            tx.commit().await.map_err(pg_err)?;
            promoted.extend(id);
        }
        Ok(promoted)
    }

    async fn register_types(&self, event_types: Checked<&[String]>) -> Result<()> {
        self.execute(&self.sql.types_register, &[&*event_types])
            .await
            .map(|_| ())
    }

    async fn types(&self) -> Result<Vec<(String, DateTime<Utc>, DateTime<Utc>)>> {
        let rows = self.query(&self.sql.types_list, &[]).await?;
        rows.iter()
            .map(|r| Ok((col(r, 0)?, col(r, 1)?, col(r, 2)?)))
            .collect()
    }

    async fn order_keys(&self, after: Option<&str>, limit: Checked<usize>) -> Result<Vec<String>> {
        let limit = i64::try_from(*limit).unwrap_or(i64::MAX);
        let rows = self
            .query(&self.sql.keys_page, &[&after.unwrap_or(""), &limit])
            .await?;
        rows.iter().map(|r| col(r, 0)).collect()
    }
}

/// Apply one round of marks (each task at most once) as one set-based statement, setting
/// the flags of the marks that applied.
async fn mark_round<C: GenericClient + Sync>(
    client: &C,
    stmt: &Stmt<'_>,
    marks: &[Mark],
    round: &[usize],
    flags: &mut [bool],
) -> Result<()> {
    let mut ids = Vec::with_capacity(round.len());
    let mut tokens = Vec::with_capacity(round.len());
    let mut kinds = Vec::with_capacity(round.len());
    let mut delays = Vec::with_capacity(round.len());
    let mut errors: Vec<Option<&str>> = Vec::with_capacity(round.len());
    for &i in round {
        let m = &marks[i];
        ids.push(m.lease.task_id);
        tokens.push(m.lease.token);
        let (kind, delay, error): (i16, i64, Option<&str>) = match &m.action {
            MarkAction::Success => (1, 0, None),
            MarkAction::Retry { delay, error } => (2, millis(*delay), Some(error.as_str())),
            MarkAction::Fail { error } => (3, 0, Some(error.as_str())),
            MarkAction::Release => (4, 0, None),
        };
        kinds.push(kind);
        delays.push(delay);
        errors.push(error);
    }
    let rows = stmt
        .query(client, &[&ids, &tokens, &kinds, &delays, &errors])
        .await?;
    let applied = rows
        .iter()
        .map(|r| col::<i64>(r, 0))
        .collect::<Result<HashSet<i64>>>()?;
    for &i in round {
        flags[i] = applied.contains(&marks[i].lease.task_id);
    }
    Ok(())
}

/// Map a tokio-postgres error to a backstop error, classifying the transient ones as
/// temporary and the rolled-back conflicts as contention. (The store names the operation.)
/// Open one connection outside the pool and close it, so a store that cannot connect
/// says why. The pool reports a failed connect as "error occurred while creating a new
/// object: error connecting to server", with the cause only in its source chain. A
/// refused connection and a connect timeout are temporary. A host that does not resolve,
/// refused credentials or a missing database are configuration errors. The message
/// names the server and the user, never the password.
async fn first_connection(
    config: &tokio_postgres::Config,
    tls: &tls::Tls,
    timeout: Duration,
) -> Result<()> {
    const OP: &str = "open_store";
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .zip(config.get_ports().iter().chain(std::iter::repeat(&5432)))
        .map(|(h, p)| match h {
            tokio_postgres::config::Host::Tcp(name) => format!("{name}:{p}"),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(dir) => format!("{}:{p}", dir.display()),
        })
        .collect();
    let server = format!(
        "{} as user {:?}",
        hosts.join(","),
        config.get_user().unwrap_or("(default)")
    );
    let e = match tokio::time::timeout(timeout, config.connect(tls.clone())).await {
        Ok(Ok((client, connection))) => {
            drop(client);
            // the connection ends once its client is gone
            let _ = connection.await;
            return Ok(());
        }
        Ok(Err(e)) => e,
        Err(_) => {
            return Err(ConnectFailure::TimedOut.error(
                "PostgreSQL",
                &server,
                format!("no answer in {timeout:?}"),
            ))
        }
    };
    let io = std::iter::successors(std::error::Error::source(&e), |s| s.source())
        .find_map(|s| s.downcast_ref::<std::io::Error>());
    let cause = match (e.code(), io) {
        (Some(c), _) if *c == SqlState::INVALID_CATALOG_NAME => {
            Some(ConnectFailure::UnknownDatabase)
        }
        (Some(c), _)
            if *c == SqlState::INVALID_PASSWORD
                || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            // pg_hba.conf refusing an unencrypted connection is about TLS
            tls_failure(&e).or(Some(ConnectFailure::AccessDenied))
        }
        (None, Some(io)) => ConnectFailure::of_io(io).or_else(|| tls_failure(&e)),
        (None, None) => tls_failure(&e),
        _ => None,
    };
    let detail = match (e.as_db_error(), io) {
        (Some(db), _) => db.message().to_owned(),
        (None, Some(io)) => io.to_string(),
        (None, None) => e.to_string(),
    };
    Err(match cause {
        Some(cause) => cause.error("PostgreSQL", &server, detail).with_source(e),
        None => pg_err(e).with_operation(OP),
    })
}

fn pg_err(e: tokio_postgres::Error) -> Error {
    let (kind, what) = match e.code() {
        None if e.is_closed() => (
            ErrorKind::Unavailable,
            "the connection is closed".to_owned(),
        ),
        None => (
            ErrorKind::Unavailable,
            "PostgreSQL connection failed".to_owned(),
        ),
        Some(code) => {
            let (kind, hint) = backstop_core::driver::postgres_error_kind(code.code());
            (kind, format!("PostgreSQL error {}{hint}", code.code()))
        }
    };
    Error::new(kind, "postgres", format!("{what}: {e}")).with_source(e)
}

/// A TLS failure of a first connection, read from the error and its sources (see
/// [`ConnectFailure::of_tls`]).
fn tls_failure(e: &tokio_postgres::Error) -> Option<ConnectFailure> {
    std::iter::successors(Some(e as &dyn std::error::Error), |s| s.source())
        .find_map(|s| ConnectFailure::of_tls(&s.to_string()))
}

/// Column `i` of `r`, or an `Unexpected` error naming it.
fn col<'a, T: tokio_postgres::types::FromSql<'a>>(r: &'a Row, i: usize) -> Result<T> {
    r.try_get(i).map_err(|e| {
        Error::new(
            ErrorKind::Unexpected,
            "decode_row",
            format!("column {i} does not decode: {e}"),
        )
        .with_source(e)
    })
}

/// Read a row of [`COLUMNS`](backstop_core::driver::COLUMNS).
fn raw_task(r: &Row) -> Result<RawTask> {
    RawTask::read(&Cols(r))
}

/// A row's columns.
struct Cols<'r>(&'r Row);

impl TaskRow for Cols<'_> {
    type Error = Error;
    fn int(&self, i: usize) -> Result<i64> {
        match self.0.columns().get(i).map(|c| c.type_()) {
            Some(&Type::INT2) => col::<i16>(self.0, i).map(i64::from),
            Some(&Type::INT4) => col::<i32>(self.0, i).map(i64::from),
            _ => col(self.0, i),
        }
    }
    fn text(&self, i: usize) -> Result<String> {
        col(self.0, i)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>> {
        col(self.0, i)
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        col(self.0, i)
    }
    fn time(&self, i: usize) -> Result<chrono::DateTime<chrono::Utc>> {
        col(self.0, i)
    }
}

/// A statement as a store sends it: prepared once per pooled connection, or unnamed with
/// its parameters' types (see `Inner::prepared`).
enum Stmt<'s> {
    Cached(tokio_postgres::Statement),
    Unnamed(&'s str),
}

impl Stmt<'_> {
    async fn query<C: GenericClient + Sync>(
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

    async fn execute<C: GenericClient + Sync>(
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

fn typed<'p>(params: &[&'p dyn Param]) -> Vec<(&'p (dyn ToSql + Sync), Type)> {
    params.iter().map(|p| (p.value(), p.pg_type())).collect()
}

/// A statement parameter with its PostgreSQL type, so a statement can be sent unnamed
/// with its types declared as well as prepared.
pub(crate) trait Param: Sync {
    fn value(&self) -> &(dyn ToSql + Sync);
    fn pg_type(&self) -> Type;
}

/// A Rust type's PostgreSQL type, as the store's statements bind it.
trait Typed: ToSql + Sync {
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
    i16 => INT2,
    i32 => INT4,
    i64 => INT8,
    String => TEXT,
    &str => TEXT,
    DateTime<Utc> => TIMESTAMPTZ,
    Vec<i16> => INT2_ARRAY,
    Vec<i64> => INT8_ARRAY,
    &[i64] => INT8_ARRAY,
    Vec<String> => TEXT_ARRAY,
    &[String] => TEXT_ARRAY,
    Vec<Option<&str>> => TEXT_ARRAY,
);

/// Where [`PgStore::enqueue_tx`] can write: a transaction or a client of `tokio_postgres`
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
