//! The enqueue's statements in PostgreSQL's SQL, which core runs on any connection.

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;

use crate::driver::PgDriver;

/// The enqueue's statements in PostgreSQL's SQL (run by core's [`EnqueuePlan`]). Every
/// statement returns a row (`RETURNING`), so each is answered with its first row; a
/// group's step rows are answered with all of them.
impl EnqueueSql for PgDriver {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn statement<'a>(&'a self, step: EnqueueStep<'a>, mut params: Vec<Value<'a>>) -> Statement<'a> {
        let sql = &self.sql;
        let text = match step {
            // announced at commit on the table's channel
            EnqueueStep::Insert { task, .. } if self.notify_now(task.event_type()) => {
                params.push(Value::Text(Some(&sql.channel)));
                &sql.insert_notify
            }
            EnqueueStep::Insert { .. } => &sql.insert,
            EnqueueStep::ReadExisting(_) => &sql.existing,
            EnqueueStep::Release(_) => &sql.release_key,
            EnqueueStep::Replace(..) => &sql.replace_payload,
            EnqueueStep::LockKey(_) => &sql.key_lock,
            EnqueueStep::KeyBlocker(_) => &sql.key_blocker,
            EnqueueStep::KeyNext(_) => &sql.key_next,
            EnqueueStep::KeyPromote(_) => &sql.key_promote,
            EnqueueStep::KeyDrop(_) => &sql.key_drop,
            EnqueueStep::Complete(_) => &sql.complete,
            EnqueueStep::Claim { .. } => &sql.claim_in,
            EnqueueStep::BarrierInsert { .. } => &sql.barrier_insert,
            EnqueueStep::BarrierRead(_) => &sql.barrier_read,
            EnqueueStep::SagaInsert(_) => &sql.saga_insert,
            EnqueueStep::SagaRead(_) => &sql.saga_read,
            EnqueueStep::Fail { .. } => &sql.fail_tx,
            EnqueueStep::SagaLock(_) => &sql.saga_lock,
            EnqueueStep::StepRows { .. } => {
                return Statement::new(&sql.step_rows, params, Returns::Rows)
            }
            EnqueueStep::StepRecord { .. } => &sql.step_record,
            EnqueueStep::SagaSet { .. } => &sql.saga_set,
            EnqueueStep::ResetFailed { .. } => &sql.reset_failed,
            EnqueueStep::SagaLog { .. } => &sql.saga_log_insert,
        };
        Statement::new(text, params, Returns::Row)
    }

    /// Rows from one JSON parameter (`json_to_recordset`), returning their ids.
    fn inserts_rows(&self) -> bool {
        true
    }

    fn insert_rows<'a>(
        &'a self,
        doc: &'a str,
        tasks: &[Checked<&'a NewTask>],
    ) -> Option<Statement<'a>> {
        let sql = &self.sql;
        Some(self.rows_statement(doc, tasks, &sql.insert_rows, &sql.insert_rows_notify))
    }

    /// Rows from core's `plain_document` (`jsonb_array_elements`), the settings constants.
    fn insert_plain_rows<'a>(
        &'a self,
        doc: &'a str,
        tasks: &[Checked<&'a NewTask>],
    ) -> Option<Statement<'a>> {
        let (rows, notify) = self.sql.insert_plain_rows.as_ref()?;
        Some(self.rows_statement(doc, tasks, rows, notify))
    }

    fn inserts_plain_rows(&self) -> bool {
        self.sql.insert_plain_rows.is_some()
    }

    /// Each step of a release of many keys is one statement over one array.
    fn releases_keys_together(&self) -> bool {
        true
    }

    fn keys_statement<'a>(&'a self, step: &'a KeysStep) -> Option<Statement<'a>> {
        let sql = &self.sql;
        let (text, list, returns) = match step {
            KeysStep::InsertKeys(k) => (&sql.keys_insert, Value::TextList(k), Returns::Row),
            KeysStep::LockKeys(k) => (&sql.keys_lock, Value::TextList(k), Returns::KeyRows),
            KeysStep::ReadBlockers(k) => (&sql.keys_blockers, Value::TextList(k), Returns::KeyRows),
            KeysStep::ReadNext(k) => (&sql.keys_next, Value::TextList(k), Returns::KeyRows),
            KeysStep::Promote(ids) => (&sql.keys_promote, Value::BigIntList(ids), Returns::Rows),
            KeysStep::DropKeys(k) => (&sql.keys_drop, Value::TextList(k), Returns::Row),
            _ => return None,
        };
        Some(Statement::new(text, vec![list], returns))
    }
}

impl PgDriver {
    /// A multi-row insert of `doc`: `rows`, or `notify` (the channel its $2) when the
    /// throttle lets one of the batch's types be announced (every type asks: each may be
    /// due an announcement).
    fn rows_statement<'a>(
        &'a self,
        doc: &'a str,
        tasks: &[Checked<&'a NewTask>],
        rows: &'a str,
        notify: &'a str,
    ) -> Statement<'a> {
        let mut types: Vec<&str> = tasks.iter().map(|t| t.event_type()).collect();
        types.sort_unstable();
        types.dedup();
        let announce = types
            .into_iter()
            .fold(false, |any, t| self.notify_now(t) | any);
        let mut params = vec![Value::Text(Some(doc))];
        let text = if announce {
            params.push(Value::Text(Some(&self.sql.channel)));
            notify
        } else {
            rows
        };
        Statement::new(text, params, Returns::Rows)
    }
}
