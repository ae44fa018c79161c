//! [`SqliteStore`]: what applications open, and its native transaction on rusqlite
//! ([`SqliteTx`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;
use rusqlite::Transaction;

use crate::conn::{db_err, OnConn};
use crate::driver::SqliteDriver;
use crate::options::SqliteOptions;
use crate::pool::{Pool, Settings};
use crate::sql::Sql;
use crate::writer::Writer;

/// A [`TaskStore`] on an SQLite database file. Cheap to clone (clones share the pool).
#[derive(Clone)]
pub struct SqliteStore {
    pub(crate) inner: Arc<SqliteDriver>,
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

    pub(crate) async fn build(path: Option<PathBuf>, options: SqliteOptions) -> Result<Self> {
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
        let pool = Arc::new(Pool::new(path.clone(), max, settings));
        // Open one connection now so a bad path fails here, not at first use (and the file
        // exists for the writer's key).
        pool.run("open_store", |_| Ok(())).await?;
        let writer = match (&path, options.queue_writers) {
            (Some(p), true) => Some(Writer::of(p)?),
            _ => None,
        };
        Ok(SqliteStore {
            inner: Arc::new(SqliteDriver {
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

/// A transaction opened by [`SqliteStore::transaction`]: derefs to the
/// [`rusqlite::Transaction`] for the caller's own statements, and enqueues tasks in it.
pub struct SqliteTx<'a> {
    pub(crate) tx: &'a Transaction<'a>,
    pub(crate) store: &'a SqliteStore,
    pub(crate) rollback: std::cell::Cell<bool>,
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

    /// The participant barrier's verdict on `call`, decided in this transaction (see
    /// [`Transactional::barrier_in`](backstop_core::Transactional::barrier_in)): run the
    /// business logic only when it [`should_run`](Barrier::should_run), then let the
    /// transaction commit whatever it says.
    ///
    /// ```no_run
    /// # async fn demo(store: backstop_sqlite::SqliteStore) -> backstop_core::Result<()> {
    /// use backstop_core::{BranchCall, BranchOp};
    /// let call = BranchCall::new("order-42", "stock", BranchOp::Compensate)?;
    /// store
    ///     .transaction(move |tx| {
    ///         if tx.barrier(&call)?.should_run() {
    ///             // release the stock, on `tx`
    ///         }
    ///         Ok(())
    ///     })
    ///     .await
    /// # }
    /// ```
    pub fn barrier(&self, call: &BranchCall) -> Result<Barrier> {
        self.store.barrier_blocking(&mut OnConn(self.tx), call)
    }

    /// Start a saga in this transaction, with the business writes that call for it (see
    /// [`Transactional::start_in`](backstop_core::Transactional::start_in)): the saga
    /// commits with them, or not at all.
    ///
    /// ```no_run
    /// # async fn demo(store: backstop_sqlite::SqliteStore) -> backstop_core::Result<()> {
    /// use backstop_core::{SagaDef, SagaStep};
    /// let def = SagaDef::builder("order").step(SagaStep::new("pay")).build()?;
    /// let start = def.start("order-42", &42)?;
    /// store
    ///     .transaction(move |tx| {
    ///         // insert the order on `tx`, then:
    ///         tx.start_saga(&start)?;
    ///         Ok(())
    ///     })
    ///     .await
    /// # }
    /// ```
    pub fn start_saga(&self, start: &SagaStart) -> Result<SagaStarted> {
        self.store.start_blocking(&mut OnConn(self.tx), start)
    }

    /// Record a saga step's report in this transaction, with the step's business writes
    /// (see [`Transactional::saga_step_in`](backstop_core::Transactional::saga_step_in)):
    /// they commit together, or not at all. A step's code gets its report from
    /// [`StepContext::report`](backstop_core::StepContext::report).
    pub fn saga_step(&self, def: &SagaDef, report: &StepReport) -> Result<StepApplied> {
        self.store
            .saga_step_blocking(&mut OnConn(self.tx), def, report)
    }
}

impl<'a> std::ops::Deref for SqliteTx<'a> {
    type Target = Transaction<'a>;
    fn deref(&self) -> &Transaction<'a> {
        self.tx
    }
}

#[cfg(test)]
mod tests {
    use backstop_core::driver::Backend;

    use crate::SqliteStore;

    /// The store hands core a multi-row insert for batches, in counts it has a text for.
    #[tokio::test]
    async fn batches_go_in_multi_row_inserts() {
        let store = SqliteStore::open_in_memory().await.unwrap();
        let sql = store.driver().enqueue_sql();
        assert!(sql.inserts_rows());
        assert!(
            !sql.insert_rows_document(),
            "every value bound, no document"
        );
        assert_eq!(
            (
                sql.insert_rows_take(1000),
                sql.insert_rows_take(40),
                sql.insert_rows_take(3)
            ),
            (960, 32, 2)
        );
    }
}
