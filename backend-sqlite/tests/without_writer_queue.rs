//! With the in-process writer queue off, stores on one file behave like separate
//! processes: only SQLite's lock (`BEGIN IMMEDIATE` + `busy_timeout`) keeps claims atomic.
//! Eight such stores race to claim 600 tasks; each task must be claimed exactly once.
#![allow(clippy::expect_used)]

use std::collections::HashSet;
use std::time::Duration;

use backstop_core::{NewTask, Owner, TaskStore};
use backstop_sqlite::{SqliteOptions, SqliteStore, Synchronous};

async fn open(path: &std::path::Path) -> SqliteStore {
    SqliteStore::open_with(
        path,
        SqliteOptions::default()
            .synchronous(Synchronous::Normal)
            .busy_timeout(Duration::from_secs(30))
            .queue_writers(false),
    )
    .await
    .expect("open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_stay_atomic_without_the_writer_queue() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("race.db");
    let store = open(&path).await;
    store.migrate().await.expect("migrate");
    for i in 0..600 {
        store
            .enqueue(NewTask::new("E", format!("k{i}")))
            .await
            .expect("enqueue");
    }
    let mut racers = Vec::new();
    for r in 0..8 {
        let s = open(&path).await;
        racers.push(tokio::spawn(async move {
            let me = Owner::new(format!("racer-{r}")).expect("owner");
            let mut ids = Vec::new();
            loop {
                let batch = s
                    .claim_batch(&me, &["E".to_string()], 5)
                    .await
                    .expect("claim");
                if batch.is_empty() {
                    return ids;
                }
                ids.extend(batch.into_iter().map(|t| (t.id, t.attempts)));
            }
        }));
    }
    let mut seen = HashSet::new();
    for r in racers {
        for (id, attempts) in r.await.expect("join") {
            assert_eq!(attempts, 1, "task {id} claimed twice");
            assert!(seen.insert(id), "task {id} claimed twice");
        }
    }
    assert_eq!(seen.len(), 600);
}
