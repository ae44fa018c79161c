//! # backstop-testkit
//!
//! The conformance suite of backstop: every [`TaskStore`] backend runs the same cases, so
//! a user can swap databases and keep the same behaviour.
//!
//! A backend implements [`Harness`] (how to make a fresh isolated database, open a store
//! on it, backdate a task's timestamps, and run its native transactional enqueue), then
//! stamps one `#[tokio::test]` per case with [`conformance!`] (or [`store_conformance!`]
//! and [`engine_conformance!`] apart):
//!
//! ```ignore
//! // backend-foo/tests/conformance.rs
//! struct FooHarness;
//! #[backstop_testkit::async_trait]
//! impl backstop_testkit::Harness for FooHarness { /* … */ }
//! backstop_testkit::conformance!(FooHarness);
//! ```
//!
//! ## Skipping
//! A harness whose server is not configured returns [`Unavailable`] from
//! [`Harness::create_db`]. The case then prints why and passes — unless the backend is
//! named in `BACKSTOP_TEST_REQUIRE` (comma separated, e.g. `postgres,mysql`), in which case
//! it fails. CI names every backend, so nothing is skipped silently there.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Test code: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod engine;
pub mod gen;
mod ledger;
pub mod logs;
pub mod redis;
pub mod spans;
pub mod store;

use std::sync::Arc;
use std::time::Duration;

pub use backstop_core::async_trait;
use backstop_core::{
    BlockingTxConnection, Claimed, Engine, Enqueued, HandlerError, Inbox, Lease, NewTask, Notifier,
    Owner, Processed, StoreConfig, Task, TaskId, TaskStore, Transactional, TxConnection,
};
use chrono::{DateTime, Utc};

/// Why a harness cannot give a database (for example: its server URL is not set).
#[derive(Debug, Clone)]
pub struct Unavailable(pub String);

/// A timestamp column a test may move into the past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeColumn {
    /// `created_at`.
    CreatedAt,
    /// `updated_at` (the liveness of a running task; the age of a succeeded one).
    UpdatedAt,
    /// `next_run_at` (when the task is due).
    NextRunAt,
}

impl TimeColumn {
    /// The column's name.
    pub fn name(self) -> &'static str {
        match self {
            TimeColumn::CreatedAt => "created_at",
            TimeColumn::UpdatedAt => "updated_at",
            TimeColumn::NextRunAt => "next_run_at",
        }
    }
}

