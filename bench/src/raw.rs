//! The baseline: the same work as raw SQL through the same driver, no engine around it.
//! Every result is a ratio to it. A drain's raw SQL comes in two [`Shape`]s: the store's
//! own statements, and the fewest statements and round trips that still do the work
//! correctly.

use std::sync::Arc;
use std::time::{Duration, Instant};

use backstop::async_trait;
use backstop::mysql::ClaimStrategy;
use hdrhistogram::Histogram;

pub const TABLE: &str = "bench_task";
pub const ORDERS: &str = "bench_order";
pub const EVENT: &str = "BENCH";

/// The columns the store's claims return (a worker needs the task's row to run it).
const COLUMNS: &str = "id, event_type, biz_key, payload, status, attempts, max_attempts, \
    retry_strategy, retry_interval_ms, retry_max_interval_ms, next_run_at, owner, lease, \
    last_error, created_at, updated_at";

/// The columns a worker cannot run a task and fence its completion without: what it
/// runs (type, key, payload, attempt number) and the lease its mark is fenced by. The
/// retry policy is needed only when a task fails, and can be read then.
const NEEDED: &str = "id, event_type, biz_key, payload, attempts, lease";

/// Which raw SQL a drain runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// The store's own statements, as a hand-written worker would send them: the claim
    /// returns the whole row.
    Store,
    /// The fewest statements and round trips that still return what a worker needs
    /// ([`NEEDED`]) and fence each completion by its lease.
    Fastest,
}

impl Shape {
    /// The columns a claim returns, with where the attempt number and the lease are.
    fn columns(self) -> (&'static str, Cols) {
        match self {
            Shape::Store => (
                COLUMNS,
                Cols {
                    attempts: 5,
                    lease: 12,
                },
            ),
            Shape::Fastest => (
                NEEDED,
                Cols {
                    attempts: 4,
                    lease: 5,
                },
            ),
        }
    }

