//! [`TaskStore::mark_and_claim`]: marks, then a claim of one type, the claim taking the
//! room the marks leave under a limited type's concurrency, rate or partitions — one
//! transaction for a limited type — and the limit held across racing stores.

use super::*;
use backstop_core::{Audit, Priority, QueueChange, RateLimit};

/// Change `event_type`'s queue.
async fn set<H: Harness>(ctx: &Ctx<H>, event_type: &str, change: QueueChange) {
    let audit = Audit::new("ops", "handover");
    ctx.store
        .set_queue(event_type, change, &audit)
        .await
        .unwrap();
}

/// `mark_and_claim` on the context's store: the flags, and the claimed ids in claim order.
async fn hand_over<H: Harness>(
    ctx: &Ctx<H>,
    marks: &[Mark],
    event_type: &str,
    n: usize,
) -> (Vec<bool>, Vec<TaskId>) {
    let (flags, tasks) = ctx
        .store
        .mark_and_claim(marks, &ctx.owner, event_type, n)
        .await
        .unwrap();
    (flags, tasks.iter().map(|t| t.id).collect())
}

/// A limit of 3 over 7 tasks, 3 running: a success, a retry (due in an hour) and a mark
/// under a lease no longer current hand their room on: flags `[true, true, false]`, and
/// the claim takes exactly the two oldest due, running under the caller with attempts
/// 1; the marked tasks are as `mark` leaves them. At the limit a claim alone takes
/// none; the claim's own limit caps it (1 of a room of 2); a limit of 0 is a mark alone.
/// Bad input (a bad event type, a claim over `MAX_BATCH`, an over-long delay) is
/// refused naming the operation, and its valid mark is not applied.
pub async fn mark_and_claim_hands_a_limited_types_room_on<H: Harness>(ctx: &Ctx<H>) {
    let mut a = Vec::new();
    for i in 0..7 {
        a.push(ctx.enqueue("HO_A", &format!("a{i}")).await);
    }
    set(ctx, "HO_A", QueueChange::Concurrency(Some(3))).await;
    assert_eq!(claim_ids(ctx, &["HO_A"], 10).await, a[..3]);
    let (t0, t1, t2) = (
        ctx.task(a[0]).await,
        ctx.task(a[1]).await,
        ctx.task(a[2]).await,
    );

    // bad input: refused, and the valid mark with it is not applied
    let ok = [Mark::success(t0.lease())];
    for (marks, event_type, n) in [
        (ok.to_vec(), "bad type", 1),
        (ok.to_vec(), "HO_A", MAX_BATCH + 1),
        (
            vec![
                Mark::success(t0.lease()),
                Mark::retry(t1.lease(), Duration::from_secs(u64::MAX / 4), "far"),
            ],
            "HO_A",
            1,
        ),
    ] {
        let r = ctx
            .store
            .mark_and_claim(&marks, &ctx.owner, event_type, n)
            .await;
        assert_kind(r, ErrorKind::InvalidInput, "mark_and_claim");
    }
    assert_eq!(
        ctx.task(a[0]).await.status,
        Status::Running,
        "nothing written"
    );

    let before = Utc::now();
    let stale = backstop_core::Lease {
        task_id: t2.id,
        token: t2.lease + 1,
    };
    let marks = [
        Mark::success(t0.lease()),
        Mark::retry(t1.lease(), HOUR, "later"),
        Mark::success(stale),
    ];
    let (flags, got) = hand_over(ctx, &marks, "HO_A", 10).await;
    let after = Utc::now();
    assert_eq!(flags, vec![true, true, false]);
    assert_eq!(got, a[3..5], "the room of the two marks, oldest first");
    for id in &a[3..5] {
        let t = ctx.task(*id).await;
        assert_eq!(
            (t.status, t.attempts, t.lease, t.owner.as_deref()),
            (Status::Running, 1, 1, Some(ctx.owner.as_str())),
            "{id}"
        );
    }
    let t0 = ctx.task(a[0]).await;
    assert_eq!((t0.status, t0.attempts), (Status::Succeeded, 1));
    let t1 = ctx.task(a[1]).await;
    assert_eq!(
        (
            t1.status,
            t1.attempts,
            t1.owner.as_deref(),
            t1.last_error.as_deref()
        ),
        (Status::Pending, 1, None, Some("later"))
    );
    assert_between(
        "the retry's due time",
        t1.next_run_at,
        before + chrono_dur(HOUR) - chrono_dur(CLOCK_SLACK),
        after + chrono_dur(HOUR) + chrono_dur(CLOCK_SLACK),
    );
    let t2 = ctx.task(a[2]).await;
    assert_eq!(
        (t2.status, t2.lease),
        (Status::Running, 1),
        "the stale mark"
    );

    // at the limit: a claim alone takes none
    assert_eq!(hand_over(ctx, &[], "HO_A", 10).await, (vec![], vec![]));
    // the claim's own limit: 1 of a room of 2
    let t3 = ctx.task(a[3]).await;
    let marks = [Mark::success(t2.lease()), Mark::success(t3.lease())];
    assert_eq!(
        hand_over(ctx, &marks, "HO_A", 1).await,
        (vec![true, true], a[5..6].to_vec())
    );
    // a limit of 0: a mark alone, the room left for the next claim
    let t4 = ctx.task(a[4]).await;
    assert_eq!(
        hand_over(ctx, &[Mark::success(t4.lease())], "HO_A", 0).await,
        (vec![true], vec![])
    );
    assert_eq!(claim_ids(ctx, &["HO_A"], 10).await, a[6..7]);
    assert_eq!(ctx.task(a[6]).await.status, Status::Running);
}

