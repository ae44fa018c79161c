//! A step's report ([`TaskStore::saga_step_many`]): fenced by its task's lease, written in one
//! transaction with the task's mark, the step's row, the saga's row and the next steps'
//! tasks, and serialized per saga so a parallel group joins once.

use backstop_core::limits::{DEFAULT_MAX_PAYLOAD_BYTES, MAX_ERROR_BYTES};
use backstop_core::TaskStoreExt;
use backstop_core::{
    Audit, ErrorKind, Lease, RetryPolicy, SagaCommand, SagaDef, SagaFilter, SagaId, SagaStatus,
    SagaStep, Status, StepApplied, StepOutcome, StepPhase, StepReport, StepState, Task, TaskFilter,
    TaskStore,
};
use futures_util::future::join_all;
use std::time::Duration;

use crate::{within, Ctx, Harness};

/// `stock` (compensated) beside `coupon` (compensated), then `pay`.
fn order() -> SagaDef {
    SagaDef::builder("order")
        .parallel([
            SagaStep::new("stock").compensated(),
            SagaStep::new("coupon").compensated(),
        ])
        .step(SagaStep::new("pay"))
        .build()
        .unwrap()
}

/// Start saga `key` of `def` and claim the task of its step `step`'s action.
async fn start_and_claim<H: Harness>(
    ctx: &Ctx<H>,
    def: &SagaDef,
    key: &str,
    step: &str,
) -> (SagaId, Task) {
    let started = ctx
        .store
        .start_saga(&def.start(key, &1).unwrap())
        .await
        .unwrap();
    (started.id, claim(ctx, def, key, step).await)
}

/// Claim the pending task of `step`'s action in saga `key`.
async fn claim<H: Harness>(ctx: &Ctx<H>, def: &SagaDef, key: &str, step: &str) -> Task {
    let biz = format!("{key}/{step}:a");
    let task = ctx
        .store
        .list(
            &TaskFilter::default()
                .event_type(def.event_type())
                .limit(1000),
        )
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.biz_key == biz)
        .unwrap_or_else(|| panic!("no task {biz}"));
    ctx.store
        .claim_by_id(task.id, &ctx.owner)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{biz} is not claimable"))
}

fn done(output: &str) -> StepOutcome {
    StepOutcome::Done {
        output: output.to_owned(),
    }
}

