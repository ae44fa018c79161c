//! The enqueue's statements in SQLite's SQL, which core runs on any connection.

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;

use crate::sql::{now_ms, Sql};

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
        self.insert_rows.statement(tasks)
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
