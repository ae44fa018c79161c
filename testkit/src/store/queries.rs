//! Reading tasks: counts and lists.

use super::*;

/// stats: counts per status and event type; age of the oldest due pending task.
pub async fn stats_counts_per_status_and_event_type<H: Harness>(ctx: &Ctx<H>) {
    let s = ctx.store.stats().await.unwrap();
    assert!(s.counts.is_empty());
    assert_eq!(s.oldest_due_pending, None);
    let a1 = ctx.enqueue("A", "1").await;
    ctx.enqueue("A", "2").await;
    let b1 = ctx.enqueue("B", "1").await;
    ctx.store
        .enqueue(NewTask::new("B", "later").delay(HOUR))
        .await
        .unwrap();
    let l = ctx.claim(b1).await.lease();
    ctx.store.mark_success(l).await.unwrap();
    ctx.backdate(a1, TimeColumn::NextRunAt, Duration::from_secs(100))
        .await;
    let s = ctx.store.stats().await.unwrap();
    assert_eq!(s.count_for("A", Status::Pending), 2);
    assert_eq!(
        s.count_for("B", Status::Pending),
        1,
        "not-due tasks are counted"
    );
    assert_eq!(s.count_for("B", Status::Succeeded), 1);
    assert_eq!(s.count(Status::Running), 0);
    assert_eq!(s.count(Status::Pending), 3);
    let age = s.oldest_due_pending.expect("a due task exists");
    assert!(
        age >= Duration::from_secs(100) && age < Duration::from_secs(100) + Duration::from_secs(5),
        "oldest due pending age {age:?}"
    );

    // the oldest of every type and priority level; running tasks are not due
    let c = ctx
        .store
        .enqueue(NewTask::new("C", "low").priority(backstop_core::Priority::LOW))
        .await
        .unwrap()
        .id;
    ctx.backdate(c, TimeColumn::NextRunAt, Duration::from_secs(300))
        .await;
    let age = ctx.store.stats().await.unwrap().oldest_due_pending;
    let age = age.expect("a due task exists");
    assert!(
        age >= Duration::from_secs(300) && age < Duration::from_secs(305),
        "the oldest due task is of another type and level: {age:?}"
    );
    ctx.claim(c).await;
    let age = ctx.store.stats().await.unwrap().oldest_due_pending;
    let age = age.expect("a due task exists");
    assert!(
        age >= Duration::from_secs(100) && age < Duration::from_secs(105),
        "a running task is not due: {age:?}"
    );
}

/// list: filters by status and event type, pages by id.
pub async fn list_filters_and_pages<H: Harness>(ctx: &Ctx<H>) {
    let mut a = Vec::new();
    for i in 0..5 {
        a.push(ctx.enqueue("A", &format!("{i}")).await);
    }
    let b = ctx.enqueue("B", "0").await;
    let l = ctx.claim(a[1]).await.lease();
    ctx.store.mark_fail(l, "x").await.unwrap();
    let ids = |v: Vec<Task>| v.into_iter().map(|t| t.id).collect::<Vec<_>>();
    let all = ctx.store.list(&TaskFilter::default()).await.unwrap();
    assert_eq!(ids(all), vec![a[0], a[1], a[2], a[3], a[4], b]);
    let f = TaskFilter::default().status(Status::Failed);
    assert_eq!(ids(ctx.store.list(&f).await.unwrap()), vec![a[1]]);
    let f = TaskFilter::default()
        .event_type("A")
        .status(Status::Pending)
        .limit(2);
    let page1 = ids(ctx.store.list(&f).await.unwrap());
    assert_eq!(page1, vec![a[0], a[2]]);
    let f2 = f.clone().after_id(a[2]);
    assert_eq!(ids(ctx.store.list(&f2).await.unwrap()), vec![a[3], a[4]]);
    // by age of updated_at
    ctx.backdate(a[3], TimeColumn::UpdatedAt, HOUR).await;
    ctx.backdate(b, TimeColumn::UpdatedAt, 2 * HOUR).await;
    let f_age = TaskFilter::default().older_than(MINUTE);
    assert_eq!(ids(ctx.store.list(&f_age).await.unwrap()), vec![a[3], b]);
    let f_age = TaskFilter::default().older_than(HOUR + MINUTE);
    assert_eq!(ids(ctx.store.list(&f_age).await.unwrap()), vec![b]);
    let f3 = TaskFilter::default().limit(MAX_BATCH + 1);
    assert_kind(ctx.store.list(&f3).await, ErrorKind::InvalidInput, "limit");
}

