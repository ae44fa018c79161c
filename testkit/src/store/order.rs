//! Order keys: tasks of one key run one at a time, in enqueue order.

use backstop_core::{Audit, Enqueued, WhenParked};

use super::*;

async fn put<H: Harness>(ctx: &Ctx<H>, key: &str, biz: &str) -> Enqueued {
    ctx.store
        .enqueue(NewTask::new("O", biz).order_key(key))
        .await
        .unwrap()
}

async fn status<H: Harness>(ctx: &Ctx<H>, id: TaskId) -> Status {
    ctx.task(id).await.status
}

async fn claim_all<H: Harness>(ctx: &Ctx<H>) -> Vec<TaskId> {
    let mut ids: Vec<TaskId> = ctx
        .store
        .claim_batch(&ctx.owner, &["O".into()], 100)
        .await
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    ids.sort_unstable();
    ids
}

async fn release<H: Harness>(ctx: &Ctx<H>, key: &str) -> Vec<TaskId> {
    ctx.store
        .release_order_keys(&[key.to_owned()])
        .await
        .unwrap()
}

/// the first task of a key is pending, the ones behind it wait (and say so); claims see
/// only the key's first; each finish, released, lets the next one go — not before. A
/// failure with retries left keeps its place; a parked one blocks until reset, and the
/// reset one runs first. Other keys and unordered tasks are unaffected.
pub async fn order_key_runs_a_keys_tasks_one_at_a_time_in_order<H: Harness>(ctx: &Ctx<H>) {
    let a1 = put(ctx, "a", "a1").await;
    let a2 = put(ctx, "a", "a2").await;
    let a3 = put(ctx, "a", "a3").await;
    let b1 = put(ctx, "b", "b1").await;
    let free = ctx.store.enqueue(NewTask::new("O", "free")).await.unwrap();
    assert_eq!(
        [a1.status, a2.status, a3.status, b1.status, free.status],
        [
            Status::Pending,
            Status::Waiting,
            Status::Waiting,
            Status::Pending,
            Status::Pending
        ]
    );
    let t = ctx.task(a2.id).await;
    assert_eq!(
        (t.status, t.order_key.as_deref(), t.when_parked),
        (Status::Waiting, Some("a"), WhenParked::Block)
    );
    assert!(ctx
        .store
        .claim_by_id(a2.id, &ctx.owner)
        .await
        .unwrap()
        .is_none());
    assert_eq!(claim_all(ctx).await, vec![a1.id, b1.id, free.id]);
    assert!(release(ctx, "a").await.is_empty(), "a1 is still running");

    // a1 succeeds: a2 goes, a3 still waits
    let a1t = ctx.task(a1.id).await;
    assert!(ctx.store.mark_success(a1t.lease()).await.unwrap());
    assert_eq!(
        status(ctx, a2.id).await,
        Status::Waiting,
        "marks do not release"
    );
    assert_eq!(release(ctx, "a").await, vec![a2.id]);
    assert_eq!(release(ctx, "a").await, Vec::<TaskId>::new(), "idempotent");
    let t = ctx.task(a2.id).await;
    assert_eq!(t.status, Status::Pending);
    assert!(
        t.next_run_at >= a1t.updated_at,
        "due from its release, not its enqueue"
    );
    assert_eq!(status(ctx, a3.id).await, Status::Waiting);

    // a2 fails with retries left: it keeps its place
    let a2t = ctx.claim(a2.id).await;
    assert!(ctx
        .store
        .mark_retry(a2t.lease(), Duration::ZERO, "down")
        .await
        .unwrap());
    assert!(release(ctx, "a").await.is_empty());
    assert_eq!(status(ctx, a3.id).await, Status::Waiting);
    // a2 parks: a3 waits until an operator resets a2, which then goes first
    let a2t = ctx.claim(a2.id).await;
    assert!(ctx
        .store
        .mark_fail(a2t.lease(), "down for good")
        .await
        .unwrap());
    assert!(release(ctx, "a").await.is_empty());
    assert_eq!(status(ctx, a3.id).await, Status::Waiting);
    let reset = ctx
        .store
        .reset(a2.id, &Audit::new("op", "fixed"))
        .await
        .unwrap();
    assert_eq!(reset.status, Status::Pending, "first in line again");
    assert_eq!(status(ctx, a3.id).await, Status::Waiting);
    let a2t = ctx.claim(a2.id).await;
    assert!(ctx.store.mark_success(a2t.lease()).await.unwrap());
    assert_eq!(release(ctx, "a").await, vec![a3.id]);
    let a3t = ctx.claim(a3.id).await;
    assert!(ctx.store.mark_success(a3t.lease()).await.unwrap());
    assert!(release(ctx, "a").await.is_empty());
    // a key with nothing left is forgotten; a new task of it is first in line at once
    assert!(!ctx
        .store
        .order_keys(None, 10)
        .await
        .unwrap()
        .contains(&"a".to_owned()));
    assert_eq!(put(ctx, "a", "a4").await.status, Status::Pending);
}

