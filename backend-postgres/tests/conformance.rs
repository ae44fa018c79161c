//! The conformance suite on PostgreSQL: every case in a fresh schema of its own, on the
//! server named by `BACKSTOP_TEST_POSTGRES_URL` (scripts/test starts a throwaway one).
#![allow(clippy::expect_used)] // test harness: a failed setup is a failed test

use std::sync::{Arc, Mutex};
use std::time::Duration;

use backstop_core::tx::{Answer, Dialect, Returns, Statement, Value};
use backstop_core::TxConnection;
use backstop_core::{Enqueued, HandlerError, NewTask, Notifier, Processed, StoreConfig, TaskId};
use backstop_postgres::{pg_handler, PgHandler, PgOptions, PgStore};
use backstop_testkit::{Harness, RowHold, TimeColumn, TxPath, TxTasks, Unavailable};
use tokio_postgres::NoTls;

const URL_VAR: &str = "BACKSTOP_TEST_POSTGRES_URL";
/// A user of the same server who may connect through TLS only (`sslmode=verify-full`).
const TLS_URL_VAR: &str = "BACKSTOP_TEST_POSTGRES_TLS_URL";

/// PgBouncer in transaction pooling mode in front of the test server.
const PGBOUNCER_URL_VAR: &str = "BACKSTOP_TEST_PGBOUNCER_URL";
/// A streaming standby and the test server in one URL, the standby first, with
/// `target_session_attrs=read-write` (scripts/servers.sh's `start_pg_standby`).
const FAILOVER_URL_VAR: &str = "BACKSTOP_TEST_POSTGRES_FAILOVER_URL";

/// How the store reaches the server; the harness's own connections are direct.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    Direct,
    /// Through TLS, as a user the server accepts only so.
    Tls,
    /// Through PgBouncer in transaction pooling mode (`transaction_pooling` on); the
    /// engines' listener connects directly, as the docs advise.
    PgBouncer,
    /// Through a URL naming a standby first and the primary second, with
    /// `target_session_attrs=read-write`: every connection, the listener's too, passes
    /// over the standby, as it would after a failover.
    Failover,
}

#[derive(Clone, Copy)]
struct PgHarness {
    route: Route,
}

/// `PgHarness` alone names the direct route.
#[allow(non_upper_case_globals)]
const PgHarness: PgHarness = PgHarness {
    route: Route::Direct,
};

impl PgHarness {
    const TLS: PgHarness = PgHarness { route: Route::Tls };
    const PGBOUNCER: PgHarness = PgHarness {
        route: Route::PgBouncer,
    };
    const FAILOVER: PgHarness = PgHarness {
        route: Route::Failover,
    };
}

struct Db {
    url: String,
    /// The URL the store connects with (`url`, or the TLS one).
    store_url: String,
    schema: String,
    admin: tokio_postgres::Client,
    /// The channel of the case's listeners, once one was made.
    channel: Mutex<Option<String>>,
}

impl Drop for Db {
    fn drop(&mut self) {
        let (url, schema) = (self.url.clone(), self.schema.clone());
        backstop_testkit::cleanup_blocking(async move {
            if let Ok((client, conn)) = tokio_postgres::connect(&url, NoTls).await {
                tokio::spawn(conn);
                let _ = client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                    .await;
            }
        });
    }
}

async fn ensure_biz(db: &Db) {
    db.admin
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS \"{}\".biz_order (key TEXT PRIMARY KEY)",
            db.schema
        ))
        .await
        .expect("create biz_order");
}

async fn finish_tokio(tx: tokio_postgres::Transaction<'_>, commit: bool) {
    if commit {
        tx.commit().await.expect("commit");
    } else {
        tx.rollback().await.expect("rollback");
    }
}

/// The application's own tokio-postgres transaction running the store's statements, as a
/// user of a driver backstop has no support for would write it: each statement is sent
/// with its parameters' types, and its first row read as integers.
struct AppConn<'a, 'c>(&'a tokio_postgres::Transaction<'c>);

