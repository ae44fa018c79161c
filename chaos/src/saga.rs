//! Sagas under fire: the driver starts a saga in one business transaction in ten
//! (`Transactional::start_in`, with its order row); the workers run its steps, each of
//! which writes an effect row behind the participant barrier; at the end the sagas,
//! their effects and the barrier's records are checked.
//!
//! The saga `chaos`: `stock` beside `coupon` (both compensated), then `pay`. Its input
//! says what goes wrong on purpose: `pay` refuses (the others are compensated), the
//! `coupon` compensation never succeeds (the saga parks), each step's first attempt
//! fails (a technical failure: retried, never compensated), the guarded write runs twice
//! (a duplicate delivery, for the barrier to turn away), `stock` is slow (a stopped
//! worker wakes while its successor runs the step). `stock` reports on its own
//! transaction (`saga_step_in`): its effect, its barrier record and its completion
//! commit together.
//!
//! The effects table has no unique key on purpose: an effect applied twice leaves two
//! rows. With `--broken-barrier` the steps call a barrier without its unique key (see
//! [`BarrierKind`]), and the checks must fail.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use backstop::{
    AnyStore, BranchCall, BranchOp, HandlerError, RetryPolicy, Saga, SagaDef, SagaFilter,
    SagaStart, SagaStatus, SagaStep, SagaSteps, StepContext, StepError, StepPhase, TaskStore,
    Transactional,
};
use serde::{Deserialize, Serialize};
use sqlx::AnyPool;

use crate::check::{some, Line};
use crate::driver::{Outcome, Written};
use crate::ledger::now_ms;
use crate::BoxError;

/// The saga's name; its tasks' event type is `saga:chaos`.
pub const SAGA: &str = "chaos";
/// What a business transaction that starts a saga is, in the driver's record of it.
pub const STARTED: &str = "CHAOS_SAGA";
/// The attempts of the `coupon` compensation: a saga whose compensation never succeeds
/// parks after them.
const UNDO_ATTEMPTS: u32 = 5;
/// The saga's `stuck_after`: its reconciler's interval, and how long a saga whose step
/// task failed with no report (its last attempt's worker killed) waits to be parked.
pub const STUCK_AFTER: Duration = Duration::from_secs(5);
/// The steps, in order, and whether each is compensated.
const STEPS: [(&str, bool); 3] = [("stock", true), ("coupon", true), ("pay", false)];

/// What goes wrong on purpose in one saga (its input).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Plan {
    /// `pay` refuses: the business failure that compensates `stock` and `coupon`.
    pub refuse: bool,
    /// The `coupon` compensation fails every attempt: the saga parks.
    pub stuck: bool,
    /// Each step's (and compensation's) first attempt fails: a technical failure.
    pub flaky: bool,
    /// The guarded write of `coupon`, `pay` and the compensations runs twice, as a
    /// second delivery would.
    pub twice: bool,
    /// `stock` takes 1.5 s.
    pub slow: bool,
}

impl Plan {
    /// A plan at random: one saga in four refuses (one in five of those parks), one in
    /// ten is flaky, one in ten calls twice, one in twenty is slow.
    pub fn pick(rng: &mut fastrand::Rng) -> Plan {
        let refuse = rng.u8(..100) < 25;
        Plan {
            refuse,
            stuck: refuse && rng.u8(..100) < 20,
            flaky: rng.u8(..100) < 10,
            twice: rng.u8(..100) < 10,
            slow: rng.u8(..100) < 5,
        }
    }
}

/// The saga's definition: quick retries (a step's technical failures are retried 50
/// times), the `coupon` compensation given up after [`UNDO_ATTEMPTS`].
pub fn def() -> backstop::Result<SagaDef> {
    let quick = RetryPolicy::fixed(50, Duration::from_millis(100));
    SagaDef::builder(SAGA)
        .parallel([
            SagaStep::new("stock")
                .compensated()
                .retry(quick)
                .compensation_retry(quick),
            SagaStep::new("coupon")
                .compensated()
                .retry(quick)
                .compensation_retry(RetryPolicy::fixed(
                    UNDO_ATTEMPTS,
                    Duration::from_millis(100),
                )),
        ])
        .step(SagaStep::new("pay").retry(quick))
        // the saga reconciler ticks every few seconds, under the faults too
        .stuck_after(STUCK_AFTER)
        .build()
}

