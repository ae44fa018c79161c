//! `backstop_enqueued_total` counts every created task, whichever path inserted it: the
//! store's own enqueue and a backend's transactional enqueue (`driver::enqueue_on`,
//! `enqueue_on_blocking`) alike; a duplicate is not counted.
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
        let label = key
            .labels()
            .find(|l| l.key() == "event_type")
            .map(|l| l.value().to_owned())
            .unwrap_or_default();
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
