//! Rate limits ([`QueueChange::Rate`]): a batch claim takes at most what the type's
//! starts in the sliding window leave, counted from the ledger of its claims, on any
//! number of stores at once; claims by id and on the caller's transaction pass a
//! rate-limited type by.

use super::*;
use backstop_core::{Audit, QueueChange, RateLimit};

fn audit(reason: &str) -> Audit {
    Audit::new("ops", reason)
}

async fn rate<H: Harness>(
    ctx: &Ctx<H>,
    event_type: &str,
    r: Option<(u32, u64)>,
) -> backstop_core::Queue {
    let r = r.map(|(n, secs)| RateLimit::new(n, Duration::from_secs(secs)));
    ctx.store
        .set_queue(event_type, QueueChange::Rate(r), &audit("rate"))
        .await
        .unwrap()
}

/// The running tasks of `event_type`.
async fn running<H: Harness>(ctx: &Ctx<H>, event_type: &str) -> Vec<Task> {
    let running = TaskFilter::default()
        .event_type(event_type)
        .status(Status::Running);
    ctx.store.list(&running).await.unwrap()
}

/// Move every claim in the rate ledger back by `by` (as if made that long ago).
async fn age_ledger<H: Harness>(ctx: &Ctx<H>, by: Duration) {
    ctx.harness
        .backdate_rows(&ctx.db, "backstop_task_rate", "at", by)
        .await;
}

/// A rate of 5 per minute over 12 due tasks: a claim of 10 takes the 5 oldest, the next
/// none, and finishing them frees nothing (starts are counted, not running tasks).
/// Once those claims are more than a minute old, the next 5 go; claims half a minute
/// old still count. Among other types the limited one adds only its room. With a
/// concurrency limit beside it, a claim takes the smaller room. Removed, the rest go.
/// The queue's row shows the rate and its log each change.
pub async fn rate_limit_caps_starts_in_a_sliding_window<H: Harness>(ctx: &Ctx<H>) {
    let mut a = Vec::new();
    for i in 0..12 {
        a.push(ctx.enqueue("RL_A", &format!("a{i}")).await);
    }
    let b = ctx.enqueue("RL_B", "b0").await;
    let q = rate(ctx, "RL_A", Some((5, 60))).await;
    assert_eq!(
        (q.paused, q.concurrency, q.rate),
        (
            false,
            None,
            Some(RateLimit::new(5, Duration::from_secs(60)))
        )
    );

    assert_eq!(
        claim_ids(ctx, &["RL_A"], 2).await,
        a[..2],
        "the claim's own limit"
    );
    assert_eq!(
        claim_ids(ctx, &["RL_A"], 10).await,
        a[2..5],
        "the rate's room: 3"
    );
    assert!(
        claim_ids(ctx, &["RL_A"], 10).await.is_empty(),
        "5 started this minute"
    );
    let done: Vec<Mark> = running(ctx, "RL_A")
        .await
        .iter()
        .map(|t| Mark::success(t.lease()))
        .collect();
    assert_eq!(done.len(), 5);
    assert!(ctx.store.mark(&done).await.unwrap().iter().all(|m| *m));
    assert!(
        claim_ids(ctx, &["RL_A"], 10).await.is_empty(),
        "a start counts after its task ended"
    );

    // half a minute on: the claims still count
    age_ledger(ctx, Duration::from_secs(30)).await;
    assert_eq!(
        claim_ids(ctx, &["RL_B", "RL_A"], 10).await,
        vec![b],
        "only B"
    );
    // a minute and a bit on: the window has passed them
    age_ledger(ctx, Duration::from_secs(31)).await;
    assert_eq!(claim_ids(ctx, &["RL_A"], 3).await, a[5..8]);
    // those 3 are recent, the 5 before are not: room for 2
    assert_eq!(claim_ids(ctx, &["RL_A"], 10).await, a[8..10]);
    assert!(claim_ids(ctx, &["RL_A"], 10).await.is_empty());

    // a concurrency limit of 1 beside a fresh window: the smaller room
    age_ledger(ctx, Duration::from_secs(61)).await;
    ctx.store
        .set_queue("RL_A", QueueChange::Concurrency(Some(1)), &audit("one"))
        .await
        .unwrap();
    assert_eq!(running(ctx, "RL_A").await.len(), 5, "a[5..10] still run");
    assert!(
        claim_ids(ctx, &["RL_A"], 10).await.is_empty(),
        "5 running ≥ 1"
    );
    ctx.store
        .set_queue("RL_A", QueueChange::Concurrency(None), &audit("any"))
        .await
        .unwrap();
    assert_eq!(claim_ids(ctx, &["RL_A"], 1).await, a[10..11]);

    let q = rate(ctx, "RL_A", None).await;
    assert_eq!(q.rate, None);
    assert_eq!(claim_ids(ctx, &["RL_A"], 10).await, a[11..12], "no limit");
    let log = queue_actions(ctx, "RL_A").await;
    assert_eq!(
        log,
        [
            "rate 5 per 60s",
            "concurrency 1",
            "concurrency off",
            "rate off"
        ]
    );
}