/// A type limited by its concurrency alone hands on what its marks freed, no more: a
/// limit of 5 with 2 running, one success hands on 1 (the other 3 of the room are a
/// batch claim's); a stale mark hands on nothing; lowered to 1 under 4 running, a
/// success hands on none. It takes no turn on the queue's row: with the row held by
/// another transaction (as a poll's claim holds it) it completes; a rate-limited
/// type's hand-over waits for the row.
pub async fn mark_and_claim_of_a_concurrency_limit_hands_on_what_it_freed<H: Harness>(
    ctx: &Ctx<H>,
) {
    let mut a = Vec::new();
    for i in 0..9 {
        a.push(ctx.enqueue("HO_FREE", &format!("f{i}")).await);
    }
    set(ctx, "HO_FREE", QueueChange::Concurrency(Some(5))).await;
    assert_eq!(claim_ids(ctx, &["HO_FREE"], 2).await, a[..2]);
    let t0 = ctx.task(a[0]).await;
    let (flags, got) = hand_over(ctx, &[Mark::success(t0.lease())], "HO_FREE", 10).await;
    assert_eq!(
        (flags, got),
        (vec![true], a[2..3].to_vec()),
        "one freed, one on"
    );
    assert_eq!(
        claim_ids(ctx, &["HO_FREE"], 10).await,
        a[3..6],
        "the room: 3"
    );
    // a stale mark frees nothing
    let t1 = ctx.task(a[1]).await;
    let stale = backstop_core::Lease {
        task_id: t1.id,
        token: t1.lease + 1,
    };
    let (flags, got) = hand_over(ctx, &[Mark::success(stale)], "HO_FREE", 10).await;
    assert_eq!((flags, got), (vec![false], vec![]));
    // lowered below the running count (5): nothing handed on
    set(ctx, "HO_FREE", QueueChange::Concurrency(Some(1))).await;
    let (flags, got) = hand_over(ctx, &[Mark::success(t1.lease())], "HO_FREE", 10).await;
    assert_eq!((flags, got), (vec![true], vec![]), "4 running over 1");
    assert_eq!(ctx.task(a[6]).await.status, Status::Pending);

    let Some(_) = passing_bound(ctx, "a hand-over never meets a held queue row") else {
        return;
    };
    set(ctx, "HO_FREE", QueueChange::Concurrency(Some(5))).await;
    let row = ctx
        .harness
        .lock_queue_row(&ctx.db, &ctx.config.table, "HO_FREE")
        .await;
    let t2 = ctx.task(a[2]).await;
    let handed = tokio::time::timeout(
        Duration::from_secs(10),
        ctx.store
            .mark_and_claim(&[Mark::success(t2.lease())], &ctx.owner, "HO_FREE", 10),
    )
    .await
    .expect("the hand-over does not wait for the queue's row")
    .unwrap();
    assert_eq!(handed.0, vec![true]);
    assert_eq!(handed.1.iter().map(|t| t.id).collect::<Vec<_>>(), a[6..7]);
    drop(row);

    // a rate-limited type's hand-over takes the row, so it waits for it
    let r = [
        ctx.enqueue("HO_FREE_RATE", "r0").await,
        ctx.enqueue("HO_FREE_RATE", "r1").await,
    ];
    let rate = RateLimit::new(10, HOUR);
    set(ctx, "HO_FREE_RATE", QueueChange::Rate(Some(rate))).await;
    assert_eq!(claim_ids(ctx, &["HO_FREE_RATE"], 1).await, r[..1]);
    let row = ctx
        .harness
        .lock_queue_row(&ctx.db, &ctx.config.table, "HO_FREE_RATE")
        .await;
    let t = ctx.task(r[0]).await;
    let marks = [Mark::success(t.lease())];
    let mut waiting = Box::pin(
        ctx.store
            .mark_and_claim(&marks, &ctx.owner, "HO_FREE_RATE", 10),
    );
    assert_still_waiting(&mut waiting, "for the rate-limited type's queue row").await;
    drop(row);
    let (flags, got) = waiting.await.unwrap();
    assert_eq!(flags, vec![true]);
    assert_eq!(got.iter().map(|t| t.id).collect::<Vec<_>>(), r[1..2]);
}

