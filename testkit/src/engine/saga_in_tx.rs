//! A saga step that reports on its own transaction ([`StepContext::report`],
//! [`StepContext::reported`]): its business writes and its report commit together,
//! along every [`TxPath`], and the runner does not report it again.

use backstop_core::{
    SagaDef, SagaStatus, SagaStep, SagaSteps, StepApplied, StepContext, StepState, TaskFilter,
};
use tokio::sync::{mpsc, oneshot};

use super::*;
use crate::TxPath;

/// A step's report for the case to write on a transaction with a business row:
/// whether to commit, and where the answer goes.
type Request = (
    backstop_core::StepReport,
    bool,
    oneshot::Sender<backstop_core::Result<StepApplied>>,
);

/// `debit` (compensated), then `credit`; quick retries.
fn ledger() -> SagaDef {
    let fast = RetryPolicy::fixed(3, Duration::from_millis(20));
    SagaDef::builder("ledger")
        .step(SagaStep::new("debit").compensated().retry(fast))
        .step(SagaStep::new("credit").retry(fast))
        .build()
        .unwrap()
}

/// Each step reports on the case's transaction; `debit`'s first attempt rolls its
/// transaction back and fails, so its second commits.
fn steps(requests: &mpsc::UnboundedSender<Request>) -> SagaSteps {
    let first = Arc::new(AtomicBool::new(true));
    let step = |name: &'static str| {
        let (requests, first) = (requests.clone(), Arc::clone(&first));
        move |cx: StepContext| {
            let (requests, first) = (requests.clone(), Arc::clone(&first));
            async move {
                let output = format!("{name}-{}", cx.context().task().attempts);
                let report = cx.report(&output)?;
                let fail = name == "debit" && first.swap(false, Ordering::SeqCst);
                let (reply, answer) = oneshot::channel();
                requests
                    .send((report, !fail, reply))
                    .map_err(|_| std::io::Error::other("test gone"))?;
                let applied = answer
                    .await
                    .map_err(|_| std::io::Error::other("test gone"))??;
                if fail {
                    return Err(std::io::Error::other("the transaction rolled back").into());
                }
                cx.reported(applied);
                Ok(output)
            }
        }
    };
    SagaSteps::new()
        .action("debit", step("debit"))
        .compensation("debit", |_cx| async { Ok(()) })
        .action("credit", step("credit"))
}

/// Both steps report on their own transactions, the paths taken in turn. Debit's first
/// attempt rolls back (its business row and report with it) and fails: it runs again,
/// and its second attempt's report commits with its business row. The saga completes
/// with one report per step (version 2: the runner reported nothing itself), each
/// step's output the one its committed attempt wrote; each business row of a committed
/// attempt exists, the rolled-back one does not; debit's task succeeded on its second
/// attempt, credit's on its first.
pub async fn engine_saga_step_reports_on_its_own_transaction<H: Harness>(ctx: &Ctx<H>) {
    let def = ledger();
    let (requests, mut serve) = mpsc::unbounded_channel::<Request>();
    let engine = Engine::builder(ctx.store.clone())
        .config(fast_config())
        .saga(def.clone(), steps(&requests), opts())
        .start()
        .unwrap();
    engine
        .start_saga(&def.start("l-1", &10).unwrap())
        .await
        .unwrap();
    let shared = Arc::new(def.clone());
    let mut served = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    let saga = loop {
        tokio::select! {
            Some((report, commit, reply)) = serve.recv() => {
                let path = TxPath::ALL[served.len() % TxPath::ALL.len()];
                let row = format!("l-1-{}-{}", report.step, served.len());
                let applied = ctx
                    .saga_step_via(path, &row, Arc::clone(&shared), report.clone(), commit)
                    .await;
                served.push((row, commit));
                let _ = reply.send(applied);
            }
            _ = tokio::time::sleep(Duration::from_millis(10)) => {
                let saga = ctx.store.saga("ledger", "l-1").await.unwrap().unwrap();
                if saga.status == SagaStatus::Completed {
                    break saga;
                }
                assert!(Instant::now() < deadline, "timed out: {saga:?} {served:?}");
            }
        }
    };
    engine.shutdown().await;
    assert_eq!((saga.version, saga.group), (2, 1), "one report per step");
    assert_eq!(served.len(), 3, "{served:?}");
    for (row, commit) in &served {
        assert_eq!(
            ctx.harness.business_row_exists(&ctx.db, row).await,
            *commit,
            "{row}"
        );
    }
    let steps = ctx.store.saga_steps(saga.id).await.unwrap();
    let rows: Vec<(&str, StepState, Option<&str>)> = steps
        .iter()
        .map(|r| (r.step.as_str(), r.state, r.output.as_deref()))
        .collect();
    assert_eq!(
        rows,
        [
            ("debit", StepState::Done, Some("\"debit-2\"")),
            ("credit", StepState::Done, Some("\"credit-1\"")),
        ]
    );
    let tasks: HashMap<String, (Status, u32)> = ctx
        .store
        .list(&TaskFilter::default().event_type("saga:ledger").limit(100))
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.biz_key, (t.status, t.attempts)))
        .collect();
    assert_eq!(tasks["l-1/debit:a"], (Status::Succeeded, 2));
    assert_eq!(tasks["l-1/credit:a"], (Status::Succeeded, 1));
}
