//! One enqueue as statements: the backend's SQL for each step ([`EnqueueSql`]) and the
//! plan that runs the enqueue protocol on them ([`EnqueuePlan`]).

use super::statement::{applied, column, first_column, locked, row};
use super::{
    millis, Answer, Checked, Dialect, Existing, InsertStep, Inserted, KeyReleasePlan, KeyedInsert,
    KeysStep, Statement, TxPlan, Value,
};
use crate::error::{Error, ErrorKind, Result};
use crate::model::{
    Audit, BranchCall, BranchOp, Lease, NewTask, SagaId, SagaStart, SagaStatus, StepState, TaskId,
    WhenParked,
};

/// A statement an enqueue runs (see [`EnqueueSql`]), with what it works on, and the
/// parameters core binds to it, in this order ([`EnqueueSql::statement`] gets them made).
#[derive(Debug, Clone, Copy)]
pub enum EnqueueStep<'a> {
    /// [`InsertStep::Insert`] of `task` with this initial status code: [`insert_params`].
    Insert {
        /// pending (0), or waiting (5) behind its order key.
        status: i16,
        /// The task inserted.
        task: Checked<&'a NewTask>,
    },
    /// [`InsertStep::ReadExisting`] of the task's key: event type, business key.
    ReadExisting(Checked<&'a NewTask>),
    /// [`InsertStep::Release`]: the id.
    Release(TaskId),
    /// [`InsertStep::Replace`] of pending task `id`'s payload with the task's, and with
    /// [`OnDuplicate::Replace`](crate::OnDuplicate::Replace) its due time too:
    /// parameters 1 the new payload, 2 whether the due time moves (0/1), 3 delay (ms)
    /// and 4 run at as the insert's 8 and 9 (the due time is the later of now plus the
    /// delay and the run-at, or now), 5 the id. Only a task still pending (`status = 0`)
    /// changes: the count says whether it did.
    Replace(TaskId, Checked<&'a NewTask>),
    /// [`ReleaseStep::LockKey`](crate::driver::ReleaseStep::LockKey) (also [`InsertStep::LockKey`]) of this order key: the key.
    LockKey(&'a str),
    /// [`ReleaseStep::ReadBlocker`](crate::driver::ReleaseStep::ReadBlocker): the key.
    KeyBlocker(&'a str),
    /// [`ReleaseStep::ReadNext`](crate::driver::ReleaseStep::ReadNext): the key.
    KeyNext(&'a str),
    /// [`ReleaseStep::Promote`](crate::driver::ReleaseStep::Promote): the id.
    KeyPromote(TaskId),
    /// [`ReleaseStep::DropKey`](crate::driver::ReleaseStep::DropKey): the key.
    KeyDrop(&'a str),
    /// The fenced success mark of a lease's task on the handler's transaction
    /// (`complete_tx`): `status = 1` (succeeded), `last_error` cleared, `updated_at` =
    /// now, where the task is running under the lease; a row changed, or returned, when
    /// it applied. Parameters: the task's id, the lease's token.
    Complete(Lease),
    /// The claim of a task never claimed before (lease 0) on the caller's transaction
    /// ([`Transactional::claim_in`](crate::driver::Transactional::claim_in)): as
    /// [`claim_by_id`](crate::TaskStore::claim_by_id) changes it — pending and due
    /// (`next_run_at <= now`) → running, `owner` set, `attempts + 1`, `updated_at` the
    /// time of this statement — with the lease set to 1. A row changed, or returned,
    /// when it applied; none when the task is missing, not pending, not due, or was
    /// claimed before. Parameters: the owner, the task's id.
    Claim {
        /// The task.
        id: TaskId,
        /// Who claims it.
        owner: &'a str,
    },
    /// An insert into the participant barrier's table (see [`BarrierPlan`](crate::driver::BarrierPlan)) of the row
    /// `(call's gid, call's branch id, op)` with the call's own operation as the reason
    /// and `created_at` now, skipped when the row exists (`ON CONFLICT DO NOTHING`,
    /// `INSERT IGNORE`, `INSERT OR IGNORE`): a row changed, or returned, when it
    /// inserted. Parameters: the gid, the branch id, `op`'s name, the call's operation's
    /// name ([`BranchOp::as_str`]).
    BarrierInsert {
        /// The call deciding its barrier.
        call: &'a BranchCall,
        /// The operation whose row is inserted: the call's own, or the one it undoes.
        op: BranchOp,
    },
    /// A read of the barrier row `(gid, branch id, the call's operation)`, after its
    /// insert was skipped: one row with one column, 1 when the row's reason is its own
    /// operation and 0 when another operation (its compensation) wrote it; no row when
    /// it is gone. A locking read where the database's plain read would miss a row
    /// committed since the transaction's snapshot (MySQL). Parameters: the gid, the
    /// branch id, the operation's name.
    BarrierRead(&'a BranchCall),
    /// The insert of a saga's state row (see [`SagaStartPlan`](crate::driver::SagaStartPlan)):
    /// the name, the key, status 0 (running), group 0, the input, version 0,
    /// `created_at` and `updated_at` now; skipped when a saga of this name and key
    /// exists (`ON CONFLICT DO NOTHING`, `INSERT IGNORE`, `INSERT OR IGNORE`): a row
    /// changed, or returned, when it inserted. Parameters: the name, the key, the input.
    SagaInsert(&'a SagaStart),
    /// The read of the saga of a name and key: one row of two integers, its id and its
    /// status's code ([`SagaStatus::code`](crate::SagaStatus::code)); no row when there
    /// is none. A locking read where the database's plain read would miss a row
    /// committed since the transaction's snapshot (MySQL). Parameters: the name, the key.
    SagaRead(&'a SagaStart),
    /// The fenced failure of a lease's task on the transaction (a saga step out of
    /// attempts, see [`saga_write_on`](crate::driver::saga_write_on)): `status = 2`
    /// (failed), `owner` cleared, `last_error` the error, `updated_at` = now, where the
    /// task is running under the lease; a row changed, or returned, when it applied.
    /// Parameters: the error, the task's id, the lease's token.
    Fail {
        /// The lease the task must still run under.
        lease: Lease,
        /// Its last error (at most [`MAX_ERROR_BYTES`](crate::limits::MAX_ERROR_BYTES)).
        error: &'a str,
    },
    /// The locking read of saga `id`'s row (`FOR UPDATE`; SQLite's write transaction
    /// holds the file): one row of two integers, its status code and its group; no row
    /// when there is none. Parameters: the id.
    SagaLock(SagaId),
    /// The step rows of a saga's group: every row (`Returns::Rows`) of two integers, the
    /// step's position and its state code ([`StepState::code`](crate::StepState::code)),
    /// read after [`SagaLock`](Self::SagaLock) so that it sees every row committed
    /// before (a locking read on MySQL). Parameters: the saga's id, the group
    /// ([`Value::Int`]).
    StepRows {
        /// The saga.
        saga: SagaId,
        /// The group.
        group: u32,
    },
    /// The upsert of one step row (key: saga id, position): inserted with
    /// `updated_at` now, or its state set, its output replaced only by a non-`NULL` one,
    /// and `updated_at` now. Parameters: the saga's id, the position ([`Value::Int`]),
    /// the step's name, its group ([`Value::Int`]), the state's code
    /// ([`Value::SmallInt`]), the output (`NULL` for none).
    StepRecord {
        /// The saga.
        saga: SagaId,
        /// The step's position in the definition.
        position: u32,
        /// The step's name.
        step: &'a str,
        /// Its group.
        group: u32,
        /// Its new state.
        state: StepState,
        /// Its action's output, when it has one.
        output: Option<&'a str>,
    },
    /// The update of saga `id`'s row after a step report: status and group set, the
    /// reason set when not `NULL` (else kept), `version + 1`, `updated_at` now. Run at
    /// every report, so the row's change fences racing reports of one saga.
    /// Parameters: the status code ([`Value::SmallInt`]), the group ([`Value::Int`]),
    /// the reason, the id.
    SagaSet {
        /// The saga.
        saga: SagaId,
        /// Its status.
        status: SagaStatus,
        /// Its group.
        group: u32,
        /// Why it compensates or is parked, when this report says so.
        reason: Option<&'a str>,
    },
    /// An operator's retry of a parked saga: every failed task (status 2) of the saga's
    /// event type whose business key starts with the prefix (an exact prefix, not a
    /// `LIKE` pattern), set pending as [`reset`](crate::TaskStore::reset) sets it
    /// (`attempts = 0`, `next_run_at` now, owner cleared, `updated_at` now). Those are
    /// the step tasks that parked it: out of attempts with their step row saying so, or
    /// failed with no report (the sweep's, an operator's) that the reconciler parked it
    /// for. Answers how many it reset (a count, or a row of one integer). Parameters:
    /// the event type, the prefix (the saga's key and `/`).
    ResetFailed {
        /// The saga's event type.
        event_type: &'a str,
        /// The saga's key and `/`.
        prefix: &'a str,
    },
    /// An entry of the saga operators' log (`<table>_saga_audit`), `at` now.
    /// Parameters: the saga's id, the action, the operator, the reason.
    SagaLog {
        /// The saga.
        saga: SagaId,
        /// What was done.
        action: &'a str,
        /// Who and why.
        audit: &'a Audit,
    },
}

impl<'a> EnqueueStep<'a> {
    /// The step's parameters (see each variant), a run-at time as `run_at`.
    pub fn params(self, run_at: RunAt) -> Vec<Value<'a>> {
        match self {
            EnqueueStep::Insert { status, task } => insert_params(task, status, run_at),
            EnqueueStep::ReadExisting(task) => vec![
                Value::Text(Some(task.into_inner().event_type())),
                Value::Text(Some(task.into_inner().biz_key())),
            ],
            EnqueueStep::Replace(id, task) => {
                let moves = task.into_inner().on_duplicate_mode() == crate::OnDuplicate::Replace;
                // the insert's 8 (delay) and 9 (run at), bound as the insert binds them
                let mut due = insert_params(task, 0, run_at).into_iter().skip(7);
                let delay = due.next().unwrap_or(Value::BigInt(None));
                let at = due.next().unwrap_or(Value::BigInt(None));
                vec![
                    Value::Text(Some(task.into_inner().payload())),
                    Value::SmallInt(Some(i16::from(moves))),
                    delay,
                    at,
                    Value::BigInt(Some(id)),
                ]
            }
            EnqueueStep::Release(id) | EnqueueStep::KeyPromote(id) => {
                vec![Value::BigInt(Some(id))]
            }
            EnqueueStep::LockKey(key)
            | EnqueueStep::KeyBlocker(key)
            | EnqueueStep::KeyNext(key)
            | EnqueueStep::KeyDrop(key) => vec![Value::Text(Some(key))],
            EnqueueStep::Complete(lease) => vec![
                Value::BigInt(Some(lease.task_id)),
                Value::BigInt(Some(lease.token)),
            ],
            EnqueueStep::BarrierInsert { call, op } => vec![
                Value::Text(Some(call.gid())),
                Value::Text(Some(call.branch_id())),
                Value::Text(Some(op.as_str())),
                Value::Text(Some(call.op().as_str())),
            ],
            EnqueueStep::BarrierRead(call) => vec![
                Value::Text(Some(call.gid())),
                Value::Text(Some(call.branch_id())),
                Value::Text(Some(call.op().as_str())),
            ],
            EnqueueStep::Claim { id, owner } => {
                vec![Value::Text(Some(owner)), Value::BigInt(Some(id))]
            }
            EnqueueStep::SagaInsert(start) => vec![
                Value::Text(Some(start.name())),
                Value::Text(Some(start.key())),
                Value::Text(Some(start.input())),
            ],
            EnqueueStep::SagaRead(start) => vec![
                Value::Text(Some(start.name())),
                Value::Text(Some(start.key())),
            ],
            EnqueueStep::Fail { lease, error } => vec![
                Value::Text(Some(error)),
                Value::BigInt(Some(lease.task_id)),
                Value::BigInt(Some(lease.token)),
            ],
            EnqueueStep::SagaLock(id) => vec![Value::BigInt(Some(id))],
            EnqueueStep::StepRows { saga, group } => {
                vec![Value::BigInt(Some(saga)), Value::Int(Some(int(group)))]
            }
            EnqueueStep::StepRecord {
                saga,
                position,
                step,
                group,
                state,
                output,
            } => vec![
                Value::BigInt(Some(saga)),
                Value::Int(Some(int(position))),
                Value::Text(Some(step)),
                Value::Int(Some(int(group))),
                Value::SmallInt(Some(state.code())),
                Value::Text(output),
            ],
            EnqueueStep::SagaSet {
                saga,
                status,
                group,
                reason,
            } => vec![
                Value::SmallInt(Some(status.code())),
                Value::Int(Some(int(group))),
                Value::Text(reason),
                Value::BigInt(Some(saga)),
            ],
            EnqueueStep::ResetFailed { event_type, prefix } => {
                vec![Value::Text(Some(event_type)), Value::Text(Some(prefix))]
            }
            EnqueueStep::SagaLog {
                saga,
                action,
                audit,
            } => vec![
                Value::BigInt(Some(saga)),
                Value::Text(Some(action)),
                Value::Text(Some(&audit.operator)),
                Value::Text(Some(&audit.reason)),
            ],
        }
    }
}

/// A group or a position (at most [`MAX_SAGA_STEPS`](crate::limits::MAX_SAGA_STEPS))
/// as a 32-bit integer.
fn int(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// How a backend stores the time a task was asked to run at ([`insert_params`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunAt {
    /// As a timestamp ([`Value::Timestamp`]).
    Timestamp,
    /// As milliseconds since the Unix epoch ([`Value::BigInt`]).
    Millis,
}

/// How many parameters [`insert_params`] makes for one task.
pub const INSERT_PARAMS: usize = 19;

/// **For backend authors**: the parameters of [`EnqueueStep::Insert`], the same on every
/// backend, in this order: 1 event type, 2 business key, 3 payload, 4 most attempts,
/// 5 backoff strategy, 6 backoff interval (ms), 7 backoff cap (ms), 8 delay (ms; zero
/// when 9 is set), 9 run at (`NULL`: use the delay; a time already past: now), 10
/// priority, 11 jitter (%), 12 initial status, 13 order key, 14 whether a parked task
/// blocks its key (0/1), 15 attempt timeout (ms), 16 tags (`,a,b,`; `NULL` for none),
/// 17 metadata (JSON text or `NULL`), 18 trace context (`traceparent` or `NULL`), 19
/// partition key (`''` for none). A backend appends what only it needs
/// (SQLite its clock; PostgreSQL the `NOTIFY` channel).
///
/// ```
/// use backstop_core::driver::{insert_params, RunAt, Value};
/// # use backstop_core::NewTask;
/// # fn demo(task: backstop_core::driver::Checked<&NewTask>) {
/// let params = insert_params(task, 0, RunAt::Millis);
/// assert_eq!(params.len(), backstop_core::driver::INSERT_PARAMS);
/// assert_eq!(params[0], Value::Text(Some(task.event_type())));
/// # }
/// ```
pub fn insert_params<'a>(task: Checked<&'a NewTask>, status: i16, run_at: RunAt) -> Vec<Value<'a>> {
    let task = task.into_inner();
    let retry = task.retry_policy();
    // a run-at already past is due at once, whatever its value: one before the epoch is
    // sent as the epoch, which every database stores (MySQL's DATETIME starts at year
    // 1000, and sqlx refuses years before 0)
    let due_at = task
        .due_at()
        .map(|t| t.max(chrono::DateTime::<chrono::Utc>::UNIX_EPOCH));
    vec![
        Value::Text(Some(task.event_type())),
        Value::Text(Some(task.biz_key())),
        Value::Text(Some(task.payload())),
        Value::BigInt(Some(i64::from(retry.max_attempts))),
        Value::Text(Some(retry.backoff.strategy())),
        Value::BigInt(Some(millis(retry.backoff.interval()))),
        Value::BigInt(Some(millis(retry.backoff.max_interval()))),
        Value::BigInt(Some(millis(task.due_delay()))),
        match run_at {
            RunAt::Timestamp => Value::Timestamp(due_at),
            RunAt::Millis => Value::BigInt(due_at.map(|t| t.timestamp_millis())),
        },
        Value::SmallInt(Some(i16::from(task.claim_priority().get()))),
        Value::SmallInt(Some(i16::from(retry.jitter_pct))),
        Value::SmallInt(Some(status)),
        Value::Text(task.order()),
        Value::SmallInt(Some(i16::from(task.parked_policy() == WhenParked::Block))),
        Value::BigInt(task.attempt_timeout().map(millis)),
        Value::Text(task.tags_column()),
        Value::Text(task.metadata_json()),
        Value::Text(task.trace_context()),
        Value::Text(Some(task.partition_key().unwrap_or(""))),
    ]
}

/// **For backend authors**: the statements of an enqueue in the backend's SQL, so core
/// runs the one enqueue protocol ([`KeyedInsert`], [`KeyRelease`](crate::driver::KeyRelease)) on any
/// [`TxConnection`](super::TxConnection) ([`Driver::enqueue_sql`](crate::driver::Driver::enqueue_sql)).
///
/// Every statement whose [`Returns`](crate::driver::Returns) is `Row` selects only 64-bit integer columns:
/// [`EnqueueStep::ReadExisting`] `(id, status, age in ms)`, the others the row's id.
pub trait EnqueueSql: Send + Sync {
    /// The backend's SQL dialect.
    fn dialect(&self) -> Dialect;

    /// How the backend stores the time a task is asked to run at (default: a
    /// timestamp).
    fn run_at(&self) -> RunAt {
        RunAt::Timestamp
    }

    /// The statement of `step`: the backend's SQL, binding `params` (the step's, as
    /// [`EnqueueStep::params`] made them) and what only it needs after them (SQLite its
    /// clock; PostgreSQL the `NOTIFY` channel).
    fn statement<'a>(&'a self, step: EnqueueStep<'a>, params: Vec<Value<'a>>) -> Statement<'a>;

    /// Whether the backend releases many order keys in one set-based transaction
    /// ([`KeysRelease`](crate::driver::KeysRelease), its statements from
    /// [`keys_statement`](Self::keys_statement)); `false` (the default): core releases
    /// them one after another in one transaction.
    fn releases_keys_together(&self) -> bool {
        false
    }

    /// Whether the set-based release's insert of the keys ([`KeysStep::InsertKeys`],
    /// an upsert) holds every key row's lock already, so no
    /// [`KeysStep::LockKeys`] statement is run (every key counts as found).
    ///
    /// [`KeysStep::InsertKeys`]: crate::driver::KeysStep::InsertKeys
    /// [`KeysStep::LockKeys`]: crate::driver::KeysStep::LockKeys
    fn keys_insert_locks(&self) -> bool {
        false
    }

    /// The statement of a step of the set-based release, binding the step's keys or ids
    /// (as one [`Value::TextList`] / [`Value::BigIntList`], or one value per item): what
    /// each [`KeysStep`](crate::driver::KeysStep) asks, answered as
    /// [`Returns::KeyRows`](crate::driver::Returns::KeyRows) for the locking read (the keys
    /// found), the blockers (their keys) and the first waiting tasks (key, id), and with
    /// a count or rows for the promotion. `None` (the default) for a backend that does
    /// not [`release keys together`](Self::releases_keys_together).
    fn keys_statement<'a>(&'a self, step: &'a KeysStep) -> Option<Statement<'a>> {
        let _ = step;
        None
    }

    /// A multi-row insert for a batch enqueue ([`EnqueueBatch`](crate::driver::EnqueueBatch)): the rows of `doc`
    /// ([`insert_document`](crate::driver::insert_document): one object per task of `tasks`, in order), pending, no order
    /// key, each business key once, bound as one text parameter; the backend appends
    /// what only it needs, as for [`EnqueueStep::Insert`].
    ///
    /// It returns ([`Returns::Rows`](crate::driver::Returns::Rows)) the id of each row it inserted, one column per row;
    /// the database assigns the ids in increasing order down the document. A row whose
    /// key is held is skipped (`ON CONFLICT DO NOTHING`, MariaDB's `INSERT IGNORE`); or
    /// the whole statement fails with [`Answer::DuplicateKey`]. Core then finds out which
    /// tasks were inserted and enqueues the others one by one.
    ///
    /// Core asks only when [`inserts_rows`](Self::inserts_rows) says the backend has one,
    /// with at least one task; `None` (the default) sends those tasks one by one.
    fn insert_rows<'a>(
        &'a self,
        doc: &'a str,
        tasks: &[Checked<&'a NewTask>],
    ) -> Option<Statement<'a>> {
        let _ = (doc, tasks);
        None
    }

    /// Whether the backend has a multi-row insert ([`insert_rows`](Self::insert_rows));
    /// `false` (the default): every task of a batch is enqueued on its own, on the same
    /// transaction.
    fn inserts_rows(&self) -> bool {
        false
    }

    /// Whether [`insert_rows`](Self::insert_rows) reads its rows from `doc` (the
    /// default); `false` for a backend that binds each task's values
    /// ([`rows_params`](crate::driver::rows_params)), which then gets an empty `doc` and
    /// core does not build one.
    fn insert_rows_document(&self) -> bool {
        true
    }

    /// How many of `n` tasks ready for a multi-row insert the next
    /// [`insert_rows`](Self::insert_rows) takes (1 to `n`; default all of them): a
    /// backend that binds every value, with a text per row count, takes the largest
    /// count it has. The rest follow in later inserts.
    fn insert_rows_take(&self, n: usize) -> usize {
        n
    }

    /// As [`insert_rows`](Self::insert_rows), of a chunk whose tasks are all plain
    /// ([`is_plain`](crate::driver::is_plain)), its rows from `doc`
    /// ([`plain_document`](crate::driver::plain_document): each task's own four values),
    /// its settings the backend's constants ([`plain_params`](crate::driver::plain_params)).
    /// A backend whose server spends per value of the full document (PostgreSQL reads
    /// 17 keys a row from it) answers it; `None` (the default) sends such a chunk
    /// through `insert_rows` with the full document.
    ///
    /// Core asks only when [`inserts_plain_rows`](Self::inserts_plain_rows) says the
    /// backend has one.
    fn insert_plain_rows<'a>(
        &'a self,
        doc: &'a str,
        tasks: &[Checked<&'a NewTask>],
    ) -> Option<Statement<'a>> {
        let _ = (doc, tasks);
        None
    }

    /// Whether the backend has [`insert_plain_rows`](Self::insert_plain_rows) (default
    /// `false`); asked once a batch.
    fn inserts_plain_rows(&self) -> bool {
        false
    }
}

/// **For backend authors**: one enqueue as a sequence of [`Statement`]s, without I/O: a
/// [`TxPlan`] whose output is what the enqueue did ([`Inserted`]).
pub struct EnqueuePlan<'a> {
    sql: &'a dyn EnqueueSql,
    task: Checked<&'a NewTask>,
    keyed: KeyedInsert<'a>,
    step: InsertStep,
    /// The release of the task's order key, while it runs.
    release: Option<KeyReleasePlan<'a>>,
}

impl<'a> EnqueuePlan<'a> {
    /// The plan of `task` (checked) in `sql`'s statements.
    pub fn new(sql: &'a dyn EnqueueSql, task: Checked<&'a NewTask>) -> Self {
        let keyed = KeyedInsert::new(task.into_inner());
        let step = keyed.first();
        EnqueuePlan {
            sql,
            task,
            keyed,
            step,
            release: None,
        }
    }

    /// [`TxPlan::next_statement`], its statement borrowing the SQL only (so a plan that
    /// runs this one inside it can hand it on). The next statement to run, or `None` when the enqueue is done.
    pub(crate) fn next(&mut self) -> Result<Option<Statement<'a>>> {
        let task = self.task;
        let key = || {
            task.into_inner().order().ok_or_else(|| {
                Error::new(
                    ErrorKind::Unexpected,
                    "enqueue",
                    "an order key step without a key",
                )
            })
        };
        loop {
            if let Some(release) = &mut self.release {
                if let Some(statement) = release.next()? {
                    return Ok(Some(statement));
                }
                let promoted = self
                    .release
                    .take()
                    .map(TxPlan::finish)
                    .transpose()?
                    .flatten();
                self.step = self.keyed.promoted(promoted)?;
                continue;
            }
            let step = match self.step {
                InsertStep::LockKey => EnqueueStep::LockKey(key()?),
                InsertStep::Insert => EnqueueStep::Insert {
                    status: self.keyed.initial_status(),
                    task,
                },
                InsertStep::ReadExisting => EnqueueStep::ReadExisting(task),
                InsertStep::Release(id) => EnqueueStep::Release(id),
                InsertStep::Replace(id) => EnqueueStep::Replace(id, task),
                InsertStep::ReleaseKey => {
                    match task.into_inner().order() {
                        Some(key) => self.release = Some(KeyReleasePlan::new(self.sql, key)),
                        None => self.step = self.keyed.promoted(None)?,
                    }
                    continue;
                }
                InsertStep::Done(_) => return Ok(None),
            };
            let params = step.params(self.sql.run_at());
            return Ok(Some(self.sql.statement(step, params)));
        }
    }
}

