//! Store layers: a layered store keeps the contract, and the shipped layers do what they
//! say (`TracingLayer`'s spans, `FaultLayer`'s latency, errors and held answers).

use super::*;
use crate::spans::SpanRecorder;
use backstop_core::layers::{FaultLayer, Faults, Phase, TracingLayer};
use backstop_core::{Audit, Op};

/// How long a case waits for a held call to arrive.
const PATIENCE: Duration = Duration::from_secs(20);

/// every operation of a store behind the fault and tracing layers (no fault set) is the
/// store's: same answers, same rows.
pub async fn layered_store_forwards_every_operation<H: Harness>(ctx: &Ctx<H>) {
    let faults = Faults::new();
    let store = ctx
        .store
        .clone()
        .layer(FaultLayer::new(faults.clone()))
        .layer(TracingLayer::new());
    let audit = Audit::new("alice", "layers");
    let me = &ctx.owner;
    store.migrate().await.unwrap();
    store.migrate_to(1).await.unwrap(); // no downgrade: changes nothing
    let a = store.enqueue(NewTask::new("E", "a")).await.unwrap();
    assert!(a.created);
    let many = store
        .enqueue_many(&[NewTask::new("E", "b"), NewTask::new("E", "a")])
        .await
        .unwrap();
    let created: Vec<bool> = many.iter().map(|e| e.created).collect();
    assert_eq!(created, [true, false]);
    assert_eq!(many[1].id, a.id, "a duplicate of the first");
    let b = many[0].id;
    let ta = store.claim_by_id(a.id, me).await.unwrap().expect("claimed");
    assert_eq!((ta.status, ta.lease, ta.attempts), (Status::Running, 1, 1));
    let batch = store.claim_batch(me, &["E".into()], 10).await.unwrap();
    assert_eq!(batch.iter().map(|t| t.id).collect::<Vec<_>>(), [b]);
    assert_eq!(store.heartbeat(&[ta.lease()]).await.unwrap(), [true]);
    let marks = [
        Mark::success(ta.lease()),
        Mark::fail(batch[0].lease(), "no"),
    ];
    assert_eq!(store.mark(&marks).await.unwrap(), [true, true]);
    assert_eq!(store.get(a.id).await.unwrap(), Some(ctx.task(a.id).await));
    assert_eq!(ctx.task(a.id).await.status, Status::Succeeded);
    let failed = TaskFilter::default().status(Status::Failed);
    let listed = store.list(&failed).await.unwrap();
    assert_eq!(listed.iter().map(|t| t.id).collect::<Vec<_>>(), [b]);
    assert_eq!(store.count_matching(&failed).await.unwrap(), 1);
    assert_eq!(
        store.stats().await.unwrap(),
        ctx.store.stats().await.unwrap()
    );
    assert_eq!(
        store.backlog().await.unwrap(),
        ctx.store.backlog().await.unwrap()
    );
    let hour = Duration::from_secs(3600);
    assert_eq!(
        store.throughput(hour, hour).await.unwrap(),
        ctx.store.throughput(hour, hour).await.unwrap()
    );
    let edited = store
        .edit(
            b,
            &backstop_core::TaskEdit::default().payload("[7]"),
            &audit,
        )
        .await;
    assert_eq!(
        edited.unwrap_err().kind(),
        backstop_core::ErrorKind::Conflict,
        "b failed: not waiting"
    );
    let reset = store.manual_reset(b, hour).await.unwrap();
    assert_eq!(
        store
            .edit(
                b,
                &backstop_core::TaskEdit::default().payload("[7]"),
                &audit
            )
            .await
            .unwrap()
            .payload,
        "[7]"
    );
    assert_eq!((reset.status, reset.attempts), (Status::Pending, 0));
    let cancelled = store.cancel(b, &audit).await.unwrap();
    assert_eq!(cancelled.status, Status::Cancelled);
    assert_eq!(
        store.reset(b, &audit).await.unwrap().status,
        Status::Pending
    );
    let actions: Vec<String> = store
        .audit_log(b)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(actions, ["edit", "cancel", "reset"]);
    let again = ctx.claim(b).await;
    assert!(ctx.store.mark_fail(again.lease(), "no").await.unwrap());
    let matched = store.reset_matching(&failed, &audit).await.unwrap();
    assert_eq!(matched.iter().map(|t| t.id).collect::<Vec<_>>(), [b]);
    assert_eq!(store.delete(b, &audit).await.unwrap().id, b);
    assert_eq!(store.get(b).await.unwrap(), None);
    assert_eq!(store.recycle_dead(MINUTE, 10).await.unwrap().to_pending, 0);
    assert_eq!(
        store.purge_succeeded(hour, 10).await.unwrap(),
        0,
        "a is new"
    );
    assert_eq!(store.delete_succeeded(&[a.id]).await.unwrap(), 1);
    assert_eq!(store.get(a.id).await.unwrap(), None);
    let o = store
        .enqueue(NewTask::new("E", "o").order_key("key-1"))
        .await
        .unwrap();
    assert_eq!(store.order_keys(None, 10).await.unwrap(), ["key-1"]);
    assert_eq!(
        store.release_order_keys(&["key-1".into()]).await.unwrap(),
        Vec::<TaskId>::new(),
        "its task is pending already: nothing to promote"
    );
    assert_eq!(ctx.task(o.id).await.status, Status::Pending);
    store.register_event_types(&["L".into()]).await.unwrap();
    let types: Vec<String> = store
        .event_types()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.event_type)
        .collect();
    assert!(types.contains(&"L".to_owned()), "{types:?}");
    let q = store
        .set_queue("L", backstop_core::QueueChange::Pause, &audit)
        .await
        .unwrap();
    assert!(q.paused);
    assert_eq!(
        store.queues().await.unwrap(),
        ctx.store.queues().await.unwrap()
    );
    assert_eq!(store.queues().await.unwrap(), [q]);
    let log = store.queue_log("L").await.unwrap();
    assert_eq!(log, ctx.store.queue_log("L").await.unwrap());
    assert_eq!(log.len(), 1);
    assert_eq!(faults.held_so_far(), 0, "nothing was held");
}

