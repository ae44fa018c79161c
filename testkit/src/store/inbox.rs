//! The consumer's inbox: a message's effect once per consumer, in the transaction of
//! its business writes (`run_idempotent` and [`Inbox::process`]).

use super::*;
use backstop_core::inbox::{MAX_CONSUMER_BYTES, MAX_MESSAGE_ID_BYTES};
use backstop_core::{Inbox, Message, Processed};

/// inbox: a new message runs and commits with its inbox row; the same message for the
/// same consumer runs nothing (its write never happens); another consumer runs it once
/// for itself (the key includes the consumer).
pub async fn inbox_runs_a_message_once_per_consumer<H: Harness>(ctx: &Ctx<H>) {
    let (h, db, s) = (&ctx.harness, &ctx.db, &ctx.store);
    let first = h
        .idempotent_business_row(db, s, "billing", "m-1", "once-a", false)
        .await;
    assert_eq!(first.unwrap(), Processed::Done(()));
    let again = h
        .idempotent_business_row(db, s, "billing", "m-1", "once-b", false)
        .await;
    assert_eq!(again.unwrap(), Processed::Duplicate);
    let other = h
        .idempotent_business_row(db, s, "shipping", "m-1", "once-c", false)
        .await;
    assert_eq!(other.unwrap(), Processed::Done(()));
    assert!(h.business_row_exists(db, "once-a").await);
    assert!(
        !h.business_row_exists(db, "once-b").await,
        "a duplicate ran"
    );
    assert!(h.business_row_exists(db, "once-c").await);
    assert_eq!(h.count_business_rows(db, "once-").await, 2);
    assert_eq!(ctx.count_all().await, 0, "the inbox writes no task");
}

/// inbox: work that fails rolls back with its inbox row, so the redelivery runs it;
/// the failure comes back as the work's own (retryable) error.
pub async fn inbox_failed_work_rolls_back_its_inbox_row<H: Harness>(ctx: &Ctx<H>) {
    let (h, db, s) = (&ctx.harness, &ctx.db, &ctx.store);
    let failed = h
        .idempotent_business_row(db, s, "billing", "m-2", "rb-1", true)
        .await;
    let e = failed.expect_err("the work failed");
    assert_eq!(e.action(), backstop_core::ErrorAction::Retry);
    assert!(
        !h.business_row_exists(db, "rb-1").await,
        "the failed write stayed"
    );
    let retried = h
        .idempotent_business_row(db, s, "billing", "m-2", "rb-2", false)
        .await;
    assert_eq!(retried.unwrap(), Processed::Done(()));
    assert!(h.business_row_exists(db, "rb-2").await);
    let dup = h
        .idempotent_business_row(db, s, "billing", "m-2", "rb-3", false)
        .await;
    assert_eq!(dup.unwrap(), Processed::Duplicate);
    assert_eq!(h.count_business_rows(db, "rb-").await, 1);
}

/// inbox: deliveries of one message racing on several connections (as after a reclaim
/// hands it to a second consumer) apply its effect exactly once, for each of many
/// messages; when the first of a race fails, another one takes over and applies it.
pub async fn inbox_racing_deliveries_apply_the_effect_once<H: Harness>(ctx: &Ctx<H>) {
    const MESSAGES: usize = 12;
    const RACERS: usize = 4;
    let mut runs = Vec::new();
    for r in 0..RACERS {
        let store = ctx.new_store().await;
        for m in 0..MESSAGES {
            let (h, db) = (&ctx.harness, &ctx.db);
            let store = store.clone();
            runs.push(async move {
                // the first racer of every third message fails after its write
                let fail = r == 0 && m % 3 == 0;
                let id = format!("race-{m}");
                let row = format!("race-{m}-{r}");
                let out = h
                    .idempotent_business_row(db, &store, "billing", &id, &row, fail)
                    .await;
                (m, out)
            });
        }
    }
    let outcomes = within("the consumers", futures_util::future::join_all(runs)).await;
    let mut done = [0; MESSAGES];
    for (m, out) in outcomes {
        match out {
            Ok(Processed::Done(())) => done[m] += 1,
            Ok(Processed::Duplicate) => {}
            // a deadlock, or on Galera a certification conflict (also error 1213,
            // "Deadlock found"), in the handler's writes or at COMMIT: that delivery is
            // rolled back, and one of the others applies the message
            Err(e) => assert!(
                m % 3 == 0 || e.message().to_lowercase().contains("deadlock"),
                "message {m}: unexpected failure {e}"
            ),
        }
    }
    for (m, n) in done.iter().enumerate() {
        assert_eq!(*n, 1, "message {m} applied {n} times");
        assert_eq!(
            ctx.harness
                .count_business_rows(&ctx.db, &format!("race-{m}-"))
                .await,
            1,
            "message {m}: business rows"
        );
    }
}

