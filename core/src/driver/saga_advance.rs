//! A step's report in its most common case, as one write a dialect may apply in a single
//! statement: the action of a step alone in its group succeeded while its saga runs at
//! that group, so the saga moves on to the next group (or completes).
//!
//! The general write ([`saga_write_on`](crate::driver::saga_write_on)) reads before it
//! decides: the fence, the saga row's lock, then the writes, each a statement of one
//! transaction. In this case the decision is known before anything is read (a lone step
//! has no sibling to join), provided the saga is where the report assumes; a dialect that
//! can test that and write in one statement (PostgreSQL's data-modifying `WITH`) saves
//! the round trips and the transaction's `BEGIN` and `COMMIT`. Where the saga is not
//! there (compensating, parked, moved on by a nudge) or the lease is gone, it writes
//! nothing and the store runs the general write, which decides and answers as always.

use super::checks::{check_task, enqueued};
use super::{Checked, Inserted, RawTask, StepState};
use crate::error::Result;
use crate::limits::StoreConfig;
use crate::model::{Lease, NewTask, SagaId, SagaStatus, StepApplied};

/// The writes of a step's report in the common case ([`Driver::saga_advance`]), all or
/// none, in one statement, under one condition: the saga row `saga` is running
/// (status 0) at group `group`, and the step's task still runs under `lease`. Then:
///
/// - the task completes as [`EnqueueStep::Complete`](crate::driver::EnqueueStep::Complete) completes it;
/// - the step row `(saga, position)` is written as the general write's is: `step`,
///   `group`, `state`, `output`, `updated_at` now (an existing row's state and output
///   replaced);
/// - the saga row gets `status` and `next_group`, its version bumped, `updated_at` now
///   (its reason kept);
/// - `tasks` are inserted as a batch enqueue's multi-row insert inserts them
///   ([`insert_document`](crate::driver::insert_document)), a task whose key exists
///   being skipped (their dedup rule is [`Dedup::Forever`](crate::Dedup::Forever));
///   when `claim` names an owner, those inserted are inserted claimed by it: running,
///   `owner` set, `attempts` 1, lease 1, `updated_at` now, and returned whole
///   ([`Advanced::claimed`]). A dialect that cannot may insert them pending and return
///   none.
///
/// [`Driver::saga_advance`]: crate::driver::Driver::saga_advance
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SagaAdvance {
    /// The saga's id.
    pub saga: SagaId,
    /// The lease the step's task must still run under.
    pub lease: Lease,
    /// The step's group: the saga must be running at it.
    pub group: u32,
    /// The step's position in its definition.
    pub position: u32,
    /// The step's name.
    pub step: String,
    /// The step row's state.
    pub state: StepState,
    /// The step's output (JSON).
    pub output: String,
    /// The saga's status after the report.
    pub status: SagaStatus,
    /// The saga's group after the report.
    pub next_group: u32,
    /// The next steps' tasks, checked as an enqueue checks them.
    pub tasks: Vec<NewTask>,
    /// Who the new tasks are inserted claimed by, if anyone.
    pub claim: Option<String>,
}

/// What a [`SagaAdvance`] wrote ([`Driver::saga_advance`](crate::driver::Driver::saga_advance)).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Advanced {
    /// What each task's insert did, in order.
    pub inserted: Vec<Inserted>,
    /// The rows of the tasks inserted claimed (in any order).
    pub claimed: Vec<RawTask>,
}

impl Advanced {
    /// What the inserts did, and the rows of those inserted claimed.
    pub fn new(inserted: Vec<Inserted>, claimed: Vec<RawTask>) -> Self {
        Advanced { inserted, claimed }
    }
}

/// The advances of one [`Driver::saga_advance`](crate::driver::Driver::saga_advance)
/// call as JSON documents, for a dialect that reads rows from JSON (PostgreSQL's
/// `json_to_recordset`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AdvanceDocuments {
    /// One object per advance, in order: `i` its index, `s` saga, `g` group, `t` the
    /// task's id, `l` its lease token, `p` position, `n` step, `st` state code, `o`
    /// output, `ss` status code, `ng` next group, `c` the claiming owner or null.
    pub reports: String,
    /// Every advance's tasks, advance by advance, as [`insert_document`](crate::driver::insert_document) writes them.
    pub tasks: String,
    /// For each object of `tasks`, in order, the index of its advance.
    pub advance_of_task: Vec<i32>,
}

impl AdvanceDocuments {
    /// The documents of `advances` (their tasks checked as an enqueue's).
    pub fn new(advances: &[SagaAdvance], config: &StoreConfig) -> Result<Self> {
        let mut reports = String::from("[");
        let (mut tasks, mut advance_of_task) = (Vec::new(), Vec::new());
        for (i, a) in advances.iter().enumerate() {
            let index = i32::try_from(i).unwrap_or(i32::MAX);
            if i > 0 {
                reports.push(',');
            }
            let text = |t: &str| serde_json::to_string(t).unwrap_or_else(|_| "null".into());
            reports.push_str(&format!(
                "{{\"i\":{index},\"s\":{},\"g\":{},\"t\":{},\"l\":{},\"p\":{},\"n\":{},\"st\":{},\"o\":{},\"ss\":{},\"ng\":{},\"c\":{}}}",
                a.saga,
                a.group,
                a.lease.task_id,
                a.lease.token,
                a.position,
                text(&a.step),
                a.state.code(),
                text(&a.output),
                a.status.code(),
                a.next_group,
                a.claim.as_deref().map_or_else(|| "null".into(), text),
            ));
            for task in a.checked_tasks(config)? {
                tasks.push(task);
                advance_of_task.push(index);
            }
        }
        reports.push(']');
        Ok(AdvanceDocuments {
            reports,
            tasks: super::insert_document(&tasks),
            advance_of_task,
        })
    }
}

impl SagaAdvance {
    /// The tasks, checked (they were, when the advance was made).
    pub fn checked_tasks(&self, config: &StoreConfig) -> Result<Vec<Checked<&NewTask>>> {
        self.tasks.iter().map(|t| check_task(config, t)).collect()
    }

    /// The report's answer, given what the insert of each task did (in order).
    pub(crate) fn applied(&self, advanced: Advanced) -> Result<StepApplied> {
        let Advanced { inserted, claimed } = advanced;
        if inserted.len() != self.tasks.len() {
            return Err(crate::error::Error::new(
                crate::error::ErrorKind::Unexpected,
                "saga_step",
                format!(
                    "{} answers for the {} tasks of a step's report",
                    inserted.len(),
                    self.tasks.len()
                ),
            ));
        }
        let tasks = inserted
            .into_iter()
            .zip(&self.tasks)
            .map(|(i, task)| enqueued(i, task))
            .collect::<Result<Vec<_>>>()?;
        let claimed = claimed
            .into_iter()
            .map(RawTask::decode)
            .collect::<Result<Vec<_>>>()?;
        Ok(
            StepApplied::new(self.status, self.next_group, self.tasks.len())
                .with_tasks(tasks)
                .with_claimed(claimed),
        )
    }
}
