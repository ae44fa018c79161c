//! Claims: by id and in batches, atomic under real concurrency.

use super::*;

/// claim_by_id: pending → running once; attempts and lease bumped; owner and updated_at set.
pub async fn claim_by_id_claims_a_due_task_once<H: Harness>(ctx: &Ctx<H>) {
    let id = ctx.enqueue("E", "k").await;
    ctx.backdate(id, TimeColumn::UpdatedAt, MINUTE).await;
    let before = ctx.task(id).await;
    let t0 = Utc::now();
    let t = ctx
        .store
        .claim_by_id(id, &ctx.owner)
        .await
        .unwrap()
        .expect("first claim wins");
    let t1 = Utc::now();
    assert_eq!(t.status, Status::Running);
    assert_eq!(t.attempts, 1);
    assert_eq!(t.lease, 1);
    assert_eq!(t.owner.as_deref(), Some("testkit-owner"));
    assert_between("updated_at", t.updated_at, t0, t1);
    assert_eq!(t.next_run_at, before.next_run_at);
    assert_eq!(t.created_at, before.created_at);
    assert_eq!(ctx.task(id).await, t, "the returned task is what is stored");
    assert!(ctx
        .store
        .claim_by_id(id, &owner("other"))
        .await
        .unwrap()
        .is_none());
    assert_eq!(ctx.task(id).await, t, "a losing claim changes nothing");
}

/// claim_by_id: only when next_run_at <= now.
pub async fn claim_by_id_waits_until_due<H: Harness>(ctx: &Ctx<H>) {
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "k").delay(Duration::from_secs(600)))
        .await
        .unwrap();
    assert!(ctx
        .store
        .claim_by_id(e.id, &ctx.owner)
        .await
        .unwrap()
        .is_none());
    ctx.backdate(e.id, TimeColumn::NextRunAt, Duration::from_secs(599))
        .await;
    assert!(
        ctx.store
            .claim_by_id(e.id, &ctx.owner)
            .await
            .unwrap()
            .is_none(),
        "still one second early"
    );
    ctx.backdate(e.id, TimeColumn::NextRunAt, Duration::from_secs(2))
        .await;
    let t = ctx.claim(e.id).await;
    assert_eq!((t.status, t.attempts), (Status::Running, 1));
}

/// claim_by_id: never claims a running, succeeded, failed or missing task.
pub async fn claim_by_id_ignores_tasks_not_pending<H: Harness>(ctx: &Ctx<H>) {
    let running = ctx.enqueue("E", "running").await;
    ctx.claim(running).await;
    let done = ctx.enqueue("E", "done").await;
    let l = ctx.claim(done).await.lease();
    assert!(ctx.store.mark_success(l).await.unwrap());
    let failed = ctx.enqueue("E", "failed").await;
    let l = ctx.claim(failed).await.lease();
    assert!(ctx.store.mark_fail(l, "boom").await.unwrap());
    for id in [running, done, failed] {
        let before = ctx.task(id).await;
        assert!(ctx
            .store
            .claim_by_id(id, &owner("thief"))
            .await
            .unwrap()
            .is_none());
        assert_eq!(ctx.task(id).await, before);
    }
    assert!(ctx
        .store
        .claim_by_id(987_654_321, &ctx.owner)
        .await
        .unwrap()
        .is_none());
    assert!(ctx.store.get(987_654_321).await.unwrap().is_none());
}