/// inbox: an empty or over-long consumer or message id is refused as invalid input
/// before anything runs or is written.
pub async fn inbox_refuses_bad_keys_and_writes_nothing<H: Harness>(ctx: &Ctx<H>) {
    let (h, db, s) = (&ctx.harness, &ctx.db, &ctx.store);
    let long_consumer = "c".repeat(MAX_CONSUMER_BYTES + 1);
    let long_id = "m".repeat(MAX_MESSAGE_ID_BYTES + 1);
    for (consumer, id) in [
        ("", "m"),
        ("c", ""),
        (long_consumer.as_str(), "m"),
        ("c", long_id.as_str()),
    ] {
        let e = h
            .idempotent_business_row(db, s, consumer, id, "bad-row", false)
            .await
            .expect_err("refused");
        assert!(
            e.message().contains("must be 1 to"),
            "{consumer:?}/{id:?}: {e}"
        );
    }
    assert!(!h.business_row_exists(db, "bad-row").await);
    // the longest valid keys work
    let max_consumer = "c".repeat(MAX_CONSUMER_BYTES);
    let max_id = "m".repeat(MAX_MESSAGE_ID_BYTES);
    let ok = h
        .idempotent_business_row(db, s, &max_consumer, &max_id, "max-row", false)
        .await;
    assert_eq!(ok.unwrap(), Processed::Done(()));
    let dup = h
        .idempotent_business_row(db, s, &max_consumer, &max_id, "max-row-2", false)
        .await;
    assert_eq!(dup.unwrap(), Processed::Duplicate);
}

/// inbox: [`Inbox::process`] runs the backend's native handler in the inbox transaction:
/// once, a duplicate never, a failure rolled back and run again on redelivery.
pub async fn inbox_process_runs_a_native_handler_once<H: Harness>(ctx: &Ctx<H>) {
    let (h, db, s) = (&ctx.harness, &ctx.db, &ctx.store);
    let handler = h.inbox_handler(db).await;
    let ok = Message::new("p-1", "ORDER_PLACED", "proc-1", "{}");
    assert_eq!(
        s.process("pay", &ok, &handler).await.unwrap(),
        Processed::Done(())
    );
    assert_eq!(
        s.process("pay", &ok, &handler).await.unwrap(),
        Processed::Duplicate
    );
    let bad = Message::new("p-2", "ORDER_PLACED", "proc-2", "fail");
    assert!(s.process("pay", &bad, &handler).await.is_err());
    assert!(!h.business_row_exists(db, "proc-2").await);
    let fixed = Message::new("p-2", "ORDER_PLACED", "proc-2", "{}");
    assert_eq!(
        s.process("pay", &fixed, &handler).await.unwrap(),
        Processed::Done(())
    );
    assert_eq!(h.count_business_rows(db, "proc-").await, 2);
}

/// inbox: the purge deletes rows processed longer ago than asked, oldest first, at most
/// the limit per call; a purged message would run again, a kept one is still a
/// duplicate. Bad arguments are refused.
pub async fn inbox_purge_deletes_only_old_rows<H: Harness>(ctx: &Ctx<H>) {
    let (h, db, s) = (&ctx.harness, &ctx.db, &ctx.store);
    for i in 0..3 {
        let r = h
            .idempotent_business_row(
                db,
                s,
                "c",
                &format!("old-{i}"),
                &format!("pg-old-{i}"),
                false,
            )
            .await;
        assert_eq!(r.unwrap(), Processed::Done(()));
    }
    h.backdate_rows(db, "backstop_task_inbox", "processed_at", 2 * HOUR)
        .await;
    let r = h
        .idempotent_business_row(db, s, "c", "fresh", "pg-fresh", false)
        .await;
    assert_eq!(r.unwrap(), Processed::Done(()));

    assert_eq!(s.purge_inbox(HOUR, 2).await.unwrap(), 2);
    assert_eq!(s.purge_inbox(HOUR, 10).await.unwrap(), 1);
    assert_eq!(s.purge_inbox(HOUR, 10).await.unwrap(), 0);
    let kept = h
        .idempotent_business_row(db, s, "c", "fresh", "pg-fresh-2", false)
        .await;
    assert_eq!(kept.unwrap(), Processed::Duplicate);
    let purged = h
        .idempotent_business_row(db, s, "c", "old-0", "pg-old-again", false)
        .await;
    assert_eq!(
        purged.unwrap(),
        Processed::Done(()),
        "a purged key is new again"
    );
    assert_eq!(s.purge_inbox(HOUR, 0).await.unwrap(), 0);
    assert_kind(
        s.purge_inbox(HOUR, MAX_BATCH + 1).await,
        ErrorKind::InvalidInput,
        "limit",
    );
}

