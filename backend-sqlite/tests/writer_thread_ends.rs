//! The writer thread of a database file ends when the last store on the file is dropped
//! (an application that opens and closes stores does not collect threads). Alone in its
//! test binary: it counts the process's writer threads.
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used)]

use std::time::Duration;

use backstop_core::{NewTask, TaskStore};
use backstop_sqlite::SqliteStore;

/// Threads of this process named like the writer (Linux keeps 15 bytes of a name).
fn writer_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("list threads")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "backstop-sqlite")
        .count()
}

async fn wait_for_writer_threads(n: usize) {
    for _ in 0..200 {
        if writer_threads() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(writer_threads(), n, "writer threads");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_writer_thread_per_file_ending_with_its_last_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    assert_eq!(writer_threads(), 0);
    let a1 = SqliteStore::open(dir.path().join("a.db"))
        .await
        .expect("open");
    let a2 = SqliteStore::open(dir.path().join("a.db"))
        .await
        .expect("open");
    let b = SqliteStore::open(dir.path().join("b.db"))
        .await
        .expect("open");
    for s in [&a1, &a2, &b] {
        s.migrate().await.expect("migrate");
        s.enqueue(NewTask::new("E", "k")).await.expect("enqueue");
    }
    assert_eq!(writer_threads(), 2, "one per file");
    drop(a1);
    a2.enqueue(NewTask::new("E", "k2"))
        .await
        .expect("still writes");
    assert_eq!(writer_threads(), 2);
    drop(a2);
    wait_for_writer_threads(1).await;
    drop(b);
    wait_for_writer_threads(0).await;
}