/// A hand-over claims in claim order across priority levels: under a limit of 2 with
/// two normal tasks running, two marks hand on the critical task and then the oldest
/// normal one, passing a high one not yet due and the low one; the next hand-over,
/// capped at 1 by the claim, takes the low one.
pub async fn mark_and_claim_hands_on_in_claim_order_across_priorities<H: Harness>(ctx: &Ctx<H>) {
    let ty = "HO_PRIO";
    let enqueue = |key: &'static str, p: Priority| async move {
        let task = NewTask::new(ty, key).priority(p);
        let task = match key {
            "high-later" => task.delay(HOUR),
            _ => task,
        };
        ctx.store.enqueue(task).await.expect("enqueue").id
    };
    let running = [
        enqueue("n0", Priority::NORMAL).await,
        enqueue("n1", Priority::NORMAL).await,
    ];
    set(ctx, ty, QueueChange::Concurrency(Some(2))).await;
    assert_eq!(claim_ids(ctx, &[ty], 10).await, running);
    let low = enqueue("low", Priority::LOW).await;
    let _later = enqueue("high-later", Priority::HIGH).await;
    let normal = enqueue("n2", Priority::NORMAL).await;
    let critical = enqueue("crit", Priority::CRITICAL).await;

    let mut marks = Vec::new();
    for id in running {
        marks.push(Mark::success(ctx.task(id).await.lease()));
    }
    let (flags, got) = hand_over(ctx, &marks, ty, 10).await;
    assert_eq!(flags, vec![true, true]);
    assert_eq!(got, vec![critical, normal], "critical, then normal");
    let marks = [Mark::success(ctx.task(critical).await.lease())];
    let (flags, got) = hand_over(ctx, &marks, ty, 1).await;
    assert_eq!((flags, got), (vec![true], vec![low]), "then low");
}

