//! Starting a saga ([`TaskStore::start_saga`], [`Transactional::start_in`] along every
//! [`TxPath`]): its state row and its first group's tasks commit together, once per key,
//! with the caller's transaction or not at all.
//!
//! [`Transactional::start_in`]: backstop_core::Transactional::start_in

use backstop_core::limits::DEFAULT_MAX_PAYLOAD_BYTES;
use backstop_core::{
    ErrorKind, RetryPolicy, SagaDef, SagaStart, SagaStarted, SagaStatus, SagaStep, Status,
    StepPhase, StepTask, Task, TaskFilter, TaskStore,
};
use futures_util::future::join_all;
use std::time::Duration;

use crate::{within, Ctx, Harness, TxPath};

/// `stock` (compensated) and `coupon` side by side, then `pay`.
fn order() -> SagaDef {
    SagaDef::builder("order")
        .parallel([
            SagaStep::new("stock")
                .compensated()
                .retry(RetryPolicy::fixed(4, Duration::from_secs(2))),
            SagaStep::new("coupon").compensated(),
        ])
        .step(SagaStep::new("pay"))
        .build()
        .unwrap()
}

/// Where a start can run: on the store's own transaction, or along a path.
#[derive(Debug, Clone, Copy)]
enum Via {
    Own,
    Path(TxPath),
}

const VIAS: [Via; 4] = [
    Via::Own,
    Via::Path(TxPath::Native),
    Via::Path(TxPath::Sqlx),
    Via::Path(TxPath::Statements),
];

impl std::fmt::Display for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Via::Own => f.write_str("own"),
            Via::Path(p) => write!(f, "{p}"),
        }
    }
}

/// Start `start` via `via` (committed; a path's business row keyed `row`).
async fn start_via<H: Harness>(
    ctx: &Ctx<H>,
    via: Via,
    row: &str,
    start: &SagaStart,
) -> backstop_core::Result<SagaStarted> {
    match via {
        Via::Own => ctx.store.start_saga(start).await,
        Via::Path(path) => ctx.start_saga_via(path, row, start.clone(), true).await,
    }
}

/// The saga's tasks (its event type, business keys starting with `key/`), by id.
async fn step_tasks<H: Harness>(ctx: &Ctx<H>, key: &str) -> Vec<Task> {
    let all = ctx
        .store
        .list(&TaskFilter::default().event_type("saga:order").limit(1000))
        .await
        .unwrap();
    let prefix = format!("{key}/");
    all.into_iter()
        .filter(|t| t.biz_key.starts_with(&prefix))
        .collect()
}

/// A start writes the state row (running, group 0, the input as given, no reason,
/// version 0, created and updated now) and one pending task per step of the first group
/// (the saga's event type, business key `{key}/{step}:a`, the step's payload and retry
/// policy), on the store's own transaction and along every path. Started again (on any
/// path), the key is answered with the same saga and nothing new is written; the
/// second caller's transaction still commits its own writes.
pub async fn saga_start_writes_its_row_and_first_group_once<H: Harness>(ctx: &Ctx<H>) {
    let def = order();
    for via in VIAS {
        let key = format!("{via}-o1");
        let input = serde_json::json!({"order": key, "skus": [1, 2], "note": "ü ✓"});
        let start = def.start(&key, &input).unwrap();
        let before = chrono::Utc::now();
        let started = start_via(ctx, via, &format!("{key}-row"), &start)
            .await
            .unwrap_or_else(|e| panic!("{via}: {e}"));
        assert!(started.created, "{via}");
        assert_eq!(started.status, SagaStatus::Running, "{via}");
        let saga = ctx.store.saga("order", &key).await.unwrap().unwrap();
        assert_eq!(saga.id, started.id, "{via}");
        assert_eq!(
            (saga.name.as_str(), saga.key.as_str()),
            ("order", key.as_str())
        );
        assert_eq!(
            (saga.status, saga.group, saga.version),
            (SagaStatus::Running, 0, 0)
        );
        assert_eq!(saga.reason, None);
        let stored: serde_json::Value = serde_json::from_str(&saga.input).unwrap();
        assert_eq!(stored, input, "{via}: the input as given");
        crate::assert_between("created_at", saga.created_at, before, chrono::Utc::now());
        assert_eq!(saga.updated_at, saga.created_at, "{via}");

        let mut tasks = step_tasks(ctx, &key).await;
        tasks.sort_by(|a, b| a.biz_key.cmp(&b.biz_key));
        let keys: Vec<&str> = tasks.iter().map(|t| t.biz_key.as_str()).collect();
        assert_eq!(
            keys,
            [format!("{key}/coupon:a"), format!("{key}/stock:a")],
            "{via}"
        );
        for t in &tasks {
            assert_eq!((t.status, t.attempts), (Status::Pending, 0), "{via}");
            let payload: StepTask = t.payload_as().unwrap();
            assert_eq!(
                (payload.saga.as_str(), payload.key.as_str()),
                ("order", key.as_str())
            );
            assert_eq!(payload.phase, StepPhase::Action);
            assert!(t.biz_key.starts_with(&format!("{key}/{}:", payload.step)));
        }
        assert_eq!(
            tasks[1].retry,
            RetryPolicy::fixed(4, Duration::from_secs(2)),
            "{via}: stock's own retry policy"
        );

        // again, on every way in: the same saga, nothing new
        for again in VIAS {
            let row = format!("{key}-again-{again}");
            let second = start_via(ctx, again, &row, &start)
                .await
                .unwrap_or_else(|e| panic!("{via} then {again}: {e}"));
            assert_eq!(
                second,
                SagaStarted::new(started.id, SagaStatus::Running, false),
                "{via} then {again}"
            );
            if let Via::Path(_) = again {
                assert!(
                    ctx.harness.business_row_exists(&ctx.db, &row).await,
                    "{again}: the caller's writes commit"
                );
            }
        }
        assert_eq!(step_tasks(ctx, &key).await.len(), 2, "{via}: no task added");
        let unchanged = ctx.store.saga("order", &key).await.unwrap().unwrap();
        assert_eq!(unchanged, saga, "{via}: the row is untouched");
    }
    assert_eq!(
        ctx.store.saga("order", "never-started").await.unwrap(),
        None
    );
    assert_eq!(
        ctx.store.saga("other", "own-o1").await.unwrap(),
        None,
        "name and key"
    );
}

