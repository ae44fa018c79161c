//! The unit tests of [`super`]: each write's statements, answered by a script.
use super::*;
use crate::driver::enqueue::tests::Names;
use crate::model::{Lease, SagaStep, StepPhase};

fn def() -> SagaDef {
    SagaDef::builder("order")
        .step(SagaStep::new("stock").compensated())
        .parallel([SagaStep::new("coupon"), SagaStep::new("points")])
        .build()
        .unwrap()
}

fn report(step: &str, outcome: StepOutcome) -> StepReport {
    let lease = Lease {
        task_id: 5,
        token: 2,
    };
    StepReport::new(lease, 9, "o-1", step, outcome)
}

/// Run a report on `Names`, answering each statement from `answers` (an insert of
/// a task answers with a new id); the statements run.
fn run(def: &SagaDef, r: &StepReport, answers: Vec<Answer>) -> Result<(Vec<String>, StepApplied)> {
    let write = SagaWrite::Step {
        def: def.clone(),
        report: r.clone(),
    };
    let (ran, written) = write_on(&write, answers)?;
    match written {
        SagaWritten::Applied(applied) => Ok((ran, applied)),
        other => panic!("{other:?}"),
    }
}

/// Run `write` on `Names`, answering each statement from `answers` (an insert of a
/// task answers with a new id); the statements run.
fn write_on(write: &SagaWrite, answers: Vec<Answer>) -> Result<(Vec<String>, SagaWritten)> {
    struct Scripted(std::vec::IntoIter<Answer>, Vec<String>);
    impl BlockingTxConnection for Scripted {
        fn dialect(&self) -> super::super::Dialect {
            super::super::Dialect::Postgres
        }
        fn run(&mut self, s: &Statement<'_>) -> Result<Answer> {
            self.1.push(s.sql().to_owned());
            Ok(match s.sql() {
                "insert" => Answer::Row(Some(vec![100])),
                _ => self.0.next().expect("an answer per statement"),
            })
        }
    }
    let mut conn = Scripted(answers.into_iter(), Vec::new());
    let config = StoreConfig::default();
    let written = saga_write_blocking(&Names, &config, &mut conn, Checked::new(write))?;
    Ok((conn.1, written))
}

#[test]
fn a_done_step_records_itself_moves_the_saga_and_enqueues_the_next_group() {
    let def = def();
    let r = report(
        "stock",
        StepOutcome::Done {
            output: "{}".into(),
        },
    );
    let (ran, applied) = run(
        &def,
        &r,
        vec![
            Answer::Row(Some(vec![0, 0])),
            Answer::RowsAffected(1),
            // stock is alone in its group: no step rows to read
            Answer::RowsAffected(1),
            Answer::RowsAffected(1),
        ],
    )
    .unwrap();
    // the saga's row is locked before the task's (one lock order for every write)
    assert_eq!(
        ran,
        [
            "saga lock",
            "complete",
            "step record",
            "saga set",
            "insert",
            "insert"
        ]
    );
    assert_eq!(
        (applied.status, applied.group, applied.enqueued),
        (SagaStatus::Running, 1, 2)
    );
    let kinds: Vec<_> = applied
        .tasks
        .iter()
        .map(|t| (t.created, t.event_type.as_str()))
        .collect();
    assert_eq!(kinds, [(true, "saga:order"), (true, "saga:order")]);
}

#[test]
fn the_first_sibling_only_records_and_the_second_joins() {
    let def = def();
    let done = |s: &str| report(s, StepOutcome::Done { output: "1".into() });
    let base = |rows| {
        vec![
            Answer::Row(Some(vec![0, 1])),
            Answer::RowsAffected(1),
            Answer::Rows(rows),
            Answer::RowsAffected(1),
            Answer::RowsAffected(1),
        ]
    };
    let (_, first) = run(&def, &done("points"), base(vec![])).unwrap();
    assert_eq!(first, StepApplied::new(SagaStatus::Running, 1, 0));
    // coupon (position 1) finds points (position 2) done: the saga completes
    let (_, second) = run(&def, &done("coupon"), base(vec![vec![2, 1]])).unwrap();
    assert_eq!(second, StepApplied::new(SagaStatus::Completed, 1, 0));
}

