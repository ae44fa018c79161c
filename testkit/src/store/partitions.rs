//! Partitioned limits ([`QueueChange::Partition`]): a partitioned queue's concurrency
//! and rate limits hold per partition key ([`NewTask::partition`]), tasks without a key
//! sharing one partition; a claim takes the partitions in turns, and a full partition
//! holds none of the others up.

use super::*;
use backstop_core::{Audit, QueueChange, RateLimit};
use std::collections::HashMap;

fn audit(reason: &str) -> Audit {
    Audit::new("ops", reason)
}

async fn set<H: Harness>(
    ctx: &Ctx<H>,
    event_type: &str,
    change: QueueChange,
) -> backstop_core::Queue {
    ctx.store
        .set_queue(event_type, change, &audit("set"))
        .await
        .unwrap()
}

/// Enqueue `n` tasks of `event_type` in partition `key` (none for `""`), in order.
pub(crate) async fn tenant<H: Harness>(
    ctx: &Ctx<H>,
    event_type: &str,
    key: &str,
    n: usize,
) -> Vec<TaskId> {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut ids = Vec::new();
    for _ in 0..n {
        let i = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut task = NewTask::new(event_type, format!("{key}-{i}"));
        if !key.is_empty() {
            task = task.partition(key);
        }
        let e = ctx.store.enqueue(task).await.unwrap();
        assert!(e.created);
        ids.push(e.id);
    }
    ids
}

/// What a batch claim of `event_type`, at most `n`, takes: sorted ids.
async fn claimed<H: Harness>(ctx: &Ctx<H>, event_type: &str, n: usize) -> Vec<TaskId> {
    let mut ids = claim_ids(ctx, &[event_type], n).await;
    ids.sort_unstable();
    ids
}

fn sorted(ids: impl IntoIterator<Item = TaskId>) -> Vec<TaskId> {
    let mut ids: Vec<TaskId> = ids.into_iter().collect();
    ids.sort_unstable();
    ids
}

/// Finish task `id` (running) with a success.
async fn finish<H: Harness>(ctx: &Ctx<H>, id: TaskId) {
    let t = ctx.task(id).await;
    assert!(ctx.store.mark(&[Mark::success(t.lease())]).await.unwrap()[0]);
}

/// A concurrency limit of 2, partitioned, over 3 tasks of each of tenants `a` and `b`
/// and 3 without a key: a claim takes 2 of each (the oldest), the next none. A success
/// of `a` frees a slot of `a` only. Unpartitioned again, the type's 6 running are over
/// its limit of 2: nothing; the limit removed, the rest. The key is stored with each
/// task; the queue's row and log show each change. A queue partitioned without a limit
/// is not limited: its tasks are claimed by id.
pub async fn partitioned_concurrency_limit_holds_per_key<H: Harness>(ctx: &Ctx<H>) {
    let a = tenant(ctx, "PT_C", "a", 3).await;
    let b = tenant(ctx, "PT_C", "b", 3).await;
    let none = tenant(ctx, "PT_C", "", 3).await;
    assert_eq!(ctx.task(a[0]).await.partition.as_deref(), Some("a"));
    assert_eq!(ctx.task(none[0]).await.partition, None);
    set(ctx, "PT_C", QueueChange::Concurrency(Some(2))).await;
    let q = set(ctx, "PT_C", QueueChange::Partition(true)).await;
    assert_eq!((q.concurrency, q.partitioned), (Some(2), true));

    assert_eq!(
        claimed(ctx, "PT_C", 100).await,
        sorted([a[0], a[1], b[0], b[1], none[0], none[1]]),
        "two of each partition"
    );
    assert!(
        claimed(ctx, "PT_C", 100).await.is_empty(),
        "each at its limit"
    );
    for id in [a[0], b[0], none[0]] {
        let t = ctx.task(id).await;
        assert_eq!(
            (t.status, t.attempts, t.lease),
            (Status::Running, 1, 1),
            "{id}"
        );
    }
    finish(ctx, a[0]).await;
    assert_eq!(claimed(ctx, "PT_C", 100).await, vec![a[2]], "a's slot only");
    assert!(claimed(ctx, "PT_C", 100).await.is_empty());

    let q = set(ctx, "PT_C", QueueChange::Partition(false)).await;
    assert!(!q.partitioned);
    assert!(
        claimed(ctx, "PT_C", 100).await.is_empty(),
        "6 running, over the type's limit of 2"
    );
    set(ctx, "PT_C", QueueChange::Concurrency(None)).await;
    assert_eq!(claimed(ctx, "PT_C", 100).await, sorted([b[2], none[2]]));
    let log = queue_actions(ctx, "PT_C").await;
    assert_eq!(
        log,
        [
            "concurrency 2",
            "partition on",
            "partition off",
            "concurrency off"
        ]
    );

    // partitioned, no limit: not limited at all
    let free = tenant(ctx, "PT_FREE", "a", 1).await[0];
    assert!(
        set(ctx, "PT_FREE", QueueChange::Partition(true))
            .await
            .partitioned
    );
    ctx.claim(free).await;
}

