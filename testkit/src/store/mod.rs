//! The conformance cases. Each is one line of the [`TaskStore`] contract, asserted on the
//! exact state it leaves (status, attempts, lease, owner, times), so it fails if the
//! behaviour it names is broken.
//!
//! The cases live in one module per area. Every `pub async fn name<H: Harness>(ctx:
//! &Ctx<H>)` in an area module is a case: the build script (`build.rs`) registers it, so a
//! new case reaches every backend without a list to update. Helpers are private, or
//! `pub(crate)` in this module; an area file must be declared below.

pub mod attempts;
pub mod barrier;
pub mod batch;
pub mod claims;
pub mod dedup;
pub mod dedup_modes;
pub mod edit;
pub mod enqueue;
pub mod fuzz;
pub mod handover;
pub mod inbox;
pub mod labels;
pub mod layers;
pub mod limits;
pub mod marks;
pub mod operators;
pub mod order;
pub mod partitions;
pub mod queries;
pub mod queues;
pub mod rates;
pub mod recycle;
pub mod reset;
pub mod retention;
pub mod saga;
pub mod saga_nudge;
pub mod saga_step;
pub mod schema;
pub mod transactional;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use backstop_core::limits::{MAX_BATCH, MAX_ERROR_BYTES};
use backstop_core::{
    Backoff, ErrorKind, Mark, NewTask, Owner, RetryPolicy, Status, StoreConfig, Task, TaskFilter,
    TaskId, TaskStore, TaskStoreExt,
};
use chrono::Utc;

use crate::{assert_between, chrono_dur, joined, within, Ctx, Harness, TimeColumn, CLOCK_SLACK};

pub(crate) const MINUTE: Duration = Duration::from_secs(60);

pub(crate) const HOUR: Duration = Duration::from_secs(3600);

pub(crate) fn owner(name: &str) -> Owner {
    Owner::new(name).unwrap()
}

#[track_caller]
pub(crate) fn assert_kind<T: std::fmt::Debug>(
    r: backstop_core::Result<T>,
    kind: ErrorKind,
    needle: &str,
) {
    match r {
        Ok(v) => panic!("expected a {kind:?} error mentioning {needle:?}, got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.kind(), kind, "wrong kind for error: {e}");
            assert!(
                e.to_string().contains(needle),
                "error {e:?} should mention {needle:?}"
            );
            assert!(!e.is_temporary(), "{e} must not be temporary");
        }
    }
}

pub(crate) async fn assert_nothing_written<H: Harness>(ctx: &Ctx<H>) {
    assert_eq!(ctx.count_all().await, 0, "bad input must write nothing");
}

/// Where the backend documents that claims wait for a row another transaction holds:
/// asserts `claim` (or another call) has not returned after 1.5 s, leaving it to be finished once the
/// holder lets go.
pub(crate) async fn assert_still_waiting<F: std::future::Future + Unpin>(
    claim: &mut F,
    what: &str,
) {
    assert!(
        tokio::time::timeout(Duration::from_millis(1500), claim)
            .await
            .is_err(),
        "documented to wait {what}, the call returned"
    );
}

/// How long a claim may take to pass a row another transaction holds: `Some(None)` when
/// the backend documents that claims wait for it; `None` (printed, with `why`) when it
/// has no row locks, one writer holding the whole database (the case has nothing to
/// check).
pub(crate) fn passing_bound<H: Harness>(ctx: &Ctx<H>, why: &str) -> Option<Option<Duration>> {
    match ctx.harness.locked_rows() {
        crate::LockedRows::NoRowLocks => {
            eprintln!(
                "{}: one writer holds the whole database: {why}",
                ctx.harness.backend()
            );
            None
        }
        crate::LockedRows::Waits => Some(None),
        crate::LockedRows::PassesWithin(d) => Some(Some(d)),
    }
}

/// Two running tasks of `event` whose owner went silent: `held` (silent 300 s, the
/// older, first in a sweep's order) and `behind` (240 s); their ids in that order.
pub(crate) async fn two_dead<H: Harness>(ctx: &Ctx<H>, event: &str) -> [TaskId; 2] {
    let mut dead = [0; 2];
    for (slot, (key, age)) in dead.iter_mut().zip([("held", 300), ("behind", 240)]) {
        let id = ctx.enqueue(event, key).await;
        ctx.claim(id).await;
        ctx.backdate(id, TimeColumn::UpdatedAt, Duration::from_secs(age))
            .await;
        *slot = id;
    }
    dead
}

