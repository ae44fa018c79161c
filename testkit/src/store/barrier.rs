//! The participant barrier ([`Transactional::barrier_in`](backstop_core::Transactional::barrier_in)) along every [`TxPath`]: each
//! call of a branch runs once, a compensation without its forward call is empty and
//! refuses that call when it arrives late, and racing calls of one branch on two
//! connections end in exactly one legal outcome.

use backstop_core::{Barrier, BranchCall, BranchOp, TaskStore};
use futures_util::future::join_all;

use std::time::Duration;

use crate::store::{HOUR, MINUTE};
use crate::{within, Ctx, Harness, TxPath};

fn call(gid: &str, branch: &str, op: BranchOp) -> BranchCall {
    BranchCall::new(gid, branch, op).unwrap()
}

/// The verdicts of `ops` on branch `branch` of `gid`, each on its own committed
/// transaction along `path`.
async fn verdicts<H: Harness>(
    ctx: &Ctx<H>,
    path: TxPath,
    gid: &str,
    branch: &str,
    ops: &[BranchOp],
) -> Vec<Barrier> {
    let mut out = Vec::new();
    // business rows are unique: a case may ask a branch again
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    for op in ops {
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let row = format!("{gid}-{branch}-{op}-{n}");
        let v = ctx
            .barrier_via(path, &row, call(gid, branch, *op), true)
            .await
            .unwrap_or_else(|e| panic!("{path} {gid}/{branch} {op}: {e}"));
        assert!(
            ctx.harness.business_row_exists(&ctx.db, &row).await,
            "{path}: the call's transaction commits whatever the verdict"
        );
        out.push(v);
    }
    out
}

/// A saga step: the action runs once, its compensation runs once, and a late copy of
/// the action after its compensation is a duplicate, not a second run. A compensation
/// with no action before it is empty, and the action arriving after it hangs (refused,
/// every time). TCC: try and confirm run once each; a cancel after a try runs, a cancel
/// before it is empty and the try then hangs. Branches and global transactions are
/// independent of each other.
pub async fn barrier_runs_each_call_once_refuses_late_calls<H: Harness>(ctx: &Ctx<H>) {
    use Barrier::{Duplicate, EmptyCompensation, Hanging, Run};
    use BranchOp::{Action, Cancel, Compensate, Confirm, Try};
    for path in TxPath::ALL {
        let started = chrono::Utc::now();
        let gid = format!("{path}-saga");
        assert_eq!(
            verdicts(
                ctx,
                path,
                &gid,
                "stock",
                &[Action, Action, Compensate, Compensate, Action]
            )
            .await,
            [Run, Duplicate, Run, Duplicate, Duplicate],
            "{path}: an action, its compensation, and their second deliveries"
        );
        assert_eq!(
            verdicts(
                ctx,
                path,
                &gid,
                "coupon",
                &[Compensate, Compensate, Action, Action]
            )
            .await,
            [EmptyCompensation, Duplicate, Hanging, Hanging],
            "{path}: a compensation before its action"
        );
        assert_eq!(
            verdicts(ctx, path, &gid, "pay", &[Try, Confirm, Confirm, Try]).await,
            [Run, Run, Duplicate, Duplicate],
            "{path}: try then confirm"
        );
        assert_eq!(
            verdicts(ctx, path, &gid, "ship", &[Try, Cancel, Cancel, Try]).await,
            [Run, Run, Duplicate, Duplicate],
            "{path}: try then cancel"
        );
        assert_eq!(
            verdicts(ctx, path, &gid, "mail", &[Cancel, Try, Cancel]).await,
            [EmptyCompensation, Hanging, Duplicate],
            "{path}: a cancel before its try"
        );
        // the records: each operation's row once, written by itself or by the
        // compensation that came first
        let records = ctx.store.barrier_records(&gid).await.unwrap();
        for r in &records {
            assert_eq!(r.gid, gid);
            crate::assert_between("created_at", r.created_at, started, chrono::Utc::now());
        }
        let mut rows: Vec<_> = records
            .iter()
            .map(|r| (r.branch_id.as_str(), r.op, r.reason))
            .collect();
        rows.sort_by_key(|(b, op, _)| (b.to_string(), op.as_str()));
        assert_eq!(
            rows,
            [
                ("coupon", Action, Compensate),
                ("coupon", Compensate, Compensate),
                ("mail", Cancel, Cancel),
                ("mail", Try, Cancel),
                ("pay", Confirm, Confirm),
                ("pay", Try, Try),
                ("ship", Cancel, Cancel),
                ("ship", Try, Try),
                ("stock", Action, Action),
                ("stock", Compensate, Compensate),
            ],
            "{path}"
        );
        // the same branch of another global transaction, and a gid differing in case
        for other in [format!("{path}-saga2"), format!("{path}-SAGA")] {
            assert_eq!(
                verdicts(ctx, path, &other, "coupon", &[Action]).await,
                [Run],
                "{path}: {other} is another global transaction"
            );
        }
    }
}

