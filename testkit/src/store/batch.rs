//! The batch enqueue (`enqueue_many`, `enqueue_many_in`): each task answered as `enqueue`
//! answers it, in one transaction, validation first.

use backstop_core::limits::MAX_ENQUEUE_MANY;
use backstop_core::{Dedup, Enqueued, Priority};

use super::*;
use crate::TxPath;

/// `n` fresh tasks `prefix0…` of type `E`, each with its own payload.
fn fresh(prefix: &str, n: usize) -> Vec<NewTask> {
    (0..n)
        .map(|i| NewTask::new("E", format!("{prefix}{i}")).json(&i))
        .collect()
}

/// Each answer names its own task (type, key, payload), the ids all differ, and each row
/// is new and pending; returns the rows.
async fn assert_created<H: Harness>(
    ctx: &Ctx<H>,
    tasks: &[NewTask],
    got: &[Enqueued],
) -> Vec<Task> {
    assert_eq!(got.len(), tasks.len(), "one answer per task");
    let ids: HashSet<TaskId> = got.iter().map(|e| e.id).collect();
    assert_eq!(ids.len(), tasks.len(), "every task its own id");
    let mut rows = Vec::new();
    for (i, (task, e)) in tasks.iter().zip(got).enumerate() {
        assert_eq!(
            (e.created, e.status, e.replaced),
            (true, Status::Pending, false),
            "task {i}"
        );
        assert_eq!(e.event_type, task.event_type(), "task {i}");
        let t = ctx.task(e.id).await;
        assert_eq!(
            (
                t.event_type.as_str(),
                t.biz_key.as_str(),
                t.payload.as_str()
            ),
            (task.event_type(), task.biz_key(), task.payload()),
            "task {i}'s answer names another row"
        );
        assert_eq!(
            (t.status, t.attempts, t.lease, &t.owner),
            (Status::Pending, 0, 0, &None),
            "task {i}"
        );
        rows.push(t);
    }
    rows
}

/// enqueue_many: 300 tasks (multi-row inserts of 256, 32, 8 and 4) each stored as
/// `enqueue` stores it: its type, key, payload, retry policy, priority, timeout and due
/// time (now, after its delay, at its run-at); the answers in the batch's order.
pub async fn enqueue_many_stores_each_task_as_enqueue_does<H: Harness>(ctx: &Ctx<H>) {
    let run_at = Utc::now() + chrono_dur(HOUR);
    let policy = RetryPolicy::exponential(7, Duration::from_millis(1500))
        .with_max_interval(Duration::from_secs(90));
    let tasks: Vec<NewTask> = (0..300)
        .map(|i| {
            let t = NewTask::new(["A", "B", "C"][i % 3], format!("k{i}"))
                .json(&serde_json::json!({ "i": i }));
            match i % 5 {
                0 => t.delay(MINUTE),
                1 => t.run_at(run_at),
                2 => t.retry(policy).priority(Priority::HIGH),
                3 => t.timeout(Duration::from_secs(7)),
                _ => t,
            }
        })
        .collect();
    let t0 = Utc::now();
    let got = ctx.store.enqueue_many(&tasks).await.unwrap();
    let t1 = Utc::now();
    let rows = assert_created(ctx, &tasks, &got).await;
    let slack = chrono_dur(CLOCK_SLACK);
    for (i, t) in rows.iter().enumerate() {
        assert_between("created_at", t.created_at, t0 - slack, t1 + slack);
        let due = match i % 5 {
            0 => t.created_at + chrono_dur(MINUTE),
            1 => run_at,
            _ => t.created_at,
        };
        assert!(
            (t.next_run_at - due).num_milliseconds().abs() <= 1,
            "task {i}: due at {}, expected {due}",
            t.next_run_at
        );
        let (retry, priority, timeout) = match i % 5 {
            2 => (policy, Priority::HIGH, None),
            3 => (
                RetryPolicy::default(),
                Priority::NORMAL,
                Some(Duration::from_secs(7)),
            ),
            _ => (RetryPolicy::default(), Priority::NORMAL, None),
        };
        assert_eq!(
            (t.retry, t.priority, t.timeout),
            (retry, priority, timeout),
            "task {i}"
        );
    }
    assert_eq!(ctx.count_all().await, 300);
    // the ones due now are claimable, in claim order
    let due: Vec<TaskId> = got
        .iter()
        .enumerate()
        .filter(|(i, e)| i % 5 > 1 && e.event_type == "A")
        .map(|(_, e)| e.id)
        .collect();
    let claimed = ctx
        .store
        .claim_batch(&owner("w"), &["A".to_owned()], MAX_BATCH)
        .await
        .unwrap();
    let claimed: HashSet<TaskId> = claimed.iter().map(|t| t.id).collect();
    assert_eq!(claimed, due.into_iter().collect::<HashSet<_>>());
}