/// A limit of 10 per partition over a backlog of 30 tasks of one tenant (the oldest),
/// 3 of another and one without a key: a claim of 7 takes the partitions in turns —
/// the first of each, the second of each, … — not 7 of the backlog. With the busy
/// tenant at its limit, its 20 older tasks hold up neither a new task of the other
/// tenant nor one without a key.
pub async fn a_full_partition_does_not_hold_up_the_others<H: Harness>(ctx: &Ctx<H>) {
    let hot = tenant(ctx, "PT_RR", "hot", 30).await;
    let cold = tenant(ctx, "PT_RR", "cold", 3).await;
    let none = tenant(ctx, "PT_RR", "", 1).await;
    set(ctx, "PT_RR", QueueChange::Concurrency(Some(10))).await;
    set(ctx, "PT_RR", QueueChange::Partition(true)).await;

    assert_eq!(
        claimed(ctx, "PT_RR", 7).await,
        sorted([hot[0], hot[1], hot[2], cold[0], cold[1], cold[2], none[0]]),
        "in turns"
    );
    assert_eq!(
        claimed(ctx, "PT_RR", 100).await,
        sorted(hot[3..10].iter().copied()),
        "the busy tenant's room: 7"
    );
    assert!(claimed(ctx, "PT_RR", 100).await.is_empty());
    let late_cold = tenant(ctx, "PT_RR", "cold", 1).await[0];
    let late_none = ctx.enqueue("PT_RR", "late-none").await;
    assert_eq!(
        claimed(ctx, "PT_RR", 1).await,
        vec![late_cold],
        "past 20 older tasks of a full partition"
    );
    assert_eq!(claimed(ctx, "PT_RR", 1).await, vec![late_none]);
    let pending = TaskFilter::default()
        .event_type("PT_RR")
        .status(Status::Pending);
    assert_eq!(ctx.store.count_matching(&pending).await.unwrap(), 20);
}

/// More keys than one claim lists before it may stop (core's `KEYS_PER_CLAIM`): 100
/// tenants with a due task each and one task without a key, a limit of 1 per key. Each
/// claim of 7 comes back full while 7 keys have room and a due task (a claim that
/// stopped listing early still takes its limit; one that comes back short has seen
/// every key), the claims go on from key to key, wrapping, and every task is claimed
/// exactly once: 14 claims of 7, one of 3, then none.
pub async fn a_claim_over_many_keys_takes_its_limit_and_every_key_in_turn<H: Harness>(
    ctx: &Ctx<H>,
) {
    let mut all = Vec::new();
    for i in 0..100 {
        all.extend(tenant(ctx, "PT_MANY", &format!("t{i:03}"), 1).await);
    }
    all.extend(tenant(ctx, "PT_MANY", "", 1).await);
    set(ctx, "PT_MANY", QueueChange::Concurrency(Some(1))).await;
    set(ctx, "PT_MANY", QueueChange::Partition(true)).await;
    let mut sizes = Vec::new();
    let mut seen = Vec::new();
    for _ in 0..16 {
        let ids = claimed(ctx, "PT_MANY", 7).await;
        sizes.push(ids.len());
        seen.extend(ids);
    }
    assert_eq!(sizes, [7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 3, 0]);
    assert_eq!(sorted(seen), sorted(all), "every task once");
}

/// A rate of 2 per minute, partitioned, over 4 tasks of each of two tenants: a claim
/// takes 2 of each, the next none (finished or not, they started this minute). A
/// minute on, 2 more of each. Unpartitioned, the window's 4 starts are the type's:
/// a new task waits.
pub async fn partitioned_rate_limit_holds_per_key<H: Harness>(ctx: &Ctx<H>) {
    let a = tenant(ctx, "PT_R", "a", 4).await;
    let b = tenant(ctx, "PT_R", "b", 4).await;
    let rate = RateLimit::new(2, Duration::from_secs(60));
    set(ctx, "PT_R", QueueChange::Rate(Some(rate))).await;
    set(ctx, "PT_R", QueueChange::Partition(true)).await;
    let first = claimed(ctx, "PT_R", 100).await;
    assert_eq!(first, sorted([a[0], a[1], b[0], b[1]]));
    for id in first {
        finish(ctx, id).await;
    }
    assert!(
        claimed(ctx, "PT_R", 100).await.is_empty(),
        "2 of each this minute"
    );
    ctx.harness
        .backdate_rows(&ctx.db, "backstop_task_rate", "at", Duration::from_secs(61))
        .await;
    assert_eq!(
        claimed(ctx, "PT_R", 100).await,
        sorted([a[2], a[3], b[2], b[3]])
    );
    set(ctx, "PT_R", QueueChange::Partition(false)).await;
    tenant(ctx, "PT_R", "c", 1).await;
    assert!(
        claimed(ctx, "PT_R", 100).await.is_empty(),
        "4 starts of the type this minute"
    );
}