/// an injected error answers before the call reaches the store: the error names the
/// operation with the injected kind (temporary when the kind is), and nothing is written;
/// healed, the same call goes through.
pub async fn fault_layer_error_writes_nothing<H: Harness>(ctx: &Ctx<H>) {
    let faults = Faults::new();
    let store = ctx.store.clone().layer(FaultLayer::new(faults.clone()));
    faults.fail(&[Op::Enqueue, Op::Mark], ErrorKind::Unavailable);
    let e = store.enqueue(NewTask::new("E", "k")).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.operation()),
        (ErrorKind::Unavailable, "enqueue")
    );
    assert!(e.is_temporary(), "{e}");
    assert_eq!(ctx.count_all().await, 0, "nothing was written");
    let id = ctx.enqueue("E", "k").await;
    let t = ctx.claim(id).await;
    let e = store.mark_success(t.lease()).await.unwrap_err();
    assert_eq!(e.operation(), "mark");
    assert_eq!(ctx.task(id).await, t, "the mark never reached the store");
    // other operations are untouched
    assert_eq!(store.get(id).await.unwrap(), Some(t.clone()));
    faults.heal(&[Op::Enqueue, Op::Mark]);
    assert!(store.mark_success(t.lease()).await.unwrap());
    assert_eq!(ctx.task(id).await.status, Status::Succeeded);
    faults.fail(&[Op::Get], ErrorKind::Config);
    let e = store.get(id).await.unwrap_err();
    assert!(!e.is_temporary(), "a Config fault is permanent: {e}");
    faults.clear(Op::ALL);
    assert!(store.get(id).await.unwrap().is_some());
}