/// A report applies only while its task runs under its lease: with another lease it is
/// `Conflict` and writes nothing (the task still running, no step row, the saga's row
/// untouched). Applied, the task is succeeded, the step's row records it with its
/// output, the saga's version and `updated_at` move; the first of a parallel group only
/// records itself, the second starts the next group's task (the saga's event type, key
/// `{key}/pay:a`, pending; the answer names it). The same report again is `Conflict`: its lease ended.
pub async fn saga_step_is_fenced_by_its_tasks_lease<H: Harness>(ctx: &Ctx<H>) {
    let def = order();
    let (id, stock) = start_and_claim(ctx, &def, "f-1", "stock").await;
    let before = ctx.store.saga("order", "f-1").await.unwrap().unwrap();
    let stale = Lease {
        task_id: stock.id,
        token: stock.lease + 1,
    };
    let report = |lease, outcome| StepReport::new(lease, id, "f-1", "stock", outcome);
    let e = ctx
        .store
        .saga_step(&def, &report(stale, done("1")))
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind(), e.operation()),
        (ErrorKind::Conflict, "saga_step"),
        "{e}"
    );
    let task = ctx.store.get(stock.id).await.unwrap().unwrap();
    assert_eq!((task.status, task.attempts), (Status::Running, 1));
    assert!(ctx.store.saga_steps(id).await.unwrap().is_empty());
    assert_eq!(
        ctx.store.saga("order", "f-1").await.unwrap().unwrap(),
        before
    );

    let applied = ctx
        .store
        .saga_step(&def, &report(stock.lease(), done(r#"{"n":1}"#)))
        .await
        .unwrap();
    assert_eq!(applied, StepApplied::new(SagaStatus::Running, 0, 0));
    let task = ctx.store.get(stock.id).await.unwrap().unwrap();
    assert_eq!((task.status, task.last_error), (Status::Succeeded, None));
    let steps = ctx.store.saga_steps(id).await.unwrap();
    assert_eq!(steps.len(), 1);
    let row = &steps[0];
    assert_eq!(
        (row.step.as_str(), row.position, row.group, row.state),
        ("stock", 0, 0, StepState::Done)
    );
    assert_eq!(row.output.as_deref(), Some(r#"{"n":1}"#));
    let after = ctx.store.saga("order", "f-1").await.unwrap().unwrap();
    assert_eq!(
        (after.status, after.group, after.version),
        (SagaStatus::Running, 0, 1)
    );
    assert!(after.updated_at >= before.updated_at);
    let e = ctx
        .store
        .saga_step(&def, &report(stock.lease(), done("2")))
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::Conflict,
        "the lease ended with the report"
    );

    let coupon = claim(ctx, &def, "f-1", "coupon").await;
    let applied = ctx
        .store
        .saga_step(
            &def,
            &StepReport::new(coupon.lease(), id, "f-1", "coupon", done("null")),
        )
        .await
        .unwrap();
    assert_eq!(
        (applied.status, applied.group, applied.enqueued),
        (SagaStatus::Running, 1, 1)
    );
    let pay = claim(ctx, &def, "f-1", "pay").await;
    assert_eq!(applied.tasks.len(), 1);
    assert_eq!(
        (applied.tasks[0].id, applied.tasks[0].created),
        (pay.id, true),
        "the answer names the task it enqueued"
    );
    assert_eq!(pay.event_type, "saga:order");
    assert_eq!(pay.retry, RetryPolicy::default());
    let after = ctx.store.saga("order", "f-1").await.unwrap().unwrap();
    assert_eq!((after.group, after.version), (1, 2));
}

/// The report of a step alone in its group (a backend may write it in one statement)
/// is all or nothing and answers as any report: with another lease `Conflict`, nothing
/// written; applied, the task succeeded, the step row with its output, the saga at the
/// next group with its version bumped, the next step's task pending and named in the
/// answer; a next task already under its key (a nudge enqueued it first) answered as not
/// created, with its id; a report of a saga an operator turned to compensating decided
/// on the saga as it is (its action recorded, then compensated); the last step completes
/// the saga and enqueues nothing.
pub async fn saga_step_of_a_lone_step_is_all_or_nothing<H: Harness>(ctx: &Ctx<H>) {
    let def = SagaDef::builder("line")
        .step(SagaStep::new("a").compensated())
        .step(SagaStep::new("b").compensated())
        .step(SagaStep::new("c"))
        .build()
        .unwrap();
    let (id, a) = start_and_claim(ctx, &def, "l-1", "a").await;
    let report =
        |task: &Task, step: &str, outcome| StepReport::new(task.lease(), id, "l-1", step, outcome);
    let stale = StepReport::new(
        Lease {
            task_id: a.id,
            token: a.lease + 1,
        },
        id,
        "l-1",
        "a",
        done("1"),
    );
    let e = ctx.store.saga_step(&def, &stale).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.operation()),
        (ErrorKind::Conflict, "saga_step")
    );
    let saga = ctx.store.saga("line", "l-1").await.unwrap().unwrap();
    assert_eq!(
        (saga.status, saga.group, saga.version),
        (SagaStatus::Running, 0, 0)
    );
    assert!(ctx.store.saga_steps(id).await.unwrap().is_empty());
    assert_eq!(
        ctx.store.get(a.id).await.unwrap().unwrap().status,
        Status::Running
    );

    // the next step's task is there already: the report meets it
    let b_task = def.step_task("l-1", def.find_step("b").unwrap().2, StepPhase::Action);
    let b_id = ctx.store.enqueue(b_task).await.unwrap().id;
    let applied = ctx
        .store
        .saga_step(&def, &report(&a, "a", done(r#"{"a":1}"#)))
        .await
        .unwrap();
    assert_eq!(
        (
            applied.status,
            applied.group,
            applied.enqueued,
            applied.tasks.len()
        ),
        (SagaStatus::Running, 1, 1, 1)
    );
    let met = &applied.tasks[0];
    assert_eq!(
        (met.id, met.created, met.status),
        (b_id, false, Status::Pending),
        "the task under the key, not created"
    );
    let task = ctx.store.get(a.id).await.unwrap().unwrap();
    assert_eq!((task.status, task.last_error), (Status::Succeeded, None));
    let rows = ctx.store.saga_steps(id).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0].step.as_str(),
            rows[0].position,
            rows[0].group,
            rows[0].state
        ),
        ("a", 0, 0, StepState::Done)
    );
    assert_eq!(rows[0].output.as_deref(), Some(r#"{"a":1}"#));
    let after = ctx.store.saga("line", "l-1").await.unwrap().unwrap();
    assert_eq!(
        (after.status, after.group, after.version),
        (SagaStatus::Running, 1, 1)
    );
    assert!(after.updated_at >= saga.updated_at);

    // an operator compensates while b runs: b's report is decided on the saga as it is
    let b = claim(ctx, &def, "l-1", "b").await;
    let op = Audit::new("op", "customer cancelled");
    ctx.store
        .command_saga(id, SagaCommand::Compensate, &op)
        .await
        .unwrap();
    let before = ctx.store.saga("line", "l-1").await.unwrap().unwrap();
    let applied = ctx
        .store
        .saga_step(&def, &report(&b, "b", done("2")))
        .await
        .unwrap();
    assert_eq!(applied.status, SagaStatus::Compensating);
    let undo: Vec<&str> = applied
        .tasks
        .iter()
        .filter(|t| t.created)
        .map(|t| t.event_type.as_str())
        .collect();
    assert_eq!(undo, vec!["saga:line"], "b's compensation enqueued");
    let comp = ctx.store.get(applied.tasks[0].id).await.unwrap().unwrap();
    assert_eq!(comp.biz_key, "l-1/b:c");
    let rows = ctx.store.saga_steps(id).await.unwrap();
    let b_row = rows.iter().find(|r| r.step == "b").unwrap();
    assert_eq!(
        (b_row.state, b_row.output.as_deref()),
        (StepState::Done, Some("2"))
    );
    let after = ctx.store.saga("line", "l-1").await.unwrap().unwrap();
    assert_eq!(
        (after.status, after.version),
        (SagaStatus::Compensating, before.version + 1)
    );

    // asked to, a store may insert the next step's task claimed: whole, as a claim
    // returns it; or decline, and it is pending
    let (id3, a3) = start_and_claim(ctx, &def, "l-3", "a").await;
    let next_owner = backstop_core::Owner::new("next-owner").unwrap();
    let applied = ctx
        .store
        .saga_step(
            &def,
            &StepReport::new(a3.lease(), id3, "l-3", "a", done("3")).claim_next(next_owner),
        )
        .await
        .unwrap();
    assert_eq!((applied.group, applied.tasks.len()), (1, 1));
    let b3 = ctx.store.get(applied.tasks[0].id).await.unwrap().unwrap();
    assert_eq!(
        (b3.biz_key.as_str(), applied.tasks[0].created),
        ("l-3/b:a", true)
    );
    match applied.claimed.as_slice() {
        [] => assert_eq!(
            (b3.status, b3.attempts, b3.owner.as_deref()),
            (Status::Pending, 0, None),
            "declined: pending"
        ),
        [claimed] => {
            assert_eq!(claimed, &b3, "the claimed task as the store has it");
            assert_eq!(
                (b3.status, b3.attempts, b3.lease, b3.owner.as_deref()),
                (Status::Running, 1, 1, Some("next-owner"))
            );
            assert_eq!(applied.tasks[0].status, Status::Running);
        }
        more => panic!("one task created, {} claimed", more.len()),
    }

    // the last step completes a saga and enqueues nothing
    let def2 = SagaDef::builder("one")
        .step(SagaStep::new("only"))
        .build()
        .unwrap();
    let (id2, only) = start_and_claim(ctx, &def2, "o-1", "only").await;
    let applied = ctx
        .store
        .saga_step(
            &def2,
            &StepReport::new(only.lease(), id2, "o-1", "only", done("null")),
        )
        .await
        .unwrap();
    assert_eq!(applied, StepApplied::new(SagaStatus::Completed, 0, 0));
    let saga = ctx.store.saga("one", "o-1").await.unwrap().unwrap();
    assert_eq!((saga.status, saga.version), (SagaStatus::Completed, 1));
    let task = ctx.store.get(only.id).await.unwrap().unwrap();
    assert_eq!(task.status, Status::Succeeded);
}

/// A report out of attempts fails its task with the reason (cut to the error limit) and
/// parks the saga, saying which phase of which step; a refusal's reason is cut too.
pub async fn saga_step_out_of_attempts_parks_the_saga<H: Harness>(ctx: &Ctx<H>) {
    let def = order();
    let (id, stock) = start_and_claim(ctx, &def, "x-1", "stock").await;
    let long = "é".repeat(MAX_ERROR_BYTES);
    let outcome = StepOutcome::Exhausted {
        phase: StepPhase::Action,
        reason: long.clone(),
    };
    let applied = ctx
        .store
        .saga_step(
            &def,
            &StepReport::new(stock.lease(), id, "x-1", "stock", outcome),
        )
        .await
        .unwrap();
    assert_eq!(applied, StepApplied::new(SagaStatus::Parked, 0, 0));
    let task = ctx.store.get(stock.id).await.unwrap().unwrap();
    assert_eq!(task.status, Status::Failed);
    assert_eq!(task.owner, None);
    let error = task.last_error.unwrap();
    assert!(error.len() <= MAX_ERROR_BYTES && long.starts_with(&error));
    let saga = ctx.store.saga("order", "x-1").await.unwrap().unwrap();
    assert_eq!((saga.status, saga.version), (SagaStatus::Parked, 1));
    let reason = saga.reason.unwrap();
    assert!(
        reason.starts_with("the action of step \"stock\" ran out of attempts: é"),
        "{reason}"
    );
    let steps = ctx.store.saga_steps(id).await.unwrap();
    assert_eq!(steps[0].state, StepState::ActionFailed);
    assert_eq!(steps[0].output, None);

    // a report of a parked saga only records the step
    let coupon = claim(ctx, &def, "x-1", "coupon").await;
    let applied = ctx
        .store
        .saga_step(
            &def,
            &StepReport::new(coupon.lease(), id, "x-1", "coupon", done("1")),
        )
        .await
        .unwrap();
    assert_eq!(applied, StepApplied::new(SagaStatus::Parked, 0, 0));
    let saga = ctx.store.saga("order", "x-1").await.unwrap().unwrap();
    assert_eq!((saga.status, saga.version), (SagaStatus::Parked, 2));
    assert!(
        saga.reason.unwrap().contains("\"stock\""),
        "the reason is kept"
    );
}

/// Bad input is refused (`InvalidInput`, operation `saga_step`) before anything is
/// written: a step the definition lacks, an output that is not JSON or is over the
/// payload limit, a bad key. The task stays running and the saga untouched.
pub async fn saga_step_refuses_bad_input_and_writes_nothing<H: Harness>(ctx: &Ctx<H>) {
    let def = order();
    let (id, stock) = start_and_claim(ctx, &def, "b-1", "stock").await;
    let before = ctx.store.saga("order", "b-1").await.unwrap().unwrap();
    let big = format!("\"{}\"", "x".repeat(DEFAULT_MAX_PAYLOAD_BYTES));
    let cases = [
        ("b-1", "refund", done("1"), "has no step \"refund\""),
        ("b-1", "stock", done("{nope"), "not valid JSON"),
        ("b-1", "stock", done(&big), "the store's limit"),
        ("", "stock", done("1"), "saga key"),
    ];
    for (key, step, outcome, want) in cases {
        let report = StepReport::new(stock.lease(), id, key, step, outcome);
        let e = ctx.store.saga_step(&def, &report).await.unwrap_err();
        assert_eq!(
            (e.kind(), e.operation()),
            (ErrorKind::InvalidInput, "saga_step"),
            "{e}"
        );
        assert!(e.to_string().contains(want), "{e} should say {want:?}");
    }
    let task = ctx.store.get(stock.id).await.unwrap().unwrap();
    assert_eq!(task.status, Status::Running);
    assert!(ctx.store.saga_steps(id).await.unwrap().is_empty());
    assert_eq!(
        ctx.store.saga("order", "b-1").await.unwrap().unwrap(),
        before
    );
}

/// The reports of a wide parallel group, all at once on many connections, for several
/// sagas: each saga joins exactly once (one task of its next step), ends at group 1 with
/// one version per report and a done row per step.
pub async fn saga_racing_sibling_reports_join_once<H: Harness>(ctx: &Ctx<H>) {
    const SAGAS: usize = 6;
    const WIDE: usize = 8;
    let def = SagaDef::builder("wide")
        .parallel((0..WIDE).map(|i| SagaStep::new(format!("s{i}"))))
        .step(SagaStep::new("last"))
        .build()
        .unwrap();
    let mut reports = Vec::new();
    for n in 0..SAGAS {
        let key = format!("w-{n}");
        let started = ctx
            .store
            .start_saga(&def.start(&key, &n).unwrap())
            .await
            .unwrap();
        for i in 0..WIDE {
            let step = format!("s{i}");
            let task = claim(ctx, &def, &key, &step).await;
            reports.push(StepReport::new(
                task.lease(),
                started.id,
                key.clone(),
                step,
                done(&i.to_string()),
            ));
        }
    }
    let racing = reports.iter().map(|r| ctx.store.saga_step(&def, r));
    let answers = within("the racing reports", join_all(racing)).await;
    for (r, a) in reports.iter().zip(&answers) {
        assert!(a.is_ok(), "{} {}: {a:?}", r.key, r.step);
    }
    for n in 0..SAGAS {
        let key = format!("w-{n}");
        let saga = ctx.store.saga("wide", &key).await.unwrap().unwrap();
        assert_eq!(
            (saga.status, saga.group, saga.version),
            (SagaStatus::Running, 1, WIDE as i64),
            "{key}"
        );
        let steps = ctx.store.saga_steps(saga.id).await.unwrap();
        assert_eq!(steps.len(), WIDE, "{key}");
        assert!(steps.iter().all(|s| s.state == StepState::Done), "{key}");
        let joined = answers
            .iter()
            .zip(&reports)
            .filter(|(a, r)| r.key == key && a.as_ref().is_ok_and(|a| a.enqueued == 1))
            .count();
        assert_eq!(joined, 1, "{key}: one report starts the next group");
        let last = ctx
            .store
            .list(&TaskFilter::default().event_type("saga:wide").limit(1000))
            .await
            .unwrap()
            .into_iter()
            .filter(|t| t.biz_key == format!("{key}/last:a"))
            .count();
        assert_eq!(last, 1, "{key}");
    }
}

/// Operators' commands answer by the saga's status: a retry of a running saga, or a
/// compensation of a compensated one, is `Conflict` naming the status and writes nothing
/// (no log entry, the version unchanged); no saga is `NotFound`. A resolution of a
/// running saga sets it completed with the operator in the reason, and logs it. The list
/// finds sagas by name, status and age, by id, paged.
pub async fn saga_commands_answer_by_status<H: Harness>(ctx: &Ctx<H>) {
    let def = order();
    let audit = Audit::new("ops", "looked at it");
    let mut ids = Vec::new();
    for n in 0..3 {
        let key = format!("c-{n}");
        ids.push(
            ctx.store
                .start_saga(&def.start(&key, &n).unwrap())
                .await
                .unwrap()
                .id,
        );
    }
    let e = ctx
        .store
        .command_saga(ids[0], SagaCommand::Retry, &audit)
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind(), e.operation()),
        (ErrorKind::Conflict, "command_saga")
    );
    assert!(
        e.to_string()
            .contains("is running: retry is for a saga parked"),
        "{e}"
    );
    let e = ctx
        .store
        .command_saga(999_999, SagaCommand::Retry, &audit)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let saga = ctx.store.saga_by_id(ids[0]).await.unwrap().unwrap();
    assert_eq!(saga.version, 0, "nothing written");
    assert!(ctx.store.saga_log(ids[0]).await.unwrap().is_empty());

    let resolved = ctx
        .store
        .command_saga(ids[0], SagaCommand::Resolve(SagaStatus::Completed), &audit)
        .await
        .unwrap();
    assert_eq!(
        (resolved.status, resolved.version),
        (SagaStatus::Completed, 1)
    );
    assert_eq!(
        resolved.reason.as_deref(),
        Some("resolved by ops: looked at it")
    );
    let log = ctx.store.saga_log(ids[0]).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(
        (
            log[0].saga_id,
            log[0].action.as_str(),
            log[0].operator.as_str()
        ),
        (ids[0], "resolve", "ops")
    );
    let e = ctx
        .store
        .command_saga(ids[0], SagaCommand::Compensate, &audit)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("is completed"), "{e}");

    let running = ctx
        .store
        .sagas(
            &SagaFilter::default()
                .name("order")
                .status(SagaStatus::Running),
        )
        .await
        .unwrap();
    assert_eq!(
        running.iter().map(|s| s.id).collect::<Vec<_>>(),
        [ids[1], ids[2]]
    );
    let page = ctx
        .store
        .sagas(&SagaFilter::default().after_id(ids[0]).limit(1))
        .await
        .unwrap();
    assert_eq!(page.iter().map(|s| s.id).collect::<Vec<_>>(), [ids[1]]);
    let old = ctx
        .store
        .sagas(&SagaFilter::default().older_than(Duration::from_secs(3600)))
        .await
        .unwrap();
    assert!(old.is_empty(), "none is an hour old");
    assert!(ctx
        .store
        .sagas(&SagaFilter::default().name("other"))
        .await
        .unwrap()
        .is_empty());
}