/// enqueue_many: a batch whose tasks share every value but their key, payload and due
/// time (one type, one retry policy, priority, timeout, tags, metadata, partition key),
/// some with a delay and some without, then one whose tasks share their due time too:
/// each row stores the shared values and its own (a backend may bind the shared values
/// once per insert: SQLite does).
pub async fn enqueue_many_stores_the_values_a_uniform_batch_shares<H: Harness>(ctx: &Ctx<H>) {
    let policy = RetryPolicy::exponential(7, Duration::from_millis(1500))
        .with_max_interval(Duration::from_secs(90));
    let task = |key: String, i: usize| {
        NewTask::new("U", key)
            .json(&serde_json::json!({ "i": i }))
            .retry(policy)
            .priority(Priority::HIGH)
            .timeout(Duration::from_secs(7))
            .tags(["u", "batch"])
            .metadata(&serde_json::json!({ "tenant": "acme" }))
            .partition("p1")
    };
    // their own due times: every other one a minute away
    let mixed: Vec<NewTask> = (0..300)
        .map(|i| match i % 2 {
            0 => task(format!("m{i}"), i).delay(MINUTE),
            _ => task(format!("m{i}"), i),
        })
        .collect();
    // one due time for all
    let same: Vec<NewTask> = (0..300).map(|i| task(format!("s{i}"), i)).collect();
    for (batch, delayed) in [(&mixed, true), (&same, false)] {
        let got = ctx.store.enqueue_many(batch).await.unwrap();
        let rows = assert_created(ctx, batch, &got).await;
        for (i, t) in rows.iter().enumerate() {
            let due = match delayed && i % 2 == 0 {
                true => t.created_at + chrono_dur(MINUTE),
                false => t.created_at,
            };
            assert!(
                (t.next_run_at - due).num_milliseconds().abs() <= 1,
                "task {i}: due at {}, expected {due}",
                t.next_run_at
            );
            assert_eq!(
                (
                    t.retry,
                    t.priority,
                    t.timeout,
                    &t.tags,
                    t.partition.as_deref()
                ),
                (
                    policy,
                    Priority::HIGH,
                    Some(Duration::from_secs(7)),
                    &vec!["batch".to_owned(), "u".to_owned()],
                    Some("p1")
                ),
                "task {i}"
            );
            let meta: serde_json::Value =
                serde_json::from_str(t.metadata.as_deref().unwrap_or("null")).unwrap();
            assert_eq!(meta, serde_json::json!({ "tenant": "acme" }), "task {i}");
        }
    }
    assert_eq!(ctx.count_all().await, 600);
}