#[backstop_testkit::async_trait]
impl TxConnection for AppConn<'_, '_> {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    async fn run(&mut self, statement: &Statement<'_>) -> backstop_core::Result<Answer> {
        use tokio_postgres::types::{ToSql, Type};
        let params: Vec<(&(dyn ToSql + Sync), Type)> = statement
            .params()
            .iter()
            .map(|v| -> (&(dyn ToSql + Sync), Type) {
                match v {
                    Value::SmallInt(n) => (n, Type::INT2),
                    Value::Int(n) => (n, Type::INT4),
                    Value::BigInt(n) => (n, Type::INT8),
                    Value::Text(t) => (t, Type::TEXT),
                    Value::Timestamp(t) => (t, Type::TIMESTAMPTZ),
                    other => panic!("an enqueue binds no {other:?}"),
                }
            })
            .collect();
        let fail = |e: tokio_postgres::Error| {
            backstop_core::Error::new(backstop_core::ErrorKind::Unavailable, "app", e.to_string())
        };
        match statement.returns() {
            Returns::Row => {
                let row = self
                    .0
                    .query_typed_opt(statement.sql(), &params)
                    .await
                    .map_err(fail)?;
                Ok(Answer::Row(row.map(|r| {
                    (0..r.len()).map(|i| r.get::<_, i64>(i)).collect()
                })))
            }
            Returns::Rows => {
                let rows = self
                    .0
                    .query_typed(statement.sql(), &params)
                    .await
                    .map_err(fail)?;
                Ok(Answer::Rows(
                    rows.iter()
                        .map(|r| (0..r.len()).map(|i| r.get::<_, i64>(i)).collect())
                        .collect(),
                ))
            }
            _ => {
                let n = self
                    .0
                    .execute_typed(statement.sql(), &params)
                    .await
                    .map_err(fail)?;
                Ok(Answer::RowsAffected(n))
            }
        }
    }
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("connect to the test server");
    tokio::spawn(conn);
    client
}

#[backstop_testkit::async_trait]
impl Harness for PgHarness {
    type Store = PgStore;
    type Db = Db;