/// A rate-limited type's tasks are claimed by the batch claim alone: a claim by id and
/// a claim on the caller's transaction (every path) pass it by, the task pending and
/// untouched, and spend none of its room.
pub async fn rate_limit_keeps_claims_by_id_off<H: Harness>(ctx: &Ctx<H>) {
    rate(ctx, "RL_ID", Some((1, 3600))).await;
    let id = passed_by_all_but_the_batch_claim(ctx, "RL_ID").await;
    assert_eq!(
        claim_ids(ctx, &["RL_ID"], 10).await,
        vec![id],
        "one, the oldest"
    );
    assert!(claim_ids(ctx, &["RL_ID"], 10).await.is_empty());
}

/// A rate of 0 starts or past `MAX_CONCURRENCY`, or a window of 0, under a second, not
/// whole seconds, or past a day, is `InvalidInput` naming `rate`; no queue row or log
/// entry is written. The bounds themselves are accepted.
pub async fn rate_limit_refuses_bad_input<H: Harness>(ctx: &Ctx<H>) {
    let secs = Duration::from_secs;
    for (n, per) in [
        (0, secs(60)),
        (backstop_core::MAX_CONCURRENCY + 1, secs(60)),
        (5, Duration::ZERO),
        (5, Duration::from_millis(500)),
        (5, Duration::from_millis(1500)),
        (5, backstop_core::MAX_RATE_WINDOW + secs(1)),
    ] {
        let e = ctx
            .store
            .set_queue(
                "RL_BAD",
                QueueChange::Rate(Some(RateLimit::new(n, per))),
                &audit("x"),
            )
            .await
            .expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("rate"), "{e}");
    }
    assert!(ctx.store.queues().await.unwrap().is_empty());
    assert!(ctx.store.queue_log("RL_BAD").await.unwrap().is_empty());
    let most = RateLimit::new(
        backstop_core::MAX_CONCURRENCY,
        backstop_core::MAX_RATE_WINDOW,
    );
    let q = ctx
        .store
        .set_queue("RL_BAD", QueueChange::Rate(Some(most)), &audit("x"))
        .await
        .unwrap();
    assert_eq!(q.rate, Some(most));
}

/// Four stores claim a type limited to 4 starts per 2 s at once, each in a loop (claim
/// up to 3, complete at once). Every claim's tasks are logged with the time the claim
/// returned: no 2-second interval (less the time a claim takes to return, 250 ms)
/// holds more than 4 starts, every task is claimed exactly once, and the limit did
/// hold the stores back (the 16 tasks took at least three windows).
pub async fn rate_limit_holds_across_racing_stores<H: Harness>(ctx: &Ctx<H>) {
    const TASKS: usize = 16;
    const RATE: usize = 4;
    const WINDOW: Duration = Duration::from_secs(2);
    for i in 0..TASKS {
        ctx.enqueue("RL_RACE", &format!("r{i}")).await;
    }
    rate(ctx, "RL_RACE", Some((RATE as u32, WINDOW.as_secs()))).await;
    let start = std::time::Instant::now();
    let starts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut racers = Vec::new();
    for r in 0..4 {
        let store = ctx.new_store().await;
        let starts = starts.clone();
        let owner = backstop_core::Owner::new(format!("racer-{r}")).unwrap();
        racers.push(tokio::spawn(async move {
            let types = vec!["RL_RACE".to_owned()];
            while starts.lock().unwrap().len() < TASKS {
                let got = store.claim_batch(&owner, &types, 3).await.unwrap();
                let at = std::time::Instant::now();
                if got.is_empty() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                starts
                    .lock()
                    .unwrap()
                    .extend(got.iter().map(|t| (at, t.id)));
                succeed_all(&store, &got).await;
            }
        }));
    }
    join_racers(racers).await;
    let mut starts = starts.lock().unwrap().clone();
    starts.sort();
    assert_each_claimed_once(starts.iter().map(|(_, id)| *id).collect(), TASKS);
    let span = WINDOW - Duration::from_millis(250);
    let most = starts
        .iter()
        .map(|(t, _)| {
            starts
                .iter()
                .filter(|(u, _)| *u >= *t && *u < *t + span)
                .count()
        })
        .max()
        .unwrap_or(0);
    assert!(most <= RATE, "{most} starts within {span:?}: {starts:?}");
    let took = starts.last().map(|(t, _)| *t - start).unwrap_or_default();
    assert!(
        took >= 3 * WINDOW - Duration::from_millis(250),
        "16 starts at 4 per 2 s take three windows, took {took:?}"
    );
}
