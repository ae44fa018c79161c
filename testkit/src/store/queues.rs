//! Queue settings ([`TaskStore::set_queue`]): a paused event type is passed by every
//! claim, in the statement that claims, until it is resumed; enqueues go on; each change
//! is logged with who and why.

use super::*;
use crate::TxPath;
use backstop_core::{Audit, QueueChange, SagaDef, SagaStatus, SagaStep, StepOutcome, StepReport};

fn audit(reason: &str) -> Audit {
    Audit::new("ops", reason)
}

/// Pause: no claim takes a task of the type — by id, in a batch of that type alone or
/// among others — while tasks of other types are claimed as before; an enqueue of the
/// paused type commits and answers as always. A second pause changes nothing and logs
/// nothing. Resume: the next batch claims every due task of the type. The log holds the
/// pause and the resume, who and why, in order, in database time.
pub async fn pause_keeps_every_claim_off_a_type_until_resume<H: Harness>(ctx: &Ctx<H>) {
    let a1 = ctx.enqueue("PQ_A", "a1").await;
    let a2 = ctx.enqueue("PQ_A", "a2").await;
    let b1 = ctx.enqueue("PQ_B", "b1").await;
    let before = Utc::now();
    let q = ctx
        .store
        .set_queue("PQ_A", QueueChange::Pause, &audit("deploy of mailer"))
        .await
        .unwrap();
    let after = Utc::now();
    assert_eq!((q.event_type.as_str(), q.paused), ("PQ_A", true));
    assert_between("updated_at", q.updated_at, before, after);

    assert!(ctx
        .store
        .claim_by_id(a1, &ctx.owner)
        .await
        .unwrap()
        .is_none());
    let only_a = vec!["PQ_A".to_owned()];
    assert!(ctx
        .store
        .claim_batch(&ctx.owner, &only_a, 10)
        .await
        .unwrap()
        .is_empty());
    let both = vec!["PQ_A".to_owned(), "PQ_B".to_owned()];
    let got: Vec<TaskId> = ctx
        .store
        .claim_batch(&ctx.owner, &both, 10)
        .await
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(got, vec![b1], "the other type is claimed as before");
    let e = ctx.store.enqueue(NewTask::new("PQ_A", "a3")).await.unwrap();
    assert!(e.created, "an enqueue of a paused type commits");
    for id in [a1, a2, e.id] {
        let t = ctx.task(id).await;
        assert_eq!(
            (t.status, t.attempts, t.lease, t.owner),
            (Status::Pending, 0, 0, None),
            "task {id} untouched"
        );
    }

    // pausing a paused type: nothing changes, nothing is logged
    let again = ctx
        .store
        .set_queue("PQ_A", QueueChange::Pause, &audit("twice"))
        .await
        .unwrap();
    assert_eq!(again, q);
    assert_eq!(ctx.store.queues().await.unwrap(), vec![q.clone()]);

    let before = Utc::now();
    let r = ctx
        .store
        .set_queue("PQ_A", QueueChange::Resume, &audit("mailer is back"))
        .await
        .unwrap();
    let after = Utc::now();
    assert_eq!((r.event_type.as_str(), r.paused), ("PQ_A", false));
    assert_between("updated_at", r.updated_at, before, after);
    let mut got: Vec<TaskId> = ctx
        .store
        .claim_batch(&ctx.owner, &only_a, 10)
        .await
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    got.sort_unstable();
    assert_eq!(got, vec![a1, a2, e.id], "resumed: every due task claimed");
    assert_eq!(ctx.store.queues().await.unwrap(), vec![r.clone()]);

    let log = ctx.store.queue_log("PQ_A").await.unwrap();
    let entries: Vec<(&str, &str, &str, &str)> = log
        .iter()
        .map(|e| {
            (
                e.event_type.as_str(),
                e.action.as_str(),
                e.operator.as_str(),
                e.reason.as_str(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        vec![
            ("PQ_A", "pause", "ops", "deploy of mailer"),
            ("PQ_A", "resume", "ops", "mailer is back"),
        ]
    );
    assert_eq!(log[0].at, q.updated_at, "logged with the change");
    assert_eq!(log[1].at, r.updated_at, "logged with the change");
    assert!(ctx.store.queue_log("PQ_B").await.unwrap().is_empty());
}

/// A claim on the caller's transaction passes a paused type by, on every path: the
/// enqueue commits with its business row, the task pending and untouched.
pub async fn pause_keeps_a_claim_in_the_enqueue_transaction_off<H: Harness>(ctx: &Ctx<H>) {
    ctx.store
        .set_queue("PQ_TX", QueueChange::Pause, &audit("hold"))
        .await
        .unwrap();
    for path in TxPath::ALL {
        let claims = crate::StoreClaims::new(ctx.store.clone(), ctx.owner.clone());
        let e = ctx
            .enqueue_claimed_in_tx_via(
                path,
                &format!("{path}-pq"),
                NewTask::new("PQ_TX", format!("{path}-pq")),
                claims.clone(),
                true,
            )
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(claims.take(), vec![None], "{path}: not claimed");
        let t = ctx.task(e.id).await;
        assert_eq!(
            (t.status, t.attempts, t.lease, t.owner),
            (Status::Pending, 0, 0, None),
            "{path}"
        );
    }
}

/// A step's report asked to claim the next steps inserts them pending when the saga's
/// type is paused: nothing in `claimed`, the task pending with no attempt; resumed, a
/// batch claims it.
pub async fn pause_keeps_a_saga_report_from_claiming_the_next_step<H: Harness>(ctx: &Ctx<H>) {
    let def = SagaDef::builder("pq")
        .step(SagaStep::new("a"))
        .step(SagaStep::new("b"))
        .build()
        .unwrap();
    let saga = ctx
        .store
        .start_saga(&def.start("k1", &1).unwrap())
        .await
        .unwrap()
        .id;
    let types = vec![def.event_type().to_owned()];
    let a = ctx.store.claim_batch(&ctx.owner, &types, 10).await.unwrap();
    assert_eq!(a.len(), 1, "the first step's task");
    ctx.store
        .set_queue(def.event_type(), QueueChange::Pause, &audit("hold"))
        .await
        .unwrap();
    let done = StepOutcome::Done {
        output: "1".to_owned(),
    };
    let report =
        StepReport::new(a[0].lease(), saga, "k1", "a", done).claim_next(owner("next-owner"));
    let applied = ctx.store.saga_step(&def, &report).await.unwrap();
    assert_eq!(
        (applied.status, applied.tasks.len()),
        (SagaStatus::Running, 1)
    );
    assert!(applied.claimed.is_empty(), "a paused type is not claimed");
    let b = ctx.task(applied.tasks[0].id).await;
    assert_eq!(
        (b.biz_key.as_str(), b.status, b.attempts, b.owner),
        ("k1/b:a", Status::Pending, 0, None)
    );
    ctx.store
        .set_queue(def.event_type(), QueueChange::Resume, &audit("go"))
        .await
        .unwrap();
    let got = ctx.store.claim_batch(&ctx.owner, &types, 10).await.unwrap();
    assert_eq!(got.iter().map(|t| t.id).collect::<Vec<_>>(), vec![b.id]);
}

/// Bad input writes nothing: an invalid event type (to change or to read the log of)
/// or an invalid audit is `InvalidInput` naming `set_queue` / `queue_log`, and no queue
/// has a row after. A resume of a type never paused logs nothing and answers it
/// unpaused.
pub async fn set_queue_refuses_bad_input_and_writes_nothing<H: Harness>(ctx: &Ctx<H>) {
    let long = "x".repeat(65);
    for bad in ["", "has space", "semi;colon", long.as_str()] {
        let r = ctx
            .store
            .set_queue(bad, QueueChange::Pause, &audit("why"))
            .await;
        match r {
            Err(e) => assert_eq!(
                (e.kind(), e.operation()),
                (ErrorKind::InvalidInput, "set_queue"),
                "{bad:?}"
            ),
            Ok(q) => panic!("{bad:?} was accepted: {q:?}"),
        }
        let r = ctx.store.queue_log(bad).await;
        assert_kind(r, ErrorKind::InvalidInput, "event_type");
    }
    for bad in [Audit::new("", "why"), Audit::new("ops", "r".repeat(5000))] {
        let r = ctx.store.set_queue("PQ_OK", QueueChange::Pause, &bad).await;
        assert_kind(r, ErrorKind::InvalidInput, "");
    }
    assert!(
        ctx.store.queues().await.unwrap().is_empty(),
        "nothing written"
    );

    let q = ctx
        .store
        .set_queue("PQ_NEVER", QueueChange::Resume, &audit("just in case"))
        .await
        .unwrap();
    assert!(!q.paused);
    assert!(ctx.store.queue_log("PQ_NEVER").await.unwrap().is_empty());
    let id = ctx.enqueue("PQ_NEVER", "n1").await;
    assert_eq!(ctx.claim(id).await.status, Status::Running);
}