/// The start of the saga of business key `key`.
pub fn start(key: &str, plan: &Plan) -> backstop::Result<SagaStart> {
    def()?.start(key, plan)
}

/// The barrier the steps' writes are guarded by.
#[derive(Clone)]
pub enum BarrierKind {
    /// The library's (`Transactional::barrier_in`), on the store's barrier table.
    Real,
    /// Broken: the barrier's plan (a compensation's insert of its forward operation's
    /// row, then its own; a forward operation's insert of its own row) against a scratch
    /// table of the same columns without the unique key, so every insert succeeds:
    /// every call runs, every compensation is taken as empty. On MySQL the suite drops
    /// the real table's primary key instead and runs the library's barrier on it (its
    /// `INSERT IGNORE` then inserts every time); PostgreSQL's and SQLite's inserts name
    /// the key as their conflict target and would fail without it, not run twice.
    Keyless(String),
}

/// The tables a run's sagas write: the effects, and the barrier's (or its broken copy).
pub fn tables(tag: &str) -> (String, String) {
    (
        format!("chaos_saga_effects_{tag}"),
        format!("chaos_{tag}_barrier"),
    )
}

/// Create the effects table (and, broken, make the barrier keyless); the barrier table
/// the checks read, and the worker's argument naming the barrier.
pub async fn setup(
    pool: &AnyPool,
    tag: &str,
    mysql: bool,
    broken: bool,
) -> Result<(String, String), BoxError> {
    let (effects, barrier) = tables(tag);
    let ddl = [
        format!(
            "CREATE TABLE {effects} (saga_key VARCHAR(64) NOT NULL, step VARCHAR(32) NOT NULL, \
             op VARCHAR(16) NOT NULL, at_ms BIGINT NOT NULL)"
        ),
        format!(
            "CREATE TABLE {barrier}_copy (gid VARCHAR(128) NOT NULL, branch_id VARCHAR(128) NOT NULL, \
             op VARCHAR(16) NOT NULL, reason VARCHAR(16) NOT NULL)"
        ),
    ];
    for sql in ddl {
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(pool).await?;
    }
    Ok(match (broken, mysql) {
        (false, _) => (barrier, "real".into()),
        (true, true) => {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "ALTER TABLE {barrier} DROP PRIMARY KEY"
            )))
            .execute(pool)
            .await?;
            (barrier, "real".into())
        }
        (true, false) => (format!("{barrier}_copy"), format!("{barrier}_copy")),
    })
}

/// What the steps need in a worker.
struct Env {
    store: AnyStore,
    pool: AnyPool,
    def: SagaDef,
    effects: String,
    barrier: BarrierKind,
    /// `$1` placeholders (PostgreSQL) rather than `?`.
    dollar: bool,
}

