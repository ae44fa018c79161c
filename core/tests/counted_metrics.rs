//! `backstop_enqueued_total` counts every created task, whichever path inserted it: the
//! store's own enqueue and a backend's transactional enqueue (`driver::enqueue_on`,
//! `enqueue_on_blocking`) alike; a duplicate is not counted. `backstop_barrier_total`
//! counts each verdict of the participant barrier once, by operation and verdict.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use backstop_core::driver::{enqueue_on, enqueue_on_blocking, Inserted};
use backstop_core::{NewTask, StoreConfig};
use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

/// Counters by name and `event_type` label.
#[derive(Default)]
struct Counts(Mutex<HashMap<(String, String), Arc<Cell>>>);

#[derive(Default)]
struct Cell(AtomicU64);

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::SeqCst);
    }
    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::SeqCst);
    }
}

impl Counts {
    fn get(&self, name: &str, event_type: &str) -> u64 {
        self.0
            .lock()
            .unwrap()
            .get(&(name.to_owned(), event_type.to_owned()))
            .map_or(0, |c| c.0.load(Ordering::SeqCst))
    }
}

impl Recorder for Counts {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        // the event type, or the barrier's `op/verdict`
        let label: Vec<&str> = key
            .labels()
            .filter(|l| ["event_type", "op", "verdict"].contains(&l.key()))
            .map(|l| l.value())
            .collect();
        let label = label.join("/");
        let cell = Arc::clone(
            self.0
                .lock()
                .unwrap()
                .entry((key.name().to_owned(), label))
                .or_default(),
        );
        Counter::from_arc(cell)
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

#[test]
fn every_created_task_is_counted_once_whatever_path_inserted_it() {
    let counts = Counts::default();
    let config = StoreConfig::default();
    metrics::with_local_recorder(&counts, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let task = NewTask::new("PAY", "o1");
            let created = enqueue_on(&config, &task, |_| async { Ok(Inserted::created(1)) })
                .await
                .unwrap();
            assert!(created.created);
            let duplicate = enqueue_on(&config, &task, |_| async {
                Ok(Inserted {
                    created: false,
                    ..Inserted::created(1)
                })
            })
            .await
            .unwrap();
            assert!(!duplicate.created);
        });
        let ship = NewTask::new("SHIP", "o1");
        enqueue_on_blocking(&config, &ship, |_| Ok(Inserted::created(2))).unwrap();
    });
    assert_eq!(counts.get("backstop_enqueued_total", "PAY"), 1);
    assert_eq!(counts.get("backstop_enqueued_total", "SHIP"), 1);
}

/// The barrier's statements named after their step, answered by the test.
struct Names;

impl backstop_core::driver::EnqueueSql for Names {
    fn dialect(&self) -> backstop_core::driver::Dialect {
        backstop_core::driver::Dialect::Postgres
    }
    fn statement<'a>(
        &'a self,
        _: backstop_core::driver::EnqueueStep<'a>,
        params: Vec<backstop_core::driver::Value<'a>>,
    ) -> backstop_core::driver::Statement<'a> {
        backstop_core::driver::Statement::new("step", params, backstop_core::driver::Returns::Row)
    }
}

#[test]
fn every_barrier_verdict_is_counted_once_by_op_and_verdict() {
    use backstop_core::driver::{Answer, BarrierPlan, TxPlan};
    use backstop_core::{Barrier, BranchCall, BranchOp};
    let counts = Counts::default();
    metrics::with_local_recorder(&counts, || {
        // (the call, the answers of its statements, its verdict)
        let cases = [
            (
                BranchOp::Try,
                vec![Answer::Row(Some(vec![1]))],
                Barrier::Run,
            ),
            (
                BranchOp::Try,
                vec![Answer::Row(None), Answer::Row(Some(vec![0]))],
                Barrier::Hanging,
            ),
            (
                BranchOp::Cancel,
                vec![Answer::Row(Some(vec![1])), Answer::Row(Some(vec![1]))],
                Barrier::EmptyCompensation,
            ),
            (
                BranchOp::Cancel,
                vec![
                    Answer::Row(None),
                    Answer::Row(None),
                    Answer::Row(Some(vec![1])),
                ],
                Barrier::Duplicate,
            ),
            (
                BranchOp::Try,
                vec![Answer::Row(Some(vec![1]))],
                Barrier::Run,
            ),
        ];
        for (op, answers, want) in cases {
            let call = BranchCall::new("g", "b", op).unwrap();
            let mut plan = BarrierPlan::new(&Names, &call);
            let mut answers = answers.into_iter();
            while plan.next_statement().unwrap().is_some() {
                plan.answer(answers.next().unwrap()).unwrap();
            }
            assert_eq!(plan.finish().unwrap(), want);
        }
        // a plan not run to its end gives no verdict, and counts none
        let call = BranchCall::new("g", "b", BranchOp::Confirm).unwrap();
        assert!(BarrierPlan::new(&Names, &call).finish().is_err());
    });
    let count = |label| counts.get("backstop_barrier_total", label);
    assert_eq!(count("try/run"), 2);
    assert_eq!(count("try/hanging"), 1);
    assert_eq!(count("cancel/empty_compensation"), 1);
    assert_eq!(count("cancel/duplicate"), 1);
    assert_eq!(count("confirm/run"), 0);
}