/// A call on a transaction that rolls back leaves no record: the barrier answers, but
/// the same call later runs again, and a compensation rolled back does not make its
/// action hang.
pub async fn barrier_records_roll_back_with_the_transaction<H: Harness>(ctx: &Ctx<H>) {
    for path in TxPath::ALL {
        let gid = format!("{path}-rb");
        for (branch, op, answer) in [
            ("a", BranchOp::Action, Barrier::Run),
            ("b", BranchOp::Compensate, Barrier::EmptyCompensation),
            ("c", BranchOp::Cancel, Barrier::EmptyCompensation),
        ] {
            let row = format!("{gid}-{branch}-rolled-back");
            let v = ctx
                .barrier_via(path, &row, call(&gid, branch, op), false)
                .await
                .unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(v, answer, "{path} {branch}: answered before the rollback");
            assert!(!ctx.harness.business_row_exists(&ctx.db, &row).await);
            let forward = op.undoes().unwrap_or(op);
            assert_eq!(
                verdicts(ctx, path, &gid, branch, &[forward]).await,
                [Barrier::Run],
                "{path} {branch}: nothing was recorded"
            );
        }
    }
}

/// Ids are stored exactly as given: the longest ids (multi-byte characters up to the
/// byte limit) run once, and ids differing only in their last character are other
/// branches.
pub async fn barrier_keeps_the_longest_ids_exactly<H: Harness>(ctx: &Ctx<H>) {
    let max = backstop_core::limits::MAX_BRANCH_ID_BYTES;
    let long = "é".repeat(max / 2);
    let mut near = "é".repeat(max / 2 - 1);
    near.push_str("ee");
    assert_eq!((long.len(), near.len()), (max, max));
    for (n, (gid, branch)) in [(&long, &long), (&near, &long), (&long, &near)]
        .into_iter()
        .enumerate()
    {
        let c = call(gid, branch, BranchOp::Action);
        for (i, want) in [Barrier::Run, Barrier::Duplicate].into_iter().enumerate() {
            let row = format!("long-{n}-{i}");
            let v = ctx
                .barrier_via(TxPath::Native, &row, c.clone(), true)
                .await
                .unwrap();
            assert_eq!(
                v, want,
                "ids {n} (gid {gid:?}, branch {branch:?}), call {i}"
            );
        }
    }
}

/// A try racing its cancel, on two connections, for many branches at once (the paths
/// mixed): each branch ends in exactly one legal outcome — the try ran and the cancel
/// undoes it, or the cancel was empty and the try hangs — and the barrier's later
/// answers agree with it. Two deliveries of one action racing: exactly one runs.
pub async fn barrier_racing_calls_have_one_legal_outcome<H: Harness>(ctx: &Ctx<H>) {
    const BRANCHES: usize = 12;
    let paths = TxPath::ALL;
    let gid = "race";
    let racers = (0..BRANCHES).flat_map(|i| {
        let branch = format!("b{i}");
        let (p, q) = (paths[i % 3], paths[(i + 1) % 3]);
        // half the branches start the cancel first
        let ops = if i % 2 == 0 {
            [(p, BranchOp::Try), (q, BranchOp::Cancel)]
        } else {
            [(q, BranchOp::Cancel), (p, BranchOp::Try)]
        };
        ops.map(|(path, op)| {
            let (branch, row) = (branch.clone(), format!("race-{i}-{op}"));
            async move {
                let v = ctx
                    .barrier_via(path, &row, call(gid, &branch, op), true)
                    .await;
                (
                    op,
                    v.unwrap_or_else(|e| panic!("{path} {branch} {op}: {e}")),
                )
            }
        })
    });
    let answers = within("the racing calls", join_all(racers)).await;
    let (mut ran, mut empty) = (0, 0);
    for (i, pair) in answers.chunks(2).enumerate() {
        let get = |op| {
            pair.iter()
                .find(|(o, _)| *o == op)
                .map(|(_, v)| *v)
                .unwrap()
        };
        let outcome = (get(BranchOp::Try), get(BranchOp::Cancel));
        let branch = format!("b{i}");
        // what a later try and cancel of the branch are told
        let later = match outcome {
            (Barrier::Run, Barrier::Run) => {
                ran += 1;
                [Barrier::Duplicate, Barrier::Duplicate]
            }
            (Barrier::Hanging, Barrier::EmptyCompensation) => {
                empty += 1;
                [Barrier::Hanging, Barrier::Duplicate]
            }
            other => panic!("{branch}: try and cancel answered {other:?}, not a legal outcome"),
        };
        let again = [BranchOp::Try, BranchOp::Cancel];
        assert_eq!(
            verdicts(ctx, TxPath::Native, gid, &branch, &again).await,
            later,
            "{branch}: after {outcome:?}"
        );
    }
    println!("{BRANCHES} races of a try and its cancel: {ran} tries ran first, {empty} cancels were empty");

    // two deliveries of one action at once
    let dup = (0..BRANCHES).flat_map(|i| {
        [0, 1].map(|n| {
            let path = paths[(i + n) % 3];
            async move {
                let row = format!("dup-{i}-{n}");
                ctx.barrier_via(
                    path,
                    &row,
                    call("dup", &format!("b{i}"), BranchOp::Action),
                    true,
                )
                .await
                .unwrap_or_else(|e| panic!("{path}: {e}"))
            }
        })
    });
    let answers = within("the racing deliveries", join_all(dup)).await;
    for (i, pair) in answers.chunks(2).enumerate() {
        let runs = pair.iter().filter(|v| **v == Barrier::Run).count();
        let dups = pair.iter().filter(|v| **v == Barrier::Duplicate).count();
        assert_eq!((runs, dups), (1, 1), "b{i}: {pair:?}");
    }
}