/// What a backend supplies to run the conformance suite.
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// The store under test (its inbox too).
    type Store: TaskStore + Clone + Inbox + Transactional;
    /// One isolated database (a temp file, a schema, a database); cleans up on drop.
    type Db: Send + Sync + 'static;

    /// The backend's name as written in `BACKSTOP_TEST_REQUIRE` (`sqlite`, `postgres`…).
    fn backend(&self) -> &'static str;

    /// A fresh, empty, isolated database, so cases run in parallel.
    /// `Err` when the backend's server is not available (see the crate docs on skipping).
    async fn create_db(&self) -> Result<Self::Db, Unavailable>;

    /// Open a new store instance on `db` with its own connections (not migrated).
    async fn open(&self, db: &Self::Db, config: StoreConfig) -> backstop_core::Result<Self::Store>;

    /// Move `column` of task `id` in `table` back by `by`, with direct SQL.
    async fn backdate(
        &self,
        db: &Self::Db,
        table: &str,
        id: TaskId,
        column: TimeColumn,
        by: Duration,
    );

    /// Run one SQL statement directly on `db` (for a case that builds a table as an
    /// earlier release did). Table names in `sql` are unqualified (PostgreSQL runs it
    /// with the case's schema as the search path), and `{now}` stands for the backend's
    /// current time as the task table stores it.
    async fn execute(&self, db: &Self::Db, sql: &str);

    /// Run one query on `db` that answers one integer (a count, a maximum), as
    /// [`execute`](Self::execute) runs a statement: NULL answers 0.
    async fn query_i64(&self, db: &Self::Db, sql: &str) -> i64;

    /// In one transaction opened as `path` says: insert a business row keyed `biz_row`
    /// (into a table the harness owns), then enqueue `tasks` in it the way `path` names
    /// (one task, or a batch: see [`TxTasks`]);
    /// commit when `commit`, else roll back. Returns what the enqueue answered; on an
    /// error the transaction rolls back.
    async fn enqueue_with_business_row(
        &self,
        db: &Self::Db,
        store: &Self::Store,
        biz_row: &str,
        tasks: TxTasks,
        commit: bool,
        path: TxPath,
    ) -> backstop_core::Result<Vec<Enqueued>>;

    /// Inside a handler's attempt `cx`, in one native transaction: enqueue `follow_up`,
    /// record the running task's success with the backend's `complete_tx`, then insert
    /// the business row keyed `biz_row` (which fails when the row exists) and commit.
    /// On any error everything rolls back and the error is returned.
    async fn complete_with_business_row(
        &self,
        db: &Self::Db,
        store: &Self::Store,
        cx: &backstop_core::Context,
        biz_row: &str,
        follow_up: NewTask,
    ) -> Result<(), HandlerError>;

    /// Whether the business row keyed `biz_row` exists.
    async fn business_row_exists(&self, db: &Self::Db, biz_row: &str) -> bool;

    /// With the backend's native `run_idempotent(consumer, message_id, …)`: insert the
    /// business row keyed `biz_row` (creating the harness's table if needed), then fail
    /// with a retryable error when `fail` (after the write, which must roll back).
    async fn idempotent_business_row(
        &self,
        db: &Self::Db,
        store: &Self::Store,
        consumer: &str,
        message_id: &str,
        biz_row: &str,
        fail: bool,
    ) -> Result<Processed<()>, HandlerError>;

    /// A native inbox handler that inserts the business row keyed by the message's
    /// `biz_key`, then fails with a retryable error when the payload is `"fail"`
    /// (creating the harness's table if needed).
    async fn inbox_handler(&self, db: &Self::Db) -> <Self::Store as Inbox>::Handler;

    /// How many business rows have keys starting with `prefix`.
    async fn count_business_rows(&self, db: &Self::Db, prefix: &str) -> u64;

    /// Move the time column `column` of every row of the default table's side table
    /// `table` (`backstop_task_inbox`'s `processed_at`, `backstop_task_barrier`'s
    /// `created_at`) back by `by`.
    async fn backdate_rows(&self, db: &Self::Db, table: &str, column: &str, by: Duration);

    /// Lock the row of task `id` in `table` from a transaction of the harness's own
    /// (`SELECT … FOR UPDATE` on its own connection), held until the answer is
    /// [released](RowHold::release): another writer waiting on the row, or not. `None`
    /// where the backend has no row locks (SQLite: a writer holds the whole database).
    async fn hold_row(&self, db: &Self::Db, table: &str, id: TaskId) -> Option<RowHold>;

    /// What [`notifier`](Self::notifier) needs, as named in `BACKSTOP_TEST_REQUIRE`
    /// (`postgres` for `LISTEN`/`NOTIFY`, `redis` for pub/sub).
    fn notifier_service(&self) -> &'static str;

    /// A new notifier for engines on `db` (each engine gets its own, as each process
    /// makes its own), reaching only engines on `db`; `store` is the engine's store.
    /// `Err` when its server is not available.
    async fn notifier(
        &self,
        db: &Self::Db,
        store: &Self::Store,
    ) -> Result<Arc<dyn Notifier>, Unavailable>;

    /// Cut, at the server, the connections of the listeners of `db`'s notifiers, so they
    /// must reconnect (and may have missed announcements meanwhile).
    async fn cut_listeners(&self, db: &Self::Db);

    /// How this backend's claims meet a due row another transaction holds locked.
    fn locked_rows(&self) -> LockedRows;

    /// Lock row `id` of `table` as a concurrent claim does (`SELECT … FOR UPDATE` in a
    /// transaction of its own connection) until the returned guard is dropped. Only
    /// called when [`locked_rows`](Self::locked_rows) is not [`LockedRows::NoRowLocks`].
    async fn lock_row(&self, db: &Self::Db, table: &str, id: TaskId) -> RowLock;

    /// Lock `event_type`'s row of the queues' table (`<table>_queues`) as a limited
    /// type's claim does, until the returned guard is dropped. Called as
    /// [`lock_row`](Self::lock_row) is.
    async fn lock_queue_row(&self, db: &Self::Db, table: &str, event_type: &str) -> RowLock;
}

/// How a backend's claims meet a due row another transaction holds locked (a concurrent
/// claim in the middle of its transaction, an operator's `SELECT … FOR UPDATE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockedRows {
    /// The claim passes it within this long and takes the rows behind it
    /// (`SKIP LOCKED`, after at most a bounded wait).
    PassesWithin(Duration),
    /// The claim waits until the lock is released, then takes it in order (MySQL's
    /// ordered-update strategy, documented so).
    Waits,
    /// The backend has no row locks: one writer at a time holds the whole database
    /// (SQLite), so claims never meet a row another claim holds.
    NoRowLocks,
}

/// A row lock held by [`Harness::lock_row`] (its transaction and connection); dropping
/// it rolls the transaction back.
pub type RowLock = Box<dyn std::any::Any + Send>;

/// What a case gets: a fresh migrated store on its own database, and helpers.
pub struct Ctx<H: Harness> {
    /// The harness.
    pub harness: H,
    /// The case's database.
    pub db: H::Db,
    /// A migrated store with the default config.
    pub store: H::Store,
    /// An owner for claims.
    pub owner: Owner,
    /// The default config (the table the store uses).
    pub config: StoreConfig,
}

impl<H: Harness> Ctx<H> {
    /// Make the case's database and store, or say why the case is skipped (`None`).
    /// Panics when the backend is required (`BACKSTOP_TEST_REQUIRE`) but unavailable.
    pub async fn setup(harness: H, case: &str) -> Option<Ctx<H>> {
        let db = match harness.create_db().await {
            Ok(db) => db,
            Err(Unavailable(why)) => {
                let backend = harness.backend();
                if required(backend) {
                    panic!(
                        "{backend} is named in BACKSTOP_TEST_REQUIRE but unavailable for {case}: {why}"
                    );
                }
                eprintln!("SKIPPED {case} on {backend}: {why}");
                return None;
            }
        };
        let config = StoreConfig::default();
        let store = harness
            .open(&db, config.clone())
            .await
            .expect("open the store");
        store.migrate().await.expect("migrate");
        Some(Ctx {
            harness,
            db,
            store,
            owner: Owner::new("testkit-owner").expect("owner"),
            config,
        })
    }