/// A partition key of 0 bytes, past 128 bytes or with a control character is
/// `InvalidInput` naming `partition`, on the enqueue and the batch; nothing is written.
/// 128 bytes are accepted.
pub async fn partition_key_refuses_bad_input<H: Harness>(ctx: &Ctx<H>) {
    for key in [String::new(), "k".repeat(129), "a\nb".to_owned()] {
        let task = NewTask::new("PT_BAD", "x").partition(key.clone());
        let e = ctx.store.enqueue(task.clone()).await.expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{key:?}: {e}");
        assert!(e.to_string().contains("partition"), "{e}");
        let ok = NewTask::new("PT_BAD", "y");
        let e = ctx
            .store
            .enqueue_many(&[ok, task])
            .await
            .expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{key:?}: {e}");
    }
    assert_nothing_written(ctx).await;
    let long = "k".repeat(128);
    let e = ctx
        .store
        .enqueue(NewTask::new("PT_BAD", "x").partition(long.clone()))
        .await
        .unwrap();
    assert_eq!(ctx.task(e.id).await.partition, Some(long));
}

/// Four stores claim a type limited to 2 running per tenant, partitioned, over 6 tasks
/// of each of 4 tenants, each in a loop (claim up to 5, hold 30 ms, complete). The
/// racers' own count of each tenant's running tasks never passes 2 (the limit held) and
/// reaches 2 for some tenant (it let two run: not for every tenant, as racers on a
/// Galera cluster's nodes may take their turns so that one tenant's tasks never
/// overlap); every task is claimed exactly once.
pub async fn partitioned_limit_holds_across_racing_stores<H: Harness>(ctx: &Ctx<H>) {
    const TENANTS: [&str; 4] = ["t0", "t1", "t2", "t3"];
    const EACH: usize = 6;
    for key in TENANTS {
        tenant(ctx, "PT_RACE", key, EACH).await;
    }
    set(ctx, "PT_RACE", QueueChange::Concurrency(Some(2))).await;
    set(ctx, "PT_RACE", QueueChange::Partition(true)).await;
    // tenant → (running now, most at once); every claimed id
    let state = Arc::new(std::sync::Mutex::new((
        HashMap::<String, (usize, usize)>::new(),
        Vec::<TaskId>::new(),
    )));
    let mut racers = Vec::new();
    for r in 0..4 {
        let store = ctx.new_store().await;
        let state = state.clone();
        let owner = backstop_core::Owner::new(format!("racer-{r}")).unwrap();
        racers.push(tokio::spawn(async move {
            let types = vec!["PT_RACE".to_owned()];
            while state.lock().unwrap().1.len() < TENANTS.len() * EACH {
                let got = store.claim_batch(&owner, &types, 5).await.unwrap();
                if got.is_empty() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                {
                    let mut s = state.lock().unwrap();
                    for t in &got {
                        let key = t.partition.clone().unwrap_or_default();
                        let e = s.0.entry(key).or_default();
                        e.0 += 1;
                        e.1 = e.1.max(e.0);
                        s.1.push(t.id);
                    }
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
                {
                    let mut s = state.lock().unwrap();
                    for t in &got {
                        let key = t.partition.clone().unwrap_or_default();
                        s.0.entry(key).or_default().0 -= 1;
                    }
                }
                succeed_all(&store, &got).await;
            }
        }));
    }
    join_racers(racers).await;
    let (most, ids) = state.lock().unwrap().clone();
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        (ids.len(), unique.len()),
        (TENANTS.len() * EACH, TENANTS.len() * EACH),
        "each task claimed once"
    );
    for key in TENANTS {
        let at_once = most.get(key).map_or(0, |m| m.1);
        assert!((1..=2).contains(&at_once), "{key}: {most:?}");
    }
    assert!(
        TENANTS.iter().any(|k| most.get(*k).map(|m| m.1) == Some(2)),
        "some tenant ran two at once: {most:?}"
    );
}