    /// The same columns, each prefixed `t.`.
    fn columns_of_t(self) -> String {
        let (cols, _) = self.columns();
        cols.split(", ")
            .map(|c| format!("t.{}", c.trim()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Where a claimed row's attempt number and lease are (id, type, key and payload come
/// first in every shape).
#[derive(Clone, Copy, Debug)]
struct Cols {
    attempts: usize,
    lease: usize,
}

/// What a hand-written worker reads of a claimed row before running it: returns the id
/// and lease (the strings are decoded, as a worker would, then dropped).
fn read_sqlite(r: &rusqlite::Row<'_>, c: Cols) -> rusqlite::Result<(i64, i64)> {
    let _task: (String, String, String, i64) =
        (r.get(1)?, r.get(2)?, r.get(3)?, r.get(c.attempts)?);
    Ok((r.get(0)?, r.get(c.lease)?))
}

fn read_pg(r: &tokio_postgres::Row, c: Cols) -> (i64, i64) {
    let _task: (String, String, String, i32) = (r.get(1), r.get(2), r.get(3), r.get(c.attempts));
    (r.get(0), r.get(c.lease))
}

fn read_mysql(r: &sqlx::mysql::MySqlRow, c: Cols) -> (i64, i64) {
    use sqlx::Row;
    let _task: (String, String, String, i32) = (r.get(1), r.get(2), r.get(3), r.get(c.attempts));
    (r.get(0), r.get(c.lease))
}

/// A histogram of microseconds (1 µs .. 60 s, 3 significant digits).
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

/// Join the workers and merge their latency histograms.
async fn merged(handles: Vec<tokio::task::JoinHandle<Histogram<u64>>>) -> Histogram<u64> {
    let mut all = histogram();
    for h in handles {
        let _ = all.add(h.await.expect("join"));
    }
    all
}

pub fn record(h: &mut Histogram<u64>, d: Duration) {
    let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
    let _ = h.record(us.min(60_000_000));
}

/// The suffixes of the saga tables of the benchmark's task table.
const SAGA_TABLES: [&str; 3] = ["_saga", "_saga_step", "_saga_audit"];

#[async_trait]
pub trait Raw: Send + Sync {
    /// Drop the benchmark's tables, so the store makes them as this version does (a server
    /// kept from an earlier run would otherwise keep an older schema).
    async fn drop_tables(&self);
    /// Empty the task and business tables.
    async fn reset(&self);
    /// Empty the saga tables (after a store made them), as `reset` empties the task
    /// table: each round of the saga scenario starts from the same empty tables as the
    /// chain's.
    async fn reset_sagas(&self);
    /// Insert `n` due pending tasks quickly (keys `b{start}`…).
    async fn bulk_insert(&self, n: usize, start: usize) {
        self.bulk_insert_of(EVENT, n, start, 0).await;
    }
    /// Insert `n` pending tasks of `event` quickly (keys `b{start}`…), due `due_ago_s`
    /// seconds ago. `event` is one of the benchmark's constants (it is put in the SQL).
    async fn bulk_insert_of(&self, event: &str, n: usize, start: usize, due_ago_s: i64) {
        self.bulk_insert_rows(event, n, start, due_ago_s, 0).await;
    }
    /// Insert `n` succeeded tasks (keys `b{start}`…), as retention keeps them.
    async fn bulk_insert_succeeded(&self, n: usize, start: usize) {
        self.bulk_insert_rows(EVENT, n, start, 0, 1).await;
    }
    /// Insert `n` tasks of `event` in `status` (a code) quickly.
    async fn bulk_insert_rows(
        &self,
        event: &str,
        n: usize,
        start: usize,
        due_ago_s: i64,
        status: i16,
    );
    /// Insert `n` due tasks over `keys` order keys (`k0`…): each key's first task pending,
    /// the rest waiting behind it, the keys in the keys table — as `n` ordered enqueues
    /// leave them.
    async fn bulk_insert_ordered(&self, n: usize, keys: usize);
    /// `workers` loops of `each`: business row + task in one transaction, commit, claim it
    /// by id, mark it succeeded. Returns the elapsed time and commit→claimed latencies.
    /// With `claim_in_tx` the claim runs in the task's transaction, before the commit
    /// (two commits a task instead of three; the latency is then commit → the worker has
    /// its row, which it already has).
    async fn per_task(
        &self,
        workers: usize,
        each: usize,
        claim_in_tx: bool,
    ) -> (Duration, Histogram<u64>);
    /// WAL or redo log flushes to disk so far, server-wide (PostgreSQL
    /// `pg_stat_wal.wal_sync`; MariaDB's redo log writes, `Innodb_log_writes`, each
    /// flushed at a commit when `innodb_flush_log_at_trx_commit = 1`); `None` where there
    /// is no such counter (SQLite).
    async fn log_syncs(&self) -> Option<u64>;
    /// `workers` loops claiming `batch` due tasks and marking them succeeded, with the
    /// statements of `shape`, until none is left. Returns the elapsed time.
    async fn drain(&self, workers: usize, batch: usize, shape: Shape) -> Duration;
    /// `workers` loops of `batches` transactions, each one multi-row insert of `batch`
    /// new pending tasks (their key and payload bound per row, keys `r{w}-{b}-{i}`) that
    /// skips a held key and returns the ids it made. Returns the elapsed time.
    async fn insert_batches(&self, workers: usize, batches: usize, batch: usize) -> Duration;
}

/// The columns a raw insert writes, in the order of [`raw_row`].
const INSERT_COLUMNS: &str = "event_type, biz_key, payload, status, attempts, max_attempts,
    retry_strategy, retry_interval_ms, retry_max_interval_ms, next_run_at, lease, created_at,
    updated_at";

/// One row of a raw multi-row insert: key and payload bound (`key`, `payload` are the
/// placeholders), the rest constants, `now` the dialect's clock.
fn raw_row(key: &str, payload: &str, now: &str) -> String {
    format!("('{EVENT}', {key}, {payload}, 0, 0, 5, 'FIXED', 1000, 1000, {now}, 0, {now}, {now})")
}

/// The key and payload of row `i` of batch `b` of worker `w`.
fn raw_batch(w: usize, b: usize, batch: usize) -> Vec<String> {
    (0..batch)
        .flat_map(|i| [format!("r{w}-{b}-{i}"), "{}".to_owned()])
        .collect()
}

fn check(ok: bool, what: &str) {
    assert!(ok, "baseline: {what}");
}

// ---------------------------------------------------------------- SQLite

pub struct SqliteRaw {
    pub path: std::path::PathBuf,
}

impl SqliteRaw {
    fn conn(path: &std::path::Path) -> rusqlite::Connection {
        let c = rusqlite::Connection::open(path).expect("open");
        c.busy_timeout(Duration::from_secs(30)).expect("busy");
        let sync = if crate::durable() { "FULL" } else { "NORMAL" };
        c.pragma_update(None, "synchronous", sync).expect("sync");
        c
    }

    fn now() -> i64 {
        chrono::Utc::now().timestamp_millis()
    }
}

#[async_trait]
impl Raw for SqliteRaw {
    async fn log_syncs(&self) -> Option<u64> {
        None
    }

    async fn drop_tables(&self) {
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            Self::conn(&path)
                .execute_batch(&format!(
                    "DROP TABLE IF EXISTS {TABLE}; DROP TABLE IF EXISTS {TABLE}_inbox;
                     DROP TABLE IF EXISTS {TABLE}_audit; DROP TABLE IF EXISTS {TABLE}_migrations;
                     DROP TABLE IF EXISTS {TABLE}_keys; DROP TABLE IF EXISTS {TABLE}_handlers;
                     DROP TABLE IF EXISTS {TABLE}_barrier; DROP TABLE IF EXISTS {TABLE}_saga;
                     DROP TABLE IF EXISTS {TABLE}_saga_step; DROP TABLE IF EXISTS {TABLE}_saga_audit;
                     DROP TABLE IF EXISTS {ORDERS};"
                ))
                .expect("drop tables");
        })
        .await
        .expect("join");
    }

    async fn reset(&self) {
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let c = Self::conn(&path);
            c.execute_batch(&format!(
                "DELETE FROM {TABLE}; DELETE FROM {TABLE}_keys;
                 CREATE TABLE IF NOT EXISTS {ORDERS} (id TEXT PRIMARY KEY); DELETE FROM {ORDERS};"
            ))
            .expect("reset");
        })
        .await
        .expect("join");
    }

