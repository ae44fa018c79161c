//! Global concurrency limits ([`QueueChange::Concurrency`]): a batch claim takes at most
//! the room a type's limit leaves over its running tasks, on any number of stores at
//! once; claims by id and on the caller's transaction pass a limited type by.

use super::*;
use backstop_core::{Audit, QueueChange};
use std::sync::atomic::Ordering;

fn audit(reason: &str) -> Audit {
    Audit::new("ops", reason)
}

async fn limit<H: Harness>(ctx: &Ctx<H>, event_type: &str, n: Option<u32>) -> backstop_core::Queue {
    ctx.store
        .set_queue(event_type, QueueChange::Concurrency(n), &audit("limit"))
        .await
        .unwrap()
}

/// A limit of 3 over 8 due tasks: a claim of 10 takes the 3 oldest, the next none; a
/// claim's own limit still caps it (1 of the room of 3). A success frees one slot, a
/// retry another, a dead holder's recycle a third. Among other types the limited one
/// adds only its room. Raised to 5, the next claim takes 2 more; lowered to 2 under 5
/// running, none; removed, the rest. Each change is in the queue's row and its log.
pub async fn concurrency_limit_caps_a_claim_at_the_room_left<H: Harness>(ctx: &Ctx<H>) {
    let mut a = Vec::new();
    for i in 0..8 {
        a.push(ctx.enqueue("CL_A", &format!("a{i}")).await);
    }
    let b = [
        ctx.enqueue("CL_B", "b0").await,
        ctx.enqueue("CL_B", "b1").await,
    ];
    let q = limit(ctx, "CL_A", Some(3)).await;
    assert_eq!(
        (q.event_type.as_str(), q.paused, q.concurrency),
        ("CL_A", false, Some(3))
    );

    assert_eq!(
        claim_ids(ctx, &["CL_A"], 1).await,
        a[..1],
        "the claim's own limit"
    );
    assert_eq!(
        claim_ids(ctx, &["CL_A"], 10).await,
        a[1..3],
        "the room left: 2"
    );
    assert!(
        claim_ids(ctx, &["CL_A"], 10).await.is_empty(),
        "at the limit"
    );
    for id in &a[..3] {
        let t = ctx.task(*id).await;
        assert_eq!(
            (t.status, t.attempts, t.lease),
            (Status::Running, 1, 1),
            "{id}"
        );
    }
    for id in &a[3..] {
        let t = ctx.task(*id).await;
        assert_eq!(
            (t.status, t.attempts, t.lease),
            (Status::Pending, 0, 0),
            "{id}"
        );
    }

    // a success frees a slot
    let t0 = ctx.task(a[0]).await;
    assert!(ctx.store.mark_success(t0.lease()).await.unwrap());
    assert_eq!(claim_ids(ctx, &["CL_A"], 10).await, a[3..4]);
    // so does a retry (the task itself is pending again, due later)
    let t1 = ctx.task(a[1]).await;
    let retry = Mark::retry(t1.lease(), Duration::from_secs(3600), "later");
    assert_eq!(ctx.store.mark(&[retry]).await.unwrap(), vec![true]);
    // among other types, the limited one adds only its room
    let mut got = claim_ids(ctx, &["CL_A", "CL_B"], 10).await;
    got.sort_unstable();
    let mut want = vec![a[4], b[0], b[1]];
    want.sort_unstable();
    assert_eq!(got, want, "B's two, A's one slot");
    assert!(claim_ids(ctx, &["CL_A", "CL_B"], 10).await.is_empty());

    // a dead holder's slot comes back when its task is recycled
    for id in [a[2], a[3], a[4], b[0], b[1]] {
        ctx.backdate(id, TimeColumn::UpdatedAt, HOUR).await;
    }
    let recycled = ctx.store.recycle_dead(MINUTE, 100).await.unwrap();
    assert_eq!(recycled.to_pending, 5, "A's three running and B's two");
    let mut got = claim_ids(ctx, &["CL_A"], 10).await;
    got.sort_unstable();
    assert_eq!(
        got,
        vec![a[2], a[3], a[4]],
        "the recycled, oldest first, up to 3"
    );

    let q = limit(ctx, "CL_A", Some(5)).await;
    assert_eq!(q.concurrency, Some(5));
    assert_eq!(
        claim_ids(ctx, &["CL_A"], 10).await,
        a[5..7],
        "raised: 2 more"
    );
    let q = limit(ctx, "CL_A", Some(2)).await;
    assert_eq!(q.concurrency, Some(2));
    assert!(
        claim_ids(ctx, &["CL_A"], 10).await.is_empty(),
        "5 running over 2"
    );
    let q = limit(ctx, "CL_A", None).await;
    assert_eq!((q.paused, q.concurrency), (false, None));
    assert_eq!(
        claim_ids(ctx, &["CL_A"], 10).await,
        a[7..8],
        "unlimited: the rest"
    );
    assert_eq!(ctx.store.queues().await.unwrap(), vec![q]);

    let log = ctx.store.queue_log("CL_A").await.unwrap();
    let actions: Vec<&str> = log.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(
        actions,
        [
            "concurrency 3",
            "concurrency 5",
            "concurrency 2",
            "concurrency off"
        ]
    );
    // a limit set to what it is changes and logs nothing
    limit(ctx, "CL_A", None).await;
    assert_eq!(ctx.store.queue_log("CL_A").await.unwrap().len(), 4);
}

