//! [`PgStore`]: what applications open, and its native forms of the transactional
//! enqueue and completion on tokio-postgres.

use backstop_core::driver::KeyCursors;
use std::sync::Arc;

use backstop_core::driver::prelude::*;
use backstop_core::driver::Throttle;
#[cfg(doc)]
use backstop_core::TaskStore;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};

use crate::conn::{OnClient, PgExecutor};
use crate::connect::first_connection;
use crate::driver::PgDriver;
use crate::listen::PgListener;
use crate::options::PgOptions;
use crate::sql::Sql;
use crate::tls;

/// A [`TaskStore`] on PostgreSQL. Cheap to clone (clones share the pool).
#[derive(Clone)]
pub struct PgStore {
    pub(crate) inner: Arc<PgDriver>,
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
    /// [`PgListener::with_url`].
    pub fn from_pool(pool: Pool, options: PgOptions) -> Result<Self> {
        Self::build(pool, options, None)
    }

    pub(crate) fn build(
        pool: Pool,
        options: PgOptions,
        pg_config: Option<(tokio_postgres::Config, tls::Tls)>,
    ) -> Result<Self> {
        options.validate()?;
        Ok(PgStore {
            inner: Arc::new(PgDriver {
                sql: Sql::new(&options.schema, &options.config.table),
                throttle: Arc::new(Throttle::new(options.notify_window)),
                pool,
                options,
                pg_config,
                cursors: KeyCursors::default(),
                unlocked: Default::default(),
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
    /// [`PgListener::with_url`].
    pub fn listener(&self) -> Result<PgListener> {
        if self.inner.options.transaction_pooling {
            return Err(Error::config(
                "listen",
                "LISTEN does not survive a transaction pooler (transaction_pooling is on): \
                 give the listener a direct URL with PgListener::with_url, or let engines poll",
            ));
        }
        let (config, tls) = self.inner.pg_config.clone().ok_or_else(|| {
            Error::config(
                "listen",
                "a store made from a pool has no connection settings of its own: use PgListener::with_url",
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
        let _flight = self.inner.throttle.flight();
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
        let _flight = self.inner.throttle.flight();
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

    /// The participant barrier's verdict on `call`, decided on the caller's transaction
    /// (see [`Transactional::barrier_in`]): run the business logic only when it
    /// [`should_run`](backstop_core::Barrier::should_run), then commit whatever it says.
    ///
    /// ```no_run
    /// # async fn demo(store: backstop_postgres::PgStore) -> Result<(), Box<dyn std::error::Error>> {
    /// use backstop_core::{BranchCall, BranchOp};
    /// let mut client = store.client().await?;
    /// let tx = client.transaction().await?;
    /// let call = BranchCall::new("order-42", "stock", BranchOp::Action)?;
    /// if store.barrier_tx(&tx, &call).await?.should_run() {
    ///     tx.execute("UPDATE stock SET held = held + 1 WHERE sku = 'A'", &[]).await?;
    /// }
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn barrier_tx<C>(&self, client: &C, call: &BranchCall) -> Result<Barrier>
    where
        C: PgExecutor + ?Sized,
    {
        let prepared = self.inner.prepared();
        self.barrier_in(&mut OnClient(client, prepared), call).await
    }

    /// Start a saga on the caller's transaction, with the business writes that call for
    /// it (see [`Transactional::start_in`]): the saga commits with them, or not at all.
    ///
    /// ```no_run
    /// # async fn demo(store: backstop_postgres::PgStore) -> Result<(), Box<dyn std::error::Error>> {
    /// use backstop_core::{SagaDef, SagaStep};
    /// let def = SagaDef::builder("order").step(SagaStep::new("pay")).build()?;
    /// let mut client = store.client().await?;
    /// let tx = client.transaction().await?;
    /// tx.execute("INSERT INTO orders (id) VALUES (42)", &[]).await?;
    /// store.start_saga_tx(&tx, &def.start("order-42", &42)?).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    pub async fn start_saga_tx<C>(&self, client: &C, start: &SagaStart) -> Result<SagaStarted>
    where
        C: PgExecutor + ?Sized,
    {
        let prepared = self.inner.prepared();
        let _flight = self.inner.throttle.flight();
        self.start_in(&mut OnClient(client, prepared), start).await
    }

    /// Record a saga step's report on the caller's transaction, with the step's business
    /// writes (see [`Transactional::saga_step_in`]): they commit together, or not at all.
    /// A step's code gets its report from
    /// [`StepContext::report`](backstop_core::StepContext::report).
    pub async fn saga_step_tx<C>(
        &self,
        client: &C,
        def: &SagaDef,
        report: &StepReport,
    ) -> Result<StepApplied>
    where
        C: PgExecutor + ?Sized,
    {
        let prepared = self.inner.prepared();
        let _flight = self.inner.throttle.flight();
        self.saga_step_in(&mut OnClient(client, prepared), def, report)
            .await
    }
}

impl Backend for PgStore {
    fn driver(&self) -> &dyn Driver {
        &*self.inner
    }
}
