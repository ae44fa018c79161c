//! An operator's edit of a task that waits to run ([`TaskStore::edit`]): run it now,
//! reschedule it, replace its payload; fenced against claims, audited, refused (writing
//! nothing) for a task that runs or has finished and for bad input.

use super::*;
use backstop_core::limits::{DEFAULT_MAX_PAYLOAD_BYTES, MAX_INTERVAL};
use backstop_core::{Audit, TaskEdit};
use chrono::DateTime;

fn audit(reason: &str) -> Audit {
    Audit::new("ops", reason)
}

/// A time `d` from now, to the millisecond every backend keeps.
fn at_ms(d: chrono::Duration) -> DateTime<Utc> {
    DateTime::from_timestamp_millis((Utc::now() + d).timestamp_millis()).unwrap()
}

/// edit: run now makes a delayed task due at database-now (then claimable); a delay
/// makes a due task due that long from now (not claimable); a time makes it due at that
/// time, or now when it is past; a payload edit replaces the payload and keeps the due
/// time. Attempts and lease are kept. A waiting task (behind another of its order key)
/// is edited and stays waiting. Each edit is one audit entry: `run_now`, `reschedule`
/// or `edit`, with the operator and reason.
pub async fn edit_runs_now_reschedules_and_replaces_the_payload<H: Harness>(ctx: &Ctx<H>) {
    let d1 = ctx
        .store
        .enqueue(NewTask::new("E", "d1").delay(HOUR))
        .await
        .unwrap()
        .id;
    let before = Utc::now();
    let t = ctx
        .store
        .edit(d1, &TaskEdit::run_now(), &audit("the customer is waiting"))
        .await
        .unwrap();
    let after = Utc::now();
    assert_between("next_run_at", t.next_run_at, before, after);
    assert_between("updated_at", t.updated_at, before, after);
    assert_eq!(
        (t.status, t.attempts, t.lease),
        (Status::Pending, 0, 0),
        "only the due time changed"
    );
    assert_eq!(ctx.task(d1).await, t, "returned as stored");

    let d2 = ctx.enqueue("E", "d2").await;
    let before = Utc::now();
    let t = ctx
        .store
        .edit(d2, &TaskEdit::run_in(HOUR), &audit("after the migration"))
        .await
        .unwrap();
    let after = Utc::now();
    assert_between(
        "next_run_at",
        t.next_run_at,
        before + chrono_dur(HOUR),
        after + chrono_dur(HOUR),
    );
    assert!(ctx
        .store
        .claim_by_id(d2, &ctx.owner)
        .await
        .unwrap()
        .is_none());
    let when = at_ms(chrono::Duration::hours(2));
    let t = ctx
        .store
        .edit(d2, &TaskEdit::run_at(when), &audit("at two"))
        .await
        .unwrap();
    assert_eq!(t.next_run_at, when);
    let before = Utc::now();
    let t = ctx
        .store
        .edit(
            d2,
            &TaskEdit::run_at(at_ms(-chrono::Duration::hours(1))),
            &audit("past"),
        )
        .await
        .unwrap();
    assert_between("a past time is now", t.next_run_at, before, Utc::now());

    let due = t.next_run_at;
    let t = ctx
        .store
        .edit(
            d2,
            &TaskEdit::default().payload(r#"{"to":"grace@example.com"}"#),
            &audit("typo in the address"),
        )
        .await
        .unwrap();
    assert_eq!(
        (t.payload.as_str(), t.next_run_at),
        (r#"{"to":"grace@example.com"}"#, due)
    );
    let claimed = ctx.claim(d2).await;
    assert_eq!(claimed.payload, r#"{"to":"grace@example.com"}"#);
    assert_eq!(ctx.claim(d1).await.status, Status::Running, "run now: due");

    // a waiting task: edited, still in line
    ctx.store
        .enqueue(NewTask::new("E", "w1").order_key("acct-9"))
        .await
        .unwrap();
    let w2 = ctx
        .store
        .enqueue(NewTask::new("E", "w2").order_key("acct-9"))
        .await
        .unwrap()
        .id;
    let t = ctx
        .store
        .edit(w2, &TaskEdit::run_now().payload("[1]"), &audit("fix"))
        .await
        .unwrap();
    assert_eq!((t.status, t.payload.as_str()), (Status::Waiting, "[1]"));

    let log = |id| async move {
        ctx.store
            .audit_log(id)
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.action, e.operator, e.reason))
            .collect::<Vec<_>>()
    };
    let e = |a: &str, r: &str| (a.to_owned(), "ops".to_owned(), r.to_owned());
    assert_eq!(log(d1).await, [e("run_now", "the customer is waiting")]);
    assert_eq!(
        log(d2).await,
        [
            e("reschedule", "after the migration"),
            e("reschedule", "at two"),
            e("reschedule", "past"),
            e("edit", "typo in the address"),
        ]
    );
    assert_eq!(log(w2).await, [e("edit", "fix")]);
}

/// edit: refused, writing nothing (the row as it was, no audit entry), for a running
/// or finished task (`Conflict`), a missing one (`NotFound`), and bad input
/// (`InvalidInput`): an edit that changes nothing, a payload that is not JSON or is over
/// the store's limit, a delay past `MAX_INTERVAL`, a bad audit.
pub async fn edit_refuses_what_is_not_waiting_and_bad_input<H: Harness>(ctx: &Ctx<H>) {
    let running = ctx.enqueue("E", "r").await;
    ctx.claim(running).await;
    let done = ctx.enqueue("E", "s").await;
    let held = ctx.claim(done).await;
    assert!(ctx.store.mark_success(held.lease()).await.unwrap());
    for (id, status) in [(running, "running"), (done, "succeeded")] {
        let before = ctx.task(id).await;
        assert_kind(
            ctx.store.edit(id, &TaskEdit::run_now(), &audit("x")).await,
            ErrorKind::Conflict,
            status,
        );
        assert_eq!(ctx.task(id).await, before, "{status}: unchanged");
    }
    assert_kind(
        ctx.store
            .edit(999_999, &TaskEdit::run_now(), &audit("x"))
            .await,
        ErrorKind::NotFound,
        "999999",
    );
    let pending = ctx.enqueue("E", "p").await;
    let before = ctx.task(pending).await;
    let big = format!("\"{}\"", "x".repeat(DEFAULT_MAX_PAYLOAD_BYTES));
    for (edit, needle) in [
        (TaskEdit::default(), "changes nothing"),
        (TaskEdit::default().payload("{not json"), "not valid JSON"),
        (TaskEdit::default().payload(big), "over the limit"),
        (
            TaskEdit::run_in(MAX_INTERVAL + Duration::from_secs(1)),
            "longest delay",
        ),
    ] {
        assert_kind(
            ctx.store.edit(pending, &edit, &audit("x")).await,
            ErrorKind::InvalidInput,
            needle,
        );
    }
    assert_kind(
        ctx.store
            .edit(pending, &TaskEdit::run_now(), &Audit::new("", "x"))
            .await,
        ErrorKind::InvalidInput,
        "operator",
    );
    assert_eq!(ctx.task(pending).await, before, "unchanged");
    for id in [running, done, pending] {
        assert!(ctx.store.audit_log(id).await.unwrap().is_empty(), "{id}");
    }
}

/// edit races claims: 40 due tasks, one connection claiming them in batches while
/// another edits each one's payload. Every task is claimed once; an edit that applied
/// came before its task's claim (the claim returned the new payload, one audit entry);
/// one refused (`Conflict`) came after (the old payload, no entry).
pub async fn edit_races_claims_and_applies_only_before_one<H: Harness>(ctx: &Ctx<H>) {
    const N: usize = 40;
    let mut ids = Vec::new();
    for i in 0..N {
        ids.push(ctx.enqueue("RACE", &format!("r{i}")).await);
    }
    let claimer = {
        let store = ctx.store.clone();
        let owner = ctx.owner.clone();
        tokio::spawn(async move {
            let mut claimed = Vec::new();
            while claimed.len() < N {
                let got = store
                    .claim_batch(&owner, &["RACE".to_owned()], 3)
                    .await
                    .unwrap();
                claimed.extend(got);
                tokio::task::yield_now().await;
            }
            claimed
        })
    };
    let mut applied = HashSet::new();
    for id in &ids {
        match ctx
            .store
            .edit(*id, &TaskEdit::default().payload("[2]"), &audit("race"))
            .await
        {
            Ok(t) => {
                applied.insert(t.id);
            }
            Err(e) => assert_eq!(e.kind(), ErrorKind::Conflict, "{e}"),
        }
    }
    let claimed = crate::joined("the claimer", vec![claimer]).await.remove(0);
    assert_eq!(claimed.len(), N, "each task claimed once");
    for t in &claimed {
        let log = ctx.store.audit_log(t.id).await.unwrap();
        if applied.contains(&t.id) {
            assert_eq!((t.payload.as_str(), log.len()), ("[2]", 1), "task {}", t.id);
        } else {
            assert_eq!((t.payload.as_str(), log.len()), ("{}", 0), "task {}", t.id);
        }
    }
}