    /// Another store instance on the same database, with its own connections (as another
    /// process would have), migrated.
    pub async fn new_store(&self) -> H::Store {
        self.new_store_with(self.config.clone()).await
    }

    /// [`new_store`](Self::new_store) with `config` (the case's table, and more: a
    /// notifier, say).
    pub async fn new_store_with(&self, config: StoreConfig) -> H::Store {
        let s = self
            .harness
            .open(&self.db, config)
            .await
            .expect("open another store");
        s.migrate().await.expect("migrate");
        s
    }

    /// A new notifier for an engine on `store` (see [`Harness::notifier`]), or `None`
    /// (printed) when its server is missing and not required; panics when required.
    pub async fn notifier(&self, store: &H::Store, case: &str) -> Option<Arc<dyn Notifier>> {
        match self.harness.notifier(&self.db, store).await {
            Ok(n) => Some(n),
            Err(Unavailable(why)) => {
                let service = self.harness.notifier_service();
                if required(service) {
                    panic!("{service} is named in BACKSTOP_TEST_REQUIRE but unavailable for {case}: {why}");
                }
                eprintln!("SKIPPED {case} on {}: {why}", self.harness.backend());
                None
            }
        }
    }

    /// Task `id`'s row (in the default table) locked by a transaction of the harness's
    /// own until released (see [`Harness::hold_row`]); `None`, printed, where the
    /// backend has no row locks.
    pub async fn hold_row(&self, id: TaskId, case: &str) -> Option<RowHold> {
        let hold = self
            .harness
            .hold_row(&self.db, &self.config.table, id)
            .await;
        if hold.is_none() {
            eprintln!(
                "NOT APPLICABLE {case} on {}: no row locks (a writer holds the whole database)",
                self.harness.backend()
            );
        }
        hold
    }

    /// Move a timestamp of task `id` (in the default table) back by `by`.
    pub async fn backdate(&self, id: TaskId, column: TimeColumn, by: Duration) {
        self.harness
            .backdate(&self.db, &self.config.table, id, column, by)
            .await;
    }

    /// The task as stored now; panics when missing.
    pub async fn task(&self, id: TaskId) -> Task {
        self.store
            .get(id)
            .await
            .expect("get")
            .unwrap_or_else(|| panic!("task {id} is missing"))
    }

    /// Enqueue a due task with the default policy; returns its id.
    pub async fn enqueue(&self, event_type: &str, biz_key: &str) -> TaskId {
        let e = self
            .store
            .enqueue(NewTask::new(event_type, biz_key))
            .await
            .expect("enqueue");
        assert!(e.created, "{event_type}/{biz_key} should be new");
        e.id
    }

    /// Claim task `id` with the case's owner; panics when the claim does not win.
    pub async fn claim(&self, id: TaskId) -> Task {
        self.store
            .claim_by_id(id, &self.owner)
            .await
            .expect("claim_by_id")
            .unwrap_or_else(|| panic!("task {id} should be claimable"))
    }

    /// The backend's native transactional enqueue with a business row keyed `biz_row`,
    /// committed or rolled back (see [`Harness::enqueue_with_business_row`]).
    pub async fn enqueue_in_tx(
        &self,
        biz_row: &str,
        task: NewTask,
        commit: bool,
    ) -> backstop_core::Result<Enqueued> {
        self.enqueue_in_tx_via(TxPath::Native, biz_row, task, commit)
            .await
    }

    /// [`enqueue_in_tx`](Self::enqueue_in_tx) along `path`.
    pub async fn enqueue_in_tx_via(
        &self,
        path: TxPath,
        biz_row: &str,
        task: NewTask,
        commit: bool,
    ) -> backstop_core::Result<Enqueued> {
        self.enqueue_in_tx_on(&self.store, path, biz_row, task, commit)
            .await
    }

    /// [`enqueue_in_tx_via`](Self::enqueue_in_tx_via) on `store`, another store of this
    /// case's database.
    pub async fn enqueue_in_tx_on(
        &self,
        store: &H::Store,
        path: TxPath,
        biz_row: &str,
        task: NewTask,
        commit: bool,
    ) -> backstop_core::Result<Enqueued> {
        let mut answers = self
            .app_tx(store, biz_row, TxTasks::One(task), commit, path)
            .await?;
        match (answers.pop(), answers.is_empty()) {
            (Some(one), true) => Ok(one),
            _ => panic!("{path}: one task enqueued, {} answers", answers.len() + 1),
        }
    }

    /// A batch enqueue (`enqueue_many_in` and its native forms) along `path`, with a
    /// business row keyed `biz_row`, committed or rolled back.
    pub async fn enqueue_many_in_tx_via(
        &self,
        path: TxPath,
        biz_row: &str,
        tasks: Vec<NewTask>,
        commit: bool,
    ) -> backstop_core::Result<Vec<Enqueued>> {
        self.app_tx(&self.store, biz_row, TxTasks::Many(tasks), commit, path)
            .await
    }