/// The next statement of an enqueue nested in another plan (`slot`): `Ok(statement)`
/// while it has one; at its end it is finished (its errors returned), the slot emptied,
/// and the answer is what it inserted (`None` for an empty slot), so the outer plan goes
/// on with its own statements.
pub(crate) fn nested_next<'a>(
    slot: &mut Option<EnqueuePlan<'a>>,
) -> Result<std::result::Result<Statement<'a>, Option<Inserted>>> {
    if let Some(plan) = slot {
        if let Some(statement) = plan.next()? {
            return Ok(Ok(statement));
        }
    }
    match slot.take() {
        Some(plan) => Ok(Err(Some(plan.finish()?))),
        None => Ok(Err(None)),
    }
}

impl<'a> TxPlan for EnqueuePlan<'a> {
    type Output = Inserted;

    /// The next statement to run, or `None` when the enqueue is done.
    fn next_statement(&mut self) -> Result<Option<Statement<'_>>> {
        self.next()
    }

    /// The answer of the statement [`next_statement`](Self::next_statement) gave last.
    fn answer(&mut self, answer: Answer) -> Result<()> {
        if let Some(release) = &mut self.release {
            return release.answer(answer);
        }
        self.step = match self.step {
            InsertStep::LockKey => self.keyed.key_locked(locked(&answer)?)?,
            InsertStep::Insert => {
                let id = match answer {
                    Answer::InsertId(id) => Some(id),
                    Answer::DuplicateKey => None,
                    ref other => first_column(other)?,
                };
                self.keyed.inserted(id)?
            }
            InsertStep::ReadExisting => {
                let existing = match row(&answer)? {
                    Some(r) => Some(Existing {
                        id: column(r, 0)?,
                        status: column(r, 1)?,
                        age_ms: column(r, 2)?,
                    }),
                    None => None,
                };
                self.keyed.existing(existing)?
            }
            InsertStep::Release(_) => self.keyed.released()?,
            InsertStep::Replace(_) => self.keyed.replaced(applied(&answer, "replace")?)?,
            InsertStep::ReleaseKey | InsertStep::Done(_) => return Err(no_statement()),
        };
        Ok(())
    }

    /// What the enqueue did, once [`next_statement`](Self::next_statement) said it is done.
    fn finish(self) -> Result<Inserted> {
        match self.step {
            InsertStep::Done(inserted) if self.release.is_none() => Ok(inserted),
            _ => Err(Error::new(
                ErrorKind::Unexpected,
                "enqueue",
                "the enqueue's statements were not all run",
            )),
        }
    }
}

