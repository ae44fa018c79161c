//! TCC transactions run by the engine ([`SagaDef::tcc`](backstop_core::SagaDef::tcc)):
//! every branch's try, then every branch's confirm; a failed try cancels every branch.
//! The branches are participants guarding their writes with the barrier, served by the
//! case along every [`TxPath`] in turn, so the barrier's records explain
//! each cancel: a cancel of a try that never committed is empty, and a try arriving
//! after it hangs.

use backstop_core::{
    Barrier, BranchCall, BranchOp, Saga, SagaDef, SagaStatus, SagaStep, SagaSteps, StepContext,
    StepError, StepState, TaskFilter,
};
use tokio::sync::{mpsc, oneshot};

use super::*;
use crate::TxPath;

/// A participant's call: the barrier's call, whether its transaction commits (a refused
/// try rolls back), and where the verdict goes.
type Request = (BranchCall, bool, oneshot::Sender<Barrier>);

/// `(branch, op, committed, verdict)` of each call the participant served, in order.
type Served = Vec<(String, BranchOp, bool, Barrier)>;

/// debit ∥ credit ∥ fee; tries retried 3 times, confirms and cancels 5 times, 20 ms
/// apart.
fn transfer() -> SagaDef {
    let fast = |n| RetryPolicy::fixed(n, Duration::from_millis(20));
    let branch = |name: &str| {
        SagaStep::new(name)
            .retry(fast(3))
            .compensation_retry(fast(5))
    };
    SagaDef::tcc("transfer")
        .branch(branch("debit"))
        .branch(branch("credit"))
        .branch(branch("fee"))
        .build()
        .unwrap()
}

/// Ask the participant for the barrier's verdict on the step's call.
async fn call(
    requests: &mpsc::UnboundedSender<Request>,
    cx: &StepContext,
    commit: bool,
) -> std::result::Result<Barrier, StepError> {
    let (reply, verdict) = oneshot::channel();
    requests
        .send((cx.branch()?, commit, reply))
        .map_err(|_| std::io::Error::other("test gone"))?;
    Ok(verdict
        .await
        .map_err(|_| std::io::Error::other("test gone"))?)
}

/// The transfer's code: each try holds (output `"held-<branch>"`); branch `refuse`'s try
/// refuses on a transaction that rolls back; branch `broken`'s try fails technically
/// without reaching the participant; the first `confirm_refusals` confirms refuse (and
/// are retried); a confirm reads its try's output.
fn transfer_steps(
    requests: &mpsc::UnboundedSender<Request>,
    refuse: Option<&'static str>,
    broken: Option<&'static str>,
    confirm_refusals: usize,
) -> SagaSteps {
    let refusals = Arc::new(AtomicUsize::new(confirm_refusals));
    let mut steps = SagaSteps::new();
    for branch in ["debit", "credit", "fee"] {
        let (r1, r2, r3) = (requests.clone(), requests.clone(), requests.clone());
        let refusals = Arc::clone(&refusals);
        steps = steps.tcc(
            branch,
            move |cx| {
                let requests = r1.clone();
                async move {
                    if broken == Some(branch) {
                        return Err(std::io::Error::other("connection reset").into());
                    }
                    let refused = refuse == Some(branch);
                    call(&requests, &cx, !refused).await?;
                    if refused {
                        return Err(StepError::refuse("insufficient funds"));
                    }
                    Ok(format!("held-{branch}"))
                }
            },
            move |cx| {
                let (requests, refusals) = (r2.clone(), Arc::clone(&refusals));
                async move {
                    let held: String = cx.output(branch).await?;
                    assert_eq!(held, format!("held-{branch}"), "a confirm reads its try");
                    let refuse = refusals
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                    if refuse {
                        return Err(StepError::refuse("not yet"));
                    }
                    call(&requests, &cx, true).await?;
                    Ok(())
                }
            },
            move |cx| {
                let requests = r3.clone();
                async move {
                    call(&requests, &cx, true).await?;
                    Ok(())
                }
            },
        );
    }
    steps
}

