//! The conformance suite on SQLite: every case on a fresh database file of its own.
#![allow(clippy::expect_used)] // test harness: a failed setup is a failed test

use std::path::PathBuf;
use std::time::Duration;

use backstop_core::driver::millis;
use backstop_core::tx::{Answer, Dialect, Returns, Statement, Value};
use backstop_core::BlockingTxConnection;
use backstop_core::{Enqueued, HandlerError, NewTask, Processed, StoreConfig, TaskId};
use backstop_sqlite::{sqlite_handler, SqliteHandler, SqliteOptions, SqliteStore, Synchronous};
use backstop_testkit::{Harness, RowHold, TimeColumn, TxPath, TxTasks, Unavailable};

/// The application's own rusqlite connection running the store's statements, as a user
/// of a driver backstop has no support for would write it.
struct AppConn<'c>(&'c rusqlite::Connection);

impl BlockingTxConnection for AppConn<'_> {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn run(&mut self, statement: &Statement<'_>) -> backstop_core::Result<Answer> {
        let fail = |e: rusqlite::Error| {
            backstop_core::Error::new(backstop_core::ErrorKind::Unexpected, "app", e.to_string())
        };
        let params: Vec<Box<dyn rusqlite::ToSql>> = statement
            .params()
            .iter()
            .map(|v| -> Box<dyn rusqlite::ToSql> {
                match *v {
                    Value::SmallInt(n) => Box::new(n),
                    Value::Int(n) => Box::new(n),
                    Value::BigInt(n) => Box::new(n),
                    Value::Text(t) => Box::new(t.map(str::to_owned)),
                    Value::Timestamp(t) => Box::new(t.map(|t| t.timestamp_millis())),
                    other => panic!("an enqueue binds no {other:?}"),
                }
            })
            .collect();
        let params = rusqlite::params_from_iter(params.iter());
        match statement.returns() {
            Returns::Row => {
                use rusqlite::OptionalExtension;
                let row = self
                    .0
                    .query_row(statement.sql(), params, |r| {
                        (0..r.as_ref().column_count())
                            .map(|i| r.get::<_, i64>(i))
                            .collect()
                    })
                    .optional()
                    .map_err(fail)?;
                Ok(Answer::Row(row))
            }
            Returns::Rows => {
                let mut st = self.0.prepare(statement.sql()).map_err(fail)?;
                let rows = st
                    .query_map(params, |r| {
                        (0..r.as_ref().column_count())
                            .map(|i| r.get::<_, i64>(i))
                            .collect::<rusqlite::Result<Vec<i64>>>()
                    })
                    .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                    .map_err(fail)?;
                Ok(Answer::Rows(rows))
            }
            _ => {
                let n = self.0.execute(statement.sql(), params).map_err(fail)?;
                Ok(Answer::RowsAffected(n as u64))
            }
        }
    }
}

struct SqliteHarness;

fn ensure_biz(db: &Db) {
    db.conn()
        .execute(
            "CREATE TABLE IF NOT EXISTS biz_order (key TEXT PRIMARY KEY)",
            [],
        )
        .expect("create biz_order");
}

struct Db {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Db {
    fn conn(&self) -> rusqlite::Connection {
        let c = rusqlite::Connection::open(&self.path).expect("open test connection");
        c.busy_timeout(Duration::from_secs(10))
            .expect("busy_timeout");
        c
    }
}

#[backstop_testkit::async_trait]
impl Harness for SqliteHarness {
    type Store = SqliteStore;
    type Db = Db;

    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn create_db(&self) -> Result<Db, Unavailable> {
        let dir = tempfile::tempdir().map_err(|e| Unavailable(format!("no temp dir: {e}")))?;
        let path = dir.path().join("backstop.db");
        Ok(Db { _dir: dir, path })
    }

