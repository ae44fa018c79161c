//! The driver's writers: business transactions at the lane's rate, each an order row
//! with its task (or a batch of five, or a saga started with it), some rolled back on
//! purpose; and the workers' own transactions, read back from their ledgers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backstop::{NewTask, RetryPolicy, SagaStart, Transactional};

use crate::driver::{Outcome, Target, Written};
use crate::worker::{Work, FAIL, FAIL_ATTEMPTS, HELD, LIMITED, OK, RATED, RELAY};

/// The producers: business transactions at `rate` per second until `stop`.
pub(crate) async fn produce(
    t: Arc<Target>,
    rate: u64,
    seed: u64,
    stop: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
    written: Arc<Mutex<HashMap<String, Written>>>,
) {
    const PRODUCERS: u64 = 4;
    let next = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for p in 0..PRODUCERS {
        let (t, stop, paused, written, next) = (
            t.clone(),
            stop.clone(),
            paused.clone(),
            written.clone(),
            next.clone(),
        );
        handles.push(tokio::spawn(async move {
            let mut rng = fastrand::Rng::with_seed(seed ^ ((p + 1) * 0x9e37_79b9));
            let every = Duration::from_micros(1_000_000 * PRODUCERS / rate.max(1));
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                if paused.load(Ordering::Relaxed) {
                    continue;
                }
                // one transaction in ten enqueues a batch of five (enqueue_many_in)
                let size = if rng.u8(..100) < 10 { BATCH } else { 1 };
                let rollback = rng.u8(..100) < 10;
                let mut batch = Vec::with_capacity(size);
                for _ in 0..size {
                    let key = format!("k{}", next.fetch_add(1, Ordering::Relaxed));
                    // one lone transaction in ten starts a saga
                    let saga = (size == 1 && rng.u8(..100) < 10)
                        .then(|| crate::saga::start(&key, &crate::saga::Plan::pick(&mut rng)));
                    let (event_type, job) = match saga {
                        Some(Ok(start)) => (crate::saga::STARTED, Job::Saga(start)),
                        Some(Err(e)) => {
                            eprintln!("chaos: a saga's start: {e}");
                            return;
                        }
                        None => {
                            let (event_type, task) = chaos_task(&mut rng, &key);
                            (event_type, Job::Task(Box::new(task)))
                        }
                    };
                    batch.push((key, event_type, job));
                }
                let outcome = business(&t, &batch, rollback).await;
                let mut written = written.lock().unwrap_or_else(|e| e.into_inner());
                for (key, event_type, _) in batch {
                    written.insert(
                        key,
                        Written {
                            event_type,
                            outcome,
                        },
                    );
                }
            }
        }));
    }
    for h in handles {
        let _ = h.await;
    }
}

/// The workers' own business transactions (claimed in the transaction), from their
/// ledgers: what each commit answered, or unknown when the worker died before it knew.
pub(crate) fn produced_by_workers(
    ledgers: &HashMap<String, Vec<crate::ledger::Entry>>,
    written: &mut HashMap<String, Written>,
) {
    for entries in ledgers.values() {
        for e in entries {
            let crate::ledger::Entry::Produced {
                key,
                event_type,
                outcome,
            } = e
            else {
                continue;
            };
            let event_type = match event_type.as_str() {
                OK => OK,
                RELAY => RELAY,
                HELD => HELD,
                LIMITED => LIMITED,
                RATED => RATED,
                _ => FAIL,
            };
            let outcome = match outcome {
                Some('C') => Outcome::Committed,
                Some('R') => Outcome::RolledBack,
                _ => Outcome::Unknown,
            };
            // the answer (`P`) follows the intent (`p`) in the same file
            written.insert(
                key.clone(),
                Written {
                    event_type,
                    outcome,
                },
            );
        }
    }
}

/// Tasks a batch transaction enqueues together.
const BATCH: usize = 5;

/// A task of the run for business key `key`, and its event type: one in twenty fails for
/// good, one in five of the rest is relayed, one in ten of the others is of the paused
/// and resumed type and one in ten of the limited type; one in twenty of those is slow (long enough that a
/// stopped worker wakes while its successor still runs the task, so its stale mark meets
/// the fence), one in ten flaky.
fn chaos_task(rng: &mut fastrand::Rng, key: &str) -> (&'static str, NewTask) {
    let fail = rng.u8(..100) < 5;
    let work = Work {
        // a failing task is never slow: three slow attempts (4.5 s) would outlast the
        // settle margin on their own, with no fault to recover from
        ms: if !fail && rng.u8(..100) < 5 {
            1500
        } else {
            rng.u64(10..100)
        },
        flaky: rng.u8(..100) < 10,
    };
    let event_type = if fail {
        FAIL
    } else if rng.u8(..100) < 20 {
        RELAY
    } else {
        match rng.u8(..100) {
            0..10 => HELD,
            10..20 => LIMITED,
            20..25 => RATED,
            _ => OK,
        }
    };
    let task = NewTask::new(event_type, key).json(&work).retry(if fail {
        RetryPolicy::fixed(FAIL_ATTEMPTS, Duration::from_millis(100))
    } else {
        RetryPolicy::fixed(50, Duration::from_millis(100))
    });
    (event_type, task)
}

/// What a business transaction writes beside each order row.
enum Job {
    Task(Box<NewTask>),
    /// A saga started with the order (`start_in`).
    Saga(SagaStart),
}

/// One business transaction: an order row and its task for each of `batch` (one task
/// with `enqueue_in`, several with `enqueue_many_in`), or an order and its saga,
/// committed or rolled back.
async fn business(t: &Target, batch: &[(String, &str, Job)], rollback: bool) -> Outcome {
    let Ok(mut tx) = t.producer().begin().await else {
        return Outcome::RolledBack;
    };
    for (key, _, _) in batch {
        let insert = sqlx::AssertSqlSafe(format!(
            "INSERT INTO {} (biz_key) VALUES ({})",
            t.orders, t.p1
        ));
        if sqlx::query(insert)
            .bind(key)
            .execute(&mut *tx)
            .await
            .is_err()
        {
            return Outcome::RolledBack;
        }
    }
    let enqueued = match batch {
        [(_, _, Job::Saga(start))] => t.store.start_in(&mut *tx, start).await.map(|_| ()),
        [(_, _, Job::Task(task))] => t.store.enqueue_in(&mut *tx, task).await.map(|_| ()),
        many => {
            let tasks: Vec<NewTask> = many
                .iter()
                .filter_map(|(_, _, job)| match job {
                    Job::Task(task) => Some((**task).clone()),
                    Job::Saga(_) => None,
                })
                .collect();
            t.store.enqueue_many_in(&mut *tx, &tasks).await.map(|_| ())
        }
    };
    if enqueued.is_err() {
        return Outcome::RolledBack;
    }
    if rollback {
        // an explicit rollback whose answer is lost still leaves nothing
        let _ = tx.rollback().await;
        return Outcome::RolledBack;
    }
    match tx.commit().await {
        Ok(()) => Outcome::Committed,
        Err(_) => Outcome::Unknown,
    }
}