    async fn reset_sagas(&self) {
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let c = Self::conn(&path);
            for t in SAGA_TABLES {
                c.execute_batch(&format!("DELETE FROM {TABLE}{t}"))
                    .expect("reset sagas");
            }
        })
        .await
        .expect("join");
    }

    async fn bulk_insert_rows(
        &self,
        event: &str,
        n: usize,
        start: usize,
        due_ago_s: i64,
        status: i16,
    ) {
        let path = self.path.clone();
        let event = event.to_owned();
        tokio::task::spawn_blocking(move || {
            let c = Self::conn(&path);
            let now = Self::now();
            c.execute(
                &format!(
                    "WITH RECURSIVE s(x) AS (SELECT ?1 UNION ALL SELECT x + 1 FROM s WHERE x < ?2)
                     INSERT INTO {TABLE} (event_type, biz_key, payload, status, attempts, max_attempts,
                        retry_strategy, retry_interval_ms, retry_max_interval_ms, next_run_at, lease,
                        created_at, updated_at)
                     SELECT '{event}', 'b' || x, '{{}}', {status}, 0, 5, 'FIXED', 1000, 1000, ?4, 0, ?3, ?3 FROM s"
                ),
                rusqlite::params![
                    start as i64,
                    (start + n - 1) as i64,
                    now,
                    now - due_ago_s * 1000
                ],
            )
            .expect("bulk insert");
        })
        .await
        .expect("join");
    }

    async fn bulk_insert_ordered(&self, n: usize, keys: usize) {
        self.bulk_insert_rows(EVENT, n, 0, 0, 5).await;
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            Self::conn(&path)
                .execute_batch(&format!(
                    "UPDATE {TABLE} SET order_key = 'k' || (id % {keys});
                     UPDATE {TABLE} SET status = 0
                        WHERE id IN (SELECT min(id) FROM {TABLE} GROUP BY order_key);
                     INSERT OR IGNORE INTO {TABLE}_keys (order_key) SELECT DISTINCT order_key FROM {TABLE};"
                ))
                .expect("ordered");
        })
        .await
        .expect("join");
    }

    async fn insert_batches(&self, workers: usize, batches: usize, batch: usize) -> Duration {
        let now = 2 * batch + 1;
        let values = (0..batch)
            .map(|r| {
                raw_row(
                    &format!("?{}", 2 * r + 1),
                    &format!("?{}", 2 * r + 2),
                    &format!("?{now}"),
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let sql = Arc::new(format!(
            "INSERT INTO {TABLE} ({INSERT_COLUMNS}) VALUES {values}
             ON CONFLICT (biz_key, event_type, dedup_slot) DO NOTHING RETURNING id"
        ));
        let started = Instant::now();
        let mut handles = Vec::new();
        for w in 0..workers {
            let (path, sql) = (self.path.clone(), Arc::clone(&sql));
            handles.push(tokio::task::spawn_blocking(move || {
                let mut c = Self::conn(&path);
                for b in 0..batches {
                    let mut params: Vec<rusqlite::types::Value> = raw_batch(w, b, batch)
                        .into_iter()
                        .map(rusqlite::types::Value::Text)
                        .collect();
                    params.push(rusqlite::types::Value::Integer(Self::now()));
                    let tx = c
                        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                        .expect("begin");
                    let made = {
                        let mut st = tx.prepare_cached(&sql).expect("prepare");
                        let rows = st
                            .query_map(rusqlite::params_from_iter(params), |r| r.get::<_, i64>(0))
                            .expect("insert");
                        rows.count()
                    };
                    check(made == batch, "every row made");
                    tx.commit().expect("commit");
                }
            }));
        }
        for h in handles {
            h.await.expect("join");
        }
        started.elapsed()
    }

    async fn per_task(
        &self,
        workers: usize,
        each: usize,
        claim_in_tx: bool,
    ) -> (Duration, Histogram<u64>) {
        let started = Instant::now();
        let mut handles = Vec::new();
        for w in 0..workers {
            let path = self.path.clone();
            handles.push(tokio::task::spawn_blocking(move || {
                let mut c = Self::conn(&path);
                let mut h = histogram();
                for i in 0..each {
                    let key = format!("r{w}-{i}");
                    let tx = c
                        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                        .expect("begin");
                    let now = Self::now();
                    tx.execute(&format!("INSERT INTO {ORDERS} (id) VALUES (?1)"), [&key])
                        .expect("order");
                    let id: i64 = tx
                        .query_row(
                            &format!(
                                "INSERT INTO {TABLE} (event_type, biz_key, payload, status, attempts,
                                    max_attempts, retry_strategy, retry_interval_ms, retry_max_interval_ms,
                                    next_run_at, lease, created_at, updated_at)
                                 VALUES ('{EVENT}', ?1, '{{}}', 0, 0, 5, 'FIXED', 1000, 1000, ?2, 0, ?2, ?2)
                                 ON CONFLICT (biz_key, event_type, dedup_slot) DO NOTHING RETURNING id"
                            ),
                            rusqlite::params![key, now],
                            |r| r.get(0),
                        )
                        .expect("task");
                    let claim_sql = format!(
                        "UPDATE {TABLE} SET status = 3, owner = 'raw', attempts = attempts + 1,
                            lease = lease + 1, updated_at = ?1
                         WHERE id = ?2 AND status = 0 AND next_run_at <= ?1 RETURNING {COLUMNS}"
                    );
                    let claim = |tx: &rusqlite::Transaction<'_>, now: i64| {
                        let (_, lease) = tx
                            .prepare_cached(&claim_sql)
                            .expect("prepare")
                            .query_row(rusqlite::params![now, id], |r| {
                                read_sqlite(r, Shape::Store.columns().1)
                            })
                            .expect("claim");
                        lease
                    };
                    let lease = if claim_in_tx {
                        let lease = claim(&tx, now);
                        tx.commit().expect("commit");
                        record(&mut h, Duration::ZERO);
                        lease
                    } else {
                        tx.commit().expect("commit");
                        let committed = Instant::now();
                        let tx = c
                            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                            .expect("begin");
                        let lease = claim(&tx, Self::now());
                        tx.commit().expect("commit");
                        record(&mut h, committed.elapsed());
                        lease
                    };
                    let tx = c
                        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                        .expect("begin");
                    let n = tx
                        .execute(
                            &format!(
                                "UPDATE {TABLE} SET status = 1, last_error = NULL, updated_at = ?1
                                 WHERE id = ?2 AND status = 3 AND lease = ?3"
                            ),
                            rusqlite::params![Self::now(), id, lease],
                        )
                        .expect("mark");
                    tx.commit().expect("commit");
                    check(n == 1, "mark applied");
                }
                h
            }));
        }
        let all = merged(handles).await;
        (started.elapsed(), all)
    }

    /// Both shapes: claim (one `UPDATE … RETURNING`, its own transaction), then the
    /// marks of the batch in one transaction (a statement per row costs no round trip
    /// in-process). The store's shape opens the claim's transaction explicitly
    /// (`BEGIN IMMEDIATE`) and returns the whole row; the fastest lets the statement be
    /// its own transaction and returns only what a worker needs.
    async fn drain(&self, workers: usize, batch: usize, shape: Shape) -> Duration {
        let started = Instant::now();
        let mut handles = Vec::new();
        for _ in 0..workers {
            let path = self.path.clone();
            handles.push(tokio::task::spawn_blocking(move || {
                let mut c = Self::conn(&path);
                let (columns, cols) = shape.columns();
                // (a bare `LIMIT ?2` would be compiled again at every call: see the
                // SQLite backend's `sql.rs`)
                let claim = format!(
                    "UPDATE {TABLE} SET status = 3, owner = 'raw', attempts = attempts + 1,
                        lease = lease + 1, updated_at = ?1
                     WHERE id IN (SELECT id FROM {TABLE} WHERE status = 0 AND next_run_at <= ?1
                        AND event_type IN ('{EVENT}') AND priority = 2
                        ORDER BY next_run_at, id LIMIT CAST(?2 AS INTEGER))
                     RETURNING {columns}"
                );
                loop {
                    let now = Self::now();
                    let claimed: Vec<(i64, i64)> = if shape == Shape::Store {
                        let tx = c
                            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                            .expect("begin");
                        let claimed = tx
                            .prepare_cached(&claim)
                            .expect("prepare")
                            .query_map(rusqlite::params![now, batch as i64], |r| {
                                read_sqlite(r, cols)
                            })
                            .expect("claim")
                            .collect::<rusqlite::Result<_>>()
                            .expect("rows");
                        tx.commit().expect("commit");
                        claimed
                    } else {
                        c.prepare_cached(&claim)
                            .expect("prepare")
                            .query_map(rusqlite::params![now, batch as i64], |r| {
                                read_sqlite(r, cols)
                            })
                            .expect("claim")
                            .collect::<rusqlite::Result<_>>()
                            .expect("rows")
                    };
                    if claimed.is_empty() {
                        return;
                    }
                    let tx = c
                        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                        .expect("begin");
                    {
                        let mut st = tx
                            .prepare_cached(&format!(
                                "UPDATE {TABLE} SET status = 1, last_error = NULL, updated_at = ?1
                                 WHERE id = ?2 AND status = 3 AND lease = ?3"
                            ))
                            .expect("prepare");
                        let now = Self::now();
                        for (id, lease) in &claimed {
                            let n = st.execute(rusqlite::params![now, id, lease]).expect("mark");
                            check(n == 1, "mark applied");
                        }
                    }
                    tx.commit().expect("commit");
                }
            }));
        }
        for h in handles {
            h.await.expect("join");
        }
        started.elapsed()
    }
}