/// A limited type's tasks are claimed by the batch claim alone: a claim by id and a
/// claim on the caller's transaction (every path) pass it by, the task pending and
/// untouched; the batch claim then takes it. A paused limited type is not claimed at
/// all; resumed, it is, under its limit.
pub async fn concurrency_limit_keeps_claims_by_id_off<H: Harness>(ctx: &Ctx<H>) {
    limit(ctx, "CL_ID", Some(1)).await;
    let id = passed_by_all_but_the_batch_claim(ctx, "CL_ID").await;
    ctx.store
        .set_queue("CL_ID", QueueChange::Pause, &audit("hold"))
        .await
        .unwrap();
    assert!(claim_ids(ctx, &["CL_ID"], 10).await.is_empty(), "paused");
    ctx.store
        .set_queue("CL_ID", QueueChange::Resume, &audit("go"))
        .await
        .unwrap();
    assert_eq!(
        claim_ids(ctx, &["CL_ID"], 10).await,
        vec![id],
        "one, the oldest"
    );
    assert!(claim_ids(ctx, &["CL_ID"], 10).await.is_empty());
}

/// A limit of 0 or past `MAX_CONCURRENCY` is `InvalidInput` naming `concurrency`; no
/// queue row or log entry is written.
pub async fn concurrency_limit_refuses_bad_input<H: Harness>(ctx: &Ctx<H>) {
    for n in [0, backstop_core::MAX_CONCURRENCY + 1] {
        let e = ctx
            .store
            .set_queue("CL_BAD", QueueChange::Concurrency(Some(n)), &audit("x"))
            .await
            .expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("concurrency"), "{e}");
    }
    assert!(ctx.store.queues().await.unwrap().is_empty());
    assert!(ctx.store.queue_log("CL_BAD").await.unwrap().is_empty());
    let q = limit(ctx, "CL_BAD", Some(backstop_core::MAX_CONCURRENCY)).await;
    assert_eq!(q.concurrency, Some(backstop_core::MAX_CONCURRENCY));
}

/// Four stores claim a type limited to 5 at once, each in a loop: claim up to 4, hold
/// the tasks until 5 are held across the stores (at most 200 ms), complete them. Every claim is logged with what the claimer held
/// at that moment (from its claim's return to just before its mark): no instant has
/// more than 5 held across the stores, every task is claimed exactly once, and the
/// limit was reached (the stores did run side by side).
pub async fn concurrency_limit_holds_across_racing_stores<H: Harness>(ctx: &Ctx<H>) {
    const TASKS: usize = 60;
    const LIMIT: usize = 5;
    for i in 0..TASKS {
        ctx.enqueue("CL_RACE", &format!("r{i}")).await;
    }
    limit(ctx, "CL_RACE", Some(LIMIT as u32)).await;
    let held = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let claimed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut racers = Vec::new();
    for r in 0..4 {
        let store = ctx.new_store().await;
        let (held, most, claimed) = (held.clone(), most.clone(), claimed.clone());
        let owner = backstop_core::Owner::new(format!("racer-{r}")).unwrap();
        racers.push(tokio::spawn(async move {
            let types = vec!["CL_RACE".to_owned()];
            let mut idle = 0;
            while idle < 20 {
                let got = store.claim_batch(&owner, &types, 4).await.unwrap();
                if got.is_empty() {
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                idle = 0;
                hold_at_the_limit(&held, &most, got.len(), LIMIT).await;
                let marks: Vec<Mark> = got.iter().map(|t| Mark::success(t.lease())).collect();
                assert!(store.mark(&marks).await.unwrap().iter().all(|m| *m));
                claimed.lock().unwrap().extend(got.iter().map(|t| t.id));
            }
        }));
    }
    for r in racers {
        r.await.unwrap();
    }
    assert_each_claimed_once(claimed.lock().unwrap().clone(), TASKS);
    let most = most.load(Ordering::SeqCst);
    assert_eq!(
        most, LIMIT,
        "at most the limit held at once, and the limit reached"
    );
}