/// list: by business key (one key across event types, or the one task of a type and
/// key) and by the text of the last error (exact substring: `%` and `_` are plain
/// characters, case matters), combined with status and paging; bad filters refused.
pub async fn list_finds_by_business_key_and_error_text<H: Harness>(ctx: &Ctx<H>) {
    let a = ctx.enqueue("PAY", "order-7").await;
    let b = ctx.enqueue("SHIP", "order-7").await;
    let c = ctx.enqueue("PAY", "order-8").await;
    for (id, error) in [(a, "gateway said 100% busy"), (c, "Gateway timeout")] {
        let l = ctx.claim(id).await.lease();
        ctx.store.mark(&[Mark::fail(l, error)]).await.unwrap();
    }
    let ids = |tasks: Vec<Task>| tasks.into_iter().map(|t| t.id).collect::<Vec<_>>();
    let list = |f: TaskFilter| async move { ids(ctx.store.list(&f).await.unwrap()) };
    assert_eq!(
        list(TaskFilter::default().biz_key("order-7")).await,
        vec![a, b]
    );
    assert_eq!(
        list(TaskFilter::default().biz_key("order-7").event_type("SHIP")).await,
        vec![b]
    );
    assert_eq!(
        list(TaskFilter::default().biz_key("order-9")).await,
        Vec::<TaskId>::new()
    );
    assert_eq!(
        list(TaskFilter::default().error_contains("100% busy")).await,
        vec![a]
    );
    assert_eq!(
        list(TaskFilter::default().error_contains("%")).await,
        vec![a]
    );
    assert_eq!(
        list(TaskFilter::default().error_contains("_")).await,
        Vec::<TaskId>::new()
    );
    assert_eq!(
        list(TaskFilter::default().error_contains("gateway")).await,
        vec![a]
    );
    assert_eq!(
        list(
            TaskFilter::default()
                .error_contains("ateway")
                .status(Status::Failed)
        )
        .await,
        vec![a, c]
    );
    assert_eq!(
        list(TaskFilter::default().error_contains("ateway").after_id(a)).await,
        vec![c]
    );
    assert_kind(
        ctx.store
            .list(&TaskFilter::default().error_contains(""))
            .await,
        ErrorKind::InvalidInput,
        "error_contains",
    );
    assert_kind(
        ctx.store.list(&TaskFilter::default().biz_key("")).await,
        ErrorKind::InvalidInput,
        "biz_key",
    );
}

/// list: by the start of the business key (a saga's step tasks, `<key>/…`): exactly that
/// prefix, byte for byte (`%` and `_` are plain characters, case matters, a key equal to
/// the prefix matches), with the other filters and paging, and counted alike; an empty
/// prefix is refused.
pub async fn list_finds_by_business_key_prefix<H: Harness>(ctx: &Ctx<H>) {
    let a = ctx.enqueue("SAGA", "o-1/stock:a").await;
    let b = ctx.enqueue("SAGA", "o-1/pay:a").await;
    let _other = ctx.enqueue("SAGA", "o-10/stock:a").await;
    let _case = ctx.enqueue("SAGA", "O-1/stock:a").await;
    let _wild = ctx.enqueue("SAGA", "oX1/stock:a").await;
    let exact = ctx.enqueue("SHIP", "o-1/").await;
    let pct = ctx.enqueue("SAGA", "100%/x").await;
    let ids = |tasks: Vec<Task>| tasks.into_iter().map(|t| t.id).collect::<Vec<_>>();
    let list = |f: TaskFilter| async move { ids(ctx.store.list(&f).await.unwrap()) };
    let prefix = TaskFilter::default().biz_key_prefix("o-1/");
    assert_eq!(list(prefix.clone()).await, vec![a, b, exact]);
    assert_eq!(list(prefix.clone().event_type("SAGA")).await, vec![a, b]);
    assert_eq!(list(prefix.clone().after_id(a).limit(1)).await, vec![b]);
    assert_eq!(
        list(prefix.clone().status(Status::Failed)).await,
        Vec::<TaskId>::new()
    );
    assert_eq!(
        list(TaskFilter::default().biz_key_prefix("o_1")).await,
        Vec::<TaskId>::new()
    );
    assert_eq!(
        list(TaskFilter::default().biz_key_prefix("100%")).await,
        vec![pct]
    );
    assert_eq!(ctx.store.count_matching(&prefix).await.unwrap(), 3);
    assert_kind(
        ctx.store
            .list(&TaskFilter::default().biz_key_prefix(""))
            .await,
        ErrorKind::InvalidInput,
        "biz_key_prefix",
    );
}

