//! The enqueue in the caller's transaction, along every [`TxPath`]: the backend's native
//! API, an application's own sqlx transaction, and the statements run by another
//! driver's code. Each path keeps the same promises as the store's own `enqueue`.

use backstop_core::{Dedup, ErrorKind, NewTask, Status, TaskStore};
use chrono::Utc;

use crate::{assert_between, Ctx, Harness, TxPath};

async fn business_row<H: Harness>(ctx: &Ctx<H>, key: &str) -> bool {
    ctx.harness.business_row_exists(&ctx.db, key).await
}

/// commit: the task exists as enqueued (pending, no attempt, due now) with the business
/// row; rollback: neither exists, though the enqueue answered with an id; a duplicate
/// answers with the existing task, writes nothing, and leaves the transaction usable
/// (its business row commits).
pub async fn tx_enqueue_commits_and_rolls_back_with_the_business_rows<H: Harness>(ctx: &Ctx<H>) {
    for path in TxPath::ALL {
        let before = ctx.count_all().await;
        let started = Utc::now();
        let task = NewTask::new("TX", format!("{path}-commit")).json(&serde_json::json!({"n": 1}));
        let e = ctx
            .enqueue_in_tx_via(path, &format!("{path}-1"), task, true)
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!((e.created, e.status), (true, Status::Pending), "{path}");
        assert_eq!(e.event_type, "TX");
        let got = ctx.task(e.id).await;
        assert_eq!(got.biz_key, format!("{path}-commit"), "{path}");
        assert_eq!(got.payload, r#"{"n":1}"#, "{path}");
        assert_eq!(
            (got.status, got.attempts, got.lease),
            (Status::Pending, 0, 0)
        );
        assert_between("next_run_at", got.next_run_at, started, Utc::now());
        assert!(business_row(ctx, &format!("{path}-1")).await, "{path}");

        let rolled_back = ctx
            .enqueue_in_tx_via(
                path,
                &format!("{path}-2"),
                NewTask::new("TX", format!("{path}-rb")),
                false,
            )
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(rolled_back.created, "{path}");
        assert!(
            ctx.store.get(rolled_back.id).await.unwrap().is_none(),
            "{path}: rolled back"
        );
        assert!(!business_row(ctx, &format!("{path}-2")).await, "{path}");

        let dup = ctx
            .enqueue_in_tx_via(
                path,
                &format!("{path}-3"),
                NewTask::new("TX", format!("{path}-commit")),
                true,
            )
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(
            (dup.id, dup.created, dup.status),
            (e.id, false, Status::Pending),
            "{path}"
        );
        assert!(
            business_row(ctx, &format!("{path}-3")).await,
            "{path}: the transaction went on"
        );
        assert_eq!(
            ctx.count_all().await,
            before + 1,
            "{path}: one task written"
        );
    }
}

/// bad input is refused before anything runs: `InvalidInput`, no task, and the
/// transaction (rolled back by the error) leaves no business row.
pub async fn tx_enqueue_refuses_bad_input_and_writes_nothing<H: Harness>(ctx: &Ctx<H>) {
    for path in TxPath::ALL {
        for (what, task) in [
            ("event type", NewTask::new("", "k")),
            ("biz key", NewTask::new("TX", "")),
            ("payload", NewTask::new("TX", "k").payload_raw("{not json")),
        ] {
            let row = format!("{path}-bad-{}", what.replace(' ', "-"));
            let e = ctx
                .enqueue_in_tx_via(path, &row, task, true)
                .await
                .expect_err("bad input must be refused");
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{path}, {what}: {e}");
            assert!(!business_row(ctx, &row).await, "{path}, {what}");
        }
    }
    crate::store::assert_nothing_written(ctx).await;
}

/// the enqueue's other statements run on the caller's transaction too: an ordered task
/// waits behind the key's first, a duplicate of a finished task under `WhileActive`
/// frees its key and inserts anew, and a duplicate that replaces a pending task's payload
/// does so.
pub async fn tx_enqueue_runs_keys_and_dedup_rules<H: Harness>(ctx: &Ctx<H>) {
    for path in TxPath::ALL {
        let key = format!("{path}-order");
        let first = ctx
            .enqueue_in_tx_via(
                path,
                &format!("{path}-o1"),
                NewTask::new("TXO", format!("{path}-a")).order_key(key.clone()),
                true,
            )
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(first.status, Status::Pending, "{path}: the key's first");
        let second = ctx
            .enqueue_in_tx_via(
                path,
                &format!("{path}-o2"),
                NewTask::new("TXO", format!("{path}-b")).order_key(key),
                true,
            )
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(second.status, Status::Waiting, "{path}: behind the first");
        assert_eq!(ctx.task(second.id).await.status, Status::Waiting);

        // a finished task frees its key for a new one
        let done = ctx.enqueue("TXD", &format!("{path}-d")).await;
        let t = ctx.claim(done).await;
        assert!(
            backstop_core::TaskStoreExt::mark_success(&ctx.store, t.lease())
                .await
                .unwrap()
        );
        let again = ctx
            .enqueue_in_tx_via(
                path,
                &format!("{path}-d1"),
                NewTask::new("TXD", format!("{path}-d")).dedup(Dedup::WhileActive),
                true,
            )
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(again.created && again.id != done, "{path}: {again:?}");
        assert_eq!(
            ctx.task(done).await.status,
            Status::Succeeded,
            "{path}: kept"
        );

        // a duplicate replaces the pending task's payload
        let replaced = ctx
            .enqueue_in_tx_via(
                path,
                &format!("{path}-d2"),
                NewTask::new("TXD", format!("{path}-d"))
                    .json(&2)
                    .replace_pending(true),
                true,
            )
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(
            (replaced.id, replaced.created, replaced.replaced),
            (again.id, false, true),
            "{path}"
        );
        assert_eq!(ctx.task(again.id).await.payload, "2", "{path}");
    }
}

/// `Transactional::claim_in` along every path: a task enqueued and claimed on one
/// transaction commits running (owner, attempt 1, lease 1, `updated_at` at the claim),
/// and its lease fences marks; a rollback leaves neither task nor business row though
/// the claim answered; a delayed task, a task claimed before, and a running one are not
/// claimed, the row unchanged and the transaction still usable (its business row
/// commits).
pub async fn tx_claim_claims_a_task_enqueued_on_the_same_transaction<H: Harness>(ctx: &Ctx<H>) {
    use backstop_core::{Lease, Owner, TaskStoreExt};
    use std::time::Duration;
    for path in TxPath::ALL {
        let owner = Owner::new(format!("claimer-{path}")).unwrap();
        let claims = crate::StoreClaims::new(ctx.store.clone(), owner.clone());
        let started = Utc::now();
        let e = ctx
            .enqueue_claimed_in_tx_via(
                path,
                &format!("{path}-c1"),
                NewTask::new("TXC", format!("{path}-a")),
                claims.clone(),
                true,
            )
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let lease = Lease {
            task_id: e.id,
            token: 1,
        };
        assert_eq!(claims.take(), vec![Some(lease)], "{path}");
        let got = ctx.task(e.id).await;
        assert_eq!(
            (got.status, got.attempts, got.lease, got.owner.as_deref()),
            (Status::Running, 1, 1, Some(owner.as_str())),
            "{path}"
        );
        assert_between("updated_at", got.updated_at, started, Utc::now());
        assert!(business_row(ctx, &format!("{path}-c1")).await, "{path}");
        // the lease fences: the token before the claim is refused, the claim's applies
        let before = Lease {
            task_id: e.id,
            token: 0,
        };
        assert!(!ctx.store.mark_success(before).await.unwrap(), "{path}");
        assert!(ctx.store.mark_success(lease).await.unwrap(), "{path}");
        assert_eq!(ctx.task(e.id).await.status, Status::Succeeded, "{path}");

        // rolled back: the claim answered inside the transaction, nothing remains
        let rb = ctx
            .enqueue_claimed_in_tx_via(
                path,
                &format!("{path}-c2"),
                NewTask::new("TXC", format!("{path}-rb")),
                claims.clone(),
                false,
            )
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(claims.take().len(), 1, "{path}");
        assert!(ctx.store.get(rb.id).await.unwrap().is_none(), "{path}");
        assert!(!business_row(ctx, &format!("{path}-c2")).await, "{path}");

        // not due: pending, untouched
        let delayed = ctx
            .enqueue_claimed_in_tx_via(
                path,
                &format!("{path}-c3"),
                NewTask::new("TXC", format!("{path}-later")).delay(Duration::from_secs(3600)),
                claims.clone(),
                true,
            )
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(claims.take(), vec![None], "{path}");
        let got = ctx.task(delayed.id).await;
        assert_eq!(
            (got.status, got.attempts, got.lease, got.owner),
            (Status::Pending, 0, 0, None),
            "{path}"
        );
        assert!(business_row(ctx, &format!("{path}-c3")).await, "{path}");

        // claimed before, then given back (pending, lease past 0): not claimed again here
        let once = ctx.enqueue("TXC", &format!("{path}-once")).await;
        let claimed = ctx.claim(once).await;
        assert!(ctx.store.release(claimed.lease()).await.unwrap(), "{path}");
        let released = ctx.task(once).await;
        assert_eq!(released.status, Status::Pending, "{path}");
        // … and a running task is not claimed either
        let running = ctx.enqueue("TXC", &format!("{path}-running")).await;
        let held = ctx.claim(running).await;
        for (n, (key, id)) in [
            (format!("{path}-once"), once),
            (format!("{path}-running"), running),
        ]
        .into_iter()
        .enumerate()
        {
            let dup = ctx
                .enqueue_claimed_in_tx_via(
                    path,
                    &format!("{path}-d{n}"),
                    NewTask::new("TXC", key),
                    claims.clone(),
                    true,
                )
                .await
                .unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!((dup.id, dup.created), (id, false), "{path}");
            assert_eq!(claims.take(), vec![None], "{path}: {id}");
            assert!(business_row(ctx, &format!("{path}-d{n}")).await, "{path}");
        }
        let got = ctx.task(once).await;
        assert_eq!(
            (got.status, got.attempts, got.lease),
            (released.status, released.attempts, released.lease),
            "{path}"
        );
        let got = ctx.task(running).await;
        assert_eq!(
            (got.status, got.attempts, got.lease, got.owner),
            (Status::Running, 1, held.lease, held.owner),
            "{path}"
        );
    }
}
