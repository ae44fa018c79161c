//! The enqueue's statements in SQLite's SQL, which core runs on any connection.

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;

use crate::sql::{now_ms, Sql, LAYOUTS};

/// The enqueue's statements in SQLite's SQL (run by core's [`EnqueuePlan`]). Times are
/// this machine's clock in milliseconds, read when each statement is made (inside the
/// write transaction).
impl EnqueueSql for Sql {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn run_at(&self) -> RunAt {
        RunAt::Millis
    }

    fn statement<'a>(&'a self, step: EnqueueStep<'a>, mut params: Vec<Value<'a>>) -> Statement<'a> {
        // (SQL, result, whether the clock follows the step's parameters)
        let (text, returns, clock) = match step {
            EnqueueStep::Insert { .. } => (&self.insert, Returns::Row, true),
            EnqueueStep::ReadExisting(_) => (&self.existing, Returns::Row, true),
            EnqueueStep::Release(_) => (&self.release_key, Returns::RowsAffected, false),
            EnqueueStep::Replace(..) => (&self.replace_payload, Returns::RowsAffected, true),
            // the write transaction holds the whole file: the key needs no lock of its own
            EnqueueStep::LockKey(_) => (&self.key_insert, Returns::RowsAffected, false),
            EnqueueStep::KeyBlocker(_) => (&self.key_blocker, Returns::Row, false),
            EnqueueStep::KeyNext(_) => (&self.key_next, Returns::Row, false),
            EnqueueStep::KeyPromote(_) => (&self.key_promote, Returns::RowsAffected, true),
            EnqueueStep::KeyDrop(_) => (&self.key_drop, Returns::RowsAffected, false),
            EnqueueStep::Complete(_) => (&self.complete, Returns::RowsAffected, true),
            EnqueueStep::Claim { .. } => (&self.claim_in, Returns::RowsAffected, true),
            EnqueueStep::BarrierInsert { .. } => {
                (&self.barrier_insert, Returns::RowsAffected, true)
            }
            EnqueueStep::BarrierRead(_) => (&self.barrier_read, Returns::Row, false),
            EnqueueStep::SagaInsert(_) => (&self.saga_insert, Returns::RowsAffected, true),
            EnqueueStep::SagaRead(_) => (&self.saga_read, Returns::Row, false),
            EnqueueStep::Fail { .. } => (&self.fail_tx, Returns::RowsAffected, true),
            EnqueueStep::SagaLock(_) => (&self.saga_lock, Returns::Row, false),
            EnqueueStep::StepRows { .. } => (&self.step_rows, Returns::Rows, false),
            EnqueueStep::StepRecord { .. } => (&self.step_record, Returns::RowsAffected, true),
            EnqueueStep::SagaSet { .. } => (&self.saga_set, Returns::RowsAffected, true),
            EnqueueStep::ResetFailed { .. } => (&self.reset_failed, Returns::RowsAffected, true),
            EnqueueStep::SagaLog { .. } => (&self.saga_log_insert, Returns::RowsAffected, true),
        };
        if clock {
            params.push(Value::BigInt(Some(now_ms())));
        }
        Statement::new(text, params, returns)
    }

    fn inserts_rows(&self) -> bool {
        true
    }

    fn insert_rows<'a>(
        &'a self,
        _: &'a str,
        tasks: &[Checked<&'a NewTask>],
    ) -> Option<Statement<'a>> {
        let rows: Vec<Vec<Value<'a>>> = tasks
            .iter()
            .map(|&t| insert_params(t, Status::Pending.code(), RunAt::Millis))
            .collect();
        let first = rows.first()?;
        // the first layout whose shared values every row agrees on (see `LAYOUTS`)
        let shared = LAYOUTS
            .iter()
            .zip(&self.insert_rows_shared)
            .find(|(own, _)| {
                rows.iter()
                    .all(|r| (0..r.len()).all(|i| own.contains(&i) || r.get(i) == first.get(i)))
            });
        let (text, mut params) = match shared {
            Some((own, texts)) => {
                // each row's own values, then the batch's shared ones once
                let mut params: Vec<Value<'a>> = rows
                    .iter()
                    .flat_map(|r| own.iter().filter_map(|&i| r.get(i).copied()))
                    .collect();
                params.extend(
                    (0..first.len())
                        .filter(|i| !own.contains(i))
                        .filter_map(|i| first.get(i).copied()),
                );
                (texts.get(tasks.len())?, params)
            }
            None => (
                self.insert_rows.get(tasks.len())?,
                rows.into_iter().flatten().collect(),
            ),
        };
        params.push(Value::BigInt(Some(now_ms())));
        Some(Statement::new(text, params, Returns::Rows))
    }

    /// Every value bound: no document.
    fn insert_rows_document(&self) -> bool {
        false
    }

    /// The row counts there is a text for.
    fn insert_rows_take(&self, n: usize) -> usize {
        self.insert_rows.take(n)
    }
}