/// backlog: the counts of every status but succeeded, per event type, and the oldest
/// due pending age — the same numbers `stats` has for them — without counting the
/// succeeded rows.
pub async fn backlog_counts_every_status_but_succeeded<H: Harness>(ctx: &Ctx<H>) {
    for i in 0..3 {
        let id = ctx.enqueue("PAY", &format!("done{i}")).await;
        let l = ctx.claim(id).await.lease();
        ctx.store.mark(&[Mark::success(l)]).await.unwrap();
    }
    let failed = ctx.enqueue("PAY", "failed").await;
    let l = ctx.claim(failed).await.lease();
    ctx.store.mark(&[Mark::fail(l, "boom")]).await.unwrap();
    let running = ctx.enqueue("SHIP", "running").await;
    ctx.claim(running).await;
    let cancelled = ctx.enqueue("SHIP", "cancelled").await;
    ctx.store
        .cancel(cancelled, &backstop_core::Audit::new("ops", "test"))
        .await
        .unwrap();
    let due = ctx.enqueue("SHIP", "due").await;
    ctx.backdate(due, TimeColumn::NextRunAt, MINUTE).await;
    ctx.store
        .enqueue(NewTask::new("SHIP", "later").delay(HOUR))
        .await
        .unwrap();

    let b = ctx.store.backlog().await.unwrap();
    let s = ctx.store.stats().await.unwrap();
    assert_eq!(
        b.count(Status::Succeeded),
        0,
        "succeeded rows are not counted"
    );
    assert_eq!(s.count(Status::Succeeded), 3);
    for status in [
        Status::Pending,
        Status::Running,
        Status::Failed,
        Status::Cancelled,
    ] {
        for et in ["PAY", "SHIP"] {
            assert_eq!(
                b.count_for(et, status),
                s.count_for(et, status),
                "{et} {status}"
            );
        }
    }
    assert_eq!(
        (
            b.count_for("PAY", Status::Failed),
            b.count_for("SHIP", Status::Running),
            b.count_for("SHIP", Status::Cancelled),
            b.count_for("SHIP", Status::Pending)
        ),
        (1, 1, 1, 2)
    );
    let age = b.oldest_due_pending.expect("a due task");
    assert!(age >= MINUTE && age < MINUTE + CLOCK_SLACK * 4, "{age:?}");
    assert_eq!(
        b.oldest_due_pending.map(|a| a.as_secs()),
        s.oldest_due_pending.map(|a| a.as_secs())
    );
}

/// throughput: tasks finished (succeeded, failed) per event type, status and bucket of
/// the window, by `updated_at`; pending, running and cancelled ones and those finished
/// before the window are not counted.
pub async fn throughput_counts_finished_tasks_per_bucket<H: Harness>(ctx: &Ctx<H>) {
    let minute = MINUTE;
    let finish = |event_type: &'static str, key: String, ok: bool, ago: Duration| async move {
        let id = ctx.enqueue(event_type, &key).await;
        let l = ctx.claim(id).await.lease();
        let mark = if ok {
            Mark::success(l)
        } else {
            Mark::fail(l, "boom")
        };
        assert_eq!(ctx.store.mark(&[mark]).await.unwrap(), vec![true]);
        if !ago.is_zero() {
            ctx.backdate(id, TimeColumn::UpdatedAt, ago).await;
        }
    };
    for i in 0..3 {
        finish("PAY", format!("now{i}"), true, Duration::ZERO).await;
    }
    finish("PAY", "fail-now".into(), false, Duration::ZERO).await;
    finish("PAY", "two-min".into(), true, 2 * minute + minute / 2).await;
    finish("SHIP", "nine-min".into(), true, 9 * minute + minute / 2).await;
    finish("SHIP", "too-old".into(), true, 11 * minute).await;
    ctx.enqueue("SHIP", "pending").await;
    let running = ctx.enqueue("SHIP", "running").await;
    ctx.claim(running).await;

    let got = ctx.store.throughput(10 * minute, minute).await.unwrap();
    let seen: Vec<(&str, Status, u32, u64)> = got
        .iter()
        .map(|t| (t.event_type.as_str(), t.status, t.bucket, t.count))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("PAY", Status::Succeeded, 0, 3),
            ("PAY", Status::Succeeded, 2, 1),
            ("PAY", Status::Failed, 0, 1),
            ("SHIP", Status::Succeeded, 9, 1),
        ]
    );
    // one bucket for the whole window
    let whole = ctx.store.throughput(HOUR, HOUR).await.unwrap();
    let total: u64 = whole.iter().map(|t| t.count).sum();
    assert_eq!(total, 7);
    assert!(whole.iter().all(|t| t.bucket == 0));
    assert_kind(
        ctx.store.throughput(minute, HOUR).await,
        ErrorKind::InvalidInput,
        "at most the window",
    );
}

