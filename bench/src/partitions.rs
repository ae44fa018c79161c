//! The partitioned claim's cost as its keys grow: a claim of 50 of a type limited to 1
//! per partition key, with `keys` keys each holding due tasks (so the claim lists about
//! 50 keys from where the last one stopped, one index dive each, and takes their tasks
//! in turns), against the same claim of the same backlog unpartitioned under a limit of
//! 50. Each claim's tasks are given back at once, so every round sees the same backlog.

use backstop::{Audit, NewTask, QueueChange, TaskStore};

use crate::raw::EVENT;
use crate::sys::Row;
use crate::{claim_p50, Target};

/// Tasks per key: the claim walks each key's first.
const PER_KEY: usize = 2;

/// One row: the p50 of `rounds` partitioned claims of 50 among `keys` keys, against the
/// unpartitioned claim of the same backlog.
pub(crate) async fn partitioned_claim(t: &Target, keys: usize, rounds: usize) -> Row {
    let m = crate::sys::Meter::start();
    t.raw.reset().await;
    let store = t.store(2).await;
    let tasks: Vec<NewTask> = (0..keys * PER_KEY)
        .map(|i| {
            let key = format!("k{:05}", i % keys);
            NewTask::new(EVENT, format!("{key}-{i}")).partition(key)
        })
        .collect();
    for chunk in tasks.chunks(backstop::limits::MAX_ENQUEUE_MANY) {
        store.enqueue_many(chunk).await.expect("enqueue");
    }
    let set = |change| {
        let store = &store;
        async move {
            store
                .set_queue(EVENT, change, &Audit::new("bench", "partitions"))
                .await
                .expect("queue")
        }
    };
    set(QueueChange::Concurrency(Some(50))).await;
    let base = claim_p50(&store, &[EVENT], rounds).await;
    set(QueueChange::Concurrency(Some(1))).await;
    set(QueueChange::Partition(true)).await;
    let partitioned = claim_p50(&store, &[EVENT], rounds).await;
    set(QueueChange::Partition(false)).await;
    set(QueueChange::Concurrency(None)).await;
    let (rss, cpu) = m.stop();
    Row {
        backend: t.backend.into(),
        scenario: format!("partitioned claim of 50, {keys} keys with due tasks"),
        lat: Some([partitioned, 0.0, 0.0, 0.0]),
        base_lat: Some([base, 0.0, 0.0, 0.0]),
        rss_mb: rss,
        cpu_s: cpu,
        note: format!(
            "p50 of {rounds} claims, limit 1 per key; base: the same backlog \
             unpartitioned, limit 50 ({base:.3} ms → {partitioned:.3} ms, ×{:.1})",
            partitioned / base
        ),
        ..Row::default()
    }
}
