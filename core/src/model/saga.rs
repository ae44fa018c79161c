//! Orchestrated sagas: a definition ([`SagaDef`], built once and checked), a start
//! ([`SagaStart`]: one saga of a definition, its key and input) and the state row a
//! store keeps of each saga ([`Saga`]).
//!
//! A saga's steps are tasks: each step's action (and compensation) is a task of the
//! saga's event type ([`SagaDef::event_type`]), so retries, leases, fencing, executors
//! and metrics are the tasks' own. Starting a saga writes its state row and the tasks of
//! its first group in one transaction, the caller's
//! ([`Transactional::start_in`](crate::Transactional::start_in)) or the store's own
//! ([`TaskStore::start_saga`](crate::TaskStore::start_saga)).

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::limits;
use crate::model::{NewTask, RetryPolicy};

/// The id of a saga's state row.
pub type SagaId = i64;

/// Where a saga stands. Stored as a small integer ([`code`](Self::code)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SagaStatus {
    /// Its steps' actions run, group after group.
    Running,
    /// A step failed for a business reason: the compensations of the completed steps
    /// run, in reverse order.
    Compensating,
    /// Every step's action succeeded.
    Completed,
    /// Every completed step was compensated.
    Compensated,
    /// Stopped for an operator, with the reason.
    Parked,
}

impl SagaStatus {
    /// Every status, in code order.
    pub const ALL: [SagaStatus; 5] = [
        SagaStatus::Running,
        SagaStatus::Compensating,
        SagaStatus::Completed,
        SagaStatus::Compensated,
        SagaStatus::Parked,
    ];

    /// The stored code: 0 running, 1 compensating, 2 completed, 3 compensated, 4 parked.
    pub fn code(self) -> i16 {
        match self {
            SagaStatus::Running => 0,
            SagaStatus::Compensating => 1,
            SagaStatus::Completed => 2,
            SagaStatus::Compensated => 3,
            SagaStatus::Parked => 4,
        }
    }

    /// The status of a stored code.
    pub fn from_code(code: i64) -> Option<SagaStatus> {
        SagaStatus::ALL
            .into_iter()
            .find(|s| i64::from(s.code()) == code)
    }

    /// Its name: `running`, `compensating`, `completed`, `compensated`, `parked`.
    pub fn as_str(self) -> &'static str {
        match self {
            SagaStatus::Running => "running",
            SagaStatus::Compensating => "compensating",
            SagaStatus::Completed => "completed",
            SagaStatus::Compensated => "compensated",
            SagaStatus::Parked => "parked",
        }
    }

    /// Whether the saga is over: completed or compensated (a parked saga waits for an
    /// operator).
    pub fn is_final(self) -> bool {
        matches!(self, SagaStatus::Completed | SagaStatus::Compensated)
    }
}

impl std::str::FromStr for SagaStatus {
    type Err = Error;

    /// A status by its name ([`as_str`](Self::as_str)), any case.
    fn from_str(s: &str) -> Result<SagaStatus> {
        SagaStatus::ALL
            .into_iter()
            .find(|status| status.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                Error::invalid_input(
                    "parse_saga_status",
                    format!(
                        "unknown saga status {s:?}: use running, compensating, completed, \
                         compensated or parked"
                    ),
                )
            })
    }
}

impl fmt::Display for SagaStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which half of a step a task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepPhase {
    /// The forward action.
    Action,
    /// The compensation, undoing a completed action.
    Compensate,
}

impl StepPhase {
    /// `action` or `compensate`.
    pub fn as_str(self) -> &'static str {
        match self {
            StepPhase::Action => "action",
            StepPhase::Compensate => "compensate",
        }
    }
}

/// One step of a [`SagaDef`]: a name, whether it has a compensation, and the retry
/// policies and timeout of its tasks.
///
/// ```
/// use backstop_core::{RetryPolicy, SagaStep};
/// use std::time::Duration;
/// let step = SagaStep::new("reserve_stock")
///     .compensated()
///     .retry(RetryPolicy::fixed(5, Duration::from_secs(1)))
///     .timeout(Duration::from_secs(10));
/// assert!(step.has_compensation());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SagaStep {
    name: String,
    role: StepRole,
    compensated: bool,
    retry: RetryPolicy,
    compensation_retry: RetryPolicy,
    timeout: Option<Duration>,
}