    fn backend(&self) -> &'static str {
        match self.route {
            Route::Direct => "postgres",
            Route::Tls => "postgres-tls",
            Route::PgBouncer => "pgbouncer",
            Route::Failover => "postgres-failover",
        }
    }

    async fn create_db(&self) -> Result<Db, Unavailable> {
        let url = backstop_testkit::server_url(URL_VAR)?;
        let store_url = match self.route {
            Route::Direct => url.clone(),
            Route::Tls => backstop_testkit::server_url(TLS_URL_VAR)?,
            Route::PgBouncer => backstop_testkit::server_url(PGBOUNCER_URL_VAR)?,
            Route::Failover => backstop_testkit::server_url(FAILOVER_URL_VAR)?,
        };
        let admin = connect(&url).await;
        let schema = backstop_testkit::unique_name("bst");
        admin
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE; CREATE SCHEMA \"{schema}\""
            ))
            .await
            .expect("create the case's schema");
        Ok(Db {
            url,
            store_url,
            schema,
            admin,
            channel: Mutex::new(None),
        })
    }

    async fn open(&self, db: &Db, config: StoreConfig) -> backstop_core::Result<PgStore> {
        PgStore::connect_with(
            &db.store_url,
            PgOptions::default()
                .config(config)
                .schema(db.schema.clone())
                .max_connections(4)
                .transaction_pooling(self.route == Route::PgBouncer),
        )
        .await
    }

    async fn execute(&self, db: &Db, sql: &str) {
        let sql = sql.replace("{now}", "now()");
        db.admin
            .batch_execute(&format!(
                "SET search_path TO \"{}\"; {sql}; RESET search_path",
                db.schema
            ))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn query_i64(&self, db: &Db, sql: &str) -> i64 {
        // one simple query: the schema's search path holds for it alone
        let answer = db
            .admin
            .simple_query(&format!(
                "SET search_path TO \"{}\"; {sql}; RESET search_path",
                db.schema
            ))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        answer
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).map(str::to_owned)),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{sql}: no row"))
            .map_or(0, |v| {
                v.parse().unwrap_or_else(|e| panic!("{sql}: {v}: {e}"))
            })
    }

    async fn backdate(&self, db: &Db, table: &str, id: TaskId, column: TimeColumn, by: Duration) {
        let col = column.name();
        let micros = i64::try_from(by.as_micros()).expect("backdate within range");
        let n = db
            .admin
            .execute(
                &format!(
                    "UPDATE \"{}\".\"{table}\" SET {col} = {col} - $1::bigint * interval '1 microsecond' WHERE id = $2",
                    db.schema
                ),
                &[&micros, &id],
            )
            .await
            .expect("backdate");
        assert_eq!(n, 1, "backdate: task {id} not found in {table}");
    }

    async fn enqueue_with_business_row(
        &self,
        db: &Db,
        store: &PgStore,
        biz_row: &str,
        tasks: TxTasks,
        commit: bool,
        path: TxPath,
    ) -> backstop_core::Result<Vec<Enqueued>> {
        ensure_biz(db).await;
        let insert_biz = format!("INSERT INTO \"{}\".biz_order (key) VALUES ($1)", db.schema);
        match path {
            TxPath::Native => {
                let mut client = store.client().await?;
                let tx = client.transaction().await.expect("begin");
                tx.execute(&insert_biz, &[&biz_row])
                    .await
                    .expect("insert business row");
                let enqueued = match &tasks {
                    TxTasks::One(task) => vec![store.enqueue_tx(&tx, task).await?],
                    TxTasks::Many(tasks) => store.enqueue_many_tx(&tx, tasks).await?,
                    TxTasks::Claimed(task, claim) => {
                        let enqueued = store.enqueue_tx(&tx, task).await?;
                        claim
                            .claim_in(&mut store.tx_connection(&tx), &enqueued)
                            .await?;
                        vec![enqueued]
                    }
                    TxTasks::Barrier(call, slot) => {
                        TxTasks::barrier_answer(slot, store.barrier_tx(&tx, call).await?)
                    }
                    TxTasks::Saga(start, slot) => {
                        TxTasks::saga_answer(slot, store.start_saga_tx(&tx, start).await?)
                    }
                    TxTasks::SagaStep(def, report, slot) => {
                        TxTasks::step_answer(slot, store.saga_step_tx(&tx, def, report).await?)
                    }
                };
                if commit {
                    tx.commit().await.expect("commit");
                } else {
                    tx.rollback().await.expect("rollback");
                }
                Ok(enqueued)
            }
            TxPath::Sqlx => {
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(&db.url)
                    .await
                    .expect("sqlx connect");
                let mut tx = conn.begin().await.expect("begin");
                sqlx::query(sqlx::AssertSqlSafe(insert_biz))
                    .bind(biz_row)
                    .execute(&mut *tx)
                    .await
                    .expect("insert business row");
                let enqueued = tasks.enqueue_in(store, &mut *tx).await?;
                if commit {
                    tx.commit().await.expect("commit");
                } else {
                    tx.rollback().await.expect("rollback");
                }
                Ok(enqueued)
            }
            TxPath::Statements => {
                let mut client = connect(&db.url).await;
                let tx = client.transaction().await.expect("begin");
                tx.execute(&insert_biz, &[&biz_row])
                    .await
                    .expect("insert business row");
                let enqueued = tasks.enqueue_in(store, &mut AppConn(&tx)).await?;
                finish_tokio(tx, commit).await;
                Ok(enqueued)
            }
        }
    }

    async fn complete_with_business_row(
        &self,
        db: &Db,
        store: &PgStore,
        cx: &backstop_core::Context,
        biz_row: &str,
        follow_up: NewTask,
    ) -> Result<(), HandlerError> {
        ensure_biz(db).await;
        let mut client = store.client().await?;
        let tx = client.transaction().await?;
        store.enqueue_tx(&tx, &follow_up).await?;
        store.complete_tx(&tx, cx).await?;
        tx.execute(
            &format!("INSERT INTO \"{}\".biz_order (key) VALUES ($1)", db.schema),
            &[&biz_row],
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn business_row_exists(&self, db: &Db, biz_row: &str) -> bool {
        let row = db
            .admin
            .query_one(
                &format!(
                    "SELECT count(*) FROM \"{}\".biz_order WHERE key = $1",
                    db.schema
                ),
                &[&biz_row],
            )
            .await
            .expect("count business rows");
        row.get::<_, i64>(0) == 1
    }

    async fn idempotent_business_row(
        &self,
        db: &Db,
        store: &PgStore,
        consumer: &str,
        message_id: &str,
        biz_row: &str,
        fail: bool,
    ) -> Result<Processed<()>, HandlerError> {
        ensure_biz(db).await;
        let sql = format!("INSERT INTO \"{}\".biz_order (key) VALUES ($1)", db.schema);
        let row = biz_row.to_owned();
        store
            .run_idempotent(consumer, message_id, move |tx| {
                Box::pin(async move {
                    tx.execute(&sql, &[&row]).await?;
                    if fail {
                        return Err(HandlerError::retry("failed on purpose after the write"));
                    }
                    Ok(())
                })
            })
            .await
    }

    async fn inbox_handler(&self, db: &Db) -> PgHandler {
        ensure_biz(db).await;
        let schema = db.schema.clone();
        pg_handler(move |tx, message| {
            let sql = format!("INSERT INTO \"{schema}\".biz_order (key) VALUES ($1)");
            Box::pin(async move {
                tx.execute(&sql, &[&message.biz_key]).await?;
                if message.payload == "fail" {
                    return Err(HandlerError::retry("failed on purpose after the write"));
                }
                Ok(())
            })
        })
    }

    async fn count_business_rows(&self, db: &Db, prefix: &str) -> u64 {
        ensure_biz(db).await;
        let row = db
            .admin
            .query_one(
                &format!(
                    "SELECT count(*) FROM \"{}\".biz_order WHERE left(key, length($1)) = $1",
                    db.schema
                ),
                &[&prefix],
            )
            .await
            .expect("count business rows");
        row.get::<_, i64>(0) as u64
    }

    async fn backdate_rows(&self, db: &Db, table: &str, column: &str, by: Duration) {
        let micros = i64::try_from(by.as_micros()).expect("backdate within range");
        db.admin
            .execute(
                &format!(
                    "UPDATE \"{}\".{table}
                     SET {column} = {column} - $1::bigint * interval '1 microsecond'",
                    db.schema
                ),
                &[&micros],
            )
            .await
            .expect("backdate the rows");
    }

    async fn hold_row(&self, db: &Db, table: &str, id: TaskId) -> Option<RowHold> {
        let (mut client, conn) = tokio_postgres::connect(&db.url, NoTls)
            .await
            .expect("connect to hold a row");
        tokio::spawn(conn);
        let sql = format!(
            "SELECT id FROM \"{}\".\"{table}\" WHERE id = $1 FOR UPDATE",
            db.schema
        );
        Some(
            RowHold::start(move |locked, released| async move {
                let tx = client.transaction().await.expect("begin the row hold");
                let rows = tx.query(&sql, &[&id]).await.expect("lock the row");
                assert_eq!(rows.len(), 1, "hold_row: task {id} not found");
                let _ = locked.send(());
                let _ = released.await;
                tx.rollback().await.expect("roll the row hold back");
            })
            .await,
        )
    }

    fn notifier_service(&self) -> &'static str {
        "postgres"
    }

    async fn notifier(&self, db: &Db, store: &PgStore) -> Result<Arc<dyn Notifier>, Unavailable> {
        let listener = match self.route {
            // LISTEN does not survive the pooler: the store refuses, and the listener
            // connects directly
            Route::PgBouncer => {
                let e = store
                    .listener()
                    .expect_err("no listener through the pooler");
                assert_eq!(e.kind(), backstop_core::ErrorKind::Config, "{e}");
                let direct = db.url.parse().expect("the direct URL");
                backstop_postgres::PgListener::with_config(store, direct)
            }
            _ => store
                .listener()
                .expect("a store made from a URL has a listener"),
        };
        *db.channel.lock().expect("channel lock") = Some(listener.channel().to_owned());
        Ok(Arc::new(listener))
    }

    async fn cut_listeners(&self, db: &Db) {
        let channel = db
            .channel
            .lock()
            .expect("channel lock")
            .clone()
            .expect("a listener was made");
        let rows = db
            .admin
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE application_name = 'backstop-listener' AND query = $1",
                &[&format!("LISTEN \"{channel}\"")],
            )
            .await
            .expect("terminate the listeners");
        assert!(!rows.is_empty(), "no listener on {channel} to cut");
    }

    fn locked_rows(&self) -> backstop_testkit::LockedRows {
        backstop_testkit::LockedRows::PassesWithin(Duration::from_millis(500))
    }

    async fn lock_row(&self, db: &Db, table: &str, id: TaskId) -> backstop_testkit::RowLock {
        let client = connect(&db.url).await;
        client.batch_execute("BEGIN").await.expect("begin");
        let n = client
            .query(
                &format!(
                    "SELECT id FROM \"{}\".\"{table}\" WHERE id = $1 FOR UPDATE",
                    db.schema
                ),
                &[&id],
            )
            .await
            .expect("lock the row")
            .len();
        assert_eq!(n, 1, "task {id} to lock");
        Box::new(client)
    }

    async fn lock_queue_row(
        &self,
        db: &Db,
        table: &str,
        event_type: &str,
    ) -> backstop_testkit::RowLock {
        let client = connect(&db.url).await;
        client.batch_execute("BEGIN").await.expect("begin");
        let sql = format!(
            "SELECT 1 FROM \"{}\".\"{table}_queues\" WHERE event_type = $1 FOR UPDATE",
            db.schema
        );
        let n = client
            .query(&sql, &[&event_type])
            .await
            .expect("lock the queue's row")
            .len();
        assert_eq!(n, 1, "queue {event_type} to lock");
        Box::new(client)
    }
}