/// claim_batch: oldest next_run_at first, id breaks ties; result in that order; each
/// returned task is exactly what is stored (running, attempts and lease bumped, owner and
/// updated_at set, the rest untouched).
pub async fn claim_batch_claims_oldest_first<H: Harness>(ctx: &Ctx<H>) {
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(ctx.enqueue("E", &format!("k{i}")).await);
    }
    // due times: k5 oldest, then k4, then k0..k3 (a tie, broken by id). The oldest are
    // the newest rows, so an id-ordered claim would pick other rows.
    ctx.backdate(ids[5], TimeColumn::NextRunAt, Duration::from_secs(300))
        .await;
    ctx.backdate(ids[4], TimeColumn::NextRunAt, Duration::from_secs(200))
        .await;
    for id in &ids[..4] {
        ctx.backdate(*id, TimeColumn::NextRunAt, Duration::from_secs(100))
            .await;
    }
    // make the tie exact: same next_run_at for k0..k3
    let base = ctx.task(ids[0]).await.next_run_at;
    for id in &ids[1..4] {
        let t = ctx.task(*id).await;
        let diff = (t.next_run_at - base).to_std().unwrap_or_default();
        ctx.backdate(*id, TimeColumn::NextRunAt, diff).await;
        assert_eq!(ctx.task(*id).await.next_run_at, base);
    }
    let mut before = Vec::new();
    for id in &ids {
        before.push(ctx.task(*id).await);
    }
    let t0 = Utc::now();
    let got = ctx
        .store
        .claim_batch(&ctx.owner, &["E".into()], 3)
        .await
        .unwrap();
    let t1 = Utc::now();
    let got_ids: Vec<TaskId> = got.iter().map(|t| t.id).collect();
    assert_eq!(got_ids, vec![ids[5], ids[4], ids[0]]);
    for t in &got {
        assert_eq!((t.status, t.attempts, t.lease), (Status::Running, 1, 1));
        assert_eq!(t.owner.as_deref(), Some("testkit-owner"));
        assert_between("updated_at", t.updated_at, t0, t1);
        assert_eq!(
            &ctx.task(t.id).await,
            t,
            "the returned task is what is stored"
        );
        let was = before.iter().find(|b| b.id == t.id).expect("enqueued");
        assert_eq!(
            (&t.payload, t.next_run_at, t.created_at, t.priority),
            (&was.payload, was.next_run_at, was.created_at, was.priority),
            "a claim changes only the claim's columns"
        );
    }
    let next = ctx
        .store
        .claim_batch(&ctx.owner, &["E".into()], 2)
        .await
        .unwrap();
    assert_eq!(
        next.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![ids[1], ids[2]],
        "ties go by id"
    );
}

/// claim_batch: never more than `limit`; 0 claims nothing; over the maximum is refused.
pub async fn claim_batch_respects_limit<H: Harness>(ctx: &Ctx<H>) {
    for i in 0..5 {
        ctx.enqueue("E", &format!("k{i}")).await;
    }
    let types = ["E".to_string()];
    assert!(ctx
        .store
        .claim_batch(&ctx.owner, &types, 0)
        .await
        .unwrap()
        .is_empty());
    assert_kind(
        ctx.store
            .claim_batch(&ctx.owner, &types, MAX_BATCH + 1)
            .await,
        ErrorKind::InvalidInput,
        "limit",
    );
    let s = ctx.store.stats().await.unwrap();
    assert_eq!(s.count(Status::Pending), 5, "nothing claimed so far");
    for expected in [2, 2, 1, 0] {
        let got = ctx.store.claim_batch(&ctx.owner, &types, 2).await.unwrap();
        assert_eq!(got.len(), expected);
    }
    assert_eq!(ctx.store.stats().await.unwrap().count(Status::Running), 5);
}

/// claim_batch: only tasks whose next_run_at has come.
pub async fn claim_batch_claims_only_due_tasks<H: Harness>(ctx: &Ctx<H>) {
    let due = ctx.enqueue("E", "due").await;
    let later = ctx
        .store
        .enqueue(NewTask::new("E", "later").delay(MINUTE))
        .await
        .unwrap()
        .id;
    let got = ctx
        .store
        .claim_batch(&ctx.owner, &["E".into()], 10)
        .await
        .unwrap();
    assert_eq!(got.iter().map(|t| t.id).collect::<Vec<_>>(), vec![due]);
    assert_eq!(ctx.task(later).await.status, Status::Pending);
    ctx.backdate(later, TimeColumn::NextRunAt, MINUTE).await;
    let got = ctx
        .store
        .claim_batch(&ctx.owner, &["E".into()], 10)
        .await
        .unwrap();
    assert_eq!(got.iter().map(|t| t.id).collect::<Vec<_>>(), vec![later]);
}