#[test]
fn a_lost_lease_or_a_missing_saga_writes_nothing_more() {
    let def = def();
    let r = report("stock", StepOutcome::Compensated);
    let e = run(
        &def,
        &r,
        vec![Answer::Row(Some(vec![0, 0])), Answer::RowsAffected(0)],
    )
    .unwrap_err();
    assert_eq!((e.kind(), e.operation()), (ErrorKind::Conflict, OP));
    assert!(e.to_string().contains("lease 2"), "{e}");
    // a lease gone is the answer before a missing saga row
    let e = run(&def, &r, vec![Answer::Row(None), Answer::RowsAffected(0)]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict);
    let e = run(&def, &r, vec![Answer::Row(None), Answer::RowsAffected(1)]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unexpected);
    let e = run(&def, &report("nope", StepOutcome::Compensated), vec![]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

#[test]
fn an_exhausted_step_fails_its_task_and_parks_the_saga() {
    let def = def();
    let r = report(
        "stock",
        StepOutcome::Exhausted {
            phase: StepPhase::Action,
            reason: "down".into(),
        },
    );
    let (ran, applied) = run(
        &def,
        &r,
        vec![
            Answer::Row(Some(vec![0, 0])),
            Answer::RowsAffected(1),
            // stock is alone in its group: no step rows to read
            Answer::RowsAffected(1),
            Answer::RowsAffected(1),
        ],
    )
    .unwrap();
    assert_eq!(ran[..2], ["saga lock", "fail"]);
    assert_eq!(applied, StepApplied::new(SagaStatus::Parked, 0, 0));
}

fn command(command: SagaCommand) -> SagaWrite {
    SagaWrite::Command {
        id: 9,
        name: "order".into(),
        key: "o-1".into(),
        command,
        audit: Audit::new("ops", "checked by hand"),
    }
}

#[test]
fn a_retry_resets_the_failed_tasks_and_goes_back_to_where_the_saga_was() {
    let parked = |state: i64| {
        vec![
            Answer::Row(Some(vec![4, 1])),
            Answer::Rows(vec![vec![1, state]]),
            Answer::RowsAffected(1),
            Answer::RowsAffected(2),
            Answer::RowsAffected(1),
        ]
    };
    let (ran, done) = write_on(&command(SagaCommand::Retry), parked(4)).unwrap();
    assert_eq!(
        ran,
        [
            "saga lock",
            "step rows",
            "saga set",
            "reset failed",
            "saga log"
        ]
    );
    assert_eq!(
        done,
        SagaWritten::Applied(StepApplied::new(SagaStatus::Running, 1, 2))
    );
    let (_, done) = write_on(&command(SagaCommand::Retry), parked(5)).unwrap();
    assert_eq!(
        done,
        SagaWritten::Applied(StepApplied::new(SagaStatus::Compensating, 1, 2))
    );
}

#[test]
fn a_command_in_the_wrong_status_or_of_no_saga_writes_nothing() {
    let running = vec![Answer::Row(Some(vec![0, 0])), Answer::Rows(vec![])];
    let (ran, done) = write_on(&command(SagaCommand::Retry), running).unwrap();
    assert_eq!(ran, ["saga lock", "step rows"]);
    assert_eq!(done, SagaWritten::Refused(SagaStatus::Running));
    // parked on a failed compensation: compensate again is refused (retry it)
    let parked = vec![
        Answer::Row(Some(vec![4, 0])),
        Answer::Rows(vec![vec![0, 5]]),
    ];
    let (_, done) = write_on(&command(SagaCommand::Compensate), parked).unwrap();
    assert_eq!(done, SagaWritten::Refused(SagaStatus::Parked));
    let (ran, done) = write_on(&command(SagaCommand::Retry), vec![Answer::Row(None)]).unwrap();
    assert_eq!((ran.len(), done), (1, SagaWritten::Missing));
}

#[test]
fn compensate_turns_the_saga_and_enqueues_a_nudge() {
    let answers = vec![
        Answer::Row(Some(vec![0, 1])),
        Answer::Rows(vec![]),
        Answer::RowsAffected(1),
        Answer::RowsAffected(1),
    ];
    let (ran, done) = write_on(&command(SagaCommand::Compensate), answers).unwrap();
    assert_eq!(
        ran,
        ["saga lock", "step rows", "saga set", "saga log", "insert"]
    );
    let SagaWritten::Applied(applied) = done else {
        panic!("{done:?}")
    };
    assert_eq!(
        (applied.status, applied.group, applied.tasks.len()),
        (SagaStatus::Compensating, 1, 1)
    );
}