backstop_testkit::conformance!(PgHarness);

/// The store's cases with the store connected through TLS (`sslmode=verify-full`, the
/// test CA), as a user the server refuses without it.
mod over_tls {
    use super::*;
    backstop_testkit::store_conformance!(PgHarness::TLS);
}

/// Every case with the store behind PgBouncer in transaction pooling mode: no named
/// statement outlives its transaction, and the engines' listener connects directly.
mod through_pgbouncer {
    use super::*;
    backstop_testkit::conformance!(PgHarness::PGBOUNCER);
}

/// Every case through a URL naming a streaming standby first and the primary second
/// (`target_session_attrs=read-write`): the store's connections and its listener land on
/// the primary.
mod through_failover_url {
    use super::*;
    backstop_testkit::conformance!(PgHarness::FAILOVER);

    /// Every connection of a store on the pair's URL is on the primary, never the
    /// standby (`pg_is_in_recovery()` false on each of 4 held at once).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_on_the_pair_connects_to_the_primary_only() {
        let Some(ctx) = backstop_testkit::Ctx::setup(
            PgHarness::FAILOVER,
            "a_store_on_the_pair_connects_to_the_primary_only",
        )
        .await
        else {
            return;
        };
        let mut held = Vec::new();
        for _ in 0..4 {
            let client = ctx.store.pool().get().await.expect("a connection");
            let standby: bool = client
                .query_one("SELECT pg_is_in_recovery()", &[])
                .await
                .expect("pg_is_in_recovery")
                .get(0);
            assert!(!standby, "a store connection on the standby");
            held.push(client);
        }
    }
}