/// claim_batch: only the event types asked for; none asked → nothing claimed.
pub async fn claim_batch_claims_only_given_event_types<H: Harness>(ctx: &Ctx<H>) {
    let a = ctx.enqueue("A", "1").await;
    let b = ctx.enqueue("B", "1").await;
    let c = ctx.enqueue("C", "1").await;
    assert!(ctx
        .store
        .claim_batch(&ctx.owner, &[], 10)
        .await
        .unwrap()
        .is_empty());
    assert_kind(
        ctx.store
            .claim_batch(&ctx.owner, &["bad type".into()], 10)
            .await,
        ErrorKind::InvalidInput,
        "event_type",
    );
    let got = ctx
        .store
        .claim_batch(&ctx.owner, &["A".into(), "C".into(), "Z".into()], 10)
        .await
        .unwrap();
    let mut got_ids: Vec<TaskId> = got.iter().map(|t| t.id).collect();
    got_ids.sort();
    assert_eq!(got_ids, vec![a, c]);
    assert_eq!(ctx.task(b).await.status, Status::Pending);
}

/// a claim of several event types takes the oldest due tasks across them, in
/// `(next_run_at, id)` order, at most `limit` in all; a type named twice counts once; a
/// type not named is never touched, however old its tasks.
pub async fn claim_batch_of_several_types_takes_the_oldest_across_them<H: Harness>(ctx: &Ctx<H>) {
    // (type, key, due this many seconds ago)
    let plan = [
        ("A", "a1", 400),
        ("A", "a2", 300),
        ("A", "a3", 100),
        ("A", "a4", 50),
        ("B", "b1", 350),
        ("B", "b2", 200),
        ("B", "b3", 60),
        ("C", "c1", 1000),
    ];
    let mut id_of = HashMap::new();
    for (t, k, ago) in plan {
        let id = ctx.enqueue(t, k).await;
        ctx.backdate(id, TimeColumn::NextRunAt, Duration::from_secs(ago))
            .await;
        id_of.insert(k, id);
    }
    let keys = |tasks: &[Task]| tasks.iter().map(|t| t.biz_key.clone()).collect::<Vec<_>>();
    let types: Vec<String> = ["B", "A", "B"].iter().map(|t| t.to_string()).collect();
    let first = ctx.store.claim_batch(&ctx.owner, &types, 4).await.unwrap();
    assert_eq!(keys(&first), ["a1", "b1", "a2", "b2"]);
    for t in &first {
        assert_eq!((t.status, t.attempts, t.lease), (Status::Running, 1, 1));
    }
    let rest = ctx.store.claim_batch(&ctx.owner, &types, 10).await.unwrap();
    assert_eq!(keys(&rest), ["a3", "b3", "a4"]);
    let c = ctx.task(id_of["c1"]).await;
    assert_eq!((c.status, c.attempts), (Status::Pending, 0));
    assert!(ctx
        .store
        .claim_batch(&ctx.owner, &types, 10)
        .await
        .unwrap()
        .is_empty());
}

/// every claim bumps attempts and lease, and a retry keeps the count.
pub async fn every_claim_bumps_attempts_and_lease<H: Harness>(ctx: &Ctx<H>) {
    let e = ctx
        .store
        .enqueue(NewTask::new("E", "k").retry(RetryPolicy::fixed(5, Duration::ZERO)))
        .await
        .unwrap();
    for n in 1..=3u32 {
        let t = if n % 2 == 1 {
            ctx.claim(e.id).await
        } else {
            let mut v = ctx
                .store
                .claim_batch(&ctx.owner, &["E".into()], 1)
                .await
                .unwrap();
            assert_eq!(v.len(), 1);
            v.remove(0)
        };
        assert_eq!(t.attempts, n);
        assert_eq!(t.lease, i64::from(n));
        assert!(ctx
            .store
            .mark_retry(t.lease(), Duration::ZERO, "again")
            .await
            .unwrap());
        let after = ctx.task(e.id).await;
        assert_eq!(
            (after.status, after.attempts, after.lease),
            (Status::Pending, n, i64::from(n))
        );
    }
}