/// parked with `WhenParked::Skip`: the tasks behind it go on; a reset puts it back in
/// line, behind them.
pub async fn order_key_skip_policy_lets_the_key_go_on<H: Harness>(ctx: &Ctx<H>) {
    let a1 = ctx
        .store
        .enqueue(
            NewTask::new("O", "a1")
                .order_key("a")
                .when_parked(WhenParked::Skip)
                .retry(RetryPolicy::fixed(1, Duration::ZERO)),
        )
        .await
        .unwrap();
    let a2 = put(ctx, "a", "a2").await;
    assert_eq!(ctx.task(a1.id).await.when_parked, WhenParked::Skip);
    let t = ctx.claim(a1.id).await;
    // the last attempt's retry parks it
    assert!(ctx
        .store
        .mark_retry(t.lease(), Duration::ZERO, "down")
        .await
        .unwrap());
    assert_eq!(status(ctx, a1.id).await, Status::Failed);
    assert_eq!(release(ctx, "a").await, vec![a2.id]);
    ctx.claim(a2.id).await;
    let reset = ctx
        .store
        .reset(a1.id, &Audit::new("op", "again"))
        .await
        .unwrap();
    assert_eq!(reset.status, Status::Waiting, "behind the running a2");
}

/// an operator's cancel or delete of a key's first task lets the next one go; a waiting
/// task can be cancelled and is then skipped.
pub async fn order_key_cancel_and_delete_move_the_key_along<H: Harness>(ctx: &Ctx<H>) {
    let audit = Audit::new("op", "test");
    let a1 = put(ctx, "a", "a1").await;
    let a2 = put(ctx, "a", "a2").await;
    let a3 = put(ctx, "a", "a3").await;
    let a4 = put(ctx, "a", "a4").await;
    let cancelled = ctx.store.cancel(a3.id, &audit).await.unwrap();
    assert_eq!(cancelled.status, Status::Cancelled, "a waiting task");
    ctx.store.cancel(a1.id, &audit).await.unwrap();
    assert_eq!(status(ctx, a2.id).await, Status::Pending);
    ctx.store.delete(a2.id, &audit).await.unwrap();
    assert_eq!(
        status(ctx, a4.id).await,
        Status::Pending,
        "the cancelled a3 is skipped"
    );
}