/// `purge_barrier` deletes the records written more than `older_than` ago, oldest first
/// and at most `limit`: a purged call runs again, a record younger than the age stays,
/// `limit` 0 deletes nothing, and an age or limit out of range is refused.
pub async fn barrier_purge_deletes_old_records_oldest_first<H: Harness>(ctx: &Ctx<H>) {
    use backstop_core::limits::{MAX_BATCH, MAX_INTERVAL};
    use backstop_core::ErrorKind;
    use BranchOp::{Action, Compensate};
    assert!(ctx.store.barrier_records("purge").await.unwrap().is_empty());
    let e = ctx.store.barrier_records("").await.unwrap_err();
    assert_eq!(
        (e.kind(), e.operation()),
        (ErrorKind::InvalidInput, "barrier_records")
    );
    let path = TxPath::Native;
    // every record so far an hour older: p1 is 4 h old, p2 3 h, p3 2 h, p4's two 1 h
    let age_all = || {
        ctx.harness
            .backdate_rows(&ctx.db, "backstop_task_barrier", "created_at", HOUR)
    };
    for branch in ["p1", "p2", "p3"] {
        assert_eq!(
            verdicts(ctx, path, "purge", branch, &[Action]).await,
            [Barrier::Run]
        );
        age_all().await;
    }
    // two records: the action's row (reason compensate) and its own
    assert_eq!(
        verdicts(ctx, path, "purge", "p4", &[Compensate]).await,
        [Barrier::EmptyCompensation]
    );
    age_all().await;
    // and one written now
    assert_eq!(
        verdicts(ctx, path, "purge", "p5", &[Action]).await,
        [Barrier::Run]
    );
    let store = &ctx.store;
    assert_eq!(store.purge_barrier(5 * HOUR, 100).await.unwrap(), 0);
    assert_eq!(store.purge_barrier(MINUTE, 0).await.unwrap(), 0);
    for (older_than, limit) in [
        (MAX_INTERVAL + Duration::from_secs(1), 10),
        (MINUTE, MAX_BATCH + 1),
    ] {
        let e = store.purge_barrier(older_than, limit).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert_eq!(e.operation(), "purge_barrier");
    }
    // the two oldest go: p1 and p2 run again, p3 and p4 are still refused
    assert_eq!(store.purge_barrier(MINUTE, 2).await.unwrap(), 2);
    let left: Vec<_> = store.barrier_records("purge").await.unwrap();
    let left: Vec<_> = left.iter().map(|r| (r.branch_id.as_str(), r.op)).collect();
    assert_eq!(
        left,
        [
            ("p3", Action),
            ("p4", Action),
            ("p4", Compensate),
            ("p5", Action)
        ],
        "the oldest two went"
    );
    assert_eq!(
        verdicts(ctx, path, "purge", "p3", &[Action]).await,
        [Barrier::Duplicate]
    );
    assert_eq!(
        verdicts(ctx, path, "purge", "p4", &[Action]).await,
        [Barrier::Hanging]
    );
    assert_eq!(
        verdicts(ctx, path, "purge", "p1", &[Action]).await,
        [Barrier::Run]
    );
    // the rest older than a minute: p3's and p4's two; p5 and p1's new one stay
    assert_eq!(store.purge_barrier(MINUTE, 100).await.unwrap(), 3);
    assert_eq!(store.purge_barrier(MINUTE, 100).await.unwrap(), 0);
    let left: Vec<_> = store.barrier_records("purge").await.unwrap();
    let mut left: Vec<_> = left.iter().map(|r| r.branch_id.as_str()).collect();
    left.sort_unstable();
    assert_eq!(left, ["p1", "p5"]);
    assert_eq!(
        verdicts(ctx, path, "purge", "p4", &[Action]).await,
        [Barrier::Run]
    );
}
