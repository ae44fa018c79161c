//! The step runner of sagas: the code of each step ([`SagaSteps`]), what a step sees
//! ([`StepContext`]), how it fails ([`StepError`]), and the handler that runs a step's
//! task and reports it ([`TaskStore::saga_step_many`], in batches: `saga/reports.rs`).

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::handler::{ErrorAction, Handler, HandlerError};
use super::Context;
use crate::error::{Error, ErrorKind, Result};
use crate::model::{
    BranchCall, BranchOp, NewTask, NudgeTask, ReconcileTask, Saga, SagaCommand, SagaDef,
    SagaFilter, SagaStatus, SagaStepRecord, StepApplied, StepOutcome, StepPhase, StepReport,
    StepRole, StepState, StepTask, Task,
};
use crate::schedule::{Periodic, Schedule};
use crate::store::TaskStore;

mod reconcile;
mod reports;
pub(crate) use reconcile::reconciler;

/// How a step's action or compensation failed.
///
/// - A **business** failure ([`StepError::refuse`]: insufficient stock, card declined)
///   is an answer: the saga compensates its completed steps (a TCC transaction cancels
///   every branch). Only an action or a TCC try refuses; a compensation, cancel or
///   confirm that refuses is retried as a technical failure.
/// - A **technical** failure (anything `?` converts: a timeout, a lost connection, a
///   5xx) retries the step's task under its policy and never compensates by itself.
///   When the attempts run out (or the failure is [permanent](HandlerError::fail)), the
///   task fails and the saga parks for an operator.
///
/// ```
/// use backstop_core::StepError;
/// let e = StepError::refuse("insufficient stock");
/// assert_eq!(e.refusal(), Some("insufficient stock"));
/// let e: StepError = std::io::Error::other("connection reset").into();
/// assert_eq!(e.refusal(), None);
/// ```
#[derive(Debug)]
pub struct StepError(Failure);

#[derive(Debug)]
enum Failure {
    Refused(String),
    Technical(HandlerError),
}

impl StepError {
    /// A business failure: the saga compensates.
    pub fn refuse(reason: impl std::fmt::Display) -> Self {
        StepError(Failure::Refused(reason.to_string()))
    }

    /// A technical failure, as a handler's error: retried after the task's backoff (or
    /// as `error` asks: after a delay, or never again).
    pub fn technical(error: HandlerError) -> Self {
        StepError(Failure::Technical(error))
    }

    /// The reason of a business failure; `None` for a technical one.
    pub fn refusal(&self) -> Option<&str> {
        match &self.0 {
            Failure::Refused(r) => Some(r),
            Failure::Technical(_) => None,
        }
    }
}

impl std::fmt::Display for StepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Failure::Refused(r) => write!(f, "refused: {r}"),
            Failure::Technical(e) => e.fmt(f),
        }
    }
}