impl SagaStep {
    /// A step without a compensation, its action retried under the default policy.
    pub fn new(name: impl Into<String>) -> Self {
        SagaStep {
            name: name.into(),
            role: StepRole::Step,
            compensated: false,
            retry: RetryPolicy::default(),
            compensation_retry: SagaStep::default_compensation_retry(),
            timeout: None,
        }
    }

    /// Compensations retry until they succeed, within reason: 50 attempts, backing off
    /// from 1 s to 10 min (about 8 hours in all) before the saga parks for an operator.
    pub fn default_compensation_retry() -> RetryPolicy {
        RetryPolicy::exponential(50, Duration::from_secs(1))
            .with_max_interval(Duration::from_secs(600))
    }

    /// The step has a compensation, run when a later step fails for a business reason.
    pub fn compensated(mut self) -> Self {
        self.compensated = true;
        self
    }

    /// How its action retries after a technical failure.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// How its compensation retries ([`default_compensation_retry`](Self::default_compensation_retry)
    /// unless set).
    pub fn compensation_retry(mut self, policy: RetryPolicy) -> Self {
        self.compensation_retry = policy;
        self
    }

    /// The timeout of each attempt of its action and compensation.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether it has a compensation.
    pub fn has_compensation(&self) -> bool {
        self.compensated
    }

    /// What it is in its definition: a saga's step, or a TCC branch's try or confirm.
    pub fn role(&self) -> StepRole {
        self.role
    }

    /// The same step in role `role` (the TCC builder makes its tries and confirms so).
    pub(crate) fn with_role(mut self, role: StepRole) -> Self {
        self.role = role;
        self
    }

    /// The retry policies of its action and its compensation.
    pub(crate) fn policies(&self) -> (RetryPolicy, RetryPolicy) {
        (self.retry, self.compensation_retry)
    }

    /// The timeout of each attempt of its tasks, if it has its own.
    pub(crate) fn attempt_timeout(&self) -> Option<Duration> {
        self.timeout
    }
}

/// What a [`SagaStep`] is in its definition. A saga's steps are
/// [`Step`](Self::Step)s; a TCC transaction ([`SagaDef::tcc`]) is a definition of two
/// groups, every branch's [`Try`](Self::Try) side by side, then every branch's
/// [`Confirm`](Self::Confirm).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StepRole {
    /// A saga's step: an action and maybe a compensation, undone only when its action
    /// succeeded.
    Step,
    /// A TCC branch's try (its compensation is the branch's cancel). Once any try fails
    /// (refused, or out of attempts), every branch is cancelled, whatever its try did:
    /// a try whose outcome is unknown may have reserved, and the barrier makes the
    /// cancel of a try that never ran empty.
    Try,
    /// A TCC branch's confirm (step `<branch>.confirm`): runs after every try
    /// succeeded, and retries until it succeeds (a refusal is retried too); out of
    /// attempts, the transaction parks.
    Confirm,
}

/// A saga's definition: a name and groups of steps run in order, the steps of a group
/// side by side (a group of one is a plain step). Built with [`SagaDef::builder`] and
/// checked by [`build`](SagaDefBuilder::build).
///
/// ```
/// use backstop_core::{SagaDef, SagaStep};
/// let order = SagaDef::builder("order")
///     .step(SagaStep::new("stock").compensated())
///     .parallel([SagaStep::new("coupon").compensated(), SagaStep::new("points")])
///     .step(SagaStep::new("pay"))
///     .build()
///     .unwrap();
/// assert_eq!(order.event_type(), "saga:order");
/// assert_eq!(order.groups().len(), 3);
///
/// // an empty flow, a nameless step or a name used twice is refused
/// assert!(SagaDef::builder("order").build().is_err());
/// assert!(SagaDef::builder("order").step(SagaStep::new("")).build().is_err());
/// let twice = SagaDef::builder("order").step(SagaStep::new("a")).step(SagaStep::new("a"));
/// assert!(twice.build().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SagaDef {
    name: String,
    event_type: String,
    groups: Vec<Vec<SagaStep>>,
    stuck_after: Duration,
    deadline: Option<Duration>,
}

