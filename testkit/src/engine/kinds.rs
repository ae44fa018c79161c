//! Typed task kinds: the payload type carries its event type, policy and priority.

use backstop_core::{kind_fn, Priority, TaskKind};

use super::*;

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
struct Charge {
    order: u32,
    cents: u64,
}

impl TaskKind for Charge {
    // an event type no other case uses: the kinds a process knows are process-wide
    const EVENT_TYPE: &'static str = "KIND_CHARGE";
    fn biz_key(&self) -> String {
        format!("order-{}", self.order)
    }
    fn retry() -> RetryPolicy {
        RetryPolicy::fixed(7, Duration::from_millis(50))
    }
    fn priority(&self) -> Priority {
        if self.cents > 100_000 {
            Priority::HIGH
        } else {
            Priority::NORMAL
        }
    }
}

/// a kind is enqueued and handled by its type: the event type, business key, payload,
/// retry policy and priority come from the kind; the handler gets the decoded payload; a
/// task of the kind's event type built by name (in a business transaction) gets the
/// kind's policy, not the default; a payload that does not decode fails for good.
pub async fn engine_runs_typed_kinds_with_the_kinds_policy<H: Harness>(ctx: &Ctx<H>) {
    let seen: Arc<Mutex<Vec<Charge>>> = Arc::default();
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .kind(
            kind_fn({
                let seen = Arc::clone(&seen);
                move |charge: Charge, _cx: backstop_core::Context| {
                    let seen = Arc::clone(&seen);
                    async move {
                        seen.lock().unwrap().push(charge);
                        Ok::<_, HandlerError>(())
                    }
                }
            }),
            // the kind's policy replaces whatever the options say
            opts().retry(RetryPolicy::fixed(1, Duration::ZERO)),
        )
        .start()
        .unwrap();
    let big = Charge {
        order: 1,
        cents: 250_000,
    };
    let (e, run) = engine.enqueue(big.clone()).await.unwrap();
    assert_eq!(run, RunAhead::Started);
    let t = wait_status(&ctx.store, e.id, Status::Succeeded).await;
    assert_eq!(
        (t.event_type.as_str(), t.biz_key.as_str()),
        ("KIND_CHARGE", "order-1")
    );
    assert_eq!(t.retry, Charge::retry());
    assert_eq!(t.priority, Priority::HIGH);
    assert_eq!(seen.lock().unwrap().clone(), vec![big]);
    // the engine's own helper agrees with the kind
    assert_eq!(
        engine.task("KIND_CHARGE", "x").retry_policy(),
        Charge::retry()
    );

    // built by name in the caller's transaction: the kind's policy all the same
    let by_name = NewTask::new("KIND_CHARGE", "order-2").json(&Charge { order: 2, cents: 5 });
    let e = ctx.enqueue_in_tx("order-2", by_name, true).await.unwrap();
    let t = ctx.task(e.id).await;
    assert_eq!(t.retry, Charge::retry(), "not the default policy");
    assert_eq!(t.priority, Priority::NORMAL);
    engine.run_now(&e).await;
    wait_status(&ctx.store, e.id, Status::Succeeded).await;
    // an explicit policy still wins
    let explicit = RetryPolicy::fixed(2, Duration::from_secs(1));
    let e = ctx
        .store
        .enqueue(NewTask::new("KIND_CHARGE", "order-3").retry(explicit))
        .await
        .unwrap();
    assert_eq!(ctx.task(e.id).await.retry, explicit);

    // a payload that is not a Charge: failed for good, not retried 7 times
    let bad = ctx
        .store
        .enqueue(NewTask::new("KIND_CHARGE", "order-4").payload_raw(r#"{"order":"four"}"#))
        .await
        .unwrap();
    engine.run_now(&bad).await;
    let t = wait_status(&ctx.store, bad.id, Status::Failed).await;
    assert_eq!(t.attempts, 1);
    assert!(
        t.last_error
            .as_deref()
            .unwrap_or("")
            .contains("does not decode"),
        "{:?}",
        t.last_error
    );
    engine.shutdown().await;
}