/// A type's limits changed between two hand-overs on one store: with only a
/// concurrency limit of 2, a hand-over hands on one; with a rate added (a limit that
/// takes the queue's row), the next hand-over still claims the room its mark freed,
/// and records the start (a rate of 2 an hour: one more claim takes one task, then
/// none); with the limits removed, a hand-over claims as a poll does (the rest, past
/// the room a limit would have left).
pub async fn mark_and_claim_follows_a_limit_changed_between_hand_overs<H: Harness>(ctx: &Ctx<H>) {
    let ty = "HO_FLIP";
    let mut a = Vec::new();
    for i in 0..7 {
        a.push(ctx.enqueue(ty, &format!("f{i}")).await);
    }
    set(ctx, ty, QueueChange::Concurrency(Some(2))).await;
    assert_eq!(claim_ids(ctx, &[ty], 10).await, a[..2]);
    let mark = |id: TaskId| async move { Mark::success(ctx.task(id).await.lease()) };
    let (_, got) = hand_over(ctx, &[mark(a[0]).await], ty, 10).await;
    assert_eq!(got, a[2..3], "concurrency only");

    set(ctx, ty, QueueChange::Rate(Some(RateLimit::new(2, HOUR)))).await;
    let (flags, got) = hand_over(ctx, &[mark(a[1]).await], ty, 10).await;
    assert_eq!((flags, got), (vec![true], a[3..4].to_vec()), "with a rate");
    let (_, got) = hand_over(ctx, &[mark(a[2]).await], ty, 10).await;
    assert_eq!(got, a[4..5], "the rate's second start");
    let (_, got) = hand_over(ctx, &[mark(a[3]).await], ty, 10).await;
    assert_eq!(got, Vec::<TaskId>::new(), "the rate's window is full");

    set(ctx, ty, QueueChange::Rate(None)).await;
    set(ctx, ty, QueueChange::Concurrency(None)).await;
    let (flags, got) = hand_over(ctx, &[mark(a[4]).await], ty, 10).await;
    assert_eq!((flags, got), (vec![true], a[5..7].to_vec()), "no limit");
}

/// Without a limit, marks then a claim of the type's due tasks (the marked retry, due
/// at once, behind the older ones); paused, the marks apply and nothing is
/// claimed; under a rate of 3 an hour with 2 started, the claim takes the 1 left.
pub async fn mark_and_claim_without_a_limit_pause_or_rate<H: Harness>(ctx: &Ctx<H>) {
    let open: Vec<TaskId> = {
        let mut ids = Vec::new();
        for i in 0..4 {
            ids.push(ctx.enqueue("HO_OPEN", &format!("o{i}")).await);
        }
        ids
    };
    assert_eq!(claim_ids(ctx, &["HO_OPEN"], 1).await, open[..1]);
    let t = ctx.task(open[0]).await;
    let retry = Mark::retry(t.lease(), Duration::ZERO, "again");
    let (flags, got) = hand_over(ctx, &[retry], "HO_OPEN", 10).await;
    assert_eq!(flags, vec![true]);
    let mut want = open[1..].to_vec();
    want.push(open[0]);
    assert_eq!(got, want, "every due task, the retried one last (due now)");
    assert_eq!(ctx.task(open[0]).await.attempts, 2);

    // paused: the marks apply, nothing is claimed
    let p = [
        ctx.enqueue("HO_PAUSED", "p0").await,
        ctx.enqueue("HO_PAUSED", "p1").await,
    ];
    set(ctx, "HO_PAUSED", QueueChange::Concurrency(Some(5))).await;
    assert_eq!(claim_ids(ctx, &["HO_PAUSED"], 1).await, p[..1]);
    set(ctx, "HO_PAUSED", QueueChange::Pause).await;
    let t = ctx.task(p[0]).await;
    let (flags, got) = hand_over(ctx, &[Mark::success(t.lease())], "HO_PAUSED", 10).await;
    assert_eq!((flags, got), (vec![true], vec![]));
    assert_eq!(ctx.task(p[0]).await.status, Status::Succeeded);
    assert_eq!(ctx.task(p[1]).await.status, Status::Pending);

    // a rate of 3 an hour, 2 started: 1 more
    let mut r = Vec::new();
    for i in 0..5 {
        r.push(ctx.enqueue("HO_RATE", &format!("r{i}")).await);
    }
    let rate = RateLimit::new(3, HOUR);
    set(ctx, "HO_RATE", QueueChange::Rate(Some(rate))).await;
    assert_eq!(claim_ids(ctx, &["HO_RATE"], 2).await, r[..2]);
    let t = ctx.task(r[0]).await;
    let (flags, got) = hand_over(ctx, &[Mark::success(t.lease())], "HO_RATE", 10).await;
    assert_eq!((flags, got), (vec![true], r[2..3].to_vec()));
    let t = ctx.task(r[1]).await;
    let (flags, got) = hand_over(ctx, &[Mark::success(t.lease())], "HO_RATE", 10).await;
    assert_eq!((flags, got), (vec![true], vec![]), "the window's 3 started");
}

