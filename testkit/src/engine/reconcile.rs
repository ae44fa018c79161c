//! User-supplied reconcilers ([`EngineBuilder::reconciler`](backstop_core::EngineBuilder::reconciler)):
//! stuck business rows found on each tick, each finding resolved once by policy (pushed
//! forward, compensated, or left to an operator as an item parked "to reconcile"), an
//! open item never doubled, and an operator's reset resolving it again.

use backstop_core::{AuditEntry, Context, Finding, Reconciler, Resolution, TaskFilter};

use super::*;

/// The business rows: key → (state, since when).
#[derive(Clone, Default)]
struct Orders(Arc<Mutex<HashMap<String, (String, Instant)>>>);

impl Orders {
    fn set(&self, key: &str, state: &str, age: Duration) {
        let since = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
        self.0
            .lock()
            .unwrap()
            .insert(key.to_owned(), (state.to_owned(), since));
    }

    fn state(&self, key: &str) -> String {
        self.0.lock().unwrap()[key].0.clone()
    }
}

/// Finds orders `paying` for over a minute; pushes `o-fwd` forward (paid), compensates
/// `o-back` (refunded), leaves any other to an operator. Notes each resolution.
struct Payments {
    orders: Orders,
    resolved: Arc<Mutex<Vec<(String, &'static str)>>>,
}

#[backstop_core::async_trait]
impl Reconciler for Payments {
    async fn scan(&self, _cx: &Context) -> std::result::Result<Vec<Finding>, HandlerError> {
        let rows = self.orders.0.lock().unwrap().clone();
        let mut found = Vec::new();
        for (key, (state, since)) in rows {
            if state == "paying" && since.elapsed() > Duration::from_secs(60) {
                found.push(Finding::new(key, serde_json::json!({ "status": state }))?);
            }
        }
        Ok(found)
    }

    async fn resolve(
        &self,
        finding: &Finding,
        _cx: &Context,
    ) -> std::result::Result<Resolution, HandlerError> {
        // check again: it may have moved on since the scan
        if self.orders.state(finding.key()) != "paying" {
            self.note(finding.key(), &Resolution::Settled);
            return Ok(Resolution::Settled);
        }
        let resolution = match finding.key() {
            "o-fwd" => {
                self.orders.set("o-fwd", "paid", Duration::ZERO);
                Resolution::PushedForward("the provider confirmed it".into())
            }
            "o-back" => {
                self.orders.set("o-back", "refunded", Duration::ZERO);
                Resolution::Compensated("refunded".into())
            }
            _ => Resolution::Operator("the amount differs from the provider's".into()),
        };
        self.note(finding.key(), &resolution);
        Ok(resolution)
    }
}

impl Payments {
    fn note(&self, key: &str, resolution: &Resolution) {
        self.resolved
            .lock()
            .unwrap()
            .push((key.to_owned(), resolution.as_str()));
    }
}

/// Two engines run the reconciler every 100 ms over five orders: three stuck, one
/// paying but recent, one paid. The stuck ones are resolved once each — one pushed
/// forward, one compensated, one left to an operator, whose finding task parks as
/// failed (one attempt) with a last error "to reconcile:", the reason and the evidence.
/// Ticks go on: no effect is applied twice (a late finding of a fixed row is found
/// settled), the open item is neither doubled nor resolved again, the recent and paid
/// orders are never touched. The operator fixes the row and resets
/// the item: it is resolved again (settled) and succeeds, the reset in its audit log.
pub async fn engine_reconciler_resolves_stuck_rows_by_policy<H: Harness>(ctx: &Ctx<H>) {
    let orders = Orders::default();
    let hour = Duration::from_secs(3600);
    for key in ["o-fwd", "o-back", "o-op"] {
        orders.set(key, "paying", hour);
    }
    orders.set("o-fresh", "paying", Duration::ZERO);
    orders.set("o-done", "paid", hour);
    let resolved = Arc::new(Mutex::new(Vec::new()));
    let start = || {
        let payments = Payments {
            orders: orders.clone(),
            resolved: Arc::clone(&resolved),
        };
        Engine::builder(ctx.store.clone())
            .config(fast_config())
            .reconciler("payments", Duration::from_millis(100), payments, opts())
            .start()
            .unwrap()
    };
    let engines = [start(), start()];
    let items = TaskFilter::default()
        .event_type("reconcile:payments")
        .biz_key("o-op");
    eventually("the three stuck orders to be resolved", || async {
        let parked = ctx.store.list(&items).await.unwrap();
        orders.state("o-fwd") == "paid"
            && orders.state("o-back") == "refunded"
            && parked.iter().any(|t| t.status == Status::Failed)
    })
    .await;
    // a few more ticks
    tokio::time::sleep(Duration::from_millis(500)).await;
    // each effect once (a finding enqueued by a tick that scanned before the fix is
    // resolved again, and found settled); the open item is not resolved again
    let count = |key: &str, how: &str| {
        let all = resolved.lock().unwrap();
        all.iter().filter(|(k, r)| k == key && *r == how).count()
    };
    let calls = |key: &str| {
        resolved
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k == key)
            .count()
    };
    assert_eq!(count("o-fwd", "pushed_forward"), 1);
    assert_eq!(count("o-back", "compensated"), 1);
    assert_eq!((count("o-op", "operator"), calls("o-op")), (1, 1));
    assert_eq!((calls("o-fresh"), calls("o-done")), (0, 0));
    // one item; a finding task of a tick that raced the item's parking ends at once
    let tasks = ctx.store.list(&items).await.unwrap();
    let (parked, done): (Vec<_>, Vec<_>) = tasks.iter().partition(|t| t.status == Status::Failed);
    assert_eq!(parked.len(), 1, "one item, never doubled: {tasks:?}");
    assert!(
        done.iter().all(|t| t.status == Status::Succeeded),
        "{tasks:?}"
    );
    let item = parked[0];
    assert_eq!((item.status, item.attempts), (Status::Failed, 1));
    let error = item.last_error.clone().unwrap_or_default();
    assert!(
        error.starts_with(RetryPolicy::TO_RECONCILE)
            && error.contains("the amount differs")
            && error.contains(r#"{"status":"paying"}"#),
        "{error}"
    );
    // the operator fixes the row and runs the resolution again
    orders.set("o-op", "paid", Duration::ZERO);
    let audit = backstop_core::Audit::new("ops", "paid by hand at the provider");
    ctx.store.reset(item.id, &audit).await.unwrap();
    let t = wait_status(&ctx.store, item.id, Status::Succeeded).await;
    assert_eq!(t.attempts, 1, "a reset starts the count again");
    assert_eq!((calls("o-op"), count("o-op", "settled")), (2, 1));
    let log: Vec<AuditEntry> = ctx.store.audit_log(item.id).await.unwrap();
    assert_eq!(
        log.iter().map(|e| e.operator.as_str()).collect::<Vec<_>>(),
        ["ops"]
    );
    for engine in engines {
        engine.shutdown().await;
    }
    // a bad name refuses the engine
    let bad = Payments {
        orders: orders.clone(),
        resolved: Arc::clone(&resolved),
    };
    let e = Engine::builder(ctx.store.clone())
        .reconciler("no spaces", Duration::from_secs(1), bad, opts())
        .start()
        .err()
        .expect("a bad reconciler name is refused");
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
}