/// A start on a transaction that rolls back leaves nothing: no row, no task; the same
/// key then starts a new saga.
pub async fn saga_start_rolls_back_with_the_transaction<H: Harness>(ctx: &Ctx<H>) {
    let def = order();
    for path in TxPath::ALL {
        let key = format!("{path}-rb");
        let start = def.start(&key, &1).unwrap();
        let row = format!("{key}-row");
        let answered = ctx
            .start_saga_via(path, &row, start.clone(), false)
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(answered.created, "{path}: answered before the rollback");
        assert!(!ctx.harness.business_row_exists(&ctx.db, &row).await);
        assert_eq!(ctx.store.saga("order", &key).await.unwrap(), None, "{path}");
        assert!(step_tasks(ctx, &key).await.is_empty(), "{path}: no task");
        let again = ctx
            .start_saga_via(path, &format!("{row}-2"), start, true)
            .await
            .unwrap();
        assert!(again.created, "{path}: nothing was left to find");
        assert_eq!(step_tasks(ctx, &key).await.len(), 2, "{path}");
    }
}

/// An input over the store's payload limit is refused (`InvalidInput`, operation
/// `start_saga`) on every way in, before anything is written (the caller's transaction
/// is left to the caller: nothing of the saga is in it); a bad name or key is refused by
/// `saga`.
pub async fn saga_start_refuses_bad_input_and_writes_nothing<H: Harness>(ctx: &Ctx<H>) {
    let def = order();
    let big = "x".repeat(DEFAULT_MAX_PAYLOAD_BYTES);
    for via in VIAS {
        let key = format!("{via}-big");
        let start = def.start(&key, &big).unwrap();
        let e = start_via(ctx, via, &format!("{key}-row"), &start)
            .await
            .unwrap_err();
        assert_eq!(
            (e.kind(), e.operation()),
            (ErrorKind::InvalidInput, "start_saga"),
            "{via}: {e}"
        );
        assert_eq!(ctx.store.saga("order", &key).await.unwrap(), None, "{via}");
        assert!(step_tasks(ctx, &key).await.is_empty(), "{via}");
    }
    for (name, key) in [("", "k"), ("a b", "k"), ("order", ""), ("order", "a\u{7}")] {
        let e = ctx.store.saga(name, key).await.unwrap_err();
        assert_eq!(
            (e.kind(), e.operation()),
            (ErrorKind::InvalidInput, "saga"),
            "{name:?} {key:?}"
        );
    }
}

/// Two starts of one key at once, on two connections (the ways in mixed), for many keys:
/// exactly one creates the saga, both answer its id, and each saga has its first group's
/// tasks once.
pub async fn saga_racing_starts_of_one_key_create_one_saga<H: Harness>(ctx: &Ctx<H>) {
    const KEYS: usize = 12;
    let def = order();
    let racers = (0..KEYS).flat_map(|i| {
        [0, 1].map(|n| {
            let via = VIAS[(i + n) % VIAS.len()];
            let start = def.start(&format!("race-{i}"), &i).unwrap();
            async move {
                let row = format!("race-{i}-{n}");
                start_via(ctx, via, &row, &start)
                    .await
                    .unwrap_or_else(|e| panic!("race-{i} {via}: {e}"))
            }
        })
    });
    let answers = within("the racing starts", join_all(racers)).await;
    for (i, pair) in answers.chunks(2).enumerate() {
        let key = format!("race-{i}");
        assert_eq!(
            pair.iter().filter(|s| s.created).count(),
            1,
            "{key}: one start creates, {pair:?}"
        );
        assert_eq!(pair[0].id, pair[1].id, "{key}: both answer one saga");
        let saga = ctx.store.saga("order", &key).await.unwrap().unwrap();
        assert_eq!(saga.id, pair[0].id);
        assert_eq!(
            step_tasks(ctx, &key).await.len(),
            2,
            "{key}: its tasks once"
        );
    }
}