impl Env {
    fn params(&self, n: usize) -> String {
        (1..=n)
            .map(|i| {
                if self.dollar {
                    format!("${i}")
                } else {
                    "?".into()
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The saga's definition and its steps' code for a worker: `url` is the database's
/// (through the proxy), `barrier` the worker's argument (`real`, or the keyless copy's
/// table).
pub async fn steps(
    store: AnyStore,
    url: &str,
    effects: &str,
    barrier: &str,
) -> Result<(SagaDef, SagaSteps), BoxError> {
    sqlx::any::install_default_drivers();
    // bounded waits, as an application sets them: a connection the faults left half dead
    // (killed by the server behind the proxy) otherwise holds a step for a minute
    let pool = sqlx::pool::PoolOptions::new()
        .max_connections(8)
        .acquire_timeout(CALL_TIMEOUT)
        // one server: sqlx's pools take one (on Galera the first node; the store's own
        // pool follows the writer node)
        .connect(&crate::driver::first_server(&without_table(url))?)
        .await?;
    let env = Arc::new(Env {
        dollar: matches!(store, AnyStore::Postgres(_)),
        store,
        pool,
        def: def()?,
        effects: effects.to_owned(),
        barrier: match barrier {
            "real" => BarrierKind::Real,
            copy => BarrierKind::Keyless(copy.to_owned()),
        },
    });
    let mut steps = SagaSteps::new();
    for (name, compensated) in STEPS {
        let e = Arc::clone(&env);
        steps = steps.action(name, move |cx| run(Arc::clone(&e), cx));
        if compensated {
            let e = Arc::clone(&env);
            steps = steps.compensation(name, move |cx| run(Arc::clone(&e), cx));
        }
    }
    Ok((env.def.clone(), steps))
}

/// The store URL without backstop's own `table=` parameter, for sqlx.
fn without_table(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let rest: Vec<&str> = query
        .split('&')
        .filter(|p| !p.starts_with("table="))
        .collect();
    if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    }
}

/// One attempt of a step's action or compensation, as its saga's plan says.
async fn run(env: Arc<Env>, cx: StepContext) -> Result<(), StepError> {
    let plan: Plan = cx.input()?;
    let (step, phase) = (cx.step().to_owned(), cx.phase());
    let action = phase == StepPhase::Action;
    let ms = if plan.slow && action && step == "stock" {
        1500
    } else {
        fastrand::u64(5..40)
    };
    tokio::time::sleep(Duration::from_millis(ms)).await;
    if plan.flaky && cx.context().task().attempts == 1 {
        return Err(StepError::technical(HandlerError::retry(
            "chaos: the first attempt fails on purpose",
        )));
    }
    match (step.as_str(), action) {
        ("pay", true) if plan.refuse => {
            return Err(StepError::refuse("chaos: payment refused on purpose"))
        }
        ("coupon", false) if plan.stuck => {
            return Err(StepError::technical(HandlerError::retry(
                "chaos: this compensation never succeeds",
            )))
        }
        _ => {}
    }
    // `stock` reports on its own transaction; the others' writes may be delivered twice
    let report = action && step == "stock";
    let calls = if plan.twice && !report { 2 } else { 1 };
    for _ in 0..calls {
        match tokio::time::timeout(CALL_TIMEOUT, guarded(&env, &cx, report)).await {
            Ok(done) => done?,
            // the transaction is dropped (rolled back, or its connection discarded)
            Err(_) => {
                return Err(StepError::technical(HandlerError::retry(format!(
                    "chaos: the step's transaction took over {CALL_TIMEOUT:?}"
                ))))
            }
        }
    }
    Ok(())
}

/// How long a step's transaction (and the wait for its connection) may take before the
/// attempt fails and is retried.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// The step's effect row on a transaction of its own, if the barrier lets this call
/// run; with `report`, the step's completion on the same transaction.
async fn guarded(env: &Env, cx: &StepContext, report: bool) -> Result<(), StepError> {
    let mut tx = env.pool.begin().await?;
    let call = cx.branch()?;
    let runs = match &env.barrier {
        BarrierKind::Real => env.store.barrier_in(&mut *tx, &call).await?.should_run(),
        BarrierKind::Keyless(table) => keyless_barrier(env, &mut tx, table, &call).await?,
    };
    if runs {
        let sql = format!(
            "INSERT INTO {} (saga_key, step, op, at_ms) VALUES ({})",
            env.effects,
            env.params(4)
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&cx.saga().key)
            .bind(cx.step())
            .bind(call.op().as_str())
            .bind(now_ms())
            .execute(&mut *tx)
            .await?;
    }
    let applied = if report {
        let r = cx.report(&())?;
        Some(env.store.saga_step_in(&mut *tx, &env.def, &r).await?)
    } else {
        None
    };
    tx.commit().await?;
    if let Some(a) = applied {
        cx.reported(a);
    }
    Ok(())
}

/// The barrier's plan on a table without its unique key ([`BarrierKind::Keyless`]):
/// whether the call runs.
async fn keyless_barrier(
    env: &Env,
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    table: &str,
    call: &BranchCall,
) -> Result<bool, StepError> {
    let sql = format!(
        "INSERT INTO {table} (gid, branch_id, op, reason) VALUES ({})",
        env.params(4)
    );
    let mut insert = async |op: BranchOp| -> Result<bool, StepError> {
        let done = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .bind(call.gid())
            .bind(call.branch_id())
            .bind(op.as_str())
            .bind(call.op().as_str())
            .execute(&mut **tx)
            .await?;
        Ok(done.rows_affected() == 1)
    };
    let undone_inserted = match call.op().undoes() {
        Some(forward) => insert(forward).await?,
        None => false,
    };
    let own_inserted = insert(call.op()).await?;
    // an inserted forward row: the compensation came first (empty); an own row
    // inserted: the call runs; neither: a duplicate (never, without the key)
    Ok(!undone_inserted && own_inserted)
}

/// One effect row.
pub struct Effect {
    pub key: String,
    pub step: String,
    pub op: String,
    pub at: i64,
}

/// What the sagas left: their rows, their effects, the barrier's records.
pub struct Outcomes {
    /// How long the sagas took to stop moving after the tasks settled (ms).
    pub settle_ms: i64,
    pub sagas: Vec<Saga>,
    pub effects: Vec<Effect>,
    /// `(gid, branch_id, op, reason)`.
    pub barrier: Vec<(String, String, String, String)>,
}

/// Wait until no saga of the run is running or compensating (up to `bound`): how long
/// it took, in ms (`i64::MAX`: it did not happen).
pub async fn settle(store: &AnyStore, bound: Duration) -> Result<i64, BoxError> {
    let from = std::time::Instant::now();
    loop {
        let moving: u64 = store
            .saga_backlog()
            .await?
            .iter()
            .filter(|c| c.name == SAGA)
            .filter(|c| matches!(c.status, SagaStatus::Running | SagaStatus::Compensating))
            .map(|c| c.count)
            .sum();
        if moving == 0 {
            return Ok(from.elapsed().as_millis() as i64);
        }
        if from.elapsed() > bound {
            return Ok(i64::MAX);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How long after the tasks settled the sagas may still move: a saga whose last step
/// task failed unreported is parked by the reconciler once unchanged for
/// [`STUCK_AFTER`], at its next tick (every `STUCK_AFTER`), plus a poll and a margin.
pub const SETTLE_BOUND: Duration = Duration::from_secs(2 * STUCK_AFTER.as_secs() + 2);

/// Read what the sagas left (`barrier`: the table the steps' barrier wrote).
pub async fn read(
    store: &AnyStore,
    pool: &AnyPool,
    effects: &str,
    barrier: &str,
    settle_ms: i64,
) -> Result<Outcomes, BoxError> {
    let mut sagas = Vec::new();
    let mut filter = SagaFilter::default().name(SAGA);
    filter.limit = 500;
    loop {
        let page = store.sagas(&filter).await?;
        let full = page.len() == filter.limit;
        filter.after_id = page.last().map_or(filter.after_id, |s| s.id);
        sagas.extend(page);
        if !full {
            break;
        }
    }
    let rows: Vec<(String, String, String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT saga_key, step, op, at_ms FROM {effects}"
    )))
    .fetch_all(pool)
    .await?;
    let barrier = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT gid, branch_id, op, reason FROM {barrier}"
    )))
    .fetch_all(pool)
    .await?;
    Ok(Outcomes {
        settle_ms,
        sagas,
        effects: rows
            .into_iter()
            .map(|(key, step, op, at)| Effect { key, step, op, at })
            .collect(),
        barrier,
    })
}

/// The sagas' invariants, each with its counts.
pub fn check(
    written: &HashMap<String, Written>,
    orders: &HashSet<&str>,
    out: &Outcomes,
) -> Vec<Line> {
    let mut lines = Vec::new();
    let by_key: HashMap<&str, &Saga> = out.sagas.iter().map(|s| (s.key.as_str(), s)).collect();
    // an input that does not decode has no plan: counted not as planned below
    let plan_of = |s: &Saga| serde_json::from_str::<Plan>(&s.input).ok();
    // effects per (saga, step, op), in the order they were applied
    let mut applied: HashMap<(&str, &str, &str), Vec<i64>> = HashMap::new();
    for e in &out.effects {
        applied
            .entry((e.key.as_str(), e.step.as_str(), e.op.as_str()))
            .or_default()
            .push(e.at);
    }
    let count = |key: &str, step: &str, op: BranchOp| {
        applied.get(&(key, step, op.as_str())).map_or(0, Vec::len)
    };

    // 1. every saga ends completed, compensated, or parked with a reason, as its plan says
    let (mut started, mut missing, mut wrong, mut split, mut leaked) = (0, 0, 0, 0, 0);
    let mut ends: HashMap<SagaStatus, usize> = HashMap::new();
    let (mut parked_on_purpose, mut parked_by_faults) = (0, 0);
    let mut examples = Vec::new();
    for (key, w) in written.iter().filter(|(_, w)| w.event_type == STARTED) {
        let saga = by_key.get(key.as_str());
        match (w.outcome, saga) {
            (Outcome::RolledBack, Some(_)) => leaked += 1,
            (Outcome::Unknown, s) if s.is_some() != orders.contains(key.as_str()) => split += 1,
            (Outcome::Committed, None) => missing += 1,
            _ => {}
        }
        let Some(s) = saga else { continue };
        started += 1;
        *ends.entry(s.status).or_default() += 1;
        let Some(plan) = plan_of(s) else {
            wrong += 1;
            examples.push(s.id);
            continue;
        };
        let reasoned = s.reason.as_deref().is_some_and(|r| !r.is_empty());
        let right = match s.status {
            SagaStatus::Completed => !plan.refuse,
            SagaStatus::Compensated => plan.refuse && !plan.stuck,
            SagaStatus::Parked if plan.stuck => {
                parked_on_purpose += 1;
                reasoned
            }
            // a step task out of attempts under the faults (its last attempt's worker
            // killed: parked by the reconciler, the reason saying so)
            SagaStatus::Parked => {
                parked_by_faults += 1;
                reasoned
            }
            _ => false,
        };
        if !right {
            wrong += 1;
            examples.push(s.id);
        }
    }
    lines.push(crate::check::settled(
        "sagas ended within stuck_after + a tick",
        out.settle_ms,
        SETTLE_BOUND,
    ));
    let strays = out
        .sagas
        .iter()
        .filter(|s| !written.contains_key(&s.key))
        .count();
    let end = |st: SagaStatus| ends.get(&st).copied().unwrap_or(0);
    lines.push(Line {
        ok: missing + wrong + split + leaked + strays == 0 && started > 0,
        name: "every saga completed, compensated or parked",
        detail: format!(
            "{started} sagas: {} completed, {} compensated, {} parked with a reason ({parked_on_purpose} on purpose, {parked_by_faults} out of attempts); {missing} missing, {wrong} not as planned, {leaked} of a rolled-back transaction, {split} split from their order, {strays} of no transaction{}",
            end(SagaStatus::Completed),
            end(SagaStatus::Compensated),
            end(SagaStatus::Parked),
            ids(&examples)
        ),
    });

    // 2. each step's effect (and each compensation's) applied at most once per saga
    let twice: Vec<_> = applied.iter().filter(|(_, at)| at.len() > 1).collect();
    let doubled = out
        .sagas
        .iter()
        .filter(|s| plan_of(s).is_some_and(|p| p.twice))
        .count();
    lines.push(Line {
        ok: twice.is_empty() && doubled > 0,
        name: "each saga step's effect applied at most once",
        detail: format!(
            "{} effects: {} applied more than once{}; {doubled} sagas delivered their writes twice on purpose",
            out.effects.len(),
            twice.len(),
            some("steps", twice.iter().map(|((k, s, o), _)| format!("{k}/{s}:{o}")))
        ),
    });

    // 3. no compensation's effect without its forward step's; the barrier's records
    // explain each empty compensation (a forward row the compensation wrote)
    let mut orphaned = Vec::new();
    for ((key, step, op), _) in applied.iter() {
        if *op == BranchOp::Compensate.as_str() && count(key, step, BranchOp::Action) == 0 {
            orphaned.push(format!("{key}/{step}"));
        }
    }
    let empty = out
        .barrier
        .iter()
        .filter(|(_, _, op, reason)| {
            op == BranchOp::Action.as_str() && reason == BranchOp::Compensate.as_str()
        })
        .count();
    lines.push(Line {
        ok: orphaned.is_empty(),
        name: "no compensation applied without its action",
        detail: format!(
            "{} compensations applied: {} without their action's effect{}; {empty} empty compensations, each with the forward row it wrote in the barrier",
            out.effects.iter().filter(|e| e.op == BranchOp::Compensate.as_str()).count(),
            orphaned.len(),
            some("steps", orphaned.iter().cloned())
        ),
    });

    // 4. no forward step applied after its compensation
    let mut late = Vec::new();
    for ((key, step, op), at) in applied.iter() {
        if *op != BranchOp::Action.as_str() {
            continue;
        }
        if let Some(undone) = applied.get(&(key, step, BranchOp::Compensate.as_str())) {
            if at.iter().any(|a| undone.iter().any(|u| a > u)) {
                late.push(format!("{key}/{step}"));
            }
        }
    }
    lines.push(Line {
        ok: late.is_empty(),
        name: "no saga step applied after its compensation",
        detail: format!(
            "{} steps done and undone: {} applied after their compensation{}",
            applied
                .keys()
                .filter(|(_, _, op)| *op == BranchOp::Compensate.as_str())
                .count(),
            late.len(),
            some("steps", late.iter().cloned())
        ),
    });

    // 5. each saga's effects are what its end says: a completed saga did every step
    // once and undid none; a compensated one undid each step it did and never paid; a
    // parked one never paid
    let mut unlike = Vec::new();
    for s in &out.sagas {
        let key = s.key.as_str();
        let did = |step| count(key, step, BranchOp::Action);
        let undid = |step| count(key, step, BranchOp::Compensate);
        let right = match s.status {
            SagaStatus::Completed => STEPS.iter().all(|(n, _)| did(n) == 1 && undid(n) == 0),
            SagaStatus::Compensated => {
                did("pay") == 0
                    && STEPS
                        .iter()
                        .filter(|(_, c)| *c)
                        .all(|(n, _)| did(n) == undid(n))
            }
            // parked on purpose: the `coupon` compensation never succeeded
            SagaStatus::Parked if plan_of(s).is_some_and(|p| p.stuck) => {
                did("pay") == 0 && undid("coupon") == 0
            }
            // parked out of attempts under the faults: a compensation whose attempt
            // failed after its transaction committed (the commit's answer lost, or the
            // call timed out while a stalled cluster held the commit) was applied and
            // never reported; the barrier still keeps each to its action's once
            SagaStatus::Parked => {
                did("pay") == 0
                    && STEPS
                        .iter()
                        .filter(|(_, c)| *c)
                        .all(|(n, _)| undid(n) <= did(n))
            }
            _ => true,
        };
        if !right {
            unlike.push(s.id);
        }
    }
    lines.push(Line {
        ok: unlike.is_empty(),
        name: "each saga's effects as its end says",
        detail: format!(
            "{} sagas: {} with effects unlike their end{}",
            out.sagas.len(),
            unlike.len(),
            ids(&unlike)
        ),
    });
    lines
}

/// A few of the offending sagas.
fn ids(examples: &[i64]) -> String {
    some("sagas", examples.iter().map(|i| i.to_string()))
}