/// register_event_types records the fleet's handled types: first seen kept, last seen
/// moved on; bad types refused, nothing written.
pub async fn register_event_types_records_the_fleets_handlers<H: Harness>(ctx: &Ctx<H>) {
    assert!(ctx.store.event_types().await.unwrap().is_empty());
    let t0 = Utc::now();
    ctx.store
        .register_event_types(&["PAY".into(), "MAIL".into(), "PAY".into()])
        .await
        .unwrap();
    let first = ctx.store.event_types().await.unwrap();
    let names: Vec<&str> = first.iter().map(|t| t.event_type.as_str()).collect();
    assert_eq!(names, vec!["MAIL", "PAY"]);
    for t in &first {
        assert_between("first_seen", t.first_seen, t0, Utc::now());
        assert_eq!(t.first_seen, t.last_seen);
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    ctx.store
        .register_event_types(&["PAY".into(), "SHIP".into()])
        .await
        .unwrap();
    let second = ctx.store.event_types().await.unwrap();
    assert_eq!(second.len(), 3);
    let pay = second.iter().find(|t| t.event_type == "PAY").unwrap();
    assert_eq!(pay.first_seen, first[1].first_seen);
    assert!(pay.last_seen > first[1].last_seen);
    assert_kind(
        ctx.store.register_event_types(&["bad type".into()]).await,
        ErrorKind::InvalidInput,
        "event_type",
    );
    assert_eq!(ctx.store.event_types().await.unwrap().len(), 3);
}

/// count_matching: how many tasks each filter matches, exactly what `list` pages through
/// for it (every condition, the limit aside); a filter `list` refuses is refused.
pub async fn count_matching_counts_what_list_pages_through<H: Harness>(ctx: &Ctx<H>) {
    let all = TaskFilter::default();
    assert_eq!(ctx.store.count_matching(&all).await.unwrap(), 0);
    let mut a = Vec::new();
    for i in 0..7 {
        a.push(ctx.enqueue("A", &format!("{i}")).await);
    }
    let b = ctx.enqueue("B", "0").await;
    for (id, error) in [
        (a[1], "smtp: refused"),
        (a[2], "smtp: timeout"),
        (b, "db down"),
    ] {
        let l = ctx.claim(id).await.lease();
        ctx.store.mark_fail(l, error).await.unwrap();
    }
    ctx.backdate(a[6], TimeColumn::UpdatedAt, HOUR).await;
    let filters = [
        all.clone(),
        all.clone().limit(2), // the limit pages; it does not bound the count
        all.clone().status(Status::Failed),
        all.clone().status(Status::Pending).event_type("A"),
        all.clone().event_type("B"),
        all.clone().biz_key("3"),
        all.clone().error_contains("smtp"),
        all.clone().older_than(MINUTE),
        all.clone().after_id(a[4]),
        all.clone().status(Status::Succeeded),
    ];
    let expected = [8, 8, 3, 5, 1, 1, 2, 1, 3, 0];
    for (filter, want) in filters.iter().zip(expected) {
        let n = ctx.store.count_matching(filter).await.unwrap();
        assert_eq!(n, want, "{filter:?}");
        // what list pages through for the same filter, a page at a time
        let mut seen = 0;
        let mut page = filter.clone().limit(3);
        loop {
            let got = ctx.store.list(&page).await.unwrap();
            seen += got.len() as u64;
            match got.last() {
                Some(t) if got.len() == 3 => page = page.after_id(t.id),
                _ => break,
            }
        }
        assert_eq!(
            seen, n,
            "list pages through what count_matching counts: {filter:?}"
        );
    }
    let bad = all.clone().event_type("bad type");
    assert_kind(
        ctx.store.count_matching(&bad).await,
        ErrorKind::InvalidInput,
        "event_type",
    );
}