/// `saga_backlog` counts the unfinished sagas per definition and status, and how long
/// the least recently changed of each has been unchanged: three running orders (one
/// backdated an hour), one parked, one completed (not counted), one running saga of
/// another definition. A status with none has no entry.
pub async fn saga_backlog_counts_unfinished_sagas<H: Harness>(ctx: &Ctx<H>) {
    assert!(ctx.store.saga_backlog().await.unwrap().is_empty());
    let def = order();
    let other = SagaDef::builder("refund")
        .step(SagaStep::new("pay"))
        .build()
        .unwrap();
    let audit = Audit::new("ops", "checking");
    let mut ids = Vec::new();
    for n in 0..5 {
        let start = def.start(&format!("b-{n}"), &n).unwrap();
        ids.push(ctx.store.start_saga(&start).await.unwrap().id);
    }
    ctx.store
        .start_saga(&other.start("r-1", &1).unwrap())
        .await
        .unwrap();
    ctx.store
        .command_saga(ids[3], SagaCommand::Park, &audit)
        .await
        .unwrap();
    ctx.store
        .command_saga(ids[4], SagaCommand::Resolve(SagaStatus::Completed), &audit)
        .await
        .unwrap();
    let saga_table = format!("{}_saga", ctx.config.table);
    ctx.harness
        .backdate(
            &ctx.db,
            &saga_table,
            ids[1],
            crate::TimeColumn::UpdatedAt,
            Duration::from_secs(3600),
        )
        .await;
    let mut counts: Vec<(String, SagaStatus, u64, Duration)> = ctx
        .store
        .saga_backlog()
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.name, c.status, c.count, c.oldest_unchanged))
        .collect();
    counts.sort_by_key(|c| (c.0.clone(), c.1.code()));
    let shape: Vec<(&str, SagaStatus, u64)> =
        counts.iter().map(|c| (c.0.as_str(), c.1, c.2)).collect();
    assert_eq!(
        shape,
        [
            ("order", SagaStatus::Running, 3),
            ("order", SagaStatus::Parked, 1),
            ("refund", SagaStatus::Running, 1),
        ]
    );
    let hour = Duration::from_secs(3600);
    assert!(
        counts[0].3 >= hour && counts[0].3 < hour + Duration::from_secs(60),
        "the backdated saga is the oldest: {:?}",
        counts[0].3
    );
    for c in &counts[1..] {
        assert!(c.3 < Duration::from_secs(60), "{c:?}");
    }
}