    /// The participant barrier's verdict on `call`, decided along `path` on a transaction
    /// with a business row keyed `biz_row`, committed or rolled back.
    pub async fn barrier_via(
        &self,
        path: TxPath,
        biz_row: &str,
        call: backstop_core::BranchCall,
        commit: bool,
    ) -> backstop_core::Result<backstop_core::Barrier> {
        let slot = BarrierSlot::default();
        self.app_tx(
            &self.store,
            biz_row,
            TxTasks::Barrier(call, slot.clone()),
            commit,
            path,
        )
        .await?;
        let verdict = *slot.lock().unwrap();
        Ok(verdict.unwrap_or_else(|| panic!("{path}: the barrier did not run")))
    }

    /// A saga started along `path` on a transaction with a business row keyed `biz_row`,
    /// committed or rolled back: what the start did.
    pub async fn start_saga_via(
        &self,
        path: TxPath,
        biz_row: &str,
        start: backstop_core::SagaStart,
        commit: bool,
    ) -> backstop_core::Result<backstop_core::SagaStarted> {
        let slot = SagaSlot::default();
        self.app_tx(
            &self.store,
            biz_row,
            TxTasks::Saga(start, slot.clone()),
            commit,
            path,
        )
        .await?;
        let started = *slot.lock().unwrap();
        Ok(started.unwrap_or_else(|| panic!("{path}: the start did not run")))
    }

    /// A saga step's report along `path` on a transaction with a business row keyed
    /// `biz_row`, committed or rolled back: what it applied.
    pub async fn saga_step_via(
        &self,
        path: TxPath,
        biz_row: &str,
        def: Arc<backstop_core::SagaDef>,
        report: backstop_core::StepReport,
        commit: bool,
    ) -> backstop_core::Result<backstop_core::StepApplied> {
        let slot = StepSlot::default();
        self.app_tx(
            &self.store,
            biz_row,
            TxTasks::SagaStep(def, report, slot.clone()),
            commit,
            path,
        )
        .await?;
        let applied = slot.lock().unwrap().take();
        Ok(applied.unwrap_or_else(|| panic!("{path}: the report did not run")))
    }

    /// One task enqueued along `path` with a business row keyed `biz_row`, then claimed on
    /// the same transaction by `claim`; committed or rolled back.
    pub async fn enqueue_claimed_in_tx_via(
        &self,
        path: TxPath,
        biz_row: &str,
        task: NewTask,
        claim: Arc<dyn ClaimIn>,
        commit: bool,
    ) -> backstop_core::Result<Enqueued> {
        let mut answers = self
            .app_tx(
                &self.store,
                biz_row,
                TxTasks::Claimed(task, claim),
                commit,
                path,
            )
            .await?;
        match (answers.pop(), answers.is_empty()) {
            (Some(one), true) => Ok(one),
            _ => panic!("{path}: one task enqueued, {} answers", answers.len() + 1),
        }
    }

    /// [`Harness::enqueue_with_business_row`] as an application runs its transaction: run
    /// again when the database rolled it back on contention (a deadlock; on a Galera
    /// cluster, a certification conflict with a transaction of another node, reported at
    /// `COMMIT`). Nothing of the failed try remains, so running it again is safe, and
    /// only the application can (backstop never retries a transaction it does not own).
    async fn app_tx(
        &self,
        store: &H::Store,
        biz_row: &str,
        tasks: TxTasks,
        commit: bool,
        path: TxPath,
    ) -> backstop_core::Result<Vec<Enqueued>> {
        const TRIES: u32 = 10;
        let mut tried = 1;
        // a try that rolled back takes its claims' answers with it
        let claim = match &tasks {
            TxTasks::Claimed(_, claim) => Some((Arc::clone(claim), claim.kept())),
            _ => None,
        };
        loop {
            let answer = self
                .harness
                .enqueue_with_business_row(&self.db, store, biz_row, tasks.clone(), commit, path)
                .await;
            match answer {
                Err(e)
                    if e.kind() == backstop_core::ErrorKind::Contention
                        && e.is_temporary()
                        && tried < TRIES =>
                {
                    if let Some((claim, kept)) = &claim {
                        claim.forget_after(*kept);
                    }
                    tried += 1;
                    tokio::time::sleep(Duration::from_millis(5 * u64::from(tried))).await;
                }
                other => return other,
            }
        }
    }

    /// How many tasks the store holds (any status), via `stats`.
    pub async fn count_all(&self) -> u64 {
        let s = self.store.stats().await.expect("stats");
        s.counts.iter().map(|c| c.count).sum()
    }
}

/// A way an application writes a task in its own transaction. Every harness supports
/// each: the transactional cases run along all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxPath {
    /// The backend's own API: `PgStore::enqueue_tx` on the store's pooled tokio-postgres
    /// transaction, `SqliteStore::transaction`, `MySqlStore::enqueue_tx`.
    Native,
    /// [`Transactional::enqueue_in`] on a
    /// `sqlx::Transaction` of a sqlx pool or connection the application opened itself.
    Sqlx,
    /// `enqueue_in` (or `enqueue_blocking`) on a connection of another driver, through a
    /// [`TxConnection`] the application wrote: the
    /// statements and their parameters, run by the application's own code.
    Statements,
}