    async fn open(&self, db: &Db, config: StoreConfig) -> backstop_core::Result<SqliteStore> {
        SqliteStore::open_with(
            &db.path,
            SqliteOptions::default().config(config).// the suite does not test power loss; keep it fast
                synchronous(Synchronous::Normal).busy_timeout(Duration::from_secs(30)),
        )
        .await
    }

    async fn execute(&self, db: &Db, sql: &str) {
        let sql = sql.replace(
            "{now}",
            "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
        );
        db.conn()
            .execute_batch(&sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn query_i64(&self, db: &Db, sql: &str) -> i64 {
        let n: Option<i64> = db
            .conn()
            .query_row(sql, [], |r| r.get(0))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        n.unwrap_or(0)
    }

    async fn backdate(&self, db: &Db, table: &str, id: TaskId, column: TimeColumn, by: Duration) {
        let col = column.name();
        let n = db
            .conn()
            .execute(
                &format!("UPDATE \"{table}\" SET {col} = {col} - ?1 WHERE id = ?2"),
                rusqlite::params![millis(by), id],
            )
            .expect("backdate");
        assert_eq!(n, 1, "backdate: task {id} not found in {table}");
    }

    async fn enqueue_with_business_row(
        &self,
        db: &Db,
        store: &SqliteStore,
        biz_row: &str,
        tasks: TxTasks,
        commit: bool,
        path: TxPath,
    ) -> backstop_core::Result<Vec<Enqueued>> {
        ensure_biz(db);
        let key = biz_row.to_owned();
        let insert_biz = "INSERT INTO biz_order (key) VALUES (?1)";
        match path {
            TxPath::Native => {
                store
                    .transaction(move |tx| {
                        tx.execute(insert_biz, [&key]).expect("insert business row");
                        let e = match &tasks {
                            TxTasks::One(task) => vec![tx.enqueue(task)?],
                            TxTasks::Many(tasks) => tx.enqueue_many(tasks)?,
                            TxTasks::Claimed(task, claim) => {
                                let enqueued = tx.enqueue(task)?;
                                claim.claim_blocking(&mut tx.connection(), &enqueued)?;
                                vec![enqueued]
                            }
                            TxTasks::Barrier(call, slot) => {
                                TxTasks::barrier_answer(slot, tx.barrier(call)?)
                            }
                            TxTasks::Saga(start, slot) => {
                                TxTasks::saga_answer(slot, tx.start_saga(start)?)
                            }
                            TxTasks::SagaStep(def, report, slot) => {
                                TxTasks::step_answer(slot, tx.saga_step(def, report)?)
                            }
                        };
                        if !commit {
                            tx.rollback();
                        }
                        Ok(e)
                    })
                    .await
            }
            TxPath::Sqlx => {
                use sqlx::Connection;
                let url = format!("sqlite://{}", db.path.display());
                let mut conn = sqlx::SqliteConnection::connect(&url)
                    .await
                    .expect("sqlx connect");
                let mut tx = conn.begin_with("BEGIN IMMEDIATE").await.expect("begin");
                sqlx::query(insert_biz)
                    .bind(&key)
                    .execute(&mut *tx)
                    .await
                    .expect("insert business row");
                let e = tasks.enqueue_in(store, &mut *tx).await?;
                if commit {
                    tx.commit().await.expect("commit");
                } else {
                    tx.rollback().await.expect("rollback");
                }
                Ok(e)
            }
            TxPath::Statements => {
                let store = store.clone();
                let path = db.path.clone();
                tokio::task::spawn_blocking(move || {
                    let mut conn = rusqlite::Connection::open(path).expect("open");
                    let tx = conn
                        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                        .expect("begin");
                    tx.execute(insert_biz, [&key]).expect("insert business row");
                    let e = tasks.enqueue_blocking(&store, &mut AppConn(&tx))?;
                    if commit {
                        tx.commit().expect("commit");
                    }
                    Ok(e)
                })
                .await
                .expect("join")
            }
        }
    }

    async fn complete_with_business_row(
        &self,
        db: &Db,
        store: &SqliteStore,
        cx: &backstop_core::Context,
        biz_row: &str,
        follow_up: NewTask,
    ) -> Result<(), HandlerError> {
        ensure_biz(db);
        let (cx, key) = (cx.clone(), biz_row.to_owned());
        store
            .transaction(move |tx| {
                tx.enqueue(&follow_up)?;
                tx.complete(&cx)?;
                tx.execute("INSERT INTO biz_order (key) VALUES (?1)", [&key])?;
                Ok::<_, HandlerError>(())
            })
            .await
    }

    async fn business_row_exists(&self, db: &Db, biz_row: &str) -> bool {
        let n: i64 = db
            .conn()
            .query_row(
                "SELECT COUNT(*) FROM biz_order WHERE key = ?1",
                [biz_row],
                |r| r.get(0),
            )
            .expect("count business rows");
        n == 1
    }

    async fn idempotent_business_row(
        &self,
        db: &Db,
        store: &SqliteStore,
        consumer: &str,
        message_id: &str,
        biz_row: &str,
        fail: bool,
    ) -> Result<Processed<()>, HandlerError> {
        ensure_biz(db);
        let row = biz_row.to_owned();
        store
            .run_idempotent(consumer, message_id, move |tx| {
                tx.execute("INSERT INTO biz_order (key) VALUES (?1)", [&row])?;
                if fail {
                    return Err(HandlerError::retry("failed on purpose after the write"));
                }
                Ok(())
            })
            .await
    }

    async fn inbox_handler(&self, db: &Db) -> SqliteHandler {
        ensure_biz(db);
        sqlite_handler(|tx, message| {
            tx.execute(
                "INSERT INTO biz_order (key) VALUES (?1)",
                [&message.biz_key],
            )?;
            if message.payload == "fail" {
                return Err(HandlerError::retry("failed on purpose after the write"));
            }
            Ok(())
        })
    }

    async fn count_business_rows(&self, db: &Db, prefix: &str) -> u64 {
        ensure_biz(db);
        let n: i64 = db
            .conn()
            .query_row(
                "SELECT COUNT(*) FROM biz_order WHERE substr(key, 1, length(?1)) = ?1",
                [prefix],
                |r| r.get(0),
            )
            .expect("count business rows");
        n as u64
    }

    async fn backdate_rows(&self, db: &Db, table: &str, column: &str, by: Duration) {
        db.conn()
            .execute(
                &format!("UPDATE {table} SET {column} = {column} - ?1"),
                [millis(by)],
            )
            .expect("backdate the rows");
    }

    async fn hold_row(&self, _: &Db, _: &str, _: TaskId) -> Option<RowHold> {
        // no row locks: a writer holds the whole database
        None
    }

    fn notifier_service(&self) -> &'static str {
        "redis"
    }

    async fn notifier(
        &self,
        db: &Db,
        _store: &Self::Store,
    ) -> Result<std::sync::Arc<dyn backstop_core::Notifier>, Unavailable> {
        backstop_testkit::redis::notifier(&db.path.display().to_string()).await
    }

    async fn cut_listeners(&self, db: &Db) {
        backstop_testkit::redis::cut_listeners(&db.path.display().to_string()).await
    }

    fn locked_rows(&self) -> backstop_testkit::LockedRows {
        backstop_testkit::LockedRows::NoRowLocks
    }

    async fn lock_row(&self, _db: &Db, _table: &str, _id: TaskId) -> backstop_testkit::RowLock {
        unreachable!("SQLite has no row locks")
    }

    async fn lock_queue_row(
        &self,
        _db: &Db,
        _table: &str,
        _event: &str,
    ) -> backstop_testkit::RowLock {
        unreachable!("SQLite has no row locks")
    }
}

backstop_testkit::conformance!(SqliteHarness);