// ---------------------------------------------------------------- PostgreSQL

pub struct PgRaw {
    pub url: String,
}

impl PgRaw {
    async fn client(&self) -> tokio_postgres::Client {
        let (c, conn) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        c
    }
}

#[async_trait]
impl Raw for PgRaw {
    async fn log_syncs(&self) -> Option<u64> {
        // (statistics reach the shared counters at most a second late)
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let row = self
            .client()
            .await
            .query_one("SELECT wal_sync FROM pg_stat_wal", &[])
            .await
            .ok()?;
        u64::try_from(row.get::<_, i64>(0)).ok()
    }

    async fn drop_tables(&self) {
        self.client()
            .await
            .batch_execute(&format!(
                "DROP TABLE IF EXISTS {TABLE}, {TABLE}_inbox, {TABLE}_audit, {TABLE}_migrations, {TABLE}_keys, \
                 {TABLE}_handlers, {TABLE}_barrier, {TABLE}_saga, {TABLE}_saga_step, {TABLE}_saga_audit, \
                 {ORDERS}"
            ))
            .await
            .expect("drop tables");
    }

    async fn reset(&self) {
        let c = self.client().await;
        c.batch_execute(&format!(
            "TRUNCATE {TABLE}; TRUNCATE {TABLE}_keys;
             CREATE TABLE IF NOT EXISTS {ORDERS} (id TEXT PRIMARY KEY); TRUNCATE {ORDERS};"
        ))
        .await
        .expect("reset");
        c.batch_execute(&format!("VACUUM ANALYZE {TABLE}"))
            .await
            .expect("vacuum");
    }

    async fn reset_sagas(&self) {
        let c = self.client().await;
        for t in SAGA_TABLES {
            c.batch_execute(&format!("TRUNCATE {TABLE}{t}"))
                .await
                .expect("reset sagas");
            c.batch_execute(&format!("VACUUM ANALYZE {TABLE}{t}"))
                .await
                .expect("vacuum sagas");
        }
    }

