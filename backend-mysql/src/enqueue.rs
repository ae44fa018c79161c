//! The enqueue's statements in MySQL's SQL, which core runs on any connection.

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;

use crate::driver::{bucket, padded, MySqlDriver};

/// The enqueue's statements in MySQL's SQL (run by core's [`EnqueuePlan`] on sqlx). The
/// insert fails on a duplicate key (error 1062, which MySQL rolls back as one statement,
/// leaving the caller's transaction intact), answered as [`Answer::DuplicateKey`]; the
/// existing task is then read with a locking read, so it is seen whatever the isolation
/// level.
impl EnqueueSql for MySqlDriver {
    fn dialect(&self) -> Dialect {
        Dialect::MySql
    }

    fn statement<'a>(&'a self, step: EnqueueStep<'a>, params: Vec<Value<'a>>) -> Statement<'a> {
        let sql = &self.sql;
        let (text, returns) = match step {
            EnqueueStep::Insert { .. } => (&sql.insert, Returns::InsertId),
            EnqueueStep::ReadExisting(_) => (&sql.existing, Returns::Row),
            EnqueueStep::Release(_) => (&sql.release_key, Returns::RowsAffected),
            EnqueueStep::Replace(..) => (&sql.replace_payload, Returns::RowsAffected),
            // the upsert holds the row's exclusive lock whether it inserted or found it
            EnqueueStep::LockKey(_) => (&sql.key_insert, Returns::RowsAffected),
            EnqueueStep::KeyBlocker(_) => (&sql.key_blocker, Returns::Row),
            EnqueueStep::KeyNext(_) => (&sql.key_next, Returns::Row),
            EnqueueStep::KeyPromote(_) => (&sql.key_promote, Returns::RowsAffected),
            EnqueueStep::KeyDrop(_) => (&sql.key_drop, Returns::RowsAffected),
            EnqueueStep::Complete(_) => (&sql.complete, Returns::RowsAffected),
            EnqueueStep::Claim { .. } => (&sql.claim_in, Returns::RowsAffected),
            EnqueueStep::BarrierInsert { .. } => (&sql.barrier_insert, Returns::RowsAffected),
            EnqueueStep::BarrierRead(_) => (&sql.barrier_read, Returns::Row),
            EnqueueStep::SagaInsert(_) => (&sql.saga_insert, Returns::RowsAffected),
            EnqueueStep::SagaRead(_) => (&sql.saga_read, Returns::Row),
            // error, id, lease: the mark's own statement
            EnqueueStep::Fail { .. } => (&sql.mark_fail, Returns::RowsAffected),
            EnqueueStep::SagaLock(_) => (&sql.saga_lock, Returns::Row),
            EnqueueStep::StepRows { .. } => (&sql.step_rows, Returns::Rows),
            EnqueueStep::StepRecord { .. } => (&sql.step_record, Returns::RowsAffected),
            EnqueueStep::SagaSet { .. } => (&sql.saga_set, Returns::RowsAffected),
            EnqueueStep::ResetFailed { .. } => (&sql.reset_failed, Returns::RowsAffected),
            EnqueueStep::SagaLog { .. } => (&sql.saga_log_insert, Returns::RowsAffected),
        };
        Statement::new(text, params, returns)
    }

    /// MariaDB's: an insert returns the rows it made. MySQL's cannot, and a batch
    /// enqueues its tasks one by one.
    fn inserts_rows(&self) -> bool {
        self.returning
    }

    /// MariaDB's multi-row `INSERT IGNORE … VALUES … RETURNING id` of `tasks` (a count
    /// [`insert_rows_take`](EnqueueSql::insert_rows_take) gave): a row whose key is held
    /// is skipped. When every task is plain ([`is_plain`]), the text with their settings
    /// as constants.
    fn insert_rows<'a>(
        &'a self,
        _: &'a str,
        tasks: &[Checked<&'a NewTask>],
    ) -> Option<Statement<'a>> {
        let plain =
            (self.sql.insert_rows_plain.as_ref()).filter(|_| tasks.iter().all(|&t| is_plain(t)));
        if let Some(texts) = plain {
            // each row's own values only (see `Sql::insert_rows_plain`)
            let params = tasks
                .iter()
                .flat_map(|&t| {
                    let values = insert_params(t, Status::Pending.code(), self.run_at());
                    PLAIN_OWN.map(|i| values.get(i).copied())
                })
                .collect::<Option<Vec<_>>>()?;
            return Some(Statement::new(
                texts.get(tasks.len())?,
                params,
                Returns::Rows,
            ));
        }
        let text = self.sql.insert_rows.get(tasks.len())?;
        let params = rows_params(tasks, self.run_at());
        Some(Statement::new(text, params, Returns::Rows))
    }

    /// Every value bound: no document.
    fn insert_rows_document(&self) -> bool {
        false
    }

    /// The row counts there is a text for.
    fn insert_rows_take(&self, n: usize) -> usize {
        self.sql.insert_rows.take(n)
    }

    /// Each step of a release of many keys is one statement over a padded list
    /// ([`padded`]): a text per list size, and a repeated key or id changes nothing.
    fn releases_keys_together(&self) -> bool {
        true
    }

    /// The keys' upsert holds every key row's exclusive lock, whether it inserted it.
    fn keys_insert_locks(&self) -> bool {
        true
    }

    fn keys_statement<'a>(&'a self, step: &'a KeysStep) -> Option<Statement<'a>> {
        let sql = &self.sql;
        let texts = |k: &'a [String]| padded(k).map(|k| Value::Text(Some(k))).collect();
        let n = |len: usize| bucket(len);
        Some(match step {
            KeysStep::InsertKeys(k) => {
                Statement::owned(sql.keys_upsert(n(k.len())), texts(k), Returns::RowsAffected)
            }
            KeysStep::ReadBlockers(k) => {
                Statement::owned(sql.keys_blockers(n(k.len())), texts(k), Returns::KeyRows)
            }
            KeysStep::ReadNext(k) => {
                Statement::owned(sql.keys_next(n(k.len())), texts(k), Returns::KeyRows)
            }
            KeysStep::Promote(ids) => {
                let values = padded(ids).map(|id| Value::BigInt(Some(*id))).collect();
                Statement::owned(
                    sql.keys_promote(n(ids.len())),
                    values,
                    Returns::RowsAffected,
                )
            }
            KeysStep::DropKeys(k) => {
                Statement::owned(sql.keys_drop(n(k.len())), texts(k), Returns::RowsAffected)
            }
            _ => return None,
        })
    }
}