/// `enqueue_tx` on every kind of connection it accepts: the store's pooled client and
/// transaction (statements prepared once per connection) and plain tokio-postgres ones
/// (unnamed statements). Each creates once and returns the duplicate the second time;
/// a rolled-back plain transaction leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_tx_on_pooled_and_plain_connections() {
    use backstop_core::{Status, TaskStore};
    let Some(ctx) =
        backstop_testkit::Ctx::setup(PgHarness, "enqueue_tx_on_pooled_and_plain_connections").await
    else {
        return;
    };
    let store = &ctx.store;
    let check = |e: &Enqueued, created: bool| {
        assert_eq!(e.created, created);
        assert_eq!(e.event_type, "PLAIN");
    };

    // pooled client (autocommit), twice
    let pooled = store.client().await.expect("client");
    let a = store
        .enqueue_tx(&pooled, &NewTask::new("PLAIN", "a"))
        .await
        .expect("enqueue");
    check(&a, true);
    let again = store
        .enqueue_tx(&pooled, &NewTask::new("PLAIN", "a"))
        .await
        .expect("dup");
    check(&again, false);
    assert_eq!(again.id, a.id);
    drop(pooled);

    // plain tokio-postgres client and transaction (the store's SQL names its schema)
    let mut plain = connect(&ctx.db.url).await;
    let b = store
        .enqueue_tx(&plain, &NewTask::new("PLAIN", "b"))
        .await
        .expect("enqueue");
    check(&b, true);
    let tx = plain.transaction().await.expect("begin");
    let dup = store
        .enqueue_tx(&tx, &NewTask::new("PLAIN", "b"))
        .await
        .expect("dup");
    check(&dup, false);
    assert_eq!(dup.id, b.id);
    let c = store
        .enqueue_tx(&tx, &NewTask::new("PLAIN", "c"))
        .await
        .expect("enqueue");
    check(&c, true);
    tx.rollback().await.expect("rollback");

    let got = store.get(b.id).await.expect("get").expect("b exists");
    assert_eq!((got.status, got.attempts), (Status::Pending, 0));
    assert!(store.get(c.id).await.expect("get").is_none(), "rolled back");
    assert_eq!(ctx.count_all().await, 2);
}