/// What a harness's transactional enqueue writes
/// ([`Harness::enqueue_with_business_row`]).
#[derive(Debug, Clone)]
pub enum TxTasks {
    /// One task: `enqueue_in`, `enqueue_blocking`, the native `enqueue_tx`.
    One(NewTask),
    /// A batch: `enqueue_many_in`, `enqueue_many_blocking`, the native
    /// `enqueue_many_tx`.
    Many(Vec<NewTask>),
    /// One task as [`One`](Self::One), then claimed on the same transaction by the
    /// [`ClaimIn`] (on the native path through the backend's own connection:
    /// `PgStore::tx_connection`, `SqliteTx::connection`, the sqlx `MySqlConnection`).
    Claimed(NewTask, Arc<dyn ClaimIn>),
    /// No task: the participant barrier's verdict on the call, on the transaction
    /// (`barrier_in`, `barrier_blocking`; on the native path `PgStore::barrier_tx`,
    /// `SqliteTx::barrier`, `MySqlStore::barrier_tx`), written into the slot. Answers no
    /// [`Enqueued`].
    Barrier(backstop_core::BranchCall, BarrierSlot),
    /// A saga started on the transaction (`start_in`, `start_blocking`; on the native
    /// path `PgStore::start_saga_tx`, `SqliteTx::start_saga`, `MySqlStore::start_saga_tx`),
    /// what the start did written into the slot. Answers no [`Enqueued`] (its first
    /// group's tasks are read back from the store).
    Saga(backstop_core::SagaStart, SagaSlot),
    /// A saga step's report on the transaction (`saga_step_in`, `saga_step_blocking`; on
    /// the native path `PgStore::saga_step_tx`, `SqliteTx::saga_step`,
    /// `MySqlStore::saga_step_tx`), what it applied written into the slot. Answers the
    /// tasks it enqueued.
    SagaStep(
        Arc<backstop_core::SagaDef>,
        backstop_core::StepReport,
        StepSlot,
    ),
}

/// A row lock held by [`Harness::hold_row`]: the transaction holding it runs on a task
/// of its own until [`release`](Self::release) rolls it back.
pub struct RowHold {
    release: Option<tokio::sync::oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl RowHold {
    /// Run `hold` on a task of its own: it locks the row, sends on its first argument
    /// once the lock is granted, waits on its second, then rolls back. Answers once the
    /// lock is held; panics when `hold` ended before it was.
    pub async fn start<F, Fut>(hold: F) -> RowHold
    where
        F: FnOnce(tokio::sync::oneshot::Sender<()>, tokio::sync::oneshot::Receiver<()>) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let (locked, is_locked) = tokio::sync::oneshot::channel();
        let (release, released) = tokio::sync::oneshot::channel();
        let done = tokio::spawn(hold(locked, released));
        is_locked
            .await
            .expect("the row hold ended before its lock was granted");
        RowHold {
            release: Some(release),
            done,
        }
    }

    /// Roll the holding transaction back and wait until it has.
    pub async fn release(mut self) {
        if let Some(r) = self.release.take() {
            let _ = r.send(());
        }
        (&mut self.done).await.expect("the row hold panicked");
    }
}

/// Where [`TxTasks::SagaStep`] leaves what the report applied.
pub type StepSlot = Arc<std::sync::Mutex<Option<backstop_core::StepApplied>>>;

/// Where [`TxTasks::Barrier`] leaves the barrier's verdict.
pub type BarrierSlot = Arc<std::sync::Mutex<Option<backstop_core::Barrier>>>;

/// Where [`TxTasks::Saga`] leaves what the start did.
pub type SagaSlot = Arc<std::sync::Mutex<Option<backstop_core::SagaStarted>>>;

impl TxTasks {
    /// Record the barrier's `verdict` of a [`TxTasks::Barrier`] (for a harness's native
    /// path); an empty answer, as the barrier enqueues nothing.
    pub fn barrier_answer(slot: &BarrierSlot, verdict: backstop_core::Barrier) -> Vec<Enqueued> {
        *slot.lock().unwrap() = Some(verdict);
        Vec::new()
    }

    /// Record what a [`TxTasks::Saga`] start did (for a harness's native path); an empty
    /// answer.
    pub fn saga_answer(slot: &SagaSlot, started: backstop_core::SagaStarted) -> Vec<Enqueued> {
        *slot.lock().unwrap() = Some(started);
        Vec::new()
    }

    /// Record what a [`TxTasks::SagaStep`] report applied (for a harness's native path);
    /// answers the tasks it enqueued.
    pub fn step_answer(slot: &StepSlot, applied: backstop_core::StepApplied) -> Vec<Enqueued> {
        let tasks = applied.tasks.clone();
        *slot.lock().unwrap() = Some(applied);
        tasks
    }
}