/// Serve the participant's calls along every path in turn until transfer `key` is in
/// `status`: the saga and what was served.
async fn serve_until<H: Harness>(
    ctx: &Ctx<H>,
    serve: &mut mpsc::UnboundedReceiver<Request>,
    key: &str,
    status: SagaStatus,
) -> (Saga, Served) {
    let deadline = Instant::now() + PATIENCE;
    let mut served = Served::new();
    loop {
        tokio::select! {
            Some((call, commit, reply)) = serve.recv() => {
                let path = TxPath::ALL[served.len() % TxPath::ALL.len()];
                let row = format!("{key}-{}-{}-{}", call.branch_id(), call.op(), served.len());
                let verdict = ctx.barrier_via(path, &row, call.clone(), commit).await.unwrap();
                served.push((call.branch_id().to_owned(), call.op(), commit, verdict));
                let _ = reply.send(verdict);
            }
            _ = tokio::time::sleep(Duration::from_millis(10)) => {
                let saga = ctx.store.saga("transfer", key).await.unwrap().unwrap();
                if saga.status == status {
                    return (saga, served);
                }
                assert!(
                    Instant::now() < deadline,
                    "timed out waiting for transfer {key} to be {status}: {saga:?}, served {served:?}"
                );
            }
        }
    }
}

/// The verdicts served for `branch`'s `op`, committed or not.
fn verdicts(served: &Served, branch: &str, op: BranchOp) -> Vec<(bool, Barrier)> {
    served
        .iter()
        .filter(|(b, o, ..)| b == branch && *o == op)
        .map(|(.., commit, v)| (*commit, *v))
        .collect()
}

fn engine<S: TaskStore + Clone>(store: S, steps: SagaSteps) -> Engine<S> {
    Engine::builder(store)
        .config(fast_config())
        .saga(transfer(), steps, opts())
        .start()
        .unwrap()
}

/// Every try succeeds, then every confirm: each try and confirm reaches the participant
/// once (the barrier runs it), every confirm after every try (the join), no cancel. A
/// confirm that refuses is retried until it succeeds (two refusals: its task succeeds on
/// its third attempt). The transaction ends completed at the confirm group; every step
/// row is done. Code without a branch's confirm is refused when the engine starts.
pub async fn engine_tcc_confirms_every_branch_after_every_try<H: Harness>(ctx: &Ctx<H>) {
    let (requests, mut serve) = mpsc::unbounded_channel::<Request>();
    let incomplete = SagaSteps::new().action("debit", |_cx| async { Ok(()) });
    let e = Engine::builder(ctx.store.clone())
        .saga(transfer(), incomplete, opts())
        .start()
        .err()
        .expect("a transfer without its confirms and cancels is refused");
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    let engine = engine(ctx.store.clone(), transfer_steps(&requests, None, None, 2));
    ctx.store
        .start_saga(&transfer().start("t-1", &100).unwrap())
        .await
        .unwrap();
    let (saga, served) = serve_until(ctx, &mut serve, "t-1", SagaStatus::Completed).await;
    engine.shutdown().await;
    assert_eq!((saga.group, saga.reason), (1, None));
    for branch in ["debit", "credit", "fee"] {
        assert_eq!(
            verdicts(&served, branch, BranchOp::Try),
            [(true, Barrier::Run)],
            "{branch}"
        );
        assert_eq!(
            verdicts(&served, branch, BranchOp::Confirm),
            [(true, Barrier::Run)],
            "{branch}"
        );
        assert!(verdicts(&served, branch, BranchOp::Cancel).is_empty());
    }
    let last_try = served.iter().rposition(|s| s.1 == BranchOp::Try).unwrap();
    let first_confirm = served
        .iter()
        .position(|s| s.1 == BranchOp::Confirm)
        .unwrap();
    assert!(
        last_try < first_confirm,
        "confirms wait for every try: {served:?}"
    );
    let steps = ctx.store.saga_steps(saga.id).await.unwrap();
    assert_eq!(steps.len(), 6, "{steps:?}");
    assert!(
        steps.iter().all(|s| s.state == StepState::Done),
        "{steps:?}"
    );
    let confirms: Vec<u32> = ctx
        .store
        .list(&TaskFilter::default().event_type("saga:transfer").limit(100))
        .await
        .unwrap()
        .into_iter()
        .filter(|t| t.biz_key.ends_with(".confirm:a"))
        .map(|t| {
            assert_eq!(t.status, Status::Succeeded, "{t:?}");
            t.attempts
        })
        .collect();
    assert_eq!(confirms.len(), 3);
    assert_eq!(
        confirms.iter().sum::<u32>(),
        5,
        "two refusals retried: {confirms:?}"
    );
    let records = ctx
        .store
        .barrier_records("saga:transfer:t-1")
        .await
        .unwrap();
    assert_eq!(
        records.len(),
        6,
        "a try and a confirm per branch: {records:?}"
    );
}