/// Enqueue a task of `event_type` (a paused or limited type), and one along each
/// transactional path, each claimed at once where the path can: a claim by id and every
/// claim on the caller's transaction pass them by, each pending and untouched. Answers
/// the first task's id (the oldest).
pub(crate) async fn passed_by_all_but_the_batch_claim<H: Harness>(
    ctx: &Ctx<H>,
    event_type: &str,
) -> TaskId {
    let id = ctx.enqueue(event_type, "k0").await;
    assert!(ctx
        .store
        .claim_by_id(id, &ctx.owner)
        .await
        .unwrap()
        .is_none());
    let mut ids = vec![id];
    for path in crate::TxPath::ALL {
        let claims = crate::StoreClaims::new(ctx.store.clone(), ctx.owner.clone());
        let key = format!("{path}-{event_type}");
        let e = ctx
            .enqueue_claimed_in_tx_via(
                path,
                &key,
                NewTask::new(event_type, key.clone()),
                claims.clone(),
                true,
            )
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(claims.take(), vec![None], "{path}: not claimed");
        ids.push(e.id);
    }
    for id in &ids {
        let t = ctx.task(*id).await;
        assert_eq!(
            (t.status, t.attempts, t.lease, t.owner),
            (Status::Pending, 0, 0, None),
            "{id}"
        );
    }
    id
}

/// Wait for every racer of a racing case to finish (a minute at most).
pub(crate) async fn join_racers(racers: Vec<tokio::task::JoinHandle<()>>) {
    for r in racers {
        tokio::time::timeout(Duration::from_secs(60), r)
            .await
            .expect("the racers finish")
            .unwrap();
    }
}

/// A racer of a limit's racing case holds the `n` tasks it claimed: counted in `held`
/// (and the most held at once in `most`) until the limit is held at once (so
/// "reached" does not hang on timing), or for 200 ms when the other racers cannot get
/// there (the last few tasks).
pub(crate) async fn hold_at_the_limit(
    held: &std::sync::atomic::AtomicUsize,
    most: &std::sync::atomic::AtomicUsize,
    n: usize,
    limit: usize,
) {
    use std::sync::atomic::Ordering;
    let now = held.fetch_add(n, Ordering::SeqCst) + n;
    most.fetch_max(now, Ordering::SeqCst);
    let until = std::time::Instant::now() + Duration::from_millis(200);
    tokio::time::sleep(Duration::from_millis(10)).await;
    while held.load(Ordering::SeqCst) < limit && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    held.fetch_sub(n, Ordering::SeqCst);
}

/// A racing case's claimed `ids` are `tasks` distinct tasks, each claimed once.
#[track_caller]
pub(crate) fn assert_each_claimed_once(mut ids: Vec<TaskId>, tasks: usize) {
    ids.sort_unstable();
    let n = ids.len();
    ids.dedup();
    assert_eq!((n, ids.len()), (tasks, tasks), "each task claimed once");
}

/// Mark every task of `got` (claimed by `store`) succeeded, each mark applied.
pub(crate) async fn succeed_all<S: TaskStore>(store: &S, got: &[Task]) {
    let marks: Vec<Mark> = got.iter().map(|t| Mark::success(t.lease())).collect();
    assert!(store.mark(&marks).await.unwrap().iter().all(|m| *m));
}

/// The actions of `event_type`'s queue log, oldest first.
pub(crate) async fn queue_actions<H: Harness>(ctx: &Ctx<H>, event_type: &str) -> Vec<String> {
    let log = ctx.store.queue_log(event_type).await.unwrap();
    log.into_iter().map(|e| e.action).collect()
}

/// The ids of what a batch claim of `types`, at most `n`, takes.
pub(crate) async fn claim_ids<H: Harness>(ctx: &Ctx<H>, types: &[&str], n: usize) -> Vec<TaskId> {
    let types: Vec<String> = types.iter().map(|t| (*t).to_owned()).collect();
    ctx.store
        .claim_batch(&ctx.owner, &types, n)
        .await
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect()
}