    async fn bulk_insert_rows(
        &self,
        event: &str,
        n: usize,
        start: usize,
        due_ago_s: i64,
        status: i16,
    ) {
        self.client()
            .await
            .execute(
                &format!(
                    "INSERT INTO {TABLE} (event_type, biz_key, payload, status, attempts, max_attempts,
                        retry_strategy, retry_interval_ms, retry_max_interval_ms, next_run_at, lease,
                        created_at, updated_at)
                     SELECT '{event}', 'b' || x, '{{}}', {status}, 0, 5, 'FIXED', 1000, 1000,
                        now() - $3::bigint * interval '1 second', 0, now(), now()
                     FROM generate_series($1::bigint, $2::bigint) AS x"
                ),
                &[&(start as i64), &((start + n - 1) as i64), &due_ago_s],
            )
            .await
            .expect("bulk insert");
        self.client()
            .await
            .batch_execute(&format!("ANALYZE {TABLE}"))
            .await
            .expect("analyze");
    }

    async fn bulk_insert_ordered(&self, n: usize, keys: usize) {
        self.bulk_insert_rows(EVENT, n, 0, 0, 5).await;
        self.client()
            .await
            .batch_execute(&format!(
                "UPDATE {TABLE} SET order_key = 'k' || (id % {keys});
                 UPDATE {TABLE} SET status = 0
                    WHERE id IN (SELECT min(id) FROM {TABLE} GROUP BY order_key);
                 INSERT INTO {TABLE}_keys (order_key) SELECT DISTINCT order_key FROM {TABLE}
                    ON CONFLICT DO NOTHING;
                 ANALYZE {TABLE}"
            ))
            .await
            .expect("ordered");
    }

    async fn insert_batches(&self, workers: usize, batches: usize, batch: usize) -> Duration {
        let values = (0..batch)
            .map(|r| {
                raw_row(
                    &format!("${}", 2 * r + 1),
                    &format!("${}", 2 * r + 2),
                    "now()",
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "INSERT INTO {TABLE} ({INSERT_COLUMNS}) VALUES {values}
             ON CONFLICT (biz_key, event_type, dedup_slot) DO NOTHING RETURNING id"
        );
        let mut clients = Vec::new();
        for _ in 0..workers {
            let c = self.client().await;
            let st = c.prepare(&sql).await.expect("prepare");
            clients.push((c, st));
        }
        let started = Instant::now();
        let mut handles = Vec::new();
        for (w, (mut c, st)) in clients.into_iter().enumerate() {
            handles.push(tokio::spawn(async move {
                for b in 0..batches {
                    let params = raw_batch(w, b, batch);
                    let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params
                        .iter()
                        .map(|p| p as &(dyn tokio_postgres::types::ToSql + Sync))
                        .collect();
                    let tx = c.transaction().await.expect("begin");
                    let made = tx.query(&st, &refs).await.expect("insert").len();
                    check(made == batch, "every row made");
                    tx.commit().await.expect("commit");
                }
            }));
        }
        for h in handles {
            h.await.expect("join");
        }
        started.elapsed()
    }

    async fn per_task(
        &self,
        workers: usize,
        each: usize,
        claim_in_tx: bool,
    ) -> (Duration, Histogram<u64>) {
        let mut clients = Vec::new();
        for _ in 0..workers {
            clients.push(self.client().await);
        }
        let started = Instant::now();
        let mut handles = Vec::new();
        for (w, mut c) in clients.into_iter().enumerate() {
            handles.push(tokio::spawn(async move {
                let order = c
                    .prepare(&format!("INSERT INTO {ORDERS} (id) VALUES ($1)"))
                    .await
                    .expect("prepare");
                let insert = c
                    .prepare(&format!(
                        "INSERT INTO {TABLE} (event_type, biz_key, payload, status, attempts, max_attempts,
                            retry_strategy, retry_interval_ms, retry_max_interval_ms, next_run_at, lease,
                            created_at, updated_at)
                         VALUES ('{EVENT}', $1, '{{}}', 0, 0, 5, 'FIXED', 1000, 1000, now(), 0, now(), now())
                         ON CONFLICT (biz_key, event_type, dedup_slot) DO NOTHING RETURNING id"
                    ))
                    .await
                    .expect("prepare");
                let claim = c
                    .prepare(&format!(
                        "UPDATE {TABLE} SET status = 3, owner = 'raw', attempts = attempts + 1,
                            lease = lease + 1, updated_at = now()
                         WHERE id = $1 AND status = 0 AND next_run_at <= now() RETURNING {COLUMNS}"
                    ))
                    .await
                    .expect("prepare");
                let mark = c
                    .prepare(&format!(
                        "UPDATE {TABLE} SET status = 1, last_error = NULL, updated_at = now()
                         WHERE id = $1 AND status = 3 AND lease = $2"
                    ))
                    .await
                    .expect("prepare");
                let mut h = histogram();
                for i in 0..each {
                    let key = format!("r{w}-{i}");
                    let tx = c.transaction().await.expect("begin");
                    tx.execute(&order, &[&key]).await.expect("order");
                    let id: i64 = tx.query_one(&insert, &[&key]).await.expect("task").get(0);
                    let lease = if claim_in_tx {
                        let (_, lease) = read_pg(
                            &tx.query_one(&claim, &[&id]).await.expect("claim"),
                            Shape::Store.columns().1,
                        );
                        tx.commit().await.expect("commit");
                        record(&mut h, Duration::ZERO);
                        lease
                    } else {
                        tx.commit().await.expect("commit");
                        let committed = Instant::now();
                        let (_, lease) = read_pg(
                            &c.query_one(&claim, &[&id]).await.expect("claim"),
                            Shape::Store.columns().1,
                        );
                        record(&mut h, committed.elapsed());
                        lease
                    };
                    let n = c.execute(&mark, &[&id, &lease]).await.expect("mark");
                    check(n == 1, "mark applied");
                }
                h
            }));
        }
        let all = merged(handles).await;
        (started.elapsed(), all)
    }

    /// Both shapes: one statement claims (a locking read in a materialised CTE and the
    /// update, `RETURNING` the rows), one marks the batch (fenced row by row by lease),
    /// each its own transaction: two round trips a batch. The fastest returns only what
    /// a worker needs.
    async fn drain(&self, workers: usize, batch: usize, shape: Shape) -> Duration {
        let mut clients = Vec::new();
        for _ in 0..workers {
            clients.push(self.client().await);
        }
        let started = Instant::now();
        let mut handles = Vec::new();
        for c in clients {
            handles.push(tokio::spawn(async move {
                let (_, cols) = shape.columns();
                let claim = c
                    .prepare(&format!(
                        "WITH picked AS MATERIALIZED (
                            SELECT id FROM {TABLE} WHERE status = 0 AND event_type = $1
                              AND priority = 2 AND next_run_at <= now()
                            ORDER BY next_run_at, id LIMIT $2
                            FOR UPDATE SKIP LOCKED)
                         UPDATE {TABLE} AS t SET status = 3, owner = 'raw', attempts = t.attempts + 1,
                            lease = t.lease + 1, updated_at = now()
                         FROM picked WHERE t.id = picked.id RETURNING {}",
                        shape.columns_of_t()
                    ))
                    .await
                    .expect("prepare");
                let mark = c
                    .prepare(&format!(
                        "UPDATE {TABLE} AS t SET status = 1, last_error = NULL, updated_at = now()
                         FROM unnest($1::bigint[], $2::bigint[]) AS m(id, lease)
                         WHERE t.id = m.id AND t.status = 3 AND t.lease = m.lease"
                    ))
                    .await
                    .expect("prepare");
                loop {
                    let rows = c
                        .query(&claim, &[&EVENT, &(batch as i64)])
                        .await
                        .expect("claim");
                    if rows.is_empty() {
                        return;
                    }
                    let (ids, leases): (Vec<i64>, Vec<i64>) =
                        rows.iter().map(|r| read_pg(r, cols)).unzip();
                    let n = c.execute(&mark, &[&ids, &leases]).await.expect("mark");
                    check(n == ids.len() as u64, "marks applied");
                }
            }));
        }
        for h in handles {
            h.await.expect("join");
        }
        started.elapsed()
    }
}