/// enqueue_many: a batch of 1 100 plain tasks (`NewTask::new` with a payload, of two
/// event types, some with a trace context: a backend may write their settings as
/// constants, every backend does) stores each row as `enqueue` stores the same task:
/// every setting, due at its creation, and its own trace context; the batch's tasks are
/// claimable at once. So does a batch of one event type and one trace context (SQLite
/// binds those once for the whole insert).
pub async fn enqueue_many_stores_a_plain_batch_as_enqueue_does<H: Harness>(ctx: &Ctx<H>) {
    let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let task = |key: String, i: usize| {
        let t = NewTask::new(["P", "Q"][i % 2], key).json(&serde_json::json!({ "i": i }));
        match i % 3 {
            0 => t.traceparent(trace),
            _ => t,
        }
    };
    let alone = ctx.store.enqueue(task("alone".into(), 0)).await.unwrap();
    let alone = ctx.task(alone.id).await;
    // past the largest multi-row insert of every backend (PostgreSQL's 1 000, MariaDB's
    // and SQLite's 1 024 rows)
    let tasks: Vec<NewTask> = (0..1100).map(|i| task(format!("p{i}"), i)).collect();
    // one event type, one trace context
    let uniform: Vec<NewTask> = (0..300)
        .map(|i| {
            NewTask::new("U", format!("u{i}"))
                .json(&serde_json::json!({ "i": i }))
                .traceparent(trace)
        })
        .collect();
    let mut rows = Vec::new();
    for batch in [&tasks, &uniform] {
        let got = ctx.store.enqueue_many(batch).await.unwrap();
        rows.extend(assert_created(ctx, batch, &got).await);
    }
    assert_eq!(rows.len(), 1400);
    for (i, t) in rows.iter().enumerate() {
        assert_eq!(t.next_run_at, t.created_at, "task {i}: due at its creation");
        assert_eq!(
            (
                t.retry,
                t.priority,
                t.timeout,
                &t.tags,
                &t.metadata,
                &t.partition,
                &t.order_key,
                t.when_parked
            ),
            (
                alone.retry,
                alone.priority,
                alone.timeout,
                &alone.tags,
                &alone.metadata,
                &alone.partition,
                &alone.order_key,
                alone.when_parked
            ),
            "task {i}: the settings of the same task enqueued alone"
        );
        let expected = (i % 3 == 0 || i >= 1100).then(|| trace.to_owned());
        assert_eq!(t.traceparent, expected, "task {i}: its own trace context");
    }
    let uniform_types: Vec<&str> = rows[1100..].iter().map(|t| t.event_type.as_str()).collect();
    assert_eq!(uniform_types, vec!["U"; 300]);
    let claimed = ctx
        .store
        .claim_batch(&owner("w"), &["P".to_owned(), "Q".to_owned()], MAX_BATCH)
        .await
        .unwrap();
    assert_eq!(claimed.len(), MAX_BATCH, "every task due at once");
    let rest = ctx
        .store
        .claim_batch(&owner("w"), &["P".to_owned(), "Q".to_owned()], MAX_BATCH)
        .await
        .unwrap();
    assert_eq!(rest.len(), 101, "every task due at once");
    let uniform_claimed = ctx
        .store
        .claim_batch(&owner("w"), &["U".to_owned()], MAX_BATCH)
        .await
        .unwrap();
    assert_eq!(uniform_claimed.len(), 300, "every task due at once");
}

