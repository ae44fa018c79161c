//! What running a saga reads and writes, beside its definition (`model/saga.rs`): the
//! state of each step, a step's report and its answer, the operators' commands, the
//! saga list's filter and log, and the payloads of nudges and reconciler ticks.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::saga::{check_name, SagaId, SagaStatus, StepPhase};
use crate::error::{Error, Result};
use crate::limits;
use crate::model::Lease;

/// Where one step of a saga stands, as its step row records it. Stored as a small
/// integer ([`code`](Self::code)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StepState {
    /// Its action succeeded.
    Done,
    /// Its action failed for a business reason (or was not run: the saga was
    /// compensating when its task came).
    Refused,
    /// Its action succeeded, then its compensation did.
    Compensated,
    /// Its action's task ran out of attempts: the saga is parked.
    ActionFailed,
    /// Its compensation's task ran out of attempts: the saga is parked.
    CompensationFailed,
}

impl StepState {
    /// Every state, in code order.
    pub const ALL: [StepState; 5] = [
        StepState::Done,
        StepState::Refused,
        StepState::Compensated,
        StepState::ActionFailed,
        StepState::CompensationFailed,
    ];

    /// The stored code: 1 done, 2 refused, 3 compensated, 4 action failed,
    /// 5 compensation failed.
    pub fn code(self) -> i16 {
        match self {
            StepState::Done => 1,
            StepState::Refused => 2,
            StepState::Compensated => 3,
            StepState::ActionFailed => 4,
            StepState::CompensationFailed => 5,
        }
    }

    /// The state of a stored code.
    pub fn from_code(code: i64) -> Option<StepState> {
        StepState::ALL
            .into_iter()
            .find(|s| i64::from(s.code()) == code)
    }

    /// Its name: `done`, `refused`, `compensated`, `action_failed`,
    /// `compensation_failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            StepState::Done => "done",
            StepState::Refused => "refused",
            StepState::Compensated => "compensated",
            StepState::ActionFailed => "action_failed",
            StepState::CompensationFailed => "compensation_failed",
        }
    }
}

impl fmt::Display for StepState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the task of one step finished, as the step runner reports it
/// ([`TaskStore::saga_step_many`](crate::TaskStore::saga_step_many)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepOutcome {
    /// The action succeeded, with its output (JSON), which later steps read.
    Done {
        /// The output, as JSON.
        output: String,
    },
    /// The action failed for a business reason (insufficient stock): the completed
    /// steps are compensated.
    Refused {
        /// Why, as the step said.
        reason: String,
    },
    /// The compensation succeeded.
    Compensated,
    /// The phase's task ran out of attempts after technical failures: the task fails
    /// with `reason` and the saga parks for an operator. Never a compensation by itself.
    Exhausted {
        /// Which half of the step failed.
        phase: StepPhase,
        /// The last failure.
        reason: String,
    },
}

/// What a step's task reports when it finishes ([`TaskStore::saga_step_many`](crate::TaskStore::saga_step_many)):
/// the attempt's lease (the fence), which saga and step, and how it finished.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StepReport {
    /// The lease of the step's task: the report applies only while the task runs
    /// under it.
    pub lease: Lease,
    /// The saga's id.
    pub saga: SagaId,
    /// The saga's key (the next steps' tasks are named after it).
    pub key: String,
    /// The step's name.
    pub step: String,
    /// How it finished.
    pub outcome: StepOutcome,
    /// Who asks for the tasks this report creates, already claimed (see
    /// [`claim_next`](Self::claim_next)).
    pub claim: Option<crate::model::Owner>,
}

impl StepReport {
    /// A report of step `step` of saga `saga` (key `key`), whose task runs under `lease`.
    pub fn new(
        lease: Lease,
        saga: SagaId,
        key: impl Into<String>,
        step: impl Into<String>,
        outcome: StepOutcome,
    ) -> Self {
        StepReport {
            lease,
            saga,
            key: key.into(),
            step: step.into(),
            outcome,
            claim: None,
        }
    }

