//! The MySQL driver's upkeep: purges of aged rows, and the migrations under their lock.

use backstop_core::driver::prelude::*;
use sqlx::Executor;

use crate::conn::{micros, safe};
use crate::connect::{error_number, my_err};
use crate::driver::MySqlDriver;

/// How many times a migration statement aborted by another instance's replicated DDL
/// (Galera) is run again before the migration fails.
const GALERA_ABORT_RETRIES: u64 = 5;

impl MySqlDriver {
    /// Run purge statement `sql` (the age in µs, then the limit) on the batch; how many
    /// rows it deleted.
    pub(crate) async fn purge(&self, sql: &str, batch: Checked<AgedBatch>) -> Result<u64> {
        self.purge_where(sql, None, batch).await
    }

    /// [`purge`](Self::purge) of a statement that binds `status` first, when given.
    pub(crate) async fn purge_where(
        &self,
        sql: &str,
        status: Option<i16>,
        batch: Checked<AgedBatch>,
    ) -> Result<u64> {
        let mut query = sqlx::query(safe(sql));
        if let Some(status) = status {
            query = query.bind(status);
        }
        query
            .bind(micros(batch.older_than))
            .bind(batch.limit as i64)
            .execute(&self.pool)
            .await
            .map(|d| d.rows_affected())
            .map_err(my_err)
    }
    /// [`Driver::migrate`] under the migration lock. MySQL commits each DDL statement by
    /// itself: each migration is recorded right after its statements, and a migration
    /// whose one `ALTER TABLE` had applied before a crash (so its column or key exists
    /// and the `ALTER` fails as a whole) is recorded as applied.
    pub(crate) async fn migrate_locked(
        &self,
        conn: &mut sqlx::MySqlConnection,
        target: u32,
    ) -> Result<()> {
        // the migrations table made only when it is missing: a `CREATE TABLE IF NOT
        // EXISTS` of a table that exists is still DDL, which a Galera cluster runs in
        // total order, aborting every open transaction on the table on every node
        let read = sqlx::query_scalar::<_, i64>(safe(&self.sql.schema.read));
        let applied = match read.fetch_all(&mut *conn).await {
            Ok(applied) => applied,
            Err(e) if error_number(&e) == Some(1146) => {
                conn.execute(safe(&self.sql.schema.setup))
                    .await
                    .map_err(my_err)?;
                sqlx::query_scalar::<_, i64>(safe(&self.sql.schema.read))
                    .fetch_all(&mut *conn)
                    .await
                    .map_err(my_err)?
            }
            Err(e) => return Err(my_err(e)),
        };
        let table = &self.options.config.table;
        let migrations = self.sql.schema.migrations()?;
        for m in schema::pending(table, &applied, &migrations, target)? {
            for statement in &m.statements {
                let mut aborted = 0;
                loop {
                    match conn.execute(safe(statement)).await {
                        Ok(_) => break,
                        // duplicate column, duplicate key name, no such column or key to drop
                        Err(e)
                            if m.version > 1
                                && matches!(error_number(&e), Some(1060 | 1061 | 1091)) =>
                        {
                            tracing::warn!(table, version = m.version, error = %e,
                                "migration had applied before (another instance, or the process stopped before recording it); recording it now");
                            break;
                        }
                        Err(e) => match self.again_after(&e, &mut aborted) {
                            Some(pause) => tokio::time::sleep(pause).await,
                            None => return Err(my_err(e)),
                        },
                    }
                }
            }
            let mut aborted = 0;
            let recorded = loop {
                let recorded = sqlx::query(safe(&self.sql.schema.record))
                    .bind(m.version)
                    .bind(m.name)
                    .execute(&mut *conn)
                    .await;
                match recorded {
                    Err(e) => match self.again_after(&e, &mut aborted) {
                        Some(pause) => tokio::time::sleep(pause).await,
                        None => break Err(e),
                    },
                    done => break done,
                }
            };
            match recorded {
                Ok(_) => schema::log_applied(table, m),
                // another instance recorded it first: on a Galera cluster `GET_LOCK` holds
                // on one node only, so instances on two nodes may migrate together; every
                // statement is safe to run twice (DDL replicated in total order, the errors
                // of a change already made passed over above)
                Err(e) if error_number(&e) == Some(1062) => {
                    tracing::debug!(
                        table,
                        version = m.version,
                        "another instance recorded this migration"
                    );
                }
                Err(e) => return Err(my_err(e)),
            }
        }
        Ok(())
    }

    /// Whether a migration's statement that failed with `e` runs again, and after what
    /// pause: on Galera a racing instance's DDL on the table, replicated in total order,
    /// aborts a statement waiting for the table's metadata lock (1317 interrupted, or
    /// 1213), and the statement run again finds the change made or makes it; at most
    /// [`GALERA_ABORT_RETRIES`] times per statement (`aborted` counts them), 50 ms
    /// longer each time.
    fn again_after(&self, e: &sqlx::Error, aborted: &mut u64) -> Option<std::time::Duration> {
        if !self.galera
            || *aborted >= GALERA_ABORT_RETRIES
            || !matches!(error_number(e), Some(1213 | 1317))
        {
            return None;
        }
        *aborted += 1;
        tracing::debug!(table = %self.options.config.table, error = %e,
            "migration statement aborted by replicated DDL; running it again");
        Some(std::time::Duration::from_millis(50 * *aborted))
    }
}