/// enqueue_many: duplicates are answered as `enqueue` answers them, whether the key is
/// held before the batch (pending: its id; finished: a new task; pending with
/// `replace_pending`: its payload replaced) or by an earlier task of the same batch; an
/// order key makes its first task pending and the next waiting. Held keys sit in the
/// middle of full multi-row chunks.
pub async fn enqueue_many_answers_duplicates_as_enqueue_does<H: Harness>(ctx: &Ctx<H>) {
    let held = ctx
        .store
        .enqueue(NewTask::new("E", "held").json(&0))
        .await
        .unwrap();
    let done = ctx.store.enqueue(NewTask::new("E", "done")).await.unwrap();
    let running = ctx.claim(done.id).await;
    assert!(ctx.store.mark_success(running.lease()).await.unwrap());
    let replace = ctx
        .store
        .enqueue(NewTask::new("E", "swap").json(&0))
        .await
        .unwrap();
    let forever = ctx.store.enqueue(NewTask::new("E", "kept")).await.unwrap();
    let running = ctx.claim(forever.id).await;
    assert!(ctx.store.mark_success(running.lease()).await.unwrap());

    let mut tasks = fresh("a", 100);
    tasks.insert(10, NewTask::new("E", "held").json(&1));
    tasks.insert(20, NewTask::new("E", "done").json(&1));
    tasks.insert(30, NewTask::new("E", "swap").json(&1).replace_pending(true));
    tasks.insert(40, NewTask::new("E", "kept").dedup(Dedup::Forever));
    tasks.insert(50, NewTask::new("E", "twice").json(&1));
    tasks.insert(60, NewTask::new("E", "twice").json(&2));
    tasks.insert(70, NewTask::new("E", "o1").order_key("line"));
    tasks.insert(80, NewTask::new("E", "o2").order_key("line"));
    tasks.extend(fresh("b", 150));
    let before = ctx.count_all().await;
    let got = ctx.store.enqueue_many(&tasks).await.unwrap();
    assert_eq!(got.len(), tasks.len());
    let answer = |i: usize| (got[i].id, got[i].created, got[i].status, got[i].replaced);

    assert_eq!(answer(10), (held.id, false, Status::Pending, false), "held");
    assert_eq!(
        ctx.task(held.id).await.payload,
        "0",
        "a duplicate changes nothing"
    );
    let (id, created, status, _) = answer(20);
    assert!(
        created && status == Status::Pending && id != done.id,
        "done: {:?}",
        got[20]
    );
    assert_eq!(ctx.task(id).await.payload, "1");
    assert_eq!(
        ctx.task(done.id).await.status,
        Status::Succeeded,
        "the finished task keeps its row"
    );
    assert_eq!(
        answer(30),
        (replace.id, false, Status::Pending, true),
        "swap"
    );
    assert_eq!(ctx.task(replace.id).await.payload, "1", "payload replaced");
    assert_eq!(
        answer(40),
        (forever.id, false, Status::Succeeded, false),
        "kept"
    );
    let twice = answer(50);
    assert_eq!((twice.1, twice.2), (true, Status::Pending), "twice");
    assert_eq!(
        answer(60),
        (twice.0, false, Status::Pending, false),
        "the second twice"
    );
    assert_eq!(ctx.task(twice.0).await.payload, "1");
    assert_eq!(
        (got[70].created, got[70].status),
        (true, Status::Pending),
        "o1"
    );
    assert_eq!(
        (got[80].created, got[80].status),
        (true, Status::Waiting),
        "o2"
    );
    assert_eq!(ctx.task(got[80].id).await.status, Status::Waiting);

    let plain: Vec<usize> = (0..tasks.len())
        .filter(|i| ![10, 20, 30, 40, 50, 60, 70, 80].contains(i))
        .collect();
    let plain_tasks: Vec<NewTask> = plain.iter().map(|&i| tasks[i].clone()).collect();
    let plain_got: Vec<Enqueued> = plain.iter().map(|&i| got[i].clone()).collect();
    assert_created(ctx, &plain_tasks, &plain_got).await;
    // new rows: the 250 fresh, done's successor, twice, o1, o2
    assert_eq!(ctx.count_all().await, before + 254);

    // the same batch again: every task a duplicate, nothing written
    let again = ctx.store.enqueue_many(&tasks).await.unwrap();
    for (i, (a, g)) in again.iter().zip(&got).enumerate() {
        assert_eq!((a.id, a.created), (g.id, false), "task {i} again: {a:?}");
    }
    assert_eq!(ctx.count_all().await, before + 254);
}

/// enqueue_many: one invalid task (or more than MAX_ENQUEUE_MANY) refuses the whole batch
/// with InvalidInput naming it, and nothing is written; an empty batch answers nothing.
pub async fn enqueue_many_refuses_a_batch_with_bad_input_and_writes_nothing<H: Harness>(
    ctx: &Ctx<H>,
) {
    assert!(ctx.store.enqueue_many(&[]).await.unwrap().is_empty());
    let mut tasks = fresh("k", 20);
    tasks[7] = NewTask::new("E", "bad").payload_raw("{not json");
    assert_kind(
        ctx.store.enqueue_many(&tasks).await,
        ErrorKind::InvalidInput,
        "task 7",
    );
    tasks[7] = NewTask::new("bad type", "k7");
    assert_kind(
        ctx.store.enqueue_many(&tasks).await,
        ErrorKind::InvalidInput,
        "task 7",
    );
    let too_many = fresh("m", MAX_ENQUEUE_MANY + 1);
    assert_kind(
        ctx.store.enqueue_many(&too_many).await,
        ErrorKind::InvalidInput,
        "at most",
    );
    assert_nothing_written(ctx).await;
}