/// 1,000 due tasks, 8 claimers on separate store instances racing: every task claimed
/// exactly once.
pub async fn concurrent_claim_batch_claims_each_task_once<H: Harness>(ctx: &Ctx<H>) {
    const TASKS: usize = 1000;
    const CLAIMERS: usize = 8;
    let mut handles = Vec::new();
    // enqueue from 4 producers
    for p in 0..4 {
        let s = ctx.store.clone();
        handles.push(tokio::spawn(async move {
            for i in (p..TASKS).step_by(4) {
                let et = if i % 2 == 0 { "A" } else { "B" };
                s.enqueue(NewTask::new(et, format!("k{i}"))).await.unwrap();
            }
        }));
    }
    joined("the producers", handles).await;
    let mut claimers = Vec::new();
    for c in 0..CLAIMERS {
        let store = ctx.new_store().await;
        claimers.push(tokio::spawn(async move {
            let me = Owner::new(format!("claimer-{c}")).unwrap();
            let types = vec!["A".to_string(), "B".to_string()];
            let mut got = Vec::new();
            loop {
                let batch = store.claim_batch(&me, &types, 7).await.unwrap();
                assert!(batch.len() <= 7);
                if batch.is_empty() {
                    break;
                }
                for t in &batch {
                    assert_eq!(t.owner.as_deref(), Some(me.as_str()));
                }
                got.extend(batch.into_iter().map(|t| (t.id, t.attempts, t.lease)));
            }
            got
        }));
    }
    let mut seen: HashMap<TaskId, usize> = HashMap::new();
    let mut per_claimer = Vec::new();
    for got in joined("the claimers", claimers).await {
        per_claimer.push(got.len());
        for (id, attempts, lease) in got {
            assert_eq!(
                (attempts, lease),
                (1, 1),
                "task {id} claimed more than once"
            );
            *seen.entry(id).or_default() += 1;
        }
    }
    assert_eq!(seen.len(), TASKS, "every task claimed");
    assert!(seen.values().all(|n| *n == 1), "no task claimed twice");
    let s = ctx.store.stats().await.unwrap();
    assert_eq!(s.count(Status::Running), TASKS as u64);
    assert_eq!(per_claimer.iter().sum::<usize>(), TASKS);
}

/// 8 pollers claiming and completing while 4 producers insert: no deadlock or lock
/// timeout escapes to the caller, and every task is claimed exactly once.
pub async fn concurrent_claims_and_inserts_never_deadlock<H: Harness>(ctx: &Ctx<H>) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    const TASKS: usize = 1200;
    const POLLERS: usize = 8;
    let inserted = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let mut pollers = Vec::new();
    for p in 0..POLLERS {
        let store = ctx.new_store().await;
        let (inserted, done) = (Arc::clone(&inserted), Arc::clone(&done));
        pollers.push(tokio::spawn(async move {
            let me = Owner::new(format!("poller-{p}")).unwrap();
            let types = vec!["A".to_string(), "B".to_string()];
            let mut mine = Vec::new();
            loop {
                let batch = store.claim_batch(&me, &types, 10).await.unwrap();
                if batch.is_empty() {
                    if inserted.load(Ordering::SeqCst) && done.load(Ordering::SeqCst) == TASKS {
                        return mine;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                }
                let marks: Vec<Mark> = batch.iter().map(|t| Mark::success(t.lease())).collect();
                let flags = store.mark(&marks).await.unwrap();
                assert!(flags.iter().all(|f| *f), "a fresh claim's mark was refused");
                done.fetch_add(batch.len(), Ordering::SeqCst);
                mine.extend(batch.into_iter().map(|t| (t.id, t.attempts)));
            }
        }));
    }
    let mut producers = Vec::new();
    for p in 0..4 {
        let store = ctx.new_store().await;
        producers.push(tokio::spawn(async move {
            for i in (p..TASKS).step_by(4) {
                let et = if i % 3 == 0 { "A" } else { "B" };
                store
                    .enqueue(NewTask::new(et, format!("k{i}")))
                    .await
                    .unwrap();
            }
        }));
    }
    joined("the producers", producers).await;
    inserted.store(true, Ordering::SeqCst);
    let mut seen: HashMap<TaskId, u32> = HashMap::new();
    for mine in joined("the pollers", pollers).await {
        for (id, attempts) in mine {
            assert_eq!(attempts, 1, "task {id} claimed more than once");
            assert!(
                seen.insert(id, attempts).is_none(),
                "task {id} claimed twice"
            );
        }
    }
    assert_eq!(seen.len(), TASKS);
    let s = ctx.store.stats().await.unwrap();
    assert_eq!(s.count(Status::Succeeded), TASKS as u64);
    assert_eq!(s.count(Status::Running) + s.count(Status::Pending), 0);
}