    /// Ask for the tasks this report creates to be inserted already claimed by `owner`
    /// (running, `attempts` 1, lease 1, `updated_at` now), the caller having room to run
    /// them at once: the claim of each next step is then no write of its own. A store
    /// may decline (the tasks are then pending, as without it); the tasks it claimed are
    /// in [`StepApplied::claimed`], whole, and the caller must run them (or release
    /// them): until then they hold the claim, and the sweep gives them back only after
    /// `dead_after`.
    pub fn claim_next(mut self, owner: crate::model::Owner) -> Self {
        self.claim = Some(owner);
        self
    }
}

/// What a report (a command, a nudge) did: where the saga stands now, and the tasks it
/// enqueued.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StepApplied {
    /// The saga's status after it.
    pub status: SagaStatus,
    /// The group it is at.
    pub group: u32,
    /// How many step tasks it enqueued (the next group's actions, or the compensations
    /// to run; for a retry, how many failed tasks it reset).
    pub enqueued: usize,
    /// What each enqueue did (a task already there is a duplicate, not created), so the
    /// engine runs the new ones ahead of its poller.
    pub tasks: Vec<crate::model::Enqueued>,
    /// The tasks created already claimed, as a [report](StepReport::claim_next) asked
    /// (empty when it did not, or the store declined): running under the report's
    /// owner, each as a claim returns it.
    pub claimed: Vec<crate::model::Task>,
}

impl StepApplied {
    /// An answer without tasks.
    pub fn new(status: SagaStatus, group: u32, enqueued: usize) -> Self {
        StepApplied {
            status,
            group,
            enqueued,
            tasks: Vec::new(),
            claimed: Vec::new(),
        }
    }

    /// The same, with what each enqueue did.
    pub fn with_tasks(mut self, tasks: Vec<crate::model::Enqueued>) -> Self {
        self.tasks = tasks;
        self
    }

    /// The same, with the tasks it created already claimed.
    pub fn with_claimed(mut self, claimed: Vec<crate::model::Task>) -> Self {
        self.claimed = claimed;
        self
    }
}

/// One step's row of a saga ([`TaskStore::saga_steps`](crate::TaskStore::saga_steps)):
/// written when the step's action or compensation finishes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SagaStepRecord {
    /// The step's name.
    pub step: String,
    /// Its position in the definition (all groups' steps in order, from 0).
    pub position: u32,
    /// Its group's index.
    pub group: u32,
    /// Where it stands.
    pub state: StepState,
    /// Its action's output (JSON), once the action succeeded.
    pub output: Option<String>,
    /// When the row last changed.
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

/// What an operator asks of a saga ([`TaskStore::command_saga`](crate::TaskStore::command_saga)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SagaCommand {
    /// A parked saga: run its failed step tasks again (they are reset to pending), and
    /// go back to running, or to compensating when it was compensating.
    Retry,
    /// A running saga, or one parked on a failed action: give up and compensate its done
    /// steps, the audit's reason as the saga's. The engine that runs the saga's steps
    /// enqueues the compensations.
    Compensate,
    /// A saga not yet completed or compensated: declare it so by hand (after fixing what
    /// it left); its steps' tasks still pending do nothing when they run.
    Resolve(SagaStatus),
    /// A running or compensating saga: stop it for an operator, the audit's reason as
    /// the saga's (the reconciler parks a saga past its deadline so); its steps' tasks
    /// wait.
    Park,
}

impl SagaCommand {
    /// Its name, as the operators' log records it: `retry`, `compensate`, `resolve`.
    pub fn as_str(self) -> &'static str {
        match self {
            SagaCommand::Retry => "retry",
            SagaCommand::Compensate => "compensate",
            SagaCommand::Resolve(_) => "resolve",
            SagaCommand::Park => "park",
        }
    }

    /// The statuses it may be given in, for the refusal's message.
    pub fn allowed(self) -> &'static str {
        match self {
            SagaCommand::Retry => "parked",
            SagaCommand::Compensate => "running, or parked on a failed action",
            SagaCommand::Resolve(_) => "running, compensating or parked",
            SagaCommand::Park => "running or compensating",
        }
    }
}

/// One entry of a saga's operators' log ([`TaskStore::saga_log`](crate::TaskStore::saga_log)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SagaLogEntry {
    /// The saga.
    pub saga_id: SagaId,
    /// What was done: a [`SagaCommand`]'s name.
    pub action: String,
    /// Who did it.
    pub operator: String,
    /// Why.
    pub reason: String,
    /// When (database time).
    pub at: chrono::DateTime<chrono::Utc>,
}