/// Contention is retried in one place, the store: a mark that times out on a row lock
/// another transaction holds (`lock_timeout`, 55P03: rolled back) is run again, and wins
/// once the lock is released; held past every retry, it is reported as `Contention`,
/// persistent (not temporary: already retried), naming the operation, with nothing
/// changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_is_retried_by_the_store_then_reported_persistent() {
    use backstop_core::{ErrorKind, Status, TaskStoreExt};
    use std::time::Instant;
    let Some(ctx) = backstop_testkit::Ctx::setup(
        PgHarness,
        "contention_is_retried_by_the_store_then_reported_persistent",
    )
    .await
    else {
        return;
    };
    // the store's statements give up on a row lock after 100 ms
    let sep = if ctx.db.url.contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}options=-c%20lock_timeout%3D100", ctx.db.url);
    let store = PgStore::connect_with(
        &url,
        PgOptions::default()
            .schema(ctx.db.schema.clone())
            .max_connections(2),
    )
    .await
    .expect("open");
    // released after three of the store's lock timeouts: a retry wins
    let id = ctx.enqueue("E", "soon").await;
    let lease = ctx.claim(id).await.lease();
    let released = hold_row(&ctx.db, id, 350).await;
    let started = Instant::now();
    assert!(store
        .mark_success(lease)
        .await
        .expect("retried until it won"));
    assert!(started.elapsed() >= Duration::from_millis(300));
    released.await.expect("released");
    assert_eq!(ctx.task(id).await.status, Status::Succeeded);

    // held past every retry (5 by default: 6 tries of 100 ms plus backoff)
    let id = ctx.enqueue("E", "later").await;
    let lease = ctx.claim(id).await.lease();
    let released = hold_row(&ctx.db, id, 2000).await;
    let e = store.mark_success(lease).await.expect_err("contention");
    assert_eq!(e.kind(), ErrorKind::Contention, "{e}");
    assert!(e.is_persistent() && !e.is_temporary(), "{e}");
    assert_eq!(e.operation(), "mark");
    assert!(e.to_string().contains("retried 5 times"), "{e}");
    released.await.expect("released");
    let t = ctx.task(id).await;
    assert_eq!(
        (t.status, t.lease),
        (Status::Running, lease.token),
        "nothing changed"
    );
}

/// Lock task `id`'s row in another transaction, released after `for_ms`.
async fn hold_row(db: &Db, id: TaskId, for_ms: u64) -> tokio::task::JoinHandle<()> {
    let other = connect(&db.url).await;
    other
        .batch_execute(&format!(
            "BEGIN; SELECT id FROM \"{}\".backstop_task WHERE id = {id} FOR UPDATE",
            db.schema
        ))
        .await
        .expect("lock the row");
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(for_ms)).await;
        other.batch_execute("COMMIT").await.expect("release");
    })
}

/// A store that cannot connect says why at once (not the pool's "error occurred while
/// creating a new object"), whether retrying can help, and never prints the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_errors_name_their_cause() {
    use backstop_testkit::{BadUrls, Ctx, WRONG_PASSWORD};
    let Some(ctx) = Ctx::setup(PgHarness, "connect_errors_name_their_cause").await else {
        return;
    };
    // postgres://user[:password]@host:port/database, as scripts/test writes it
    let url = ctx.db.url.clone();
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (_, host_and_path) = rest.split_once('@').expect("a user in the URL");
    let (server, _) = host_and_path
        .rsplit_once('/')
        .expect("a database in the URL");
    let user = rest.split(['@', ':']).next().expect("a user");
    let urls = BadUrls {
        refused: format!("postgres://backstop:{WRONG_PASSWORD}@127.0.0.1:1/backstop"),
        // an unknown role: the test server trusts its own user whatever the password
        denied: format!("{scheme}://nobody_here:{WRONG_PASSWORD}@{host_and_path}"),
        missing_database: format!("{scheme}://{user}@{server}/backstop_no_such_database"),
        wrong_ca: backstop_testkit::wrong_ca_url(TLS_URL_VAR),
        tls_backend: "postgres-tls",
    };
    backstop_testkit::assert_connect_errors(
        |url| async move {
            PgStore::connect_with(
                &url,
                PgOptions::default().acquire_timeout(Duration::from_secs(20)),
            )
            .await
            .map(drop)
        },
        urls,
    )
    .await;
}