/// `order_keys` pages through the keys with work left; releasing a page moves on a key
/// whose release was missed (its engine died after recording the outcome).
pub async fn order_keys_page_and_release_stranded_keys<H: Harness>(ctx: &Ctx<H>) {
    let mut heads = Vec::new();
    let mut seconds = Vec::new();
    for k in ["k1", "k2", "k3"] {
        heads.push(put(ctx, k, &format!("{k}-1")).await.id);
        seconds.push(put(ctx, k, &format!("{k}-2")).await.id);
    }
    assert_eq!(
        ctx.store.order_keys(None, 2).await.unwrap(),
        vec!["k1".to_owned(), "k2".to_owned()]
    );
    assert_eq!(
        ctx.store.order_keys(Some("k2"), 2).await.unwrap(),
        vec!["k3".to_owned()]
    );
    for id in &heads {
        let t = ctx.claim(*id).await;
        assert!(ctx.store.mark_success(t.lease()).await.unwrap());
    }
    let page = ctx.store.order_keys(None, 10).await.unwrap();
    let mut promoted = ctx.store.release_order_keys(&page).await.unwrap();
    promoted.sort_unstable();
    assert_eq!(promoted, seconds);
    assert_kind(
        ctx.store.release_order_keys(&["".to_owned()]).await,
        ErrorKind::InvalidInput,
        "order_key",
    );
    assert_kind(
        ctx.store
            .enqueue(NewTask::new("O", "x").order_key("k".repeat(129)))
            .await,
        ErrorKind::InvalidInput,
        "order_key",
    );
}

/// concurrent enqueues of one key from several instances, and in the caller's
/// transactions: exactly one task of the key is pending at a time, and releasing the key
/// hands the turn on in enqueue (id) order; a rolled-back enqueue leaves nothing.
pub async fn order_key_races_keep_one_task_in_front<H: Harness>(ctx: &Ctx<H>) {
    let rolled_back = ctx
        .enqueue_in_tx("r-0", NewTask::new("O", "r-rb").order_key("r"), false)
        .await
        .unwrap();
    assert!(ctx.store.get(rolled_back.id).await.unwrap().is_none());
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(ctx.new_store().await);
    }
    let results = within(
        "the enqueuers",
        futures_util::future::join_all((0..20).map(|i| {
            let store = stores[i % stores.len()].clone();
            async move {
                store
                    .enqueue(NewTask::new("O", format!("r{i}")).order_key("r"))
                    .await
                    .unwrap()
            }
        })),
    )
    .await;
    let in_tx = ctx
        .enqueue_in_tx("r-1", NewTask::new("O", "r-tx").order_key("r"), true)
        .await
        .unwrap();
    assert_eq!(in_tx.status, Status::Waiting);
    let mut ids: Vec<TaskId> = results.iter().map(|e| e.id).collect();
    ids.push(in_tx.id);
    ids.sort_unstable();
    let pending: Vec<_> = results
        .iter()
        .filter(|e| e.status == Status::Pending)
        .collect();
    assert_eq!(pending.len(), 1, "{results:?}");
    for expected in ids {
        let claimed = claim_all(ctx).await;
        assert_eq!(claimed, vec![expected], "one at a time, in order");
        let t = ctx.task(expected).await;
        assert!(ctx.store.mark_success(t.lease()).await.unwrap());
        release(ctx, "r").await;
    }
    assert!(claim_all(ctx).await.is_empty());
}