impl<E: Into<crate::error::BoxError>> From<E> for StepError {
    fn from(e: E) -> Self {
        StepError(Failure::Technical(HandlerError::from(e)))
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type ActionFn =
    dyn Fn(StepContext) -> BoxFuture<std::result::Result<String, StepError>> + Send + Sync;
type CompensationFn =
    dyn Fn(StepContext) -> BoxFuture<std::result::Result<(), StepError>> + Send + Sync;

/// The code of a saga's steps: an action for every step, a compensation for every
/// [compensated](crate::SagaStep::compensated) one. Register it with its definition
/// ([`EngineBuilder::saga`](crate::EngineBuilder::saga)), which checks that they match.
///
/// Delivery is at-least-once: an action or compensation may run again after a crash
/// between its effect and its report. Make each idempotent, or guard a participant's
/// writes with the barrier ([`StepContext::branch`]).
///
/// ```
/// use backstop_core::{SagaSteps, StepError};
///
/// #[derive(serde::Deserialize)]
/// struct Order { sku: u32, qty: u32 }
///
/// let steps = SagaSteps::new()
///     .action("stock", |cx| async move {
///         let order: Order = cx.input()?;
///         if order.qty > 10 {
///             return Err(StepError::refuse("insufficient stock"));
///         }
///         Ok(serde_json::json!({ "reserved": order.qty }))
///     })
///     .compensation("stock", |cx| async move {
///         let reserved: serde_json::Value = cx.output("stock").await?;
///         println!("releasing {reserved}");
///         Ok(())
///     });
/// # let _ = steps;
/// ```
#[derive(Default, Clone)]
pub struct SagaSteps {
    actions: HashMap<String, Arc<ActionFn>>,
    compensations: HashMap<String, Arc<CompensationFn>>,
}

impl SagaSteps {
    /// No steps yet.
    pub fn new() -> Self {
        SagaSteps::default()
    }

    /// The action of step `step`: its output (any `Serialize`) is saved with the step
    /// and read by later steps ([`StepContext::output`]).
    pub fn action<F, Fut, O>(mut self, step: impl Into<String>, f: F) -> Self
    where
        F: Fn(StepContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<O, StepError>> + Send + 'static,
        O: Serialize + 'static,
    {
        let f = Arc::new(f);
        let run: Arc<ActionFn> = Arc::new(move |cx| {
            let fut = f(cx);
            Box::pin(async move {
                let output = fut.await?;
                serde_json::to_string(&output).map_err(|e| {
                    StepError::technical(HandlerError::fail(format!(
                        "the step's output does not serialize: {e}"
                    )))
                })
            })
        });
        self.actions.insert(step.into(), run);
        self
    }

    /// The compensation of step `step`: undoes its action. It runs only after the action
    /// succeeded, and retries until it succeeds (then the saga parks).
    pub fn compensation<F, Fut>(mut self, step: impl Into<String>, f: F) -> Self
    where
        F: Fn(StepContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), StepError>> + Send + 'static,
    {
        let f = Arc::new(f);
        let run: Arc<CompensationFn> = Arc::new(move |cx| Box::pin(f(cx)));
        self.compensations.insert(step.into(), run);
        self
    }

    /// The try, confirm and cancel of TCC branch `branch`
    /// ([`SagaDef::tcc`](crate::SagaDef::tcc)): the try is the branch's action (its
    /// output is saved, and read by its confirm and cancel as
    /// [`output(branch)`](StepContext::output)), the cancel its compensation, the
    /// confirm the action of step `<branch>.confirm`. A confirm or cancel that refuses is
    /// retried.
    ///
    /// ```
    /// use backstop_core::SagaSteps;
    /// let steps = SagaSteps::new().tcc(
    ///     "debit",
    ///     |_cx| async move { Ok("hold-7") },
    ///     |_cx| async move { Ok(()) },
    ///     |_cx| async move { Ok(()) },
    /// );
    /// # let _ = steps;
    /// ```
    pub fn tcc<T, TFut, O, C, CFut, X, XFut>(
        self,
        branch: impl Into<String>,
        try_: T,
        confirm: C,
        cancel: X,
    ) -> Self
    where
        T: Fn(StepContext) -> TFut + Send + Sync + 'static,
        TFut: Future<Output = std::result::Result<O, StepError>> + Send + 'static,
        O: Serialize + 'static,
        C: Fn(StepContext) -> CFut + Send + Sync + 'static,
        CFut: Future<Output = std::result::Result<(), StepError>> + Send + 'static,
        X: Fn(StepContext) -> XFut + Send + Sync + 'static,
        XFut: Future<Output = std::result::Result<(), StepError>> + Send + 'static,
    {
        let branch = branch.into();
        self.action(SagaDef::confirm_step(&branch), confirm)
            .action(branch.clone(), try_)
            .compensation(branch, cancel)
    }

    /// Check the steps against `def`: an action for each step, a compensation for each
    /// compensated step and for no other, nothing for a step `def` lacks.
    pub(crate) fn check(&self, def: &SagaDef) -> Result<()> {
        const OP: &str = "register_saga";
        let fail = |m: String| Err(Error::config(OP, format!("saga {:?}: {m}", def.name())));
        for step in def.groups().iter().flatten() {
            if !self.actions.contains_key(step.name()) {
                return fail(format!("step {:?} has no action", step.name()));
            }
            let has = self.compensations.contains_key(step.name());
            if step.has_compensation() && !has {
                return fail(format!(
                    "step {:?} is compensated but has no compensation",
                    step.name()
                ));
            }
            if !step.has_compensation() && has {
                return fail(format!(
                    "step {:?} has a compensation but is not compensated \
                     (SagaStep::compensated)",
                    step.name()
                ));
            }
        }
        let mut named: Vec<&String> = self
            .actions
            .keys()
            .chain(self.compensations.keys())
            .collect();
        named.sort();
        if let Some(unknown) = named.into_iter().find(|s| def.find_step(s).is_none()) {
            return fail(format!(
                "code is given for step {unknown:?}, which it does not have"
            ));
        }
        Ok(())
    }
}

/// What a step's action or compensation sees: the saga (its key and input), the outputs
/// of the steps done before, and the attempt's [`Context`].
#[derive(Clone)]
pub struct StepContext {
    saga: Arc<Saga>,
    /// The saga's step rows, read at the first [`output`](Self::output) (or before a
    /// compensation).
    steps: Arc<tokio::sync::OnceCell<Vec<SagaStepRecord>>>,
    step: String,
    phase: StepPhase,
    /// The barrier's branch and operation of this step and phase.
    barrier: (String, BranchOp),
    /// What the step's own report answered, once it committed on the step's
    /// transaction ([`reported`](Self::reported)).
    reported: Arc<std::sync::Mutex<Option<StepApplied>>>,
    cx: Context,
}

impl StepContext {
    /// The saga's row as the step found it (id, key, input, status…).
    pub fn saga(&self) -> &Saga {
        &self.saga
    }

    /// The step's name.
    pub fn step(&self) -> &str {
        &self.step
    }

    /// Which half of the step runs.
    pub fn phase(&self) -> StepPhase {
        self.phase
    }

    /// The attempt's context: its task, lease, cancellation and shared state.
    pub fn context(&self) -> &Context {
        &self.cx
    }

    /// The saga's input, decoded. A permanent failure when it does not decode (a retry
    /// cannot fix it).
    pub fn input<T: DeserializeOwned>(&self) -> std::result::Result<T, StepError> {
        serde_json::from_str(&self.saga.input).map_err(|e| {
            StepError::technical(HandlerError::fail(format!(
                "saga {}'s input does not decode as {}: {e}",
                self.saga.id,
                std::any::type_name::<T>()
            )))
        })
    }

    /// The output of step `step`, done before this one, decoded (the saga's step rows are
    /// read once, at the first call). A permanent failure when it has none (it is not
    /// done, or not an earlier step) or it does not decode; a retryable one when the rows
    /// could not be read.
    pub async fn output<T: DeserializeOwned>(
        &self,
        step: &str,
    ) -> std::result::Result<T, StepError> {
        let rows = self
            .steps
            .get_or_try_init(|| self.cx.store().saga_steps(self.saga.id))
            .await
            .map_err(|e| StepError::technical(store_failed("reading the saga's steps", e)))?;
        let text = rows
            .iter()
            .find(|r| r.step == step)
            .and_then(|r| r.output.as_deref())
            .ok_or_else(|| {
                StepError::technical(HandlerError::fail(format!(
                    "saga {}: step {step:?} has no output (not done before {:?})",
                    self.saga.id, self.step
                )))
            })?;
        serde_json::from_str(text).map_err(|e| {
            StepError::technical(HandlerError::fail(format!(
                "saga {}: step {step:?}'s output does not decode as {}: {e}",
                self.saga.id,
                std::any::type_name::<T>()
            )))
        })
    }

    /// The report of this step's success, for the step's own transaction: an action's
    /// `output` (serialized; what [`output`](Self::output) answers later steps), a
    /// compensation's none (`output` is ignored). Write it with the step's business
    /// writes ([`Transactional::saga_step_in`](crate::Transactional::saga_step_in), or
    /// the backend's native `saga_step_tx`), commit, then hand the answer to
    /// [`reported`](Self::reported): the effect, the step's completion and the next
    /// steps' tasks commit together, so a step on this database takes effect once.
    /// `InvalidInput` when `output` does not serialize.
    ///
    /// ```no_run
    /// # use backstop_core::{SagaDef, StepContext, StepError, Transactional, TxConnection};
    /// # async fn step<S: Transactional, C: TxConnection>(
    /// #     store: &S, tx: &mut C, def: &SagaDef, cx: StepContext,
    /// # ) -> Result<u32, StepError> {
    /// // … the step's business writes on `tx`, then its report on the same transaction:
    /// let report = cx.report(&3)?;
    /// let applied = store.saga_step_in(tx, def, &report).await?;
    /// // … commit `tx`, then:
    /// cx.reported(applied);
    /// Ok(3)
    /// # }
    /// ```
    pub fn report<O: Serialize + ?Sized>(&self, output: &O) -> Result<StepReport> {
        let outcome = match self.phase {
            StepPhase::Action => StepOutcome::Done {
                output: serde_json::to_string(output).map_err(|e| {
                    Error::invalid_input("saga_step", format!("the step's output: {e}"))
                })?,
            },
            StepPhase::Compensate => StepOutcome::Compensated,
        };
        Ok(StepReport::new(
            self.cx.lease(),
            self.saga.id,
            self.saga.key.clone(),
            self.step.clone(),
            outcome,
        ))
    }

    /// The step's own report ([`report`](Self::report)) committed, and answered
    /// `applied`: the runner does not report the step again (whatever the code returns
    /// now), and starts the next steps at once.
    pub fn reported(&self, applied: StepApplied) {
        *self
            .reported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(applied);
    }

    /// The participant barrier's call of this step, for a participant to guard its
    /// writes with ([`Transactional::barrier_in`](crate::Transactional::barrier_in)):
    /// global transaction `saga:<name>:<key>`; of a saga's step, branch the step's name
    /// and operation [`Action`](BranchOp::Action) or
    /// [`Compensate`](BranchOp::Compensate); of a TCC branch
    /// ([`SagaDef::tcc`](crate::SagaDef::tcc)), branch the branch's name (a confirm's
    /// too) and operation [`Try`](BranchOp::Try), [`Confirm`](BranchOp::Confirm) or
    /// [`Cancel`](BranchOp::Cancel).
    pub fn branch(&self) -> Result<BranchCall> {
        let (branch, op) = &self.barrier;
        BranchCall::new(self.saga.gid(), branch.as_str(), *op)
    }
}

/// The handler of a saga's event type: runs the step a task names and reports it.
pub(crate) struct SagaRunner {
    def: Arc<SagaDef>,
    steps: SagaSteps,
    /// The attempt timeout of the type's tasks without one of their own.
    timeout: Duration,
    /// The saga rows this runner's reports just committed, by the step tasks they
    /// created and run ahead: the next step starts from the row its predecessor's report
    /// wrote rather than reading it again (a round trip per step).
    handoff: std::sync::Mutex<HashMap<crate::model::TaskId, (Saga, std::time::Instant)>>,
    /// The reports of this runner's steps, written in batches.
    reports: reports::Reports,
}

/// How long a handed-off saga row stands for the row read: a run-ahead starts within
/// milliseconds; a step run later (by the poller, after a failed claim) reads the row.
const HANDOFF_FOR: Duration = Duration::from_secs(2);

impl SagaRunner {
    pub(crate) fn new(def: SagaDef, steps: SagaSteps, timeout: Duration) -> Self {
        SagaRunner {
            def: Arc::new(def),
            steps,
            timeout,
            handoff: std::sync::Mutex::new(HashMap::new()),
            reports: reports::Reports::default(),
        }
    }

    /// Hand `saga` as its report left it to the steps the report created, when the
    /// report left its status as it was (a change of status brings a reason, and the
    /// next steps read the row).
    /// Places in this saga's executor for the next group's tasks, for `report` to claim
    /// them (see [`StepReport::claim_next`]): only for the case a store writes in one
    /// statement, the action of a step alone in its group done with a group after it.
    /// A store that declines leaves them pending; they run ahead as without it.
    ///
    /// The trade-off is [`Engine::claim_in`](crate::Engine::claim_in)'s: a process that
    /// dies between the report's commit and the hand-over (microseconds) leaves the next
    /// step running until the sweep gives it back, `dead_after` later.
    fn reserve_next(&self, cx: &Context, report: &StepReport) -> Option<super::Reserved> {
        if !matches!(report.outcome, StepOutcome::Done { .. }) {
            return None;
        }
        let groups = self.def.groups();
        let (group, _, _) = self.def.find_step(&report.step)?;
        let group = usize::try_from(group).ok()?;
        if groups.get(group)?.len() != 1 {
            return None;
        }
        let next = groups.get(group + 1)?.len();
        cx.reserve(self.def.event_type(), next)
    }

    fn hand_off(&self, saga: &Saga, applied: &StepApplied) {
        if applied.status != saga.status || !applied.tasks.iter().any(|t| t.created) {
            return;
        }
        let now = std::time::Instant::now();
        let mut after = saga.clone();
        after.status = applied.status;
        after.group = applied.group;
        after.version += 1;
        let mut map = self
            .handoff
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.retain(|_, (_, at)| now.duration_since(*at) < HANDOFF_FOR);
        for t in applied.tasks.iter().filter(|t| t.created) {
            map.insert(t.id, (after.clone(), now));
        }
    }

    /// The saga row handed off to step task `task` (its first attempt, within
    /// [`HANDOFF_FOR`]), if any.
    fn handed(&self, task: &Task) -> Option<Saga> {
        let mut map = self
            .handoff
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (saga, at) = map.remove(&task.id)?;
        (task.attempts == 1 && at.elapsed() < HANDOFF_FOR).then_some(saga)
    }

    /// How long the step's code may run: a little less than the attempt's timeout, so a
    /// last attempt that times out is still reported (and parks the saga).
    fn budget(&self, task: &Task) -> Duration {
        let full = task.timeout.unwrap_or(self.timeout);
        full.saturating_sub((full / 10).min(Duration::from_secs(5)))
    }

    /// Run the step's code, its panics and its time budget turned into technical
    /// failures.
    async fn run_code(
        &self,
        task: &Task,
        phase: StepPhase,
        scx: StepContext,
    ) -> std::result::Result<Option<String>, StepError> {
        let budget = self.budget(task);
        let step = scx.step.clone();
        let fut: BoxFuture<std::result::Result<Option<String>, StepError>> = match phase {
            StepPhase::Action => {
                let f = self.steps.actions.get(&step).cloned();
                Box::pin(async move {
                    match f {
                        Some(f) => f(scx).await.map(Some),
                        None => Err(no_code(&step)),
                    }
                })
            }
            StepPhase::Compensate => {
                let f = self.steps.compensations.get(&step).cloned();
                Box::pin(async move {
                    match f {
                        Some(f) => f(scx).await.map(|()| None),
                        None => Err(no_code(&step)),
                    }
                })
            }
        };
        match tokio::time::timeout(budget, AssertUnwindSafe(fut).catch_unwind()).await {
            Ok(Ok(result)) => result,
            Ok(Err(panic)) => Err(StepError::technical(HandlerError::retry(format!(
                "the step panicked: {}",
                super::executor::panic_message(panic)
            )))),
            Err(_) => Err(StepError::technical(HandlerError::retry(format!(
                "the step timed out after {budget:?}"
            )))),
        }
    }
}

fn no_code(step: &str) -> StepError {
    StepError::technical(HandlerError::fail(format!("no code for step {step:?}")))
}

/// A handler error that the store's failure is: retried.
fn store_failed(what: &str, e: Error) -> HandlerError {
    HandlerError::retry(format!("{what}: {e}"))
}

#[async_trait]
impl Handler for SagaRunner {
    async fn handle(&self, task: &Task) -> std::result::Result<(), HandlerError> {
        let cx = Context::current().ok_or_else(|| {
            HandlerError::fail(format!(
                "task {}: a saga step runs inside an engine's attempt",
                task.id
            ))
        })?;
        let call = match serde_json::from_str::<Call>(&task.payload) {
            Ok(Call::Step(call)) => call,
            Ok(Call::Nudge(nudge)) => return self.nudge(&cx, nudge).await,
            Ok(Call::Reconcile(tick)) => return self.reconcile(&cx, tick).await,
            Err(e) => {
                return Err(HandlerError::fail(format!(
                    "the payload is not a saga step's, a nudge's or a reconciler tick's: {e}"
                )))
            }
        };
        let def = &self.def;
        let Some((_, _, step)) = def
            .find_step(&call.step)
            .filter(|_| call.saga == def.name())
        else {
            return Err(HandlerError::fail(format!(
                "saga {:?} step {:?} is not a step of this engine's saga {:?}",
                call.saga,
                call.step,
                def.name()
            )));
        };
        let (role, branch) = (step.role(), def.branch_of(step));
        let store = cx.store();
        let saga = match self.handed(task).filter(|s| s.key == call.key) {
            Some(saga) => saga,
            None => store
                .saga(def.name(), &call.key)
                .await
                .map_err(|e| store_failed("reading the saga", e))?
                .ok_or_else(|| {
                    HandlerError::fail(format!(
                        "saga {:?} key {:?} has no state row",
                        call.saga, call.key
                    ))
                })?,
        };
        let outcome = match (call.phase, saga.status) {
            // a parked saga waits for an operator; its step tasks wait too
            (_, SagaStatus::Parked) => {
                return Err(HandlerError::retry_after(
                    Duration::from_secs(60),
                    format!(
                        "saga {} is parked: {}",
                        saga.id,
                        saga.reason.as_deref().unwrap_or("")
                    ),
                ))
            }
            // a late duplicate of a finished saga: nothing to do
            (_, SagaStatus::Completed | SagaStatus::Compensated) => return Ok(()),
            // an action whose saga compensates already is not run: it is refused, so its
            // group can settle (a TCC confirm runs: the tries all succeeded, so the
            // transaction confirms; see SagaProgress)
            (StepPhase::Action, SagaStatus::Compensating) if role != StepRole::Confirm => {
                StepOutcome::Refused {
                    reason: "not run: the saga was compensating".to_owned(),
                }
            }
            // a compensation of a running saga: a stray; nothing to undo
            (StepPhase::Compensate, SagaStatus::Running) => return Ok(()),
            (phase, _) => {
                let steps = Arc::new(tokio::sync::OnceCell::new());
                if phase == StepPhase::Compensate {
                    let rows = steps
                        .get_or_try_init(|| store.saga_steps(saga.id))
                        .await
                        .map_err(|e| store_failed("reading the saga's steps", e))?;
                    let undone = rows.iter().any(|r: &SagaStepRecord| {
                        r.step == call.step
                            && match role {
                                // a TCC try is cancelled whatever it did
                                StepRole::Try => r.state == StepState::Compensated,
                                _ => matches!(r.state, StepState::Compensated | StepState::Refused),
                            }
                    });
                    if undone {
                        // compensated before (or its action refused: nothing to undo)
                        return Ok(());
                    }
                }
                let reported = Arc::new(std::sync::Mutex::new(None));
                let scx = StepContext {
                    saga: Arc::new(saga.clone()),
                    steps,
                    step: call.step.clone(),
                    phase,
                    barrier: (branch.to_owned(), barrier_op(role, phase)),
                    reported: Arc::clone(&reported),
                    cx: cx.clone(),
                };
                let result = self.run_code(task, phase, scx).await;
                let own = reported
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                if let Some(applied) = own {
                    // the step reported itself, on its own transaction
                    crate::driver::Attempt::set_completed(&cx);
                    self.hand_off(&saga, &applied);
                    for task in applied.tasks.iter().filter(|t| t.created) {
                        cx.run_ahead(task).await;
                    }
                    return Ok(());
                }
                match (result, phase) {
                    (Ok(output), StepPhase::Action) => StepOutcome::Done {
                        output: output.unwrap_or_else(|| "null".to_owned()),
                    },
                    (Ok(_), StepPhase::Compensate) => StepOutcome::Compensated,
                    (Err(StepError(Failure::Refused(reason))), StepPhase::Action)
                        if role != StepRole::Confirm =>
                    {
                        StepOutcome::Refused { reason }
                    }
                    (Err(StepError(Failure::Refused(reason))), StepPhase::Action) => {
                        let e = HandlerError::retry(format!(
                            "a TCC confirm cannot refuse; retried: {reason}"
                        ));
                        exhausted_or_retry(def.name(), task, phase, e)?
                    }
                    (Err(StepError(Failure::Refused(reason))), StepPhase::Compensate) => {
                        let e = HandlerError::retry(format!(
                            "a compensation cannot refuse; retried: {reason}"
                        ));
                        exhausted_or_retry(def.name(), task, phase, e)?
                    }
                    (Err(StepError(Failure::Technical(e))), phase) => {
                        exhausted_or_retry(def.name(), task, phase, e)?
                    }
                }
            }
        };
        let report = StepReport::new(cx.lease(), saga.id, call.key, call.step, outcome);
        let failed = matches!(report.outcome, StepOutcome::Exhausted { .. });
        let mut reserved = self.reserve_next(&cx, &report);
        let report = match &reserved {
            Some(r) => report.claim_next(r.owner().clone()),
            None => report,
        };
        match self.reports.report(store, def, report).await {
            Ok(_) if failed => {
                cx.set_failed_in_tx();
                Ok(())
            }
            Ok(applied) => {
                crate::driver::Attempt::set_completed(&cx);
                // committed: the next steps start now, not at the next poll
                self.hand_off(&saga, &applied);
                let claimed: Vec<crate::model::TaskId> =
                    applied.claimed.iter().map(|t| t.id).collect();
                if let Some(places) = reserved.as_mut() {
                    for task in applied.claimed {
                        cx.run_claimed(task, places).await;
                    }
                }
                // the places the report did not use are free for the tasks run ahead
                drop(reserved);
                for task in applied.tasks.iter() {
                    if task.created && !claimed.contains(&task.id) {
                        cx.run_ahead(task).await;
                    }
                }
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::Conflict => Err(HandlerError::retry(e)),
            Err(e) => Err(store_failed("recording the step", e)),
        }
    }
}

/// What a task of a saga's event type asks: a step, a nudge, or a reconciler's tick.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Call {
    Step(StepTask),
    Nudge(NudgeTask),
    Reconcile(ReconcileTask),
}

/// The barrier's operation of `phase` of a step in `role`.
fn barrier_op(role: StepRole, phase: StepPhase) -> BranchOp {
    match (role, phase) {
        (StepRole::Try, StepPhase::Action) => BranchOp::Try,
        (StepRole::Try, StepPhase::Compensate) => BranchOp::Cancel,
        (StepRole::Confirm, _) => BranchOp::Confirm,
        (_, StepPhase::Action) => BranchOp::Action,
        (_, StepPhase::Compensate) => BranchOp::Compensate,
    }
}

/// A technical failure: the task's last attempt (or a permanent failure) is reported,
/// parking the saga; any other is retried.
/// Each technical failure counts in `backstop_saga_step_failures_total{saga, phase}`.
fn exhausted_or_retry(
    saga: &str,
    task: &Task,
    phase: StepPhase,
    e: HandlerError,
) -> std::result::Result<StepOutcome, HandlerError> {
    metrics::counter!("backstop_saga_step_failures_total", "saga" => saga.to_owned(), "phase" => phase.as_str())
        .increment(1);
    // a step cannot cancel its task (the saga would wait for its report): as a fail
    if task.has_attempts_left() && !matches!(e.action(), ErrorAction::Fail | ErrorAction::Cancel) {
        return Err(e);
    }
    Ok(StepOutcome::Exhausted {
        phase,
        reason: e.message().to_owned(),
    })
}