/// 8 concurrent claim_by_id on one task, from separate store instances: exactly one wins.
pub async fn concurrent_claim_by_id_has_one_winner<H: Harness>(ctx: &Ctx<H>) {
    let mut stores = Vec::new();
    for _ in 0..8 {
        stores.push(ctx.new_store().await);
    }
    for round in 0..10 {
        let id = ctx.enqueue("E", &format!("k{round}")).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(stores.len()));
        let mut handles = Vec::new();
        for (i, s) in stores.iter().enumerate() {
            let s = s.clone();
            let barrier = Arc::clone(&barrier);
            handles.push(tokio::spawn(async move {
                let me = Owner::new(format!("racer-{i}")).unwrap();
                barrier.wait().await;
                s.claim_by_id(id, &me).await.unwrap().map(|t| (me, t))
            }));
        }
        let mut winners = Vec::new();
        for w in joined("the racers", handles).await.into_iter().flatten() {
            winners.push(w);
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one claim wins");
        let (me, t) = &winners[0];
        let stored = ctx.task(id).await;
        assert_eq!(stored.owner.as_deref(), Some(me.as_str()));
        assert_eq!((stored.attempts, stored.lease), (1, 1));
        assert_eq!(&stored, t);
    }
}

/// claim_batch: the lowest priority number first, then the earliest due, then the oldest;
/// every level is claimable; a task not yet due waits whatever its priority; across
/// event types the same order holds.
pub async fn claim_batch_claims_by_priority_then_due_time_then_id<H: Harness>(ctx: &Ctx<H>) {
    use backstop_core::Priority;
    let put = |key: &'static str, p: Priority| async move {
        let e = ctx
            .store
            .enqueue(NewTask::new("P", key).priority(p))
            .await
            .unwrap();
        assert!(e.created);
        e.id
    };
    let normal_1 = put("normal-1", Priority::NORMAL).await;
    let bulk = put("bulk", Priority::BULK).await;
    let normal_2 = put("normal-2", Priority::NORMAL).await;
    let critical = put("critical", Priority::CRITICAL).await;
    let high = put("high", Priority::HIGH).await;
    let low = put("low", Priority::LOW).await;
    // the later normal task has been due longer: due time beats id within a level
    ctx.backdate(normal_2, TimeColumn::NextRunAt, MINUTE).await;
    let not_due = ctx
        .store
        .enqueue(
            NewTask::new("P", "critical-later")
                .priority(Priority::CRITICAL)
                .delay(HOUR),
        )
        .await
        .unwrap()
        .id;
    assert_eq!(ctx.task(critical).await.priority, Priority::CRITICAL);
    assert_eq!(ctx.task(bulk).await.priority, Priority::BULK);
    assert_eq!(ctx.task(normal_1).await.priority, Priority::NORMAL);

    let ids = |ts: Vec<Task>| ts.iter().map(|t| t.id).collect::<Vec<_>>();
    let first = ctx
        .store
        .claim_batch(&ctx.owner, &["P".into()], 3)
        .await
        .unwrap();
    assert_eq!(ids(first), vec![critical, high, normal_2]);
    let rest = ctx
        .store
        .claim_batch(&ctx.owner, &["P".into()], 10)
        .await
        .unwrap();
    assert_eq!(ids(rest), vec![normal_1, low, bulk]);
    assert_eq!(ctx.task(not_due).await.status, Status::Pending);

    // several event types: one order over all of them
    let q_low = ctx
        .store
        .enqueue(NewTask::new("Q", "low").priority(Priority::LOW))
        .await
        .unwrap()
        .id;
    let p_bulk = put("bulk-2", Priority::BULK).await;
    let q_high = ctx
        .store
        .enqueue(NewTask::new("Q", "high").priority(Priority::HIGH))
        .await
        .unwrap()
        .id;
    let p_normal = put("normal-3", Priority::NORMAL).await;
    let both = ctx
        .store
        .claim_batch(&ctx.owner, &["P".into(), "Q".into()], 10)
        .await
        .unwrap();
    assert_eq!(ids(both), vec![q_high, p_normal, q_low, p_bulk]);
}

