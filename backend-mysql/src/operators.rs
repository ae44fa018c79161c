//! Operators' changes on MySQL: a task's change with its audit entry in one transaction
//! (cancel, reset, edit, delete), and a queue's setting with its log entry.

use backstop_core::driver::prelude::*;
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, MySqlConnection};

use crate::conn::safe;
use crate::connect::my_err;
use crate::driver::MySqlDriver;
use crate::rows::{raw_task, Cols};
use crate::sql::Sql;

impl MySqlDriver {
    /// An operator's change of task `id`: the `update` (fenced by status), its audit
    /// entry and the row read back, in one transaction (the row lock keeps a claimer out
    /// until commit); or the status that refused it.
    pub(crate) async fn audited_update<'q, F>(
        &'q self,
        id: TaskId,
        action: &'static str,
        audit: &'q Audit,
        update: F,
    ) -> Result<Change>
    where
        F: FnOnce(&'q Sql) -> sqlx::query::Query<'q, MySql, sqlx::mysql::MySqlArguments>,
    {
        let sql = &self.sql;
        let (row, status) = self
            .on_conn(|mut conn| async move {
                let mut tx = conn.begin(None).await?;
                let done = update(sql).execute(&mut *tx).await?;
                if done.rows_affected() != 1 {
                    let status: Option<i8> = sqlx::query_scalar(safe(&sql.status_of))
                        .bind(id)
                        .fetch_optional(&mut *tx)
                        .await?;
                    return Ok((None, status));
                }
                audit_entry(sql, &mut tx, id, action, audit).await?;
                let row = sqlx::query(safe(&sql.get))
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
                conn.settled();
                Ok((row, None))
            })
            .await?;
        changed(row, status)
    }

    /// `set_queue`: the queue's row inserted (or its setting changed where it differs),
    /// the change logged when it changed, the row read back, in one transaction.
    pub(crate) async fn queue_change(
        &self,
        event_type: &str,
        change: QueueChange,
        audit: &Audit,
    ) -> Result<Queue> {
        let sql = &self.sql;
        let c = change.columns();
        let (paused, concurrency, rate, window, partitioned) = (
            c.paused,
            c.concurrency,
            c.rate_limit,
            c.rate_window_ms,
            c.partitioned,
        );
        let action = change.action();
        let action = action.as_str();
        let row = self
            .on_conn(|mut conn| async move {
                let mut tx = conn.begin(None).await?;
                let inserted = sqlx::query(safe(&sql.queue_insert))
                    .bind(event_type)
                    .bind(paused)
                    .bind(concurrency)
                    .bind(rate)
                    .bind(window)
                    .bind(partitioned)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                    > 0;
                let changed = if inserted {
                    !change.sets_nothing_new()
                } else {
                    sqlx::query(safe(&sql.queue_update))
                        .bind(paused)
                        .bind(concurrency)
                        .bind(rate)
                        .bind(window)
                        .bind(partitioned)
                        .bind(event_type)
                        .bind(paused)
                        .bind(concurrency)
                        .bind(rate)
                        .bind(window)
                        .bind(partitioned)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected()
                        > 0
                };
                if changed {
                    sqlx::query(safe(&sql.queue_audit))
                        .bind(action)
                        .bind(&audit.operator)
                        .bind(&audit.reason)
                        .bind(event_type)
                        .execute(&mut *tx)
                        .await?;
                }
                let row = sqlx::query(safe(&sql.queue_get))
                    .bind(event_type)
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                conn.settled();
                Ok(row)
            })
            .await?;
        read_queue(&Cols(&row)).map_err(my_err)
    }
    /// Every queue's row (`queues`).
    pub(crate) async fn queue_rows(&self) -> Result<Vec<Queue>> {
        sqlx::query(safe(&self.sql.queues))
            .fetch_all(&self.pool)
            .await
            .map_err(my_err)?
            .iter()
            .map(|r| read_queue(&Cols(r)).map_err(my_err))
            .collect()
    }

    /// One queue's log, oldest first (`queue_log`).
    pub(crate) async fn queue_entries(&self, event_type: &str) -> Result<Vec<QueueLogEntry>> {
        sqlx::query(safe(&self.sql.queue_log))
            .bind(event_type)
            .fetch_all(&self.pool)
            .await
            .map_err(my_err)?
            .iter()
            .map(|r| read_queue_entry(&Cols(r)).map_err(my_err))
            .collect()
    }
}

/// Append an operator's audit entry on `tx`.
pub(crate) async fn audit_entry(
    sql: &Sql,
    tx: &mut MySqlConnection,
    id: TaskId,
    action: &str,
    audit: &Audit,
) -> std::result::Result<(), sqlx::Error> {
    sqlx::query(safe(&sql.audit_insert))
        .bind(id)
        .bind(action)
        .bind(&audit.operator)
        .bind(&audit.reason)
        .execute(tx)
        .await
        .map(|_| ())
}

/// The answer of a fenced change: the row, or the status that refused it, or missing.
pub(crate) fn changed(row: Option<MySqlRow>, status: Option<i8>) -> Result<Change> {
    Ok(match (row, status) {
        (Some(row), _) => Change::Done(Box::new(raw_task(&row).map_err(my_err)?)),
        (None, Some(code)) => Change::Refused(code.into()),
        (None, None) => Change::Missing,
    })
}