/// A message with the barrier's headers, as the relay publishes a saga step.
fn branch_message(id: &str, biz: &str, call: &backstop_core::BranchCall) -> Message {
    let mut m = Message::new(id, "STOCK", biz, "{}");
    m.headers = call
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    m
}

/// inbox: a message that carries a branch call in its headers (a relayed saga step) runs
/// its handler behind the participant barrier, on the inbox's transaction: a
/// compensation that arrives first runs nothing and leaves its records; the forward call
/// after it runs nothing (hanging); a forward call runs once, and the same call under a
/// new message id (a second publication) runs nothing. Each is processed (its inbox row
/// committed with the barrier's verdict). Partial or invalid headers are a permanent
/// failure that writes nothing: neither the inbox row nor a barrier record.
pub async fn inbox_runs_a_relayed_branch_behind_the_barrier<H: Harness>(ctx: &Ctx<H>) {
    use backstop_core::{BranchCall, BranchOp, ErrorAction};
    let (h, db, s) = (&ctx.harness, &ctx.db, &ctx.store);
    let handler = h.inbox_handler(db).await;
    let gid = "saga:order:br-1";
    let stock = BranchCall::new(gid, "stock", BranchOp::Action).unwrap();
    let coupon = BranchCall::new(gid, "coupon", BranchOp::Action).unwrap();
    let runs = |id: &str, biz: &str, call: &BranchCall| {
        let m = branch_message(id, biz, call);
        let handler = &handler;
        async move { s.process("stock-svc", &m, handler).await.unwrap() }
    };
    // the compensation first: empty; the late action: hanging
    let undo = stock.with_op(BranchOp::Compensate);
    assert_eq!(runs("m-1", "br-undo", &undo).await, Processed::Done(()));
    assert_eq!(runs("m-2", "br-late", &stock).await, Processed::Done(()));
    // another branch's action runs once; published again under a new id, it is skipped
    assert_eq!(runs("m-3", "br-coupon", &coupon).await, Processed::Done(()));
    assert_eq!(runs("m-4", "br-again", &coupon).await, Processed::Done(()));
    // the same message again is the inbox's duplicate
    assert_eq!(
        runs("m-3", "br-coupon", &coupon).await,
        Processed::Duplicate
    );
    assert_eq!(h.count_business_rows(db, "br-").await, 1);
    assert!(h.business_row_exists(db, "br-coupon").await);
    let mut records: Vec<(String, BranchOp, BranchOp)> = s
        .barrier_records(gid)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.branch_id, r.op, r.reason))
        .collect();
    records.sort_by(|a, b| (&a.0, a.1.as_str()).cmp(&(&b.0, b.1.as_str())));
    assert_eq!(
        records,
        [
            ("coupon".into(), BranchOp::Action, BranchOp::Action),
            ("stock".into(), BranchOp::Action, BranchOp::Compensate),
            ("stock".into(), BranchOp::Compensate, BranchOp::Compensate),
        ]
    );
    // partial headers: refused for good, nothing written
    let mut partial = branch_message("m-5", "br-partial", &coupon);
    partial.headers.retain(|(k, _)| k != "backstop-op");
    let e = s
        .process("stock-svc", &partial, &handler)
        .await
        .unwrap_err();
    assert_eq!(e.action(), ErrorAction::Fail, "{e}");
    let mut unknown = branch_message("m-5", "br-partial", &coupon);
    unknown.headers[2].1 = "undo".into();
    let e = s
        .process("stock-svc", &unknown, &handler)
        .await
        .unwrap_err();
    assert_eq!(e.action(), ErrorAction::Fail, "{e}");
    assert_eq!(s.barrier_records(gid).await.unwrap().len(), 3);
    // not even the inbox row: the message, fixed, runs (without headers: no barrier)
    let plain = Message::new("m-5", "STOCK", "br-partial", "{}");
    assert_eq!(
        s.process("stock-svc", &plain, &handler).await.unwrap(),
        Processed::Done(())
    );
    assert_eq!(h.count_business_rows(db, "br-").await, 2);
}
