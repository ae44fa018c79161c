//! Quickstart on the embedded SQLite backend (no server needed):
//!
//! 1. an order row and its task are written in one local transaction;
//! 2. the task runs ahead right after commit (claimed by id);
//! 3. a flaky downstream fails twice and succeeds on the third attempt through retries
//!    picked up by a small poll loop (the safety net);
//! 4. a prints a short summary.
//!
//! Run it with `cargo run --example quickstart`.

use std::time::{Duration, Instant};

use backstop::sqlite::SqliteStore;
use backstop::{NewTask, Owner, RetryPolicy, Status, Task, TaskStore, TaskStoreExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let dir = std::env::temp_dir().join(format!("backstop-quickstart-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("shop.db");
    let started = Instant::now();

    let store = SqliteStore::open(&path).await?;
    store.migrate().await?;
    store
        .transaction(|tx| {
            tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)",
            )?;
            Ok::<_, BoxError>(())
        })
        .await?;
    let me = Owner::generate();

    // 1. Business row + task in one local transaction.
    let enq = store
        .transaction(|tx| {
            tx.execute("INSERT INTO orders (id, item) VALUES (42, 'coffee')", [])?;
            let enq = tx.enqueue(
                &NewTask::new("PAY_ORDER", "order-42")
                    .json(&serde_json::json!({ "order_id": 42, "amount_cents": 450 })),
            )?;
            Ok::<_, BoxError>(enq)
        })
        .await?;

    // 2. Run ahead: claim by id right after commit and run.
    if let Some(task) = store.grab_by_id(enq.id, &me).await? {
        pay(&task)?;
        store.mark_success(task.lease()).await?;
    }

    // 3. A flaky downstream: fails twice, then succeeds, through fixed 100 ms retries.
    let flaky = store
        .enqueue(
            NewTask::new("NOTIFY_WAREHOUSE", "order-42")
                .retry(RetryPolicy::fixed(5, Duration::from_millis(100))),
        )
        .await?;
    let types = vec!["NOTIFY_WAREHOUSE".to_string()];
    let mut calls = 0;
    while store.get(flaky.id).await?.map(|t| t.status) == Some(Status::Pending) {
        for task in store.grab_batch(&me, &types, 10).await? {
            calls += 1;
            if calls <= 2 {
                let err = format!("warehouse timed out (call {calls})");
                store
                    .mark_retry(task.lease(), task.retry_delay(), &err)
                    .await?;
            } else {
                store.mark_success(task.lease()).await?;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // 4. Summary.
    println!("backstop quickstart ({})", path.display());
    for id in [enq.id, flaky.id] {
        if let Some(t) = store.get(id).await? {
            println!(
                "  task {:>2} {:<17} {:<9} status={:<9} attempts={} last_error={:?} ran {} ms after enqueue",
                t.id,
                t.event_type,
                t.biz_key,
                t.status.to_string(),
                t.attempts,
                t.last_error.as_deref().unwrap_or("-"),
                (t.updated_at - t.created_at).num_milliseconds(),
            );
        }
    }
    println!("  done in {} ms", started.elapsed().as_millis());
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

fn pay(task: &Task) -> Result<(), BoxError> {
    #[derive(serde::Deserialize)]
    struct Pay {
        order_id: u64,
        amount_cents: u64,
    }
    let p: Pay = task.payload_as()?;
    println!(
        "  paying order {} ({} cents), attempt {}",
        p.order_id, p.amount_cents, task.attempts
    );
    Ok(())
}