/// one call releases many keys in each state at once: a key whose head runs or is parked
/// (blocking) stays as it is, a key whose head finished hands its turn to its next task,
/// a key with nothing left (or never used) leaves the keys table; four racing calls over
/// the same keys promote each task once.
pub async fn release_many_keys_at_once<H: Harness>(ctx: &Ctx<H>) {
    let running = put(ctx, "m1", "m1-1").await.id;
    let behind_running = put(ctx, "m1", "m1-2").await.id;
    let done = put(ctx, "m2", "m2-1").await.id;
    let next = put(ctx, "m2", "m2-2").await.id;
    let last = put(ctx, "m3", "m3-1").await.id;
    let parked = put(ctx, "m4", "m4-1").await.id;
    let behind_parked = put(ctx, "m4", "m4-2").await.id;
    let pending = put(ctx, "m5", "m5-1").await.id;
    let behind_pending = put(ctx, "m5", "m5-2").await.id;
    ctx.claim(running).await;
    for id in [done, last] {
        let t = ctx.claim(id).await;
        assert!(ctx.store.mark_success(t.lease()).await.unwrap());
    }
    let t = ctx.claim(parked).await;
    assert!(ctx.store.mark_fail(t.lease(), "parked").await.unwrap());
    let keys: Vec<String> = ["ghost", "m1", "m2", "m3", "m4", "m5"]
        .iter()
        .map(|k| k.to_string())
        .collect();
    let promoted = ctx.store.release_order_keys(&keys).await.unwrap();
    assert_eq!(promoted, vec![next]);
    let states = [
        (running, Status::Running),
        (behind_running, Status::Waiting),
        (next, Status::Pending),
        (parked, Status::Failed),
        (behind_parked, Status::Waiting),
        (pending, Status::Pending),
        (behind_pending, Status::Waiting),
    ];
    for (id, want) in states {
        assert_eq!(status(ctx, id).await, want, "task {id}");
    }
    assert_eq!(
        ctx.store.order_keys(None, 10).await.unwrap(),
        ["m1", "m2", "m4", "m5"],
        "m3 and the unused key have nothing left"
    );

    // racing releases: each waiting task is promoted by exactly one of them
    let mut heads = Vec::new();
    let mut seconds = Vec::new();
    let race_keys: Vec<String> = (0..12).map(|i| format!("r{i:02}")).collect();
    for k in &race_keys {
        heads.push(put(ctx, k, &format!("{k}-1")).await.id);
        seconds.push(put(ctx, k, &format!("{k}-2")).await.id);
    }
    for id in &heads {
        let t = ctx.claim(*id).await;
        assert!(ctx.store.mark_success(t.lease()).await.unwrap());
    }
    let calls = (0..4).map(|_| ctx.store.release_order_keys(&race_keys));
    let mut all: Vec<TaskId> = within("the releases", futures_util::future::join_all(calls))
        .await
        .into_iter()
        .flat_map(|r| r.unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all, seconds, "each second task promoted once");
    for id in &seconds {
        assert_eq!(status(ctx, *id).await, Status::Pending);
    }
}

/// releases racing from several instances (on a cluster: several nodes) over keys with
/// two tasks waiting behind a finished one: each key hands its turn to its next task
/// only; the one behind it still waits. Some calls release the keys together, some one
/// key a call, so both ways of releasing race each other.
pub async fn racing_releases_promote_only_each_keys_next_task<H: Harness>(ctx: &Ctx<H>) {
    const KEYS: usize = 32;
    let keys: Vec<String> = (0..KEYS).map(|i| format!("rr{i:02}")).collect();
    let (mut seconds, mut thirds) = (Vec::new(), Vec::new());
    for k in &keys {
        let head = put(ctx, k, &format!("{k}-1")).await.id;
        seconds.push(put(ctx, k, &format!("{k}-2")).await.id);
        thirds.push(put(ctx, k, &format!("{k}-3")).await.id);
        let t = ctx.claim(head).await;
        assert!(ctx.store.mark_success(t.lease()).await.unwrap());
    }
    let mut stores = Vec::new();
    for _ in 0..6 {
        stores.push(ctx.new_store().await);
    }
    let calls = stores.iter().enumerate().map(|(i, store)| {
        let keys = keys.clone();
        async move {
            let mut promoted = Vec::new();
            if i % 2 == 0 {
                promoted.extend(store.release_order_keys(&keys).await.unwrap());
            } else {
                // each call starts at another key, so the calls meet mid-way
                for k in keys.iter().cycle().skip(i * 3).take(KEYS) {
                    promoted.extend(
                        store
                            .release_order_keys(std::slice::from_ref(k))
                            .await
                            .unwrap(),
                    );
                }
            }
            promoted
        }
    });
    let mut all: Vec<TaskId> = within("the releases", futures_util::future::join_all(calls))
        .await
        .into_iter()
        .flatten()
        .collect();
    all.sort_unstable();
    let mut want = seconds.clone();
    want.sort_unstable();
    assert_eq!(all, want, "each key's second task promoted once, no third");
    for (second, third) in seconds.iter().zip(&thirds) {
        assert_eq!(status(ctx, *second).await, Status::Pending, "task {second}");
        assert_eq!(status(ctx, *third).await, Status::Waiting, "task {third}");
    }
}
