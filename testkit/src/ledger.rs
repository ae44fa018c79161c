//! A ledger table of handler runs, in the case's database: the racing limit cases record
//! each handler's start and end in it as they happen (the handler waits until its row is
//! written) and assert the cluster-wide maximum with SQL over the table.
//!
//! The engines of a case run in one process, so the times are one monotonic clock's
//! (microseconds since the ledger was made); the case serves the writes on its own
//! connection ([`Ledger::serve_until`]) while the engines run.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, Mutex};

use crate::{Ctx, Harness};

/// A statement to write, and where to say it is written.
type Write = (String, oneshot::Sender<()>);

/// The ledger table `table`: `(task, part, started, ended)`, one row per handler run.
pub(crate) struct Ledger {
    table: String,
    base: Instant,
    tx: mpsc::UnboundedSender<Write>,
    rx: Mutex<mpsc::UnboundedReceiver<Write>>,
}

/// What a handler records with: cheap to clone into every handler.
#[derive(Clone)]
pub(crate) struct Recorder {
    table: String,
    base: Instant,
    tx: mpsc::UnboundedSender<Write>,
}

impl Recorder {
    fn micros(&self) -> i64 {
        i64::try_from(self.base.elapsed().as_micros()).unwrap_or(i64::MAX)
    }

    async fn write(&self, sql: String) {
        let (done, written) = oneshot::channel();
        if self.tx.send((sql, done)).is_ok() {
            let _ = written.await;
        }
    }

    /// Task `task` (of partition `part`, `""` for none) started now.
    pub(crate) async fn started(&self, task: i64, part: &str) {
        let at = self.micros();
        let t = &self.table;
        self.write(format!(
            "INSERT INTO {t} (task, part, started) VALUES ({task}, '{part}', {at})"
        ))
        .await;
    }

    /// Task `task`'s run ended now.
    pub(crate) async fn ended(&self, task: i64) {
        let at = self.micros();
        let t = &self.table;
        self.write(format!(
            "UPDATE {t} SET ended = {at} WHERE task = {task} AND ended IS NULL"
        ))
        .await;
    }
}

impl Ledger {
    /// Create the ledger table `table` in the case's database.
    pub(crate) async fn create<H: Harness>(ctx: &Ctx<H>, table: &str) -> Self {
        ctx.harness
            .execute(
                &ctx.db,
                &format!(
                    "CREATE TABLE {table} (task BIGINT NOT NULL, part VARCHAR(64) NOT NULL,
                        started BIGINT NOT NULL, ended BIGINT)"
                ),
            )
            .await;
        let (tx, rx) = mpsc::unbounded_channel();
        Ledger {
            table: table.to_owned(),
            base: Instant::now(),
            tx,
            rx: Mutex::new(rx),
        }
    }

    /// A recorder for the handlers.
    pub(crate) fn recorder(&self) -> Recorder {
        Recorder {
            table: self.table.clone(),
            base: self.base,
            tx: self.tx.clone(),
        }
    }

    /// Run `work` (the engines' run), writing the handlers' records meanwhile; then
    /// those still queued.
    pub(crate) async fn serve_until<H: Harness, T>(
        &self,
        ctx: &Ctx<H>,
        work: impl Future<Output = T>,
    ) -> T {
        let mut rx = self.rx.lock().await;
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => {
                    while let Ok((sql, done)) = rx.try_recv() {
                        ctx.harness.execute(&ctx.db, &sql).await;
                        let _ = done.send(());
                    }
                    return out;
                }
                Some((sql, done)) = rx.recv() => {
                    ctx.harness.execute(&ctx.db, &sql).await;
                    let _ = done.send(());
                }
            }
        }
    }

    /// The most runs at one instant (of one partition when `per_part`): for each run's
    /// start, the runs started by then and not yet ended.
    pub(crate) async fn most_running<H: Harness>(&self, ctx: &Ctx<H>, per_part: bool) -> i64 {
        let t = &self.table;
        let same = if per_part { "AND b.part = a.part" } else { "" };
        let sql = format!(
            "SELECT MAX(n) FROM (SELECT (SELECT COUNT(*) FROM {t} b
                WHERE b.started <= a.started AND b.ended > a.started {same}) AS n
             FROM {t} a) m"
        );
        ctx.harness.query_i64(&ctx.db, &sql).await
    }

    /// The most starts within `span` of a start.
    pub(crate) async fn most_started_within<H: Harness>(
        &self,
        ctx: &Ctx<H>,
        span: Duration,
    ) -> i64 {
        let t = &self.table;
        let span = span.as_micros();
        let sql = format!(
            "SELECT MAX(n) FROM (SELECT (SELECT COUNT(*) FROM {t} b
                WHERE b.started >= a.started AND b.started < a.started + {span}) AS n
             FROM {t} a) m"
        );
        ctx.harness.query_i64(&ctx.db, &sql).await
    }

    /// The time from the first start to the last.
    pub(crate) async fn span<H: Harness>(&self, ctx: &Ctx<H>) -> Duration {
        let t = &self.table;
        let sql = format!("SELECT MAX(started) - MIN(started) FROM {t}");
        let micros = ctx.harness.query_i64(&ctx.db, &sql).await;
        Duration::from_micros(u64::try_from(micros).unwrap_or(0))
    }

    /// How many runs ended.
    pub(crate) async fn ended<H: Harness>(&self, ctx: &Ctx<H>) -> i64 {
        let t = &self.table;
        let sql = format!("SELECT COUNT(*) FROM {t} WHERE ended IS NOT NULL");
        ctx.harness.query_i64(&ctx.db, &sql).await
    }
}