// ---------------------------------------------------------------- MySQL / MariaDB

pub struct MySqlRaw {
    pub pool: sqlx::MySqlPool,
    /// The claim's locking-read clause: the store's default claim strategy on this server.
    lock_wait: &'static str,
}

impl MySqlRaw {
    pub async fn connect(url: &str, max: u32) -> MySqlRaw {
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(max)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    sqlx::Executor::execute(
                        conn,
                        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                    )
                    .await?;
                    Ok(())
                })
            })
            .connect(url)
            .await
            .expect("connect");
        let version: String = sqlx::query_scalar("SELECT VERSION()")
            .fetch_one(&pool)
            .await
            .expect("version");
        // the store's statements (ClaimStrategy::Auto): a 1205 after the wait is retried
        let lock_wait = match ClaimStrategy::auto_for(&version) {
            ClaimStrategy::QueueThenSkip => "WAIT 1",
            ClaimStrategy::SkipLocked => "SKIP LOCKED",
            _ => "",
        };
        MySqlRaw { pool, lock_wait }
    }
}

fn q(sql: String) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(sql)
}

impl MySqlRaw {
    /// The business row and its task in one transaction (and its claim, with `claim`);
    /// the task's id.
    async fn insert_order_and_task(
        conn: &mut sqlx::pool::PoolConnection<sqlx::MySql>,
        key: &str,
        claim: bool,
    ) -> Result<i64, sqlx::Error> {
        let mut tx = sqlx::Connection::begin(&mut **conn).await?;
        sqlx::query(q(format!("INSERT INTO {ORDERS} (id) VALUES (?)")))
            .bind(key)
            .execute(&mut *tx)
            .await?;
        let done = sqlx::query(q(format!(
            "INSERT INTO {TABLE} (event_type, biz_key, payload, status, attempts, max_attempts,
                retry_strategy, retry_interval_ms, retry_max_interval_ms, next_run_at, lease,
                created_at, updated_at)
             VALUES ('{EVENT}', ?, '{{}}', 0, 0, 5, 'FIXED', 1000, 1000,
                NOW(3) + INTERVAL 0 MICROSECOND, 0, NOW(3), NOW(3))"
        )))
        .bind(key)
        .execute(&mut *tx)
        .await?;
        let id = done.last_insert_id() as i64;
        if claim {
            let done = sqlx::query(q(format!(
                "UPDATE {TABLE} SET status = 3, owner = 'raw', attempts = attempts + 1,
                    lease = lease + 1, updated_at = NOW(3)
                 WHERE id = ? AND status = 0 AND next_run_at <= NOW(3)"
            )))
            .bind(id)
            .execute(&mut *tx)
            .await?;
            check(done.rows_affected() == 1, "claimed");
        }
        tx.commit().await?;
        Ok(id)
    }

    /// Run `sql` with `binds`, again while MariaDB reports a lock conflict (as the store
    /// does); the rows it changed.
    async fn execute_retrying(
        conn: &mut sqlx::pool::PoolConnection<sqlx::MySql>,
        what: &str,
        sql: &str,
        binds: &[i64],
    ) -> u64 {
        loop {
            let mut query = sqlx::query(q(sql.to_owned()));
            for b in binds {
                query = query.bind(*b);
            }
            match query.execute(&mut **conn).await {
                Ok(r) => return r.rows_affected(),
                Err(e) if is_lock_conflict(&e) => continue,
                Err(e) => panic!("{what}: {e}"),
            }
        }
    }
}

#[async_trait]
impl Raw for MySqlRaw {
    async fn log_syncs(&self) -> Option<u64> {
        let (_, n): (String, String) =
            sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Innodb_log_writes'")
                .fetch_one(&self.pool)
                .await
                .ok()?;
        n.parse().ok()
    }

    async fn drop_tables(&self) {
        sqlx::query(q(format!(
            "DROP TABLE IF EXISTS {TABLE}, {TABLE}_inbox, {TABLE}_audit, {TABLE}_migrations, {TABLE}_keys, \
                 {TABLE}_handlers, {TABLE}_barrier, {TABLE}_saga, {TABLE}_saga_step, {TABLE}_saga_audit, \
                 {ORDERS}"
        )))
        .execute(&self.pool)
        .await
        .expect("drop tables");
    }

    async fn reset(&self) {
        for t in [TABLE.to_owned(), format!("{TABLE}_keys")] {
            sqlx::query(q(format!("TRUNCATE TABLE {t}")))
                .execute(&self.pool)
                .await
                .expect("truncate");
        }
        sqlx::query(q(format!(
            "CREATE TABLE IF NOT EXISTS {ORDERS} (id VARCHAR(64) PRIMARY KEY) ENGINE = InnoDB"
        )))
        .execute(&self.pool)
        .await
        .expect("orders");
        sqlx::query(q(format!("TRUNCATE TABLE {ORDERS}")))
            .execute(&self.pool)
            .await
            .expect("truncate");
    }

    async fn reset_sagas(&self) {
        for t in SAGA_TABLES {
            sqlx::query(q(format!("TRUNCATE TABLE {TABLE}{t}")))
                .execute(&self.pool)
                .await
                .expect("reset sagas");
        }
    }