/// A type limited to 1 per partition, keys `k1` (3 tasks) and `k2` (2), one of each
/// running: the success of `k1`'s hands on `k1`'s room alone (its next task), `k2` at
/// its limit.
pub async fn mark_and_claim_of_a_partitioned_type_hands_on_its_keys_room<H: Harness>(ctx: &Ctx<H>) {
    let k1 = super::partitions::tenant(ctx, "HO_PART", "k1", 3).await;
    let k2 = super::partitions::tenant(ctx, "HO_PART", "k2", 2).await;
    set(ctx, "HO_PART", QueueChange::Concurrency(Some(1))).await;
    set(ctx, "HO_PART", QueueChange::Partition(true)).await;
    let mut got = claim_ids(ctx, &["HO_PART"], 10).await;
    got.sort_unstable();
    assert_eq!(got, vec![k1[0], k2[0]]);
    let t = ctx.task(k1[0]).await;
    let (flags, got) = hand_over(ctx, &[Mark::success(t.lease())], "HO_PART", 10).await;
    assert_eq!((flags, got), (vec![true], k1[1..2].to_vec()));
    assert_eq!(ctx.task(k2[1]).await.status, Status::Pending);
}

/// Four stores race over 60 tasks of a type limited to 5, each handing the room of
/// what it finished to its next claim (`mark_and_claim`, up to 4): every task is
/// claimed once and at most 5 are held at once — and 5 are.
pub async fn mark_and_claim_holds_the_limit_across_racing_stores<H: Harness>(ctx: &Ctx<H>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    const TASKS: usize = 60;
    const LIMIT: usize = 5;
    for i in 0..TASKS {
        ctx.enqueue("HO_RACE", &format!("r{i}")).await;
    }
    set(ctx, "HO_RACE", QueueChange::Concurrency(Some(LIMIT as u32))).await;
    let held = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let claimed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut racers = Vec::new();
    for r in 0..4 {
        let store = ctx.new_store().await;
        let (held, most, claimed) = (held.clone(), most.clone(), claimed.clone());
        let owner = owner(&format!("racer-{r}"));
        racers.push(tokio::spawn(async move {
            let mut finished: Vec<Mark> = Vec::new();
            let mut idle = 0;
            while idle < 20 {
                let (flags, got) = store
                    .mark_and_claim(&finished, &owner, "HO_RACE", 4)
                    .await
                    .unwrap();
                assert!(flags.iter().all(|f| *f), "every mark applies");
                finished.clear();
                if got.is_empty() {
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                idle = 0;
                // released here, marked (and the room handed on) by the next call
                hold_at_the_limit(&held, &most, got.len(), LIMIT).await;
                finished.extend(got.iter().map(|t| Mark::success(t.lease())));
                claimed.lock().unwrap().extend(got.iter().map(|t| t.id));
            }
        }));
    }
    join_racers(racers).await;
    assert_each_claimed_once(claimed.lock().unwrap().clone(), TASKS);
    let done = ctx
        .store
        .list(
            &TaskFilter::default()
                .event_type("HO_RACE")
                .status(Status::Succeeded)
                .limit(100),
        )
        .await
        .unwrap();
    assert_eq!(done.len(), TASKS, "every task marked succeeded");
    assert_eq!(
        most.load(Ordering::SeqCst),
        LIMIT,
        "at most the limit held at once, and the limit reached"
    );
}
