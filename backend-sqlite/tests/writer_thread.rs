//! The writer thread (one per database file in the process, see
//! `SqliteOptions::queue_writers`): shared by every store on the file, each write with its
//! own store's settings, and a panicking transaction neither writes nor stops it.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use backstop_core::{ErrorKind, NewTask, Owner, Status, TaskStore, TaskStoreExt};
use backstop_sqlite::{SqliteOptions, SqliteStore, Synchronous};

async fn open(path: &std::path::Path, synchronous: Synchronous, busy: Duration) -> SqliteStore {
    SqliteStore::open_with(
        path,
        SqliteOptions::default()
            .synchronous(synchronous)
            .busy_timeout(busy),
    )
    .await
    .expect("open")
}

/// `PRAGMA synchronous` as a write of `store` sees it (2 = FULL, 1 = NORMAL).
async fn synchronous_seen_by_a_write(store: &SqliteStore) -> i64 {
    store
        .transaction(|tx| {
            Ok::<_, backstop_core::Error>(
                tx.query_row("PRAGMA synchronous", [], |r| r.get::<_, i64>(0))
                    .expect("read pragma"),
            )
        })
        .await
        .expect("transaction")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_write_runs_with_its_own_stores_durability() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("w.db");
    let full = open(&path, Synchronous::Full, Duration::from_secs(5)).await;
    let normal = open(&path, Synchronous::Normal, Duration::from_secs(5)).await;
    full.migrate().await.expect("migrate");
    for _ in 0..3 {
        assert_eq!(synchronous_seen_by_a_write(&full).await, 2);
        assert_eq!(synchronous_seen_by_a_write(&normal).await, 1);
    }
}

/// With no busy timeout at all, stores on one file that write at once never meet on
/// SQLite's lock: their writes queue on the one writer thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stores_on_one_file_share_the_writer_and_never_see_busy() {
    const STORES: usize = 8;
    const TASKS: usize = 50;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("w.db");
    let first = open(&path, Synchronous::Normal, Duration::ZERO).await;
    first.migrate().await.expect("migrate");
    let mut writers = Vec::new();
    for s in 0..STORES {
        let store = open(&path, Synchronous::Normal, Duration::ZERO).await;
        writers.push(tokio::spawn(async move {
            let me = Owner::new(format!("w{s}")).expect("owner");
            let types = vec![format!("E{s}")];
            let mut done = 0;
            for i in 0..TASKS {
                store
                    .enqueue(NewTask::new(format!("E{s}"), format!("k{i}")))
                    .await
                    .expect("enqueue: a queued write never sees SQLITE_BUSY");
                for t in store.claim_batch(&me, &types, 10).await.expect("claim") {
                    assert!(store.mark_success(t.lease()).await.expect("mark"));
                    done += 1;
                }
            }
            done
        }));
    }
    let mut done = 0;
    for w in writers {
        done += w.await.expect("join");
    }
    assert_eq!(done, STORES * TASKS);
    let stats = first.stats().await.expect("stats");
    assert_eq!(stats.count(Status::Succeeded), (STORES * TASKS) as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_transaction_writes_nothing_and_the_writer_goes_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("w.db");
    let store = open(&path, Synchronous::Normal, Duration::from_secs(5)).await;
    store.migrate().await.expect("migrate");
    let r: Result<(), backstop_core::Error> = store
        .transaction(|tx| {
            tx.enqueue(&NewTask::new("E", "lost")).expect("enqueue");
            panic!("the business code panicked mid-transaction");
        })
        .await;
    let e = r.expect_err("a panic is an error");
    assert_eq!(e.kind(), ErrorKind::Unexpected, "{e}");
    assert_eq!(e.operation(), "transaction");
    let stats = store.stats().await.expect("stats");
    assert_eq!(
        stats.count(Status::Pending),
        0,
        "the panicked write rolled back"
    );
    // the writer still runs writes, on this store and on a new one
    let enq = store
        .enqueue(NewTask::new("E", "kept"))
        .await
        .expect("enqueue");
    assert!(enq.created);
    let other = open(&path, Synchronous::Normal, Duration::from_secs(5)).await;
    let t = other.get(enq.id).await.expect("get").expect("the task");
    assert_eq!(t.status, Status::Pending);
    other
        .enqueue(NewTask::new("E", "also"))
        .await
        .expect("enqueue on another store");
    assert_eq!(
        store.stats().await.expect("stats").count(Status::Pending),
        2
    );
}