/// A level's backlog does not hide another level's tasks: with more due tasks of one
/// priority than the limit, a claim still takes the higher-priority ones first and the
/// rest in order, each task once.
pub async fn claim_batch_drains_every_priority_level_in_order<H: Harness>(ctx: &Ctx<H>) {
    use backstop_core::Priority;
    let mut expected: Vec<(Priority, TaskId)> = Vec::new();
    for i in 0..60 {
        let p = Priority::ALL[(i * 7) % Priority::ALL.len()];
        let e = ctx
            .store
            .enqueue(NewTask::new("P", format!("k{i}")).priority(p))
            .await
            .unwrap();
        expected.push((p, e.id));
    }
    // ids grow with enqueue order and every task is due at its enqueue: within a level,
    // id order is due order (ties broken by id)
    expected.sort();
    let mut claimed = Vec::new();
    loop {
        let batch = ctx
            .store
            .claim_batch(&ctx.owner, &["P".into()], 7)
            .await
            .unwrap();
        if batch.is_empty() {
            break;
        }
        assert!(batch.len() <= 7);
        claimed.extend(batch.iter().map(|t| (t.priority, t.id)));
    }
    let by_level = |v: &[(Priority, TaskId)]| {
        let mut v = v.to_vec();
        v.sort();
        v
    };
    assert_eq!(by_level(&claimed), expected, "each task once");
    // claims came level by level
    let levels: Vec<Priority> = claimed.iter().map(|(p, _)| *p).collect();
    let mut sorted = levels.clone();
    sorted.sort();
    assert_eq!(
        levels, sorted,
        "a lower level was claimed before a higher one"
    );
}