fn no_statement() -> Error {
    Error::new(
        ErrorKind::Unexpected,
        "enqueue",
        "an answer with no statement pending",
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::driver::Returns;
    use crate::model::Dedup;

    /// Statements named after their step, so the test reads the sequence, with their
    /// parameters; a multi-row insert is `rows`, its document its one parameter.
    pub(crate) struct Names;

    impl EnqueueSql for Names {
        fn dialect(&self) -> Dialect {
            Dialect::Postgres
        }
        fn statement<'a>(&'a self, step: EnqueueStep<'a>, params: Vec<Value<'a>>) -> Statement<'a> {
            let name = match step {
                EnqueueStep::Insert { status: 5, .. } => "insert waiting",
                EnqueueStep::Insert { .. } => "insert",
                EnqueueStep::ReadExisting(_) => "existing",
                EnqueueStep::Release(_) => "release",
                EnqueueStep::Replace(..) => "replace",
                EnqueueStep::LockKey(_) => "lock",
                EnqueueStep::KeyBlocker(_) => "blocker",
                EnqueueStep::KeyNext(_) => "next",
                EnqueueStep::KeyPromote(_) => "promote",
                EnqueueStep::KeyDrop(_) => "drop",
                EnqueueStep::Complete(_) => "complete",
                EnqueueStep::Claim { .. } => "claim",
                EnqueueStep::BarrierInsert { .. } => "barrier insert",
                EnqueueStep::BarrierRead(_) => "barrier read",
                EnqueueStep::SagaInsert(_) => "saga insert",
                EnqueueStep::SagaRead(_) => "saga read",
                EnqueueStep::Fail { .. } => "fail",
                EnqueueStep::SagaLock(_) => "saga lock",
                EnqueueStep::StepRows { .. } => "step rows",
                EnqueueStep::StepRecord { .. } => "step record",
                EnqueueStep::SagaSet { .. } => "saga set",
                EnqueueStep::ResetFailed { .. } => "reset failed",
                EnqueueStep::SagaLog { .. } => "saga log",
            };
            Statement::new(name, params, Returns::Row)
        }
        fn inserts_rows(&self) -> bool {
            true
        }
        fn insert_rows<'a>(
            &'a self,
            doc: &'a str,
            _: &[Checked<&'a NewTask>],
        ) -> Option<Statement<'a>> {
            let params = vec![Value::Text(Some(doc))];
            Some(Statement::new("rows", params, Returns::Rows))
        }
    }

    fn walk(task: &NewTask, answers: Vec<Answer>) -> (Vec<String>, Result<Inserted>) {
        let mut plan = EnqueuePlan::new(&Names, Checked::new(task));
        let mut seen = Vec::new();
        let mut answers = answers.into_iter();
        while let Some(st) = plan.next_statement().unwrap() {
            seen.push(st.sql().to_owned());
            plan.answer(answers.next().expect("an answer for every statement"))
                .unwrap();
        }
        (seen, plan.finish())
    }

    #[test]
    fn a_new_task_is_one_insert() {
        let task = NewTask::new("E", "k");
        let (seen, done) = walk(&task, vec![Answer::Row(Some(vec![7]))]);
        assert_eq!(seen, ["insert"]);
        assert_eq!(done.unwrap(), Inserted::created(7));
        // MySQL's insert answers with the insert id
        let (_, done) = walk(&task, vec![Answer::InsertId(8)]);
        assert_eq!(done.unwrap().id, 8);
    }

    #[test]
    fn a_duplicate_reads_the_existing_task() {
        let task = NewTask::new("E", "k");
        for conflict in [Answer::Row(None), Answer::DuplicateKey] {
            let (seen, done) = walk(&task, vec![conflict, Answer::Row(Some(vec![3, 0, 10]))]);
            assert_eq!(seen, ["insert", "existing"]);
            let done = done.unwrap();
            assert_eq!((done.id, done.created, done.status), (3, false, 0));
        }
        // a finished task's key is freed and the insert tried again
        let task = NewTask::new("E", "k").dedup(Dedup::WhileActive);
        let (seen, done) = walk(
            &task,
            vec![
                Answer::Row(None),
                Answer::Row(Some(vec![3, 1, 10])),
                Answer::RowsAffected(1),
                Answer::Row(Some(vec![4])),
            ],
        );
        assert_eq!(seen, ["insert", "existing", "release", "insert"]);
        assert_eq!(done.unwrap(), Inserted::created(4));
    }

    #[test]
    fn an_ordered_task_locks_its_key_then_releases_it() {
        let task = NewTask::new("E", "k").order_key("o");
        let (seen, done) = walk(
            &task,
            vec![
                Answer::RowsAffected(1), // lock (an upsert)
                Answer::Row(Some(vec![9])),
                Answer::Row(Some(vec![1])), // lock again, for the release
                Answer::Row(None),          // no blocker
                Answer::Row(Some(vec![9])), // the next task is the new one
                Answer::RowsAffected(1),    // promoted
            ],
        );
        assert_eq!(
            seen,
            [
                "lock",
                "insert waiting",
                "lock",
                "blocker",
                "next",
                "promote"
            ]
        );
        let done = done.unwrap();
        assert_eq!((done.id, done.created, done.status), (9, true, 0));
    }

    /// every step's parameters, in the documented order
    #[test]
    fn core_makes_each_steps_parameters() {
        let task = NewTask::new("E", "k").payload_raw(r#"{"a":1}"#);
        let t = Checked::new(&task);
        assert_eq!(
            EnqueueStep::Replace(7, t).params(RunAt::Timestamp),
            [
                Value::Text(Some(r#"{"a":1}"#)),
                Value::SmallInt(Some(0)),
                Value::BigInt(Some(0)),
                Value::Timestamp(None),
                Value::BigInt(Some(7))
            ]
        );
        assert_eq!(
            EnqueueStep::ReadExisting(t).params(RunAt::Timestamp),
            [Value::Text(Some("E")), Value::Text(Some("k"))]
        );
        assert_eq!(
            EnqueueStep::KeyNext("o").params(RunAt::Millis),
            [Value::Text(Some("o"))]
        );
        let insert = EnqueueStep::Insert { status: 5, task: t }.params(RunAt::Millis);
        assert_eq!(insert.len(), INSERT_PARAMS);
        assert_eq!(
            (&insert[15], &insert[16], &insert[17]),
            (&Value::Text(None), &Value::Text(None), &Value::Text(None))
        );
        assert_eq!(insert[18], Value::Text(Some("")));
        assert_eq!(
            insert[8],
            Value::BigInt(None),
            "no run-at: NULL, in milliseconds"
        );
        assert_eq!(insert[11], Value::SmallInt(Some(5)));
        let at = chrono::Utc::now();
        let timed = NewTask::new("E", "k").run_at(at);
        let insert = EnqueueStep::Insert {
            status: 0,
            task: Checked::new(&timed),
        }
        .params(RunAt::Timestamp);
        assert_eq!(insert[7], Value::BigInt(Some(0)), "no delay with a run-at");
        assert_eq!(insert[8], Value::Timestamp(Some(at)));
    }

    #[test]
    fn a_wrong_answer_is_an_error_not_a_guess() {
        let task = NewTask::new("E", "k");
        let mut plan = EnqueuePlan::new(&Names, Checked::new(&task));
        plan.next_statement().unwrap();
        let e = plan.answer(Answer::RowsAffected(1)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unexpected);
        let unfinished = EnqueuePlan::new(&Names, Checked::new(&task));
        assert_eq!(
            unfinished.finish().unwrap_err().kind(),
            ErrorKind::Unexpected
        );
    }
}