/// a hold before the call keeps it from the store (nothing applied while it waits); a
/// hold after it keeps its answer back once the store applied and committed it (another
/// connection sees the change before the caller hears of it).
pub async fn fault_layer_holds_calls_and_answers<H: Harness>(ctx: &Ctx<H>) {
    let faults = Faults::new();
    let store = ctx.store.clone().layer(FaultLayer::new(faults.clone()));
    // the status another connection sees while the mark (or its answer) is held
    for (n, phase, held) in [
        (1, Phase::Before, Status::Running),
        (2, Phase::After, Status::Succeeded),
    ] {
        let id = ctx.enqueue("E", &format!("k{n}")).await;
        let t = ctx.claim(id).await;
        faults.clear(&[Op::Mark]);
        faults.hold(&[Op::Mark], phase);
        let late = tokio::spawn({
            let store = store.clone();
            async move { store.mark_success(t.lease()).await }
        });
        tokio::time::timeout(PATIENCE, faults.held(n))
            .await
            .unwrap_or_else(|_| panic!("{phase:?}: the mark reached the hold"));
        assert_eq!(ctx.task(id).await.status, held, "{phase:?}, held");
        assert!(!late.is_finished(), "{phase:?}: the caller waits");
        faults.release();
        assert!(late.await.unwrap().unwrap(), "{phase:?}: applied, answered");
        assert_eq!(ctx.task(id).await.status, Status::Succeeded, "{phase:?}");
    }
}

/// injected latency: a call takes at least the delay, before or after the store, and
/// answers what the store answers.
pub async fn fault_layer_delays_calls<H: Harness>(ctx: &Ctx<H>) {
    let faults = Faults::new();
    let store = ctx.store.clone().layer(FaultLayer::new(faults.clone()));
    let id = ctx.enqueue("E", "k").await;
    let delay = Duration::from_millis(150);
    for phase in [Phase::Before, Phase::After] {
        faults.clear(&[Op::Get]);
        faults.delay(&[Op::Get], phase, delay);
        let t0 = std::time::Instant::now();
        let got = store.get(id).await.unwrap();
        assert!(t0.elapsed() >= delay, "{phase:?}: {:?}", t0.elapsed());
        assert_eq!(got, Some(ctx.task(id).await), "{phase:?}");
    }
}

/// the tracing layer: one span per operation (target `backstop::store`, name `store`)
/// with its fields, and the error of a failed one recorded inside its span.
pub async fn tracing_layer_spans_each_operation<H: Harness>(ctx: &Ctx<H>) {
    let faults = Faults::new();
    let store = ctx
        .store
        .clone()
        .layer(FaultLayer::new(faults.clone()))
        .layer(TracingLayer::new());
    let spans = SpanRecorder::on_this_thread();
    let e = store.enqueue(NewTask::new("SEND", "k")).await.unwrap();
    let t = store.claim_by_id(e.id, &ctx.owner).await.unwrap().unwrap();
    faults.fail(&[Op::Mark], ErrorKind::Unavailable);
    assert!(store.mark_success(t.lease()).await.is_err());
    let claims = store.claim_batch(&ctx.owner, &["SEND".into()], 7).await;
    assert!(claims.unwrap().is_empty());
    let recorded = spans.spans("backstop::store");
    let ops: Vec<&str> = recorded.iter().map(|s| s.fields["op"].as_str()).collect();
    assert_eq!(ops, ["enqueue", "claim_by_id", "mark", "claim_batch"]);
    assert!(recorded.iter().all(|s| s.name == "store"));
    assert_eq!(recorded[0].fields["event_type"], "SEND");
    assert_eq!(recorded[1].fields["task_id"], e.id.to_string());
    assert_eq!(recorded[2].fields["count"], "1");
    let failure = recorded[2].events_of("backstop::store");
    let failure = failure.first().expect("the failure's event");
    assert_eq!(failure["kind"], "Unavailable");
    assert!(failure["error"].contains("FaultLayer"), "{failure:?}");
    assert!(
        recorded[0].events_of("backstop::store").is_empty(),
        "no event for a success"
    );
    assert_eq!(
        (
            recorded[3].fields["count"].as_str(),
            recorded[3].fields["limit"].as_str()
        ),
        ("1", "7")
    );
}