    async fn bulk_insert_rows(
        &self,
        event: &str,
        n: usize,
        start: usize,
        due_ago_s: i64,
        status: i16,
    ) {
        const CHUNK: usize = 5000;
        let mut i = start;
        let end = start + n;
        while i < end {
            let hi = (i + CHUNK).min(end);
            let values = (i..hi)
                .map(|x| {
                    format!(
                        "('{event}','b{x}','{{}}',{status},0,5,'FIXED',1000,1000,
                          NOW(3) - INTERVAL {due_ago_s} SECOND,0,NOW(3),NOW(3))"
                    )
                })
                .collect::<Vec<_>>()
                .join(",");
            sqlx::query(q(format!(
                "INSERT INTO {TABLE} (event_type, biz_key, payload, status, attempts, max_attempts,
                    retry_strategy, retry_interval_ms, retry_max_interval_ms, next_run_at, lease,
                    created_at, updated_at) VALUES {values}"
            )))
            // each chunk's text is new: not kept prepared in the connection's statement
            // cache (a hundred of them per connection held the server's memory at 21 GB
            // during the 10M rows of `counts`, until the OOM killer ended it)
            .persistent(false)
            .execute(&self.pool)
            .await
            .expect("bulk insert");
            i = hi;
        }
        sqlx::query(q(format!("ANALYZE TABLE {TABLE}")))
            .execute(&self.pool)
            .await
            .expect("analyze");
    }

    async fn bulk_insert_ordered(&self, n: usize, keys: usize) {
        self.bulk_insert_rows(EVENT, n, 0, 0, 5).await;
        for sql in [
            format!("UPDATE {TABLE} SET order_key = CONCAT('k', id % {keys})"),
            format!(
                "UPDATE {TABLE} AS t JOIN (SELECT MIN(id) AS id FROM {TABLE} GROUP BY order_key) AS m
                    ON t.id = m.id SET t.status = 0"
            ),
            format!("INSERT IGNORE INTO {TABLE}_keys (order_key) SELECT DISTINCT order_key FROM {TABLE}"),
        ] {
            sqlx::query(q(sql))
                .execute(&self.pool)
                .await
                .expect("ordered");
        }
    }

    async fn insert_batches(&self, workers: usize, batches: usize, batch: usize) -> Duration {
        let values = (0..batch)
            .map(|_| raw_row("?", "?", "NOW(3)"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql =
            format!("INSERT IGNORE INTO {TABLE} ({INSERT_COLUMNS}) VALUES {values} RETURNING id");
        let started = Instant::now();
        let mut handles = Vec::new();
        for w in 0..workers {
            let (pool, sql) = (self.pool.clone(), sql.clone());
            handles.push(tokio::spawn(async move {
                let mut conn = pool.acquire().await.expect("acquire");
                for b in 0..batches {
                    let params = raw_batch(w, b, batch);
                    loop {
                        let mut tx = sqlx::Connection::begin(&mut *conn).await.expect("begin");
                        let mut query = sqlx::query(q(sql.clone()));
                        for p in &params {
                            query = query.bind(p);
                        }
                        match query.fetch_all(&mut *tx).await {
                            Ok(rows) => {
                                check(rows.len() == batch, "every row made");
                                tx.commit().await.expect("commit");
                                break;
                            }
                            // a deadlock victim (gap locks of concurrent inserts): again
                            Err(e) if is_lock_conflict(&e) => continue,
                            Err(e) => panic!("insert: {e}"),
                        }
                    }
                }
            }));
        }
        for h in handles {
            h.await.expect("join");
        }
        started.elapsed()
    }

    async fn per_task(
        &self,
        workers: usize,
        each: usize,
        claim_in_tx: bool,
    ) -> (Duration, Histogram<u64>) {
        let started = Instant::now();
        let mut handles = Vec::new();
        for w in 0..workers {
            let pool = self.pool.clone();
            handles.push(tokio::spawn(async move {
                let mut conn = pool.acquire().await.expect("acquire");
                let mut h = histogram();
                for i in 0..each {
                    let key = format!("r{w}-{i}");
                    // MariaDB may pick this transaction or a claim as a deadlock victim (gap
                    // locks of concurrent inserts on the claim index): retry it, as the store
                    // does.
                    let id = loop {
                        match Self::insert_order_and_task(&mut conn, &key, claim_in_tx).await {
                            Ok(id) => break id,
                            Err(e) if is_lock_conflict(&e) => continue,
                            Err(e) => panic!("enqueue: {e}"),
                        }
                    };
                    let lease = if claim_in_tx {
                        // claimed before the commit: the worker has its row and lease 1
                        record(&mut h, Duration::ZERO);
                        1
                    } else {
                        let committed = Instant::now();
                        let claim = format!(
                            "UPDATE {TABLE} SET status = 3, owner = 'raw', attempts = attempts + 1,
                                lease = lease + 1, updated_at = NOW(3)
                             WHERE id = ? AND status = 0 AND next_run_at <= NOW(3)"
                        );
                        let n = Self::execute_retrying(&mut conn, "claim", &claim, &[id]).await;
                        check(n == 1, "claimed");
                        let (_, lease) = read_mysql(
                            &sqlx::query(q(format!("SELECT {COLUMNS} FROM {TABLE} WHERE id = ?")))
                                .bind(id)
                                .fetch_one(&mut *conn)
                                .await
                                .expect("read"),
                            Shape::Store.columns().1,
                        );
                        record(&mut h, committed.elapsed());
                        lease
                    };
                    let mark = format!(
                        "UPDATE {TABLE} SET status = 1, last_error = NULL, updated_at = NOW(3)
                         WHERE id = ? AND status = 3 AND lease = ?"
                    );
                    let n = Self::execute_retrying(&mut conn, "mark", &mark, &[id, lease]).await;
                    check(n == 1, "mark applied");
                }
                h
            }));
        }
        let all = merged(handles).await;
        (started.elapsed(), all)
    }

    /// The store's shape: `BEGIN`, the locking read of the whole rows, the claim's
    /// `UPDATE … WHERE id IN (…)` (placeholders, one prepared statement per batch size),
    /// `COMMIT`, then one success `UPDATE` for the batch, fenced row by row by lease
    /// (`CASE id`), that reads nothing back when every row applied: five round trips a
    /// batch. The fastest sends the claim's statements as one text (`START TRANSACTION`
    /// … `COMMIT`, the ids going through a temporary table), then the same mark: two
    /// round trips a batch.
    async fn drain(&self, workers: usize, batch: usize, shape: Shape) -> Duration {
        let started = Instant::now();
        let token = Arc::new(std::sync::atomic::AtomicI64::new(1));
        let lock_wait = self.lock_wait;
        let mut handles = Vec::new();
        for _ in 0..workers {
            let pool = self.pool.clone();
            let token = Arc::clone(&token);
            handles.push(tokio::spawn(async move {
                let mut conn = pool.acquire().await.expect("acquire");
                let (columns, cols) = shape.columns();
                // The fastest claim in one round trip: the locking read writes the ids to a
                // temporary table of the session, the update and the read of the rows join
                // it. (MariaDB's `UPDATE` has no `RETURNING`; a claim token to read the rows
                // back by would need an index of its own on every write.)
                let picked = "bench_picked";
                let fastest = format!(
                    "START TRANSACTION;
                     DELETE FROM {picked};
                     INSERT INTO {picked} SELECT id FROM {TABLE} FORCE INDEX (ix_claim_type)
                       WHERE status = 0 AND event_type IN ('{EVENT}') AND priority = 2
                         AND next_run_at <= NOW(3)
                       ORDER BY next_run_at, id LIMIT {batch} FOR UPDATE {lock_wait};
                     UPDATE {TABLE} AS t JOIN {picked} USING (id) SET t.status = 3,
                       t.owner = 'raw', t.attempts = t.attempts + 1, t.lease = t.lease + 1,
                       t.updated_at = NOW(3);
                     SELECT {} FROM {TABLE} AS t JOIN {picked} USING (id);
                     COMMIT",
                    shape.columns_of_t()
                );
                if shape == Shape::Fastest {
                    sqlx::raw_sql(q(format!(
                        "CREATE TEMPORARY TABLE IF NOT EXISTS {picked}
                            (id BIGINT PRIMARY KEY) ENGINE = MEMORY"
                    )))
                    .execute(&mut *conn)
                    .await
                    .expect("temporary table");
                }
                loop {
                    // A deadlock (1213) between racing workers is retried, as the store does.
                    let claim = match shape {
                        Shape::Store => {
                            async {
                                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                                // the whole rows, locked: the update applies to all of them,
                                // so they need no read back (the store does the same)
                                let picked: Vec<(i64, i64)> = sqlx::query(q(format!(
                                    "SELECT {columns} FROM {TABLE} FORCE INDEX (ix_claim_type)
                                     WHERE status = 0 AND event_type IN ('{EVENT}') AND priority = 2
                                       AND next_run_at <= NOW(3)
                                     ORDER BY next_run_at, id LIMIT ? FOR UPDATE {lock_wait}"
                                )))
                                .bind(batch as i64)
                                .fetch_all(&mut *tx)
                                .await?
                                .iter()
                                .map(|r| read_mysql(r, cols))
                                .collect();
                                if picked.is_empty() {
                                    tx.commit().await?;
                                    return Ok(Vec::new());
                                }
                                let list = vec!["?"; picked.len()].join(",");
                                let t = token.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                let mut claim = sqlx::query(q(format!(
                                    "UPDATE {TABLE} SET status = 3, owner = 'raw',
                                        attempts = attempts + 1, lease = lease + 1,
                                        claim_token = ?, updated_at = NOW(3)
                                     WHERE id IN ({list}) AND status = 0"
                                )))
                                .bind(t);
                                for (id, _) in &picked {
                                    claim = claim.bind(id);
                                }
                                let done = claim.execute(&mut *tx).await?;
                                check(
                                    done.rows_affected() == picked.len() as u64,
                                    "all picked claimed",
                                );
                                tx.commit().await?;
                                Ok::<_, sqlx::Error>(
                                    picked.into_iter().map(|(id, l)| (id, l + 1)).collect(),
                                )
                            }
                            .await
                        }
                        Shape::Fastest => {
                            let rows = sqlx::raw_sql(q(fastest.clone()))
                                .fetch_all(&mut *conn)
                                .await;
                            match rows {
                                Ok(rows) => Ok(rows.iter().map(|r| read_mysql(r, cols)).collect()),
                                Err(e) => {
                                    // the text stops at the failed statement: end its
                                    // transaction before trying again
                                    sqlx::raw_sql("ROLLBACK")
                                        .execute(&mut *conn)
                                        .await
                                        .expect("rollback");
                                    Err(e)
                                }
                            }
                        }
                    };
                    let claimed: Vec<(i64, i64)> = match claim {
                        Ok(claimed) if claimed.is_empty() => return,
                        Ok(claimed) => claimed,
                        Err(e) if is_lock_conflict(&e) => continue,
                        Err(e) => panic!("claim: {e}"),
                    };
                    // success marks fenced by each task's lease, one statement (the store's
                    // also writes a token to find the rows that did not apply by)
                    let list = vec!["?"; claimed.len()].join(",");
                    let cases = vec!["WHEN ? THEN ?"; claimed.len()].join(" ");
                    let set_token = if shape == Shape::Store {
                        ", claim_token = ?"
                    } else {
                        ""
                    };
                    loop {
                        let mut mark = sqlx::query(q(format!(
                            "UPDATE {TABLE} SET status = 1, last_error = NULL,
                                updated_at = NOW(3){set_token}
                             WHERE id IN ({list}) AND status = 3 AND lease = CASE id {cases} END"
                        )));
                        if shape == Shape::Store {
                            mark =
                                mark.bind(token.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
                        }
                        for (id, _) in &claimed {
                            mark = mark.bind(id);
                        }
                        for (id, lease) in &claimed {
                            mark = mark.bind(id).bind(lease);
                        }
                        match mark.execute(&mut *conn).await {
                            Ok(done) => {
                                check(
                                    done.rows_affected() == claimed.len() as u64,
                                    "marks applied",
                                );
                                break;
                            }
                            Err(e) if is_lock_conflict(&e) => continue,
                            Err(e) => panic!("mark: {e}"),
                        }
                    }
                }
            }));
        }
        for h in handles {
            h.await.expect("join");
        }
        started.elapsed()
    }
}

/// MySQL's deadlock (1213) and lock-wait timeout (1205): the store retries them; so
/// does the raw SQL.
fn is_lock_conflict(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .is_some_and(|d| matches!(d.number(), 1213 | 1205))
}