/// Claims a task on the transaction that enqueued it, for [`TxTasks::Claimed`]: through
/// an engine ([`EngineClaims`]) or the store itself ([`StoreClaims`]). Keeps what it
/// claimed for the case to look at after the commit.
#[async_trait]
pub trait ClaimIn: Send + Sync + std::fmt::Debug {
    /// Claim `enqueued` on `conn` (async connections).
    async fn claim_in(
        &self,
        conn: &mut (dyn TxConnection + '_),
        enqueued: &Enqueued,
    ) -> backstop_core::Result<()>;

    /// Claim `enqueued` on `conn` (blocking connections).
    fn claim_blocking(
        &self,
        conn: &mut (dyn BlockingTxConnection + '_),
        enqueued: &Enqueued,
    ) -> backstop_core::Result<()>;

    /// How many answers it keeps (none by default).
    fn kept(&self) -> usize {
        0
    }

    /// Forget the answers after the first `n`: the transaction they were made on rolled
    /// back, and the application runs it again (as a claim's `Claimed` goes with it).
    fn forget_after(&self, _n: usize) {}
}

/// [`ClaimIn`] through [`Engine::claim_in`] / [`Engine::claim_blocking`]; the answers wait
/// in [`take`](Self::take) for [`Engine::run_claimed`].
pub struct EngineClaims<S: TaskStore + Clone> {
    engine: Engine<S>,
    claimed: std::sync::Mutex<Vec<Claimed>>,
}

impl<S: TaskStore + Clone> EngineClaims<S> {
    /// Claims for `engine`.
    pub fn new(engine: &Engine<S>) -> Arc<Self> {
        Arc::new(EngineClaims {
            engine: engine.clone(),
            claimed: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The answers so far, oldest first (emptied).
    pub fn take(&self) -> Vec<Claimed> {
        std::mem::take(&mut *self.claimed.lock().unwrap())
    }
}

impl<S: TaskStore + Clone> std::fmt::Debug for EngineClaims<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineClaims")
            .field("owner", self.engine.owner())
            .finish()
    }
}

#[async_trait]
impl<S: TaskStore + Transactional + Clone> ClaimIn for EngineClaims<S> {
    async fn claim_in(
        &self,
        conn: &mut (dyn TxConnection + '_),
        enqueued: &Enqueued,
    ) -> backstop_core::Result<()> {
        let claimed = self.engine.claim_in(conn, enqueued).await?;
        self.claimed.lock().unwrap().push(claimed);
        Ok(())
    }

    fn claim_blocking(
        &self,
        conn: &mut (dyn BlockingTxConnection + '_),
        enqueued: &Enqueued,
    ) -> backstop_core::Result<()> {
        let claimed = self.engine.claim_blocking(conn, enqueued)?;
        self.claimed.lock().unwrap().push(claimed);
        Ok(())
    }

    fn kept(&self) -> usize {
        self.claimed.lock().unwrap().len()
    }

    fn forget_after(&self, n: usize) {
        self.claimed.lock().unwrap().truncate(n);
    }
}

/// [`ClaimIn`] through the store's own [`Transactional::claim_in`] for `owner`; the
/// leases it answered wait in [`take`](Self::take).
pub struct StoreClaims<S> {
    store: S,
    owner: Owner,
    leases: std::sync::Mutex<Vec<Option<Lease>>>,
}

impl<S> StoreClaims<S> {
    /// Claims of `store` for `owner`.
    pub fn new(store: S, owner: Owner) -> Arc<Self> {
        Arc::new(StoreClaims {
            store,
            owner,
            leases: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The answers so far, oldest first (emptied).
    pub fn take(&self) -> Vec<Option<Lease>> {
        std::mem::take(&mut *self.leases.lock().unwrap())
    }
}

impl<S> std::fmt::Debug for StoreClaims<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreClaims")
            .field("owner", &self.owner)
            .finish()
    }
}

#[async_trait]
impl<S: Transactional + Send + Sync> ClaimIn for StoreClaims<S> {
    async fn claim_in(
        &self,
        conn: &mut (dyn TxConnection + '_),
        enqueued: &Enqueued,
    ) -> backstop_core::Result<()> {
        let lease = self.store.claim_in(conn, enqueued.id, &self.owner).await?;
        self.leases.lock().unwrap().push(lease);
        Ok(())
    }

    fn claim_blocking(
        &self,
        conn: &mut (dyn BlockingTxConnection + '_),
        enqueued: &Enqueued,
    ) -> backstop_core::Result<()> {
        let lease = self.store.claim_blocking(conn, enqueued.id, &self.owner)?;
        self.leases.lock().unwrap().push(lease);
        Ok(())
    }

    fn kept(&self) -> usize {
        self.leases.lock().unwrap().len()
    }

    fn forget_after(&self, n: usize) {
        self.leases.lock().unwrap().truncate(n);
    }
}

impl TxTasks {
    /// Enqueue on `conn` through [`Transactional`] (the
    /// [`TxPath::Sqlx`] and [`TxPath::Statements`] paths).
    pub async fn enqueue_in<S, C>(
        &self,
        store: &S,
        conn: &mut C,
    ) -> backstop_core::Result<Vec<Enqueued>>
    where
        S: backstop_core::Transactional + ?Sized,
        C: backstop_core::TxConnection + ?Sized,
    {
        match self {
            TxTasks::One(task) => Ok(vec![store.enqueue_in(conn, task).await?]),
            TxTasks::Many(tasks) => store.enqueue_many_in(conn, tasks).await,
            TxTasks::Claimed(task, claim) => {
                let mut conn = conn;
                let enqueued = store.enqueue_in(&mut conn, task).await?;
                claim.claim_in(&mut conn, &enqueued).await?;
                Ok(vec![enqueued])
            }
            TxTasks::Barrier(call, slot) => {
                let verdict = store.barrier_in(conn, call).await?;
                Ok(TxTasks::barrier_answer(slot, verdict))
            }
            TxTasks::Saga(start, slot) => {
                let started = store.start_in(conn, start).await?;
                Ok(TxTasks::saga_answer(slot, started))
            }
            TxTasks::SagaStep(def, report, slot) => {
                let applied = store.saga_step_in(conn, def, report).await?;
                Ok(TxTasks::step_answer(slot, applied))
            }
        }
    }

    /// [`enqueue_in`](Self::enqueue_in) on a blocking driver's connection.
    pub fn enqueue_blocking<S, C>(
        &self,
        store: &S,
        conn: &mut C,
    ) -> backstop_core::Result<Vec<Enqueued>>
    where
        S: backstop_core::Transactional + ?Sized,
        C: backstop_core::BlockingTxConnection + ?Sized,
    {
        match self {
            TxTasks::One(task) => Ok(vec![store.enqueue_blocking(conn, task)?]),
            TxTasks::Many(tasks) => store.enqueue_many_blocking(conn, tasks),
            TxTasks::Claimed(task, claim) => {
                let mut conn = conn;
                let enqueued = store.enqueue_blocking(&mut conn, task)?;
                claim.claim_blocking(&mut conn, &enqueued)?;
                Ok(vec![enqueued])
            }
            TxTasks::Barrier(call, slot) => {
                let verdict = store.barrier_blocking(conn, call)?;
                Ok(TxTasks::barrier_answer(slot, verdict))
            }
            TxTasks::Saga(start, slot) => {
                let started = store.start_blocking(conn, start)?;
                Ok(TxTasks::saga_answer(slot, started))
            }
            TxTasks::SagaStep(def, report, slot) => {
                let applied = store.saga_step_blocking(conn, def, report)?;
                Ok(TxTasks::step_answer(slot, applied))
            }
        }
    }
}

impl TxPath {
    /// Every path.
    pub const ALL: [TxPath; 3] = [TxPath::Native, TxPath::Sqlx, TxPath::Statements];
}

impl std::fmt::Display for TxPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TxPath::Native => "native",
            TxPath::Sqlx => "sqlx",
            TxPath::Statements => "statements",
        })
    }
}

/// The server URL in environment variable `var`, or why the backend is unavailable
/// (unset or empty) — for [`Harness::create_db`].
pub fn server_url(var: &str) -> Result<String, Unavailable> {
    std::env::var(var)
        .ok()
        .filter(|u| !u.is_empty())
        .ok_or_else(|| Unavailable(format!("{var} is not set")))
}

/// A name no other case of this test process uses: `{prefix}_{pid}_{n}` (for a case's
/// own schema or database).
pub fn unique_name(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    )
}

/// Run async clean-up from a `Drop` (which cannot await): on a thread of its own with a
/// small runtime, waiting for it to finish. Failures are ignored — it is clean-up.
pub fn cleanup_blocking<F>(cleanup: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let _ = std::thread::spawn(move || {
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            rt.block_on(cleanup);
        }
    })
    .join();
}

/// Enqueue `task` with one attempt, claim it and fail it with `error`: a task parked as
/// failed, as an operator finds it. Returns its id.
pub async fn park_failed<S: TaskStore + ?Sized>(store: &S, task: NewTask, error: &str) -> TaskId {
    let e = store
        .enqueue(task.retry(backstop_core::RetryPolicy::fixed(1, Duration::from_secs(1))))
        .await
        .expect("enqueue");
    assert!(e.created, "task {} already exists", e.id);
    let t = store
        .claim_by_id(e.id, &backstop_core::Owner::generate())
        .await
        .expect("claim")
        .expect("the task is due");
    let marked = store
        .mark(&[backstop_core::Mark::fail(t.lease(), error)])
        .await
        .expect("mark");
    assert_eq!(marked, vec![true]);
    e.id
}

/// The version table of task table `table`.
pub fn version_table(table: &str) -> String {
    backstop_core::driver::schema::version_table(table)
}

/// Whether `backend` is named in `BACKSTOP_TEST_REQUIRE`.
pub fn required(backend: &str) -> bool {
    std::env::var("BACKSTOP_TEST_REQUIRE")
        .map(|v| v.split(',').any(|b| b.trim().eq_ignore_ascii_case(backend)))
        .unwrap_or(false)
}

/// How far database time may be from this process's clock in the suite's time windows
/// (same machine; covers storage rounding to milliseconds).
pub const CLOCK_SLACK: Duration = Duration::from_millis(250);

/// Assert `t` lies in `[from − slack, to + slack]`.
#[track_caller]
pub fn assert_between(what: &str, t: DateTime<Utc>, from: DateTime<Utc>, to: DateTime<Utc>) {
    let slack = chrono::Duration::from_std(CLOCK_SLACK).expect("slack");
    assert!(
        t >= from - slack && t <= to + slack,
        "{what} = {t} is outside [{from}, {to}] (± {CLOCK_SLACK:?})"
    );
}

/// `d` as a chrono duration.
pub fn chrono_dur(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).expect("duration in range")
}

// The case lists, one macro per suite, made by build.rs from the area modules.
include!(concat!(env!("OUT_DIR"), "/cases.rs"));

/// Stamp one `#[tokio::test]` per store conformance case for a harness, in one module per
/// area (`store_claims::claim_by_id_claims_a_due_task_once`, …).
///
/// The argument is an expression that makes the harness; it is evaluated once per case,
/// inside the area's module (which sees the caller's items through `use super::*`). The
/// calling crate needs `tokio` (features `macros`, `rt-multi-thread`) as a
/// dev-dependency.
#[macro_export]
macro_rules! store_conformance {
    ($make:expr) => {
        $crate::__store_cases!($make);
    };
}

/// Stamp one `#[tokio::test]` per engine conformance case for a harness (see
/// [`store_conformance!`]).
#[macro_export]
macro_rules! engine_conformance {
    ($make:expr) => {
        $crate::__engine_cases!($make);
    };
}

/// Both suites: [`store_conformance!`] and [`engine_conformance!`].
#[macro_export]
macro_rules! conformance {
    ($make:expr) => {
        $crate::store_conformance!($make);
        $crate::engine_conformance!($make);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __stamp_cases {
    ($suite:ident :: $area:ident; $make:expr; $($case:ident),+ $(,)?) => {$(
        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $case() {
            if let Some(ctx) = $crate::Ctx::setup($make, stringify!($case)).await {
                $crate::$suite::$area::$case(&ctx).await;
            }
        }
    )+};
}

/// The password [`BadUrls`] carry, which no error may print.
pub const WRONG_PASSWORD: &str = "s3cr3t-wrong";

/// URLs a store must fail to connect to, each with [`WRONG_PASSWORD`] where it has a
/// password.
#[derive(Debug, Clone)]
pub struct BadUrls {
    /// Nothing listens there: `127.0.0.1:1`.
    pub refused: String,
    /// The test server with a wrong password (or an unknown user).
    pub denied: String,
    /// The test server, a database that does not exist.
    pub missing_database: String,
    /// The test server through TLS, checked against a CA that did not sign its
    /// certificate; `Err` says why there is no such URL (no TLS server): the check then
    /// skips with that reason, unless `tls_backend` is required.
    pub wrong_ca: Result<String, Unavailable>,
    /// The name of the TLS server in `BACKSTOP_TEST_REQUIRE` (`postgres-tls`, `mysql-tls`).
    pub tls_backend: &'static str,
}

/// A store that cannot connect says why at once (not a pool timeout after the acquire
/// timeout), whether retrying can help, and never prints the password: `connect` opens
/// a store on a URL with an acquire timeout of 20 s.
pub async fn assert_connect_errors<F, Fut>(connect: F, urls: BadUrls)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = backstop_core::Result<()>>,
{
    use backstop_core::ErrorKind;
    let failed = |url: String| {
        let attempt = connect(url.clone());
        async move {
            let started = std::time::Instant::now();
            let Err(e) = attempt.await else {
                panic!("connecting to {url} must fail");
            };
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "reported at once, not after the acquire timeout: {:?}",
                started.elapsed()
            );
            assert!(
                !e.to_string().contains(WRONG_PASSWORD),
                "no password in {e}"
            );
            e
        }
    };
    let e = failed(urls.refused).await;
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.is_temporary());
    assert!(e.to_string().contains("connection refused"), "{e}");
    assert!(e.to_string().contains("127.0.0.1:1"), "{e}");

    let e = failed(urls.denied).await;
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    assert!(!e.is_temporary());
    assert!(e.to_string().contains("access denied"), "{e}");

    let e = failed(urls.missing_database).await;
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    assert!(!e.is_temporary());
    assert!(e.to_string().contains("unknown database"), "{e}");

    match urls.wrong_ca {
        Ok(url) => {
            let e = failed(url).await;
            assert_eq!(e.kind(), ErrorKind::Config, "{e}");
            assert!(!e.is_temporary());
            assert!(e.to_string().contains("TLS failed"), "{e}");
            assert!(e.to_string().contains("certificate"), "{e}");
        }
        Err(Unavailable(why)) => {
            assert!(
                !required(urls.tls_backend),
                "{} is required but {why}",
                urls.tls_backend
            );
            eprintln!("SKIPPED the wrong-CA connect: {why}");
        }
    }
}

/// The TLS test URL in `var` with its CA file (`sslrootcert=` / `ssl-ca=`) swapped for
/// the one in `BACKSTOP_TEST_TLS_OTHER_CA`, which did not sign the server's certificate.
pub fn wrong_ca_url(var: &str) -> Result<String, Unavailable> {
    let url = server_url(var)?;
    let ca = server_url("BACKSTOP_TEST_TLS_CA")?;
    let other = server_url("BACKSTOP_TEST_TLS_OTHER_CA")?;
    Ok(url.replace(&ca, &other))
}

/// The most a concurrency case's racers may take together. A racer that waits for work
/// that never comes (claims that return nothing after a bug) fails the case with its
/// name instead of hanging CI until its timeout.
pub(crate) const DEADLINE: Duration = Duration::from_secs(90);

/// `fut` (the racers of a concurrency case, joined), or a panic naming `what` when it
/// has not finished within [`DEADLINE`].
pub(crate) async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(DEADLINE, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what} did not finish within {DEADLINE:?}"),
    }
}

/// What the spawned racers return, in order, each within [`DEADLINE`] of the call; a
/// racer's panic is the case's panic. Racers still running at the deadline are aborted.
pub(crate) async fn joined<T>(what: &str, racers: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let aborts: Vec<_> = racers.iter().map(|r| r.abort_handle()).collect();
    let all = futures_util::future::join_all(racers);
    let Ok(results) = tokio::time::timeout(DEADLINE, all).await else {
        for a in aborts {
            a.abort();
        }
        panic!("{what} did not finish within {DEADLINE:?}");
    };
    results
        .into_iter()
        .map(|r| match r {
            Ok(v) => v,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("{what}: {e}"),
        })
        .collect()
}