/// Transfer `key` run by an engine with `steps` until it is compensated: the saga,
/// what was served, and its tasks by business key.
async fn cancelled<H: Harness>(
    ctx: &Ctx<H>,
    key: &str,
    refuse: Option<&'static str>,
    broken: Option<&'static str>,
) -> (Saga, Served, HashMap<String, (Status, u32)>) {
    let (requests, mut serve) = mpsc::unbounded_channel::<Request>();
    let engine = engine(
        ctx.store.clone(),
        transfer_steps(&requests, refuse, broken, 0),
    );
    ctx.store
        .start_saga(&transfer().start(key, &100).unwrap())
        .await
        .unwrap();
    let (saga, served) = serve_until(ctx, &mut serve, key, SagaStatus::Compensated).await;
    engine.shutdown().await;
    let tasks: HashMap<String, (Status, u32)> = ctx
        .store
        .list(&TaskFilter::default().event_type("saga:transfer").limit(100))
        .await
        .unwrap()
        .into_iter()
        .filter(|t| t.biz_key.starts_with(&format!("{key}/")))
        .map(|t| (t.biz_key, (t.status, t.attempts)))
        .collect();
    // every branch is cancelled once, and the barrier explains each cancel: it undoes a
    // try that committed, and is empty for a try that did not (refused, failed, or not
    // run because the transaction was cancelling already); no confirm runs
    for branch in ["debit", "credit", "fee"] {
        let tried = verdicts(&served, branch, BranchOp::Try).contains(&(true, Barrier::Run));
        let undo = match tried {
            true => Barrier::Run,
            false => Barrier::EmptyCompensation,
        };
        assert_eq!(
            verdicts(&served, branch, BranchOp::Cancel),
            [(true, undo)],
            "{key} {branch}: {served:?}"
        );
        let task = tasks.get(&format!("{key}/{branch}:c"));
        assert_eq!(task, Some(&(Status::Succeeded, 1)), "{key} {branch}");
    }
    assert!(
        served.iter().all(|s| s.1 != BranchOp::Confirm),
        "{served:?}"
    );
    assert!(!tasks.keys().any(|k| k.contains(".confirm")), "{tasks:?}");
    let steps = ctx.store.saga_steps(saga.id).await.unwrap();
    assert_eq!(steps.len(), 3, "no confirm step ran: {steps:?}");
    assert!(
        steps.iter().all(|s| s.state == StepState::Compensated),
        "{steps:?}"
    );
    (saga, served, tasks)
}

/// A failed try cancels every branch, whatever its try did. Credit's try refuses (its
/// transaction rolls back): the transfer is cancelled with its reason, credit's cancel
/// is empty, and a branch whose try committed is undone. Fee's try fails technically
/// until its attempts run out (it never reaches the participant): its task fails after
/// 3 attempts and the transfer is cancelled just the same (not parked: a try's outcome
/// is unknown, so it is cancelled), fee's cancel empty. A try of fee arriving after its
/// cancel hangs: refused by the barrier, on every path.
pub async fn engine_tcc_failed_try_cancels_every_branch<H: Harness>(ctx: &Ctx<H>) {
    let (saga, served, _) = cancelled(ctx, "t-2", Some("credit"), None).await;
    assert_eq!(saga.reason.as_deref(), Some("insufficient funds"));
    assert_eq!(
        verdicts(&served, "credit", BranchOp::Try),
        [(false, Barrier::Run)]
    );
    let (saga, served, tasks) = cancelled(ctx, "t-3", None, Some("fee")).await;
    assert_eq!(
        saga.reason.as_deref(),
        Some("the try of branch \"fee\" ran out of attempts: connection reset")
    );
    assert!(verdicts(&served, "fee", BranchOp::Try).is_empty());
    assert_eq!(tasks["t-3/fee:a"], (Status::Failed, 3));
    // the late try hangs
    let late = BranchCall::new("saga:transfer:t-3", "fee", BranchOp::Try).unwrap();
    for path in TxPath::ALL {
        let row = format!("t-3-late-{path}");
        let v = ctx
            .barrier_via(path, &row, late.clone(), true)
            .await
            .unwrap();
        assert_eq!(v, Barrier::Hanging, "{path}");
    }
}