/// Which sagas to list ([`TaskStore::sagas`](crate::TaskStore::sagas)): all conditions
/// hold; by id, after `after_id`, at most `limit`.
///
/// ```
/// use backstop_core::{SagaFilter, SagaStatus};
/// use std::time::Duration;
/// // running sagas that have not moved for an hour
/// let stuck = SagaFilter::default()
///     .status(SagaStatus::Running)
///     .older_than(Duration::from_secs(3600));
/// assert_eq!(stuck.limit, 100);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SagaFilter {
    /// Of this definition.
    pub name: Option<String>,
    /// In this status.
    pub status: Option<SagaStatus>,
    /// Whose row last changed longer ago than this (database time).
    pub older_than: Option<Duration>,
    /// Started longer ago than this (database time).
    pub started_older_than: Option<Duration>,
    /// With an id greater than this (the last id of the previous page).
    pub after_id: SagaId,
    /// At most this many (1 to [`MAX_BATCH`](crate::limits::MAX_BATCH); default 100).
    pub limit: usize,
}

impl Default for SagaFilter {
    fn default() -> Self {
        SagaFilter {
            name: None,
            status: None,
            older_than: None,
            started_older_than: None,
            after_id: 0,
            limit: 100,
        }
    }
}

impl SagaFilter {
    /// Of definition `name`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// In `status`.
    pub fn status(mut self, status: SagaStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Not changed for longer than `age`.
    pub fn older_than(mut self, age: Duration) -> Self {
        self.older_than = Some(age);
        self
    }

    /// Started more than `age` ago.
    pub fn started_older_than(mut self, age: Duration) -> Self {
        self.started_older_than = Some(age);
        self
    }

    /// After id `id`.
    pub fn after_id(mut self, id: SagaId) -> Self {
        self.after_id = id;
        self
    }

    /// At most `limit`.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// `InvalidInput` for a bad name, a limit of 0 or over `MAX_BATCH`, or an age over
    /// `MAX_INTERVAL`.
    pub(crate) fn check(&self, op: &'static str) -> Result<()> {
        if let Some(name) = &self.name {
            check_name(op, "saga name", name, limits::MAX_SAGA_NAME_BYTES)?;
        }
        if self.limit == 0 || self.limit > limits::MAX_BATCH {
            return Err(Error::invalid_input(
                op,
                format!(
                    "limit must be 1 to {}, got {}",
                    limits::MAX_BATCH,
                    self.limit
                ),
            ));
        }
        for (what, age) in [
            ("older_than", self.older_than),
            ("started_older_than", self.started_older_than),
        ] {
            if age.is_some_and(|d| d > limits::MAX_INTERVAL) {
                return Err(Error::invalid_input(
                    op,
                    format!("{what} must be at most {:?}", limits::MAX_INTERVAL),
                ));
            }
        }
        Ok(())
    }
}

/// The payload of a saga reconciler's tick ([`SagaDef::reconciler_name`](crate::SagaDef::reconciler_name)): the engine
/// running the saga's steps looks for its stuck sagas and those past their deadline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileTask {
    /// The saga's definition name.
    pub saga: String,
    /// Always `true`: what tells a reconciler's tick from a step's task.
    pub reconcile: bool,
}

/// The payload of a nudge: a task of a saga's event type that asks the engine running
/// its steps to enqueue what its state calls for (after an operator's
/// [`SagaCommand::Compensate`], or for a saga found stuck).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NudgeTask {
    /// The saga's definition name.
    pub saga: String,
    /// The saga's key.
    pub key: String,
    /// Always `true`: what tells a nudge from a step's task.
    pub nudge: bool,
}

/// The unfinished sagas of one definition in one status
/// ([`TaskStore::saga_backlog`](crate::TaskStore::saga_backlog)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SagaCount {
    /// The definition's name.
    pub name: String,
    /// Running, compensating or parked.
    pub status: SagaStatus,
    /// How many.
    pub count: u64,
    /// How long the least recently changed of them has been unchanged (database time).
    pub oldest_unchanged: Duration,
}