/// A claim passes a due row another transaction holds locked instead of queueing behind
/// it (`SKIP LOCKED`): with the oldest due task locked by a concurrent transaction, a
/// claim of three returns the two behind it at once (within the backend's bound) and the
/// locked one stays pending, untouched; once the lock is gone the next claim takes it.
/// Where the backend documents that claims wait (MySQL's ordered update), the case pins
/// that instead: the claim returns only after the lock is released, all three in order.
pub async fn claims_pass_a_row_another_transaction_holds<H: Harness>(ctx: &Ctx<H>) {
    let held = ctx.enqueue("E", "held").await;
    let behind = [ctx.enqueue("E", "b1").await, ctx.enqueue("E", "b2").await];
    let Some(bound) = passing_bound(ctx, "no row locks: nothing to pass") else {
        return;
    };
    let lock = ctx.harness.lock_row(&ctx.db, &ctx.config.table, held).await;
    let types = vec!["E".to_string()];
    let claim = ctx.store.claim_batch(&ctx.owner, &types, 3);
    match bound {
        Some(bound) => {
            let started = std::time::Instant::now();
            let got = within("a claim past a locked row", claim).await.unwrap();
            let took = started.elapsed();
            assert!(
                took <= bound + Duration::from_millis(500),
                "the claim waited {took:?} behind the locked row (bound {bound:?})"
            );
            let ids: Vec<TaskId> = got.iter().map(|t| t.id).collect();
            assert_eq!(
                ids,
                behind.to_vec(),
                "the rows behind the locked one, in order"
            );
            let t = ctx.task(held).await;
            assert_eq!(
                (t.status, t.attempts, t.lease, t.owner),
                (Status::Pending, 0, 0, None),
                "the locked row is untouched"
            );
            // the lock's connection closes in the background: claim until it is gone
            drop(lock);
            let next = within("the lock to go", async {
                loop {
                    let got = ctx.store.claim_batch(&ctx.owner, &types, 3).await.unwrap();
                    if !got.is_empty() {
                        return got;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await;
            let ids: Vec<TaskId> = next.iter().map(|t| t.id).collect();
            assert_eq!(ids, vec![held], "the row is claimed once its lock is gone");
        }
        None => {
            let mut claim = Box::pin(claim);
            assert_still_waiting(&mut claim, "behind the lock").await;
            drop(lock);
            let got = within("a claim after the lock is released", claim)
                .await
                .unwrap();
            let ids: Vec<TaskId> = got.iter().map(|t| t.id).collect();
            assert_eq!(ids, vec![held, behind[0], behind[1]], "all three, in order");
        }
    }
}

/// Holds the transaction that enqueued a task open, uncommitted, until released: the
/// [`ClaimIn`](crate::ClaimIn) hook of [`TxTasks::Claimed`](crate::TxTasks), used
/// to claim nothing and wait.
#[derive(Debug, Default)]
struct HoldOpen {
    inside: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

#[crate::async_trait]
impl crate::ClaimIn for HoldOpen {
    async fn claim_in(
        &self,
        _conn: &mut (dyn backstop_core::TxConnection + '_),
        _enqueued: &backstop_core::Enqueued,
    ) -> backstop_core::Result<()> {
        self.inside.notify_one();
        self.release.notified().await;
        Ok(())
    }

    fn claim_blocking(
        &self,
        _conn: &mut (dyn backstop_core::BlockingTxConnection + '_),
        _enqueued: &backstop_core::Enqueued,
    ) -> backstop_core::Result<()> {
        Err(backstop_core::Error::config(
            "hold_open",
            "the case holds async transactions only",
        ))
    }
}

/// An application's transaction that has enqueued a task and not committed yet holds
/// no claim up for long: with such a transaction open (a due task of the claimed type;
/// then a delayed one, and one of a type next to it), a claim returns the committed due
/// tasks within the backend's bound for a locked row, the claims after it at once
/// (MariaDB's queue-then-skip claim waits once on the uncommitted insert InnoDB's
/// locking read meets, then skips for a while), and the uncommitted task is not
/// claimed; rolled back, it never existed. Where the backend documents that claims wait
/// (MySQL's ordered update), the case pins that: the claim returns once the transaction
/// ends.
pub async fn claims_pass_an_uncommitted_enqueue<H: Harness>(ctx: &Ctx<H>) {
    let Some(bound) = passing_bound(ctx, "an open transaction holds every claim by design") else {
        return;
    };
    let types = vec!["E".to_string()];
    let held_tasks = [
        NewTask::new("E", "held-due"),
        NewTask::new("E", "held-later").delay(HOUR),
        NewTask::new("Ea", "held-next-type"),
    ];
    let mut first = true;
    for (n, held) in held_tasks.into_iter().enumerate() {
        let committed: Vec<TaskId> = committed_pair(ctx, n).await;
        let hold = Arc::new(HoldOpen::default());
        let biz_row = format!("held-{n}");
        let writer = ctx.enqueue_claimed_in_tx_via(
            crate::TxPath::Sqlx,
            &biz_row,
            held.clone(),
            hold.clone(),
            false,
        );
        let claims = async {
            within("the held transaction to enqueue", hold.inside.notified()).await;
            let claim = ctx.store.claim_batch(&ctx.owner, &types, 10);
            let got = match bound {
                Some(bound) => {
                    let started = std::time::Instant::now();
                    let got = within("a claim past the uncommitted task", claim)
                        .await
                        .unwrap();
                    let took = started.elapsed();
                    // the first claim may wait out the bound; later ones pass at once
                    let allowed = if first {
                        bound + Duration::from_millis(500)
                    } else {
                        Duration::from_millis(500)
                    };
                    assert!(
                        took <= allowed,
                        "{}: the claim waited {took:?} behind the uncommitted task (allowed {allowed:?})",
                        held.biz_key()
                    );
                    hold.release.notify_one();
                    got
                }
                None => {
                    let mut claim = Box::pin(claim);
                    let what = format!("{}: behind the open transaction", held.biz_key());
                    assert_still_waiting(&mut claim, &what).await;
                    hold.release.notify_one();
                    within("a claim after the transaction ended", claim)
                        .await
                        .unwrap()
                }
            };
            let ids: Vec<TaskId> = got.iter().map(|t| t.id).collect();
            assert_eq!(
                ids,
                committed,
                "{}: the committed due tasks, in order, and nothing else",
                held.biz_key()
            );
        };
        let (written, ()) = tokio::join!(writer, claims);
        let written = written.expect("the held transaction rolls back cleanly");
        assert!(
            written.created,
            "{}: enqueued in its transaction",
            held.biz_key()
        );
        assert!(
            ctx.store.get(written.id).await.unwrap().is_none(),
            "{}: rolled back, the task never existed",
            held.biz_key()
        );
        first = false;
    }
    assert_eq!(ctx.count_all().await, 6, "the committed tasks only");
}

/// Two committed due tasks of type `E` for round `n` of
/// [`claims_pass_an_uncommitted_enqueue`].
async fn committed_pair<H: Harness>(ctx: &Ctx<H>, n: usize) -> Vec<TaskId> {
    vec![
        ctx.enqueue("E", &format!("c{n}a")).await,
        ctx.enqueue("E", &format!("c{n}b")).await,
    ]
}