/// Builds a [`SagaDef`].
#[derive(Debug, Clone)]
#[must_use]
pub struct SagaDefBuilder {
    name: String,
    groups: Vec<Vec<SagaStep>>,
    stuck_after: Duration,
    deadline: Option<Duration>,
}

impl SagaDef {
    /// A definition named `name` (1 to [`MAX_SAGA_NAME_BYTES`](limits::MAX_SAGA_NAME_BYTES) of ASCII letters, digits,
    /// `_`, `.`, `-`), its steps added in order.
    pub fn builder(name: impl Into<String>) -> SagaDefBuilder {
        SagaDefBuilder {
            name: name.into(),
            groups: Vec::new(),
            stuck_after: SagaDef::DEFAULT_STUCK_AFTER,
            deadline: None,
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The event type of its steps' tasks: `saga:` and its name.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// Its groups of steps, in order.
    pub fn groups(&self) -> &[Vec<SagaStep>] {
        &self.groups
    }

    /// How long a running or compensating saga's row may stay unchanged before the
    /// reconciler nudges it (default [`DEFAULT_STUCK_AFTER`](Self::DEFAULT_STUCK_AFTER)).
    pub fn stuck_after(&self) -> Duration {
        self.stuck_after
    }

    /// How long a saga may run or compensate, from its start, before the reconciler
    /// parks it for an operator (none by default).
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// The default of [`stuck_after`](Self::stuck_after): 15 minutes.
    pub const DEFAULT_STUCK_AFTER: Duration = Duration::from_secs(15 * 60);

    /// The name of its reconciler's periodic task: `saga:<name>:reconcile`.
    pub fn reconciler_name(&self) -> String {
        format!("saga:{}:reconcile", self.name)
    }

    /// A start of this saga under `key` (1 to [`MAX_SAGA_KEY_BYTES`](limits::MAX_SAGA_KEY_BYTES) bytes, no control
    /// characters; one saga per definition and key) with `input`, serialized as JSON:
    /// what [`TaskStore::start_saga`](crate::TaskStore::start_saga) and
    /// [`Transactional::start_in`](crate::Transactional::start_in) write.
    /// `InvalidInput` for a bad key or an input that does not serialize.
    pub fn start<T: Serialize + ?Sized>(&self, key: &str, input: &T) -> Result<SagaStart> {
        const OP: &str = "start_saga";
        limits::check_key(OP, "saga key", key, limits::MAX_SAGA_KEY_BYTES)?;
        let input = serde_json::to_string(input)
            .map_err(|e| Error::invalid_input(OP, format!("the saga's input: {e}")))?;
        let first = self
            .groups
            .first()
            .map(|group| {
                group
                    .iter()
                    .map(|step| self.step_task(key, step, StepPhase::Action))
                    .collect()
            })
            .unwrap_or_default();
        Ok(SagaStart {
            name: self.name.clone(),
            key: key.to_owned(),
            input,
            first,
        })
    }

    /// The business key of the task that runs `phase` of `step` of the saga `key`:
    /// `{key}/{step}:a`, `:c` for a compensation.
    pub fn step_key(&self, key: &str, step: &SagaStep, phase: StepPhase) -> String {
        let suffix = match phase {
            StepPhase::Action => "a",
            StepPhase::Compensate => "c",
        };
        format!("{key}/{}:{suffix}", step.name)
    }

    /// The task that runs `phase` of `step` of the saga `key`: the saga's event type,
    /// business key `{key}/{step}:a` (`:c` for a compensation, so each phase of a step
    /// is enqueued once per saga), a [`StepTask`] payload, and the step's retry policy
    /// and timeout.
    pub fn step_task(&self, key: &str, step: &SagaStep, phase: StepPhase) -> NewTask {
        let payload = StepTask {
            saga: self.name.clone(),
            key: key.to_owned(),
            step: step.name.clone(),
            phase,
        };
        let policy = match phase {
            StepPhase::Action => step.retry,
            StepPhase::Compensate => step.compensation_retry,
        };
        let task = NewTask::new(self.event_type.clone(), self.step_key(key, step, phase))
            .json(&payload)
            .retry(policy)
            // never twice, whatever state the first is in: a nudge may ask again
            .dedup(crate::model::Dedup::Forever);
        match step.timeout {
            Some(t) => task.timeout(t),
            None => task,
        }
    }
}

impl SagaDefBuilder {
    /// Add a step that runs alone, after the steps before it.
    pub fn step(mut self, step: SagaStep) -> Self {
        self.groups.push(vec![step]);
        self
    }

    /// A running or compensating saga whose row has not changed for `after` is found
    /// stuck by the reconciler, which enqueues what its state calls for (a lost or
    /// deleted step task comes back). 1 s to `MAX_INTERVAL`; default 15 minutes.
    pub fn stuck_after(mut self, after: Duration) -> Self {
        self.stuck_after = after;
        self
    }

    /// A saga still running or compensating `deadline` after its start is parked by the
    /// reconciler, for an operator, with the reason (never compensated on a guess). At
    /// most `MAX_INTERVAL`; none by default.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Add a group of steps that run side by side, after the steps before them; the
    /// next step waits for all of them.
    pub fn parallel(mut self, steps: impl IntoIterator<Item = SagaStep>) -> Self {
        self.groups.push(steps.into_iter().collect());
        self
    }

    /// The definition, checked: a valid name, at least one step, at most
    /// [`MAX_SAGA_STEPS`](limits::MAX_SAGA_STEPS), no empty group, every step named (as the saga is) and no name
    /// used twice. `InvalidInput` naming what is wrong otherwise.
    pub fn build(self) -> Result<SagaDef> {
        const OP: &str = "saga_definition";
        check_name(OP, "saga name", &self.name, limits::MAX_SAGA_NAME_BYTES)?;
        if self.groups.is_empty() {
            return Err(Error::invalid_input(
                OP,
                format!("saga {:?} has no steps", self.name),
            ));
        }
        if let Some(i) = self.groups.iter().position(Vec::is_empty) {
            return Err(Error::invalid_input(
                OP,
                format!("saga {:?}: group {i} has no steps", self.name),
            ));
        }
        let steps = self.groups.iter().map(Vec::len).sum::<usize>();
        if steps > limits::MAX_SAGA_STEPS {
            return Err(Error::invalid_input(
                OP,
                format!(
                    "saga {:?} has {steps} steps; at most {}",
                    self.name,
                    limits::MAX_SAGA_STEPS
                ),
            ));
        }
        let mut seen = HashSet::new();
        for step in self.groups.iter().flatten() {
            check_name(OP, "step name", &step.name, limits::MAX_STEP_NAME_BYTES)?;
            if !seen.insert(step.name.as_str()) {
                return Err(Error::invalid_input(
                    OP,
                    format!("saga {:?} names step {:?} twice", self.name, step.name),
                ));
            }
        }
        if self.stuck_after < Duration::from_secs(1) || self.stuck_after > limits::MAX_INTERVAL {
            return Err(Error::invalid_input(
                OP,
                format!(
                    "saga {:?}: stuck_after must be 1 s to {:?}, got {:?}",
                    self.name,
                    limits::MAX_INTERVAL,
                    self.stuck_after
                ),
            ));
        }
        if let Some(d) = self
            .deadline
            .filter(|d| d.is_zero() || *d > limits::MAX_INTERVAL)
        {
            return Err(Error::invalid_input(
                OP,
                format!(
                    "saga {:?}: the deadline must be positive and at most {:?}, got {d:?}",
                    self.name,
                    limits::MAX_INTERVAL
                ),
            ));
        }
        Ok(SagaDef {
            event_type: format!("saga:{}", self.name),
            name: self.name,
            groups: self.groups,
            stuck_after: self.stuck_after,
            deadline: self.deadline,
        })
    }
}

impl SagaDef {
    /// Step `name`: its group's index, its position among all the steps (in definition
    /// order, the key of its step row) and the step.
    pub fn find_step(&self, name: &str) -> Option<(u32, u32, &SagaStep)> {
        let mut pos = 0u32;
        for (g, group) in self.groups.iter().enumerate() {
            for step in group {
                if step.name == name {
                    return Some((u32::try_from(g).ok()?, pos, step));
                }
                pos += 1;
            }
        }
        None
    }
}

/// The name and key of a saga read back ([`TaskStore::saga`](crate::TaskStore::saga)):
/// as a definition's name and a start's key are checked.
pub(crate) fn check_saga_ids(op: &'static str, name: &str, key: &str) -> Result<()> {
    check_name(op, "saga name", name, limits::MAX_SAGA_NAME_BYTES)?;
    limits::check_key(op, "saga key", key, limits::MAX_SAGA_KEY_BYTES)
}

/// A saga's or a step's name: 1 to `max` bytes of ASCII letters, digits, `_`, `.`, `-`.
pub(crate) fn check_name(op: &'static str, what: &str, name: &str, max: usize) -> Result<()> {
    if name.is_empty() || name.len() > max {
        return Err(Error::invalid_input(
            op,
            format!("{what} must be 1 to {max} bytes, got {}", name.len()),
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(Error::invalid_input(
            op,
            format!("{what} {name:?} contains {c:?}; use ASCII letters, digits, '_', '.' or '-'"),
        ));
    }
    Ok(())
}

/// The payload of a step's task: which saga, which step, which phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepTask {
    /// The saga's definition name.
    pub saga: String,
    /// The saga's key.
    pub key: String,
    /// The step's name.
    pub step: String,
    /// Action or compensation.
    pub phase: StepPhase,
}

/// One saga of a definition to start: its key, its input (JSON) and the tasks of its
/// first group ([`SagaDef::start`]).
#[derive(Debug, Clone)]
pub struct SagaStart {
    name: String,
    key: String,
    input: String,
    first: Vec<NewTask>,
}

impl SagaStart {
    /// The definition's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The saga's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Its input, as JSON.
    pub fn input(&self) -> &str {
        &self.input
    }

    /// The tasks of the first group's actions, enqueued with the state row.
    pub fn first_tasks(&self) -> &[NewTask] {
        &self.first
    }
}

/// What a start did: the saga (new, or the one started before under the same key) and
/// where it stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SagaStarted {
    /// The saga's id.
    pub id: SagaId,
    /// Its status now (running for a new saga).
    pub status: SagaStatus,
    /// Whether this call created it (`false`: the key was started before, and nothing
    /// was written).
    pub created: bool,
}

impl SagaStarted {
    /// A start's answer.
    pub fn new(id: SagaId, status: SagaStatus, created: bool) -> Self {
        SagaStarted {
            id,
            status,
            created,
        }
    }
}

/// A saga's state row ([`TaskStore::saga`](crate::TaskStore::saga)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Saga {
    /// Its id.
    pub id: SagaId,
    /// The definition's name.
    pub name: String,
    /// Its key.
    pub key: String,
    /// Where it stands.
    pub status: SagaStatus,
    /// The group it is at: running its actions, or (compensating) undoing its steps.
    pub group: u32,
    /// Its input, as JSON.
    pub input: String,
    /// Why it compensates or is parked.
    pub reason: Option<String>,
    /// Bumped by every change of the row (the fence of concurrent step completions).
    pub version: i64,
    /// When it started (database time).
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// When the row last changed.
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

impl Saga {
    /// The participant barrier's global transaction of this saga, `saga:<name>:<key>`:
    /// the `gid` of its steps' [`StepContext::branch`](crate::StepContext::branch) calls,
    /// and what [`TaskStore::barrier_records`](crate::TaskStore::barrier_records) takes.
    pub fn gid(&self) -> String {
        format!("saga:{}:{}", self.name, self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn two() -> SagaDef {
        SagaDef::builder("order")
            .step(SagaStep::new("stock").compensated())
            .parallel([SagaStep::new("coupon"), SagaStep::new("points")])
            .build()
            .unwrap()
    }

    #[test]
    fn bad_definitions_are_refused_with_what_is_wrong() {
        let cases = [
            (SagaDef::builder(""), "saga name"),
            (SagaDef::builder("a b").step(SagaStep::new("s")), "contains"),
            (
                SagaDef::builder("x".repeat(49)).step(SagaStep::new("s")),
                "1 to 48",
            ),
            (SagaDef::builder("o"), "no steps"),
            (SagaDef::builder("o").parallel([]), "group 0 has no steps"),
            (SagaDef::builder("o").step(SagaStep::new("")), "step name"),
            (
                SagaDef::builder("o").step(SagaStep::new("a/b")),
                "contains '/'",
            ),
            (
                SagaDef::builder("o")
                    .step(SagaStep::new("a"))
                    .parallel([SagaStep::new("b"), SagaStep::new("a")]),
                "names step \"a\" twice",
            ),
            (
                (0..=limits::MAX_SAGA_STEPS).fold(SagaDef::builder("o"), |b, i| {
                    b.step(SagaStep::new(format!("s{i}")))
                }),
                "at most 64",
            ),
            (
                SagaDef::builder("o")
                    .step(SagaStep::new("a"))
                    .stuck_after(Duration::from_millis(10)),
                "stuck_after must be 1 s",
            ),
            (
                SagaDef::builder("o")
                    .step(SagaStep::new("a"))
                    .deadline(Duration::ZERO),
                "the deadline must be positive",
            ),
        ];
        for (builder, want) in cases {
            let e = builder.build().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert_eq!(e.operation(), "saga_definition");
            assert!(e.to_string().contains(want), "{e} should say {want:?}");
        }
        let longest = "x".repeat(limits::MAX_SAGA_NAME_BYTES);
        let def = SagaDef::builder(longest.as_str())
            .step(SagaStep::new(longest.as_str()))
            .build()
            .unwrap();
        assert!(def.event_type().len() <= limits::MAX_EVENT_TYPE_BYTES);
    }

    #[test]
    fn a_start_carries_the_first_group_as_tasks() {
        let def = two();
        let start = def.start("o-1", &serde_json::json!({"sku": 7})).unwrap();
        assert_eq!((start.name(), start.key()), ("order", "o-1"));
        assert_eq!(start.input(), r#"{"sku":7}"#);
        let tasks = start.first_tasks();
        assert_eq!(tasks.len(), 1);
        assert_eq!(tasks[0].event_type(), "saga:order");
        assert_eq!(tasks[0].biz_key(), "o-1/stock:a");
        let payload: StepTask = serde_json::from_str(tasks[0].payload()).unwrap();
        assert_eq!(payload.step, "stock");
        assert_eq!(payload.phase, StepPhase::Action);
        let c = def.step_task("o-1", &def.groups()[0][0], StepPhase::Compensate);
        assert_eq!(c.biz_key(), "o-1/stock:c");
        assert_eq!(c.retry_policy(), SagaStep::default_compensation_retry());
        // the longest key and step name still make a valid business key
        let key = "k".repeat(limits::MAX_SAGA_KEY_BYTES);
        let step = SagaStep::new("s".repeat(limits::MAX_STEP_NAME_BYTES));
        let t = def.step_task(&key, &step, StepPhase::Compensate);
        assert!(t.biz_key().len() <= limits::MAX_BIZ_KEY_BYTES);
        for bad in ["", "a\nb"] {
            let e = def.start(bad, &1).unwrap_err();
            assert_eq!(
                (e.kind(), e.operation()),
                (ErrorKind::InvalidInput, "start_saga")
            );
        }
        let long = "k".repeat(limits::MAX_SAGA_KEY_BYTES + 1);
        assert!(def.start(&long, &1).is_err());
    }

    #[test]
    fn status_codes_round_trip() {
        for s in SagaStatus::ALL {
            assert_eq!(SagaStatus::from_code(i64::from(s.code())), Some(s));
        }
        assert_eq!(SagaStatus::from_code(9), None);
        assert!(SagaStatus::Compensated.is_final() && !SagaStatus::Parked.is_final());
    }
}