/// A step's report on the caller's transaction
/// ([`Transactional::saga_step_in`](backstop_core::Transactional::saga_step_in) and its
/// native forms), along every path: rolled back with the business row, it leaves
/// nothing (the task still running under its lease, no step row, the saga's row as it
/// was); committed, the business row, the task's success, the step row and the saga's
/// row are there together; the same report again is `Conflict` and its business row
/// rolls back with it; a report of a step the definition lacks is `InvalidInput` and
/// writes nothing.
pub async fn saga_step_in_commits_with_the_business_row<H: Harness>(ctx: &Ctx<H>) {
    let def = std::sync::Arc::new(order());
    for path in crate::TxPath::ALL {
        let key = format!("in-{path}");
        let (id, stock) = start_and_claim(ctx, &def, &key, "stock").await;
        let before = ctx.store.saga("order", &key).await.unwrap().unwrap();
        let report = |step: &str| {
            StepReport::new(stock.lease(), id, key.clone(), step, done(r#"{"held":2}"#))
        };
        let row = |what: &str| format!("{key}-{what}");
        ctx.saga_step_via(path, &row("rolled"), def.clone(), report("stock"), false)
            .await
            .unwrap();
        assert!(
            !ctx.harness
                .business_row_exists(&ctx.db, &row("rolled"))
                .await
        );
        let task = ctx.store.get(stock.id).await.unwrap().unwrap();
        assert_eq!(
            (task.status, task.lease),
            (Status::Running, stock.lease),
            "{path}"
        );
        assert!(ctx.store.saga_steps(id).await.unwrap().is_empty(), "{path}");
        assert_eq!(
            ctx.store.saga("order", &key).await.unwrap().unwrap(),
            before
        );

        let e = ctx
            .saga_step_via(path, &row("bad"), def.clone(), report("nope"), true)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{path}: {e}");
        assert!(!ctx.harness.business_row_exists(&ctx.db, &row("bad")).await);

        let applied = ctx
            .saga_step_via(path, &row("done"), def.clone(), report("stock"), true)
            .await
            .unwrap();
        assert_eq!(
            applied,
            StepApplied::new(SagaStatus::Running, 0, 0),
            "{path}"
        );
        assert!(ctx.harness.business_row_exists(&ctx.db, &row("done")).await);
        let task = ctx.store.get(stock.id).await.unwrap().unwrap();
        assert_eq!(task.status, Status::Succeeded, "{path}");
        let steps = ctx.store.saga_steps(id).await.unwrap();
        assert_eq!(steps.len(), 1, "{path}");
        assert_eq!(
            (steps[0].state, steps[0].output.as_deref()),
            (StepState::Done, Some(r#"{"held":2}"#))
        );
        let after = ctx.store.saga("order", &key).await.unwrap().unwrap();
        assert_eq!(after.version, before.version + 1, "{path}");

        let e = ctx
            .saga_step_via(path, &row("again"), def.clone(), report("stock"), true)
            .await
            .unwrap_err();
        assert_eq!(
            (e.kind(), e.operation()),
            (ErrorKind::Conflict, "saga_step"),
            "{path}: {e}"
        );
        assert!(
            !ctx.harness
                .business_row_exists(&ctx.db, &row("again"))
                .await
        );
    }
}

/// Reports of one call (`saga_step_many`) are each applied as if alone and answered in
/// their own slot, in order: a stale lease is `Conflict` and an unknown step
/// `InvalidInput` in theirs, writing nothing for their sagas, while the others apply;
/// a saga an operator turned compensating is decided as it is; a saga reported twice in
/// the call takes turns (the second meets the fence of the first). No report, no answer.
pub async fn saga_step_many_answers_each_report_alone<H: Harness>(ctx: &Ctx<H>) {
    let def = SagaDef::builder("batch")
        .step(SagaStep::new("a").compensated())
        .step(SagaStep::new("b"))
        .build()
        .unwrap();
    assert!(ctx
        .store
        .saga_step_many(&def, &[])
        .await
        .unwrap()
        .is_empty());
    let mut started = Vec::new();
    for k in ["m-1", "m-2", "m-3", "m-4", "m-5"] {
        started.push(start_and_claim(ctx, &def, k, "a").await);
    }
    let op = Audit::new("op", "customer cancelled");
    ctx.store
        .command_saga(started[3].0, SagaCommand::Compensate, &op)
        .await
        .unwrap();
    let owner = backstop_core::Owner::new("batch-owner").unwrap();
    let at = |i: usize, step: &str, out: &str| {
        let (id, task) = &started[i];
        StepReport::new(
            task.lease(),
            *id,
            task.biz_key.split('/').next().unwrap(),
            step,
            done(out),
        )
    };
    let stale = {
        let (id, task) = &started[1];
        let lease = Lease {
            task_id: task.id,
            token: task.lease + 1,
        };
        StepReport::new(lease, *id, "m-2", "a", done("2"))
    };
    let reports = [
        at(0, "a", "1").claim_next(owner),
        stale,
        at(2, "nope", "3"),
        at(3, "a", "4"),
        at(0, "a", "1"),
        at(4, "a", "5"),
    ];
    let answers = ctx.store.saga_step_many(&def, &reports).await.unwrap();
    assert_eq!(answers.len(), 6, "one answer per report");
    let kind = |i: usize| answers[i].as_ref().err().map(|e| (e.kind(), e.operation()));
    assert_eq!(kind(1), Some((ErrorKind::Conflict, "saga_step")));
    assert_eq!(kind(2), Some((ErrorKind::InvalidInput, "saga_step")));
    assert_eq!(
        kind(4),
        Some((ErrorKind::Conflict, "saga_step")),
        "the second report of m-1"
    );
    for (i, key) in [(1, "m-2"), (2, "m-3")] {
        let saga = ctx.store.saga("batch", key).await.unwrap().unwrap();
        assert_eq!(
            (saga.status, saga.group, saga.version),
            (SagaStatus::Running, 0, 0),
            "{key}"
        );
        assert!(
            ctx.store.saga_steps(started[i].0).await.unwrap().is_empty(),
            "{key}"
        );
        let task = ctx.store.get(started[i].1.id).await.unwrap().unwrap();
        assert_eq!(task.status, Status::Running, "{key}");
    }
    for (i, key, output) in [(0, "m-1", "1"), (5, "m-5", "5")] {
        let applied = answers[i].as_ref().unwrap();
        assert_eq!(
            (applied.status, applied.group, applied.tasks.len()),
            (SagaStatus::Running, 1, 1),
            "{key}"
        );
        let next = ctx.store.get(applied.tasks[0].id).await.unwrap().unwrap();
        assert_eq!(
            (next.biz_key.clone(), applied.tasks[0].created),
            (format!("{key}/b:a"), true)
        );
        let saga = ctx.store.saga("batch", key).await.unwrap().unwrap();
        assert_eq!(
            (saga.status, saga.group, saga.version),
            (SagaStatus::Running, 1, 1),
            "{key}"
        );
        let rows = ctx.store.saga_steps(saga.id).await.unwrap();
        assert_eq!(rows.len(), 1, "{key}");
        assert_eq!(
            (rows[0].state, rows[0].output.as_deref()),
            (StepState::Done, Some(output))
        );
        let own = if i == 0 { 0 } else { 4 };
        let task = ctx.store.get(started[own].1.id).await.unwrap().unwrap();
        assert_eq!(task.status, Status::Succeeded, "{key}");
        match (i, applied.claimed.as_slice()) {
            (0, [claimed]) => {
                assert_eq!(claimed, &next, "the claimed task as the store has it");
                assert_eq!(
                    (next.status, next.attempts, next.owner.as_deref()),
                    (Status::Running, 1, Some("batch-owner"))
                );
            }
            (_, []) => assert_eq!(
                (next.status, next.attempts, next.owner),
                (Status::Pending, 0, None),
                "{key}"
            ),
            (_, more) => panic!("{key}: {} claimed", more.len()),
        }
    }
    let applied = answers[3].as_ref().unwrap();
    assert_eq!(applied.status, SagaStatus::Compensating);
    let comp: Vec<&str> = applied
        .tasks
        .iter()
        .filter(|t| t.created)
        .map(|t| t.event_type.as_str())
        .collect();
    assert_eq!(comp, vec!["saga:batch"], "a's compensation enqueued");
    let saga = ctx.store.saga("batch", "m-4").await.unwrap().unwrap();
    assert_eq!((saga.status, saga.version), (SagaStatus::Compensating, 2));
}