/// the transactional batch, along every path: committed, every task and the business row
/// exist, answered as `enqueue_many` answers (a key held before, a key twice in the
/// batch); rolled back, none of them; bad input refused before anything runs.
pub async fn tx_enqueue_many_commits_and_rolls_back_with_the_business_rows<H: Harness>(
    ctx: &Ctx<H>,
) {
    let held = ctx.store.enqueue(NewTask::new("E", "held")).await.unwrap();
    for path in TxPath::ALL {
        let before = ctx.count_all().await;
        let mut tasks = fresh(&format!("{path}-"), 40);
        tasks[5] = NewTask::new("E", "held");
        tasks[6] = NewTask::new("E", format!("{path}-twice"));
        tasks[9] = NewTask::new("E", format!("{path}-twice"));
        let got = ctx
            .enqueue_many_in_tx_via(path, &format!("{path}-many"), tasks.clone(), true)
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(got.len(), 40, "{path}");
        assert_eq!((got[5].id, got[5].created), (held.id, false), "{path}");
        assert!(got[6].created, "{path}");
        assert_eq!((got[9].id, got[9].created), (got[6].id, false), "{path}");
        let fresh_at: Vec<usize> = (0..40).filter(|i| ![5, 9].contains(i)).collect();
        let (t, g): (Vec<_>, Vec<_>) = fresh_at
            .iter()
            .map(|&i| (tasks[i].clone(), got[i].clone()))
            .unzip();
        assert_created(ctx, &t, &g).await;
        assert!(
            ctx.harness
                .business_row_exists(&ctx.db, &format!("{path}-many"))
                .await,
            "{path}"
        );
        assert_eq!(ctx.count_all().await, before + 38, "{path}");

        let rolled_back = ctx
            .enqueue_many_in_tx_via(
                path,
                &format!("{path}-undone"),
                fresh(&format!("{path}-r"), 30),
                false,
            )
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(rolled_back.iter().all(|e| e.created), "{path}");
        for e in &rolled_back {
            assert!(
                ctx.store.get(e.id).await.unwrap().is_none(),
                "{path}: rolled back"
            );
        }
        assert!(
            !ctx.harness
                .business_row_exists(&ctx.db, &format!("{path}-undone"))
                .await,
            "{path}"
        );
        let mut bad = fresh(&format!("{path}-x"), 3);
        bad[2] = NewTask::new("", "x");
        let refused = ctx
            .enqueue_many_in_tx_via(path, &format!("{path}-bad"), bad, true)
            .await;
        assert_kind(refused, ErrorKind::InvalidInput, "task 2");
        assert_eq!(ctx.count_all().await, before + 38, "{path}: nothing more");
    }
}

/// 4 stores racing `enqueue_many` over the same 300 keys (and 50 keys of their own
/// each), 3 rounds: every key one task, created by exactly one racer, and every racer
/// answers each shared key with that task's id.
pub async fn concurrent_batches_of_shared_keys_create_each_key_once<H: Harness>(ctx: &Ctx<H>) {
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(ctx.new_store().await);
    }
    for round in 0..3 {
        let barrier = Arc::new(tokio::sync::Barrier::new(stores.len()));
        let mut handles = Vec::new();
        for (r, s) in stores.iter().enumerate() {
            let (s, barrier) = (s.clone(), Arc::clone(&barrier));
            let mut tasks = fresh(&format!("r{round}-shared-"), 300);
            tasks.extend(fresh(&format!("r{round}-own{r}-"), 50));
            handles.push(tokio::spawn(async move {
                barrier.wait().await;
                s.enqueue_many(&tasks).await.unwrap()
            }));
        }
        let answers = within("the racing batches", joined("the racers", handles)).await;
        for i in 0..350 {
            let created = answers.iter().filter(|a| a[i].created).count();
            if i < 300 {
                assert_eq!(
                    created, 1,
                    "round {round}: shared key {i} created by one racer"
                );
                let ids: HashSet<TaskId> = answers.iter().map(|a| a[i].id).collect();
                assert_eq!(ids.len(), 1, "round {round}: shared key {i} one id for all");
            } else {
                assert_eq!(
                    created, 4,
                    "round {round}: own key {i} created by its racer"
                );
            }
        }
        assert_eq!(ctx.count_all().await, (round as u64 + 1) * 500);
    }
}
