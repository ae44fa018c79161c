//! Validation first, for every backend at once: the store layer in core checks every
//! operation's input before any driver runs. A tripwire driver counts its calls and
//! re-checks every argument it gets against the contract's limits, failing the test on
//! anything out of bounds; bad input must come back as `InvalidInput` with no call made,
//! empty input must come back empty with no call made, and input at the limits must
//! arrive intact.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use backstop_core::driver::{
    AgedBatch, Backend, Buckets, Change, Checked, Claim, Driver, EnqueueSql, EnqueueStep, Inserted,
    RawAudit, RawBarrier, RawSaga, RawSagaStep, RawStats, RawTask, SagaWrite, SagaWritten,
};
use backstop_core::limits::{
    MAX_BATCH, MAX_BRANCH_ID_BYTES, MAX_ENQUEUE_MANY, MAX_ERROR_BYTES, MAX_EVENT_TYPES,
    MAX_EVENT_TYPE_BYTES, MAX_INTERVAL, MAX_LEASES, MAX_OPERATOR_BYTES, MAX_REASON_BYTES,
    MAX_SAGA_KEY_BYTES,
};
use backstop_core::tx::{Answer, Dialect, Returns, Statement};
use backstop_core::TaskStoreExt;
use backstop_core::{
    async_trait, Audit, ErrorKind, Lease, Mark, MarkAction, NewTask, Owner, Queue, QueueChange,
    QueueLogEntry, Recycled, Result, RetryPolicy, SagaCommand, SagaDef, SagaFilter, SagaId,
    SagaStart, SagaStarted, SagaStatus, SagaStep, Status, StepOutcome, StepReport, StoreConfig,
    TaskEdit, TaskFilter, TaskId, TaskStore,
};
use backstop_core::{Transactional, TxConnection};

/// Fails the test when called with input outside the contract; counts its calls.
struct Tripwire {
    config: StoreConfig,
    calls: AtomicUsize,
}

impl Tripwire {
    fn called(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
    }
}

fn limit_ok(limit: usize) {
    assert!(
        (1..=MAX_BATCH).contains(&limit),
        "limit {limit} reached the driver"
    );
}

fn audit_ok(a: &Audit) {
    assert!(
        (1..=MAX_OPERATOR_BYTES).contains(&a.operator.len()) && a.reason.len() <= MAX_REASON_BYTES,
        "audit {a:?} reached the driver"
    );
}

fn age_ok(d: Duration) {
    assert!(d <= MAX_INTERVAL, "age {d:?} reached the driver");
}

/// The enqueue's statements: building one counts as a call, and checks the task.
impl EnqueueSql for Tripwire {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }
    fn statement<'a>(
        &'a self,
        step: EnqueueStep<'a>,
        _params: Vec<backstop_core::tx::Value<'a>>,
    ) -> Statement<'a> {
        self.called();
        if let EnqueueStep::Insert { task, .. }
        | EnqueueStep::ReadExisting(task)
        | EnqueueStep::Replace(_, task) = step
        {
            task.validate(self.config.max_payload_bytes)
                .expect("an invalid task reached the driver");
        }
        Statement::new("INSERT", Vec::new(), Returns::Row)
    }
}

/// How the test's statements spell a list's conditions (PostgreSQL's way).
const LIST: backstop_core::driver::ListDialect = backstop_core::driver::ListDialect {
    placeholder: |n| format!("${n}"),
    contains: |p| format!("strpos(last_error, {p}) > 0"),
    starts_with: |p| format!("starts_with(biz_key, {p})"),
    has_tag: |p| format!("strpos(tags, ',' || {p} || ',') > 0"),
    metadata_is: |k, p| format!("metadata::jsonb ->> '{k}' = {p}"),
    older_than: |p| format!("updated_at < now() - {p}"),
    backlog_order: "id",
    age: |d| backstop_core::tx::Value::BigInt(Some(d.as_millis() as i64)),
};

/// A caller's connection that answers every statement with a new task 1, counting runs.
struct Conn(usize);

#[async_trait]
impl TxConnection for Conn {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }
    async fn run(&mut self, _statement: &Statement<'_>) -> Result<Answer> {
        self.0 += 1;
        Ok(Answer::Row(Some(vec![1])))
    }
}

#[async_trait]
impl Driver for Tripwire {
    fn config(&self) -> &StoreConfig {
        &self.config
    }
    fn enqueue_sql(&self) -> &dyn EnqueueSql {
        self
    }
    async fn migrate(&self, _target: u32) -> Result<()> {
        self.called();
        Ok(())
    }
    async fn enqueue(&self, task: Checked<&NewTask>) -> Result<Inserted> {
        self.called();
        task.validate(self.config.max_payload_bytes)
            .expect("an invalid task reached the driver");
        Ok(Inserted::created(1))
    }
    async fn enqueue_many(&self, tasks: Checked<&[NewTask]>) -> Result<Vec<Inserted>> {
        self.called();
        assert!(
            (1..=MAX_ENQUEUE_MANY).contains(&tasks.len()),
            "{} tasks reached the driver",
            tasks.len()
        );
        for task in tasks.iter() {
            task.validate(self.config.max_payload_bytes)
                .expect("an invalid task reached the driver");
        }
        Ok((1..=tasks.len() as i64).map(Inserted::created).collect())
    }
    async fn claim_by_id(&self, _id: TaskId, _owner: &Owner) -> Result<Option<RawTask>> {
        self.called();
        Ok(None)
    }
    async fn claim_batch(&self, claim: Checked<Claim<'_>>) -> Result<Vec<RawTask>> {
        self.called();
        limit_ok(claim.limit);
        let event_types = claim.event_types;
        assert!(
            (1..=MAX_EVENT_TYPES).contains(&event_types.len()),
            "{} event types reached the driver",
            event_types.len()
        );
        let mut distinct = event_types.to_vec();
        distinct.dedup();
        assert_eq!(distinct.len(), event_types.len(), "duplicate event types");
        for t in event_types.iter() {
            assert!(
                !t.is_empty() && t.len() <= MAX_EVENT_TYPE_BYTES && !t.contains(' '),
                "event type {t:?} reached the driver"
            );
        }
        Ok(Vec::new())
    }
    async fn recycle_dead(&self, batch: Checked<AgedBatch>) -> Result<Recycled> {
        self.called();
        age_ok(batch.older_than);
        limit_ok(batch.limit);
        Ok(Recycled::default())
    }
    async fn heartbeat(&self, leases: Checked<&[Lease]>) -> Result<Vec<bool>> {
        self.called();
        assert!((1..=MAX_LEASES).contains(&leases.len()));
        Ok(vec![true; leases.len()])
    }
    async fn set_output(&self, _lease: Lease, output: Checked<&str>) -> Result<bool> {
        self.called();
        assert!(output.len() <= backstop_core::limits::MAX_OUTPUT_BYTES);
        Ok(true)
    }
    async fn mark(&self, marks: Checked<&[Mark]>) -> Result<Vec<bool>> {
        self.called();
        assert!((1..=MAX_LEASES).contains(&marks.len()));
        for m in marks.iter() {
            if let Some(e) = m.action.error() {
                assert!(e.len() <= MAX_ERROR_BYTES, "an unbounded error text");
            }
            if let MarkAction::Retry { delay, .. } = &m.action {
                age_ok(*delay);
            }
        }
        Ok(vec![true; marks.len()])
    }
    async fn mark_and_claim(
        &self,
        marks: Checked<&[Mark]>,
        claim: Checked<Claim<'_>>,
    ) -> Result<(Vec<bool>, Option<Vec<RawTask>>)> {
        assert_eq!(
            claim.event_types.len(),
            1,
            "a claim after marks of one type"
        );
        assert!(claim.limit > 0, "a claim of nothing reached the driver");
        let flags = self.mark(marks).await?;
        self.claim_batch(claim).await?;
        Ok((flags, Some(Vec::new())))
    }
    async fn manual_reset(&self, _id: TaskId, stuck_after: Checked<Duration>) -> Result<Change> {
        self.called();
        age_ok(*stuck_after);
        Ok(Change::Missing)
    }
    async fn cancel(&self, _id: TaskId, audit: Checked<&Audit>) -> Result<Change> {
        self.called();
        audit_ok(&audit);
        Ok(Change::Missing)
    }

    async fn edit(
        &self,
        _id: TaskId,
        edit: Checked<&TaskEdit>,
        audit: Checked<&Audit>,
    ) -> Result<Change> {
        self.called();
        audit_ok(&audit);
        assert!(
            edit.due.is_some() || edit.payload.is_some(),
            "an empty edit reached the driver"
        );
        if let Some(backstop_core::Due::In(d)) = edit.due {
            age_ok(d);
        }
        Ok(Change::Missing)
    }

    async fn delete(&self, _id: TaskId, audit: Checked<&Audit>) -> Result<Change> {
        self.called();
        audit_ok(&audit);
        Ok(Change::Missing)
    }

    async fn reset(&self, _id: TaskId, from: [i16; 2], audit: Checked<&Audit>) -> Result<Change> {
        self.called();
        audit_ok(&audit);
        assert!(from.iter().all(|c| [2, 4].contains(c)), "{from:?}");
        Ok(Change::Missing)
    }

    async fn audit_log(&self, _id: TaskId) -> Result<Vec<RawAudit>> {
        self.called();
        Ok(Vec::new())
    }

    async fn get(&self, _id: TaskId) -> Result<Option<RawTask>> {
        self.called();
        Ok(None)
    }
    fn tasks_table(&self) -> (&str, &backstop_core::driver::ListDialect) {
        ("t", &LIST)
    }
    async fn run(&self, _statement: &Statement<'_>) -> Result<Answer> {
        self.called();
        Ok(Answer::Row(Some(vec![0])))
    }
    async fn list(&self, filter: Checked<&TaskFilter>) -> Result<Vec<RawTask>> {
        self.called();
        limit_ok(filter.limit);
        if let Some(age) = filter.older_than {
            age_ok(age);
        }
        Ok(Vec::new())
    }
    async fn stats(&self, _backlog_only: bool) -> Result<RawStats> {
        self.called();
        Ok(RawStats::default())
    }
    async fn throughput(&self, b: Checked<Buckets>) -> Result<Vec<(String, i64, i64, i64)>> {
        self.called();
        age_ok(b.window);
        assert!(b.bucket >= Duration::from_secs(1) && b.bucket <= b.window);
        assert_eq!(b.cap, backstop_core::limits::MAX_THROUGHPUT_ROWS);
        Ok(Vec::new())
    }
    async fn purge_finished(&self, status: Checked<i16>, batch: Checked<AgedBatch>) -> Result<u64> {
        self.called();
        assert!([1, 2, 4].contains(&*status));
        age_ok(batch.older_than);
        limit_ok(batch.limit);
        Ok(0)
    }

    async fn purge_audit(&self, batch: Checked<AgedBatch>) -> Result<u64> {
        self.called();
        age_ok(batch.older_than);
        limit_ok(batch.limit);
        Ok(0)
    }

    async fn purge_event_types(&self, batch: Checked<AgedBatch>) -> Result<u64> {
        self.called();
        age_ok(batch.older_than);
        limit_ok(batch.limit);
        Ok(0)
    }

    async fn purge_barrier(&self, batch: Checked<AgedBatch>) -> Result<u64> {
        self.called();
        age_ok(batch.older_than);
        limit_ok(batch.limit);
        Ok(0)
    }

    async fn barrier_records(&self, gid: Checked<&str>) -> Result<Vec<RawBarrier>> {
        self.called();
        assert!(
            !gid.is_empty() && gid.len() <= MAX_BRANCH_ID_BYTES,
            "{}",
            gid.len()
        );
        Ok(Vec::new())
    }
    async fn start_saga(&self, start: Checked<&SagaStart>) -> Result<SagaStarted> {
        self.called();
        panic!(
            "a start within limits never reaches this driver: {}",
            start.key()
        )
    }

    async fn saga(&self, name: Checked<&str>, key: Checked<&str>) -> Result<Option<RawSaga>> {
        self.called();
        assert!(!name.is_empty() && !key.is_empty() && key.len() <= MAX_SAGA_KEY_BYTES);
        Ok(None)
    }

    async fn saga_write(&self, write: Checked<&SagaWrite>) -> Result<SagaWritten> {
        self.called();
        panic!("a write within limits never reaches this driver: {write:?}")
    }

    async fn saga_steps(&self, _: SagaId) -> Result<Vec<RawSagaStep>> {
        self.called();
        Ok(Vec::new())
    }

    async fn saga_by_id(&self, _: SagaId) -> Result<Option<RawSaga>> {
        self.called();
        panic!("only a valid command reads a saga by id")
    }

    async fn sagas(&self, filter: Checked<&SagaFilter>) -> Result<Vec<RawSaga>> {
        self.called();
        limit_ok(filter.limit);
        Ok(Vec::new())
    }

    async fn saga_backlog(&self) -> Result<Vec<(String, i64, i64, i64)>> {
        self.called();
        Ok(Vec::new())
    }

    async fn saga_log(&self, _: SagaId) -> Result<Vec<RawAudit>> {
        self.called();
        Ok(Vec::new())
    }

    async fn delete_finished(&self, status: Checked<i16>, ids: Checked<&[TaskId]>) -> Result<u64> {
        self.called();
        assert!([1, 2, 4].contains(&*status));
        assert!((1..=MAX_BATCH).contains(&ids.len()));
        Ok(0)
    }
    async fn release_order_keys(&self, keys: Checked<&[String]>) -> Result<Vec<TaskId>> {
        self.called();
        assert!((1..=MAX_BATCH).contains(&keys.len()));
        Ok(Vec::new())
    }
    async fn register_event_types(&self, event_types: Checked<&[String]>) -> Result<()> {
        self.called();
        assert!((1..=backstop_core::limits::MAX_EVENT_TYPES).contains(&event_types.len()));
        Ok(())
    }
    async fn event_types(
        &self,
    ) -> Result<
        Vec<(
            String,
            chrono::DateTime<chrono::Utc>,
            chrono::DateTime<chrono::Utc>,
        )>,
    > {
        self.called();
        Ok(Vec::new())
    }
    async fn order_keys(&self, _after: Option<&str>, limit: Checked<usize>) -> Result<Vec<String>> {
        self.called();
        limit_ok(*limit);
        Ok(Vec::new())
    }
    async fn set_queue(
        &self,
        event_type: Checked<&str>,
        _: QueueChange,
        audit: Checked<&Audit>,
    ) -> Result<Queue> {
        self.called();
        event_type_ok(&event_type);
        audit_ok(&audit);
        Err(backstop_core::Error::new(
            ErrorKind::Unexpected,
            "set_queue",
            "the tripwire stores no queue",
        ))
    }
    async fn queues(&self) -> Result<Vec<Queue>> {
        self.called();
        Ok(Vec::new())
    }
    async fn queue_log(&self, event_type: Checked<&str>) -> Result<Vec<QueueLogEntry>> {
        self.called();
        event_type_ok(&event_type);
        Ok(Vec::new())
    }
}

fn event_type_ok(t: &str) {
    assert!(
        !t.is_empty() && t.len() <= MAX_EVENT_TYPE_BYTES && !t.contains(' '),
        "event type {t:?} reached the driver"
    );
}

struct Store(Tripwire);

impl Backend for Store {
    fn driver(&self) -> &dyn Driver {
        &self.0
    }
}

fn store() -> Store {
    Store(Tripwire {
        config: StoreConfig::default().max_payload_bytes(100),
        calls: AtomicUsize::new(0),
    })
}

impl Store {
    fn calls(&self) -> usize {
        self.0.calls.load(Ordering::SeqCst)
    }
}

#[track_caller]
fn refused<T: std::fmt::Debug>(r: Result<T>, op: &str) {
    let e = r.expect_err("bad input must be refused");
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert_eq!(e.operation(), op, "{e}");
}

fn lease(id: i64) -> Lease {
    Lease {
        task_id: id,
        token: 1,
    }
}

#[tokio::test]
async fn invalid_input_reaches_no_driver() {
    let s = store();
    let owner = Owner::new("w").unwrap();
    let too_old = MAX_INTERVAL + Duration::from_secs(1);
    for task in [
        NewTask::new("", "k"),
        NewTask::new("a".repeat(MAX_EVENT_TYPE_BYTES + 1), "k"),
        NewTask::new("has space", "k"),
        NewTask::new("E", ""),
        NewTask::new("E", "a\u{0}b"),
        NewTask::new("E", "k").payload_raw("{not json"),
        NewTask::new("E", "k").json(&"x".repeat(200)),
        NewTask::new("E", "k").retry(RetryPolicy::fixed(0, Duration::ZERO)),
        NewTask::new("E", "k").delay(too_old),
        NewTask::new("E", "k").tag("a,b"),
        NewTask::new("E", "k").tag("x".repeat(backstop_core::limits::MAX_TAG_BYTES + 1)),
        NewTask::new("E", "k").tags((0..=backstop_core::limits::MAX_TAGS).map(|i| format!("t{i}"))),
        NewTask::new("E", "k").metadata(&[1, 2]),
        NewTask::new("E", "k").metadata_raw("{nope"),
        NewTask::new("E", "k").metadata(&serde_json::json!({
            "a": "x".repeat(backstop_core::limits::MAX_METADATA_BYTES)
        })),
    ] {
        // in the caller's transaction too: nothing reaches its connection
        let mut conn = Conn(0);
        refused(s.enqueue_in(&mut conn, &task).await, "enqueue");
        assert_eq!(conn.0, 0, "{task:?} reached the caller's connection");
        // in a batch, one bad task refuses the whole batch, on either path
        let batch = vec![NewTask::new("E", "good"), task.clone()];
        let mut conn = Conn(0);
        let e = s.enqueue_many_in(&mut conn, &batch).await.unwrap_err();
        assert!(e.message().starts_with("task 1 of the batch:"), "{e}");
        refused(Err::<(), _>(e), "enqueue_many");
        assert_eq!(conn.0, 0, "{task:?} reached the caller's connection");
        refused(s.enqueue_many(&batch).await, "enqueue_many");
        refused(s.enqueue(task).await, "enqueue");
    }
    refused(
        s.enqueue_many(&vec![NewTask::new("E", "k"); MAX_ENQUEUE_MANY + 1])
            .await,
        "enqueue_many",
    );
    let types = |n: usize| (0..n).map(|i| format!("T{i}")).collect::<Vec<_>>();
    refused(
        s.claim_batch(&owner, &types(1), MAX_BATCH + 1).await,
        "claim_batch",
    );
    refused(
        s.claim_batch(&owner, &types(MAX_EVENT_TYPES + 1), 1).await,
        "claim_batch",
    );
    refused(
        s.claim_batch(&owner, &["bad type".to_owned()], 1).await,
        "claim_batch",
    );
    refused(s.migrate_to(0).await, "migrate");
    refused(
        s.migrate_to(backstop_core::driver::schema::LATEST + 1)
            .await,
        "migrate",
    );
    refused(s.recycle_dead(too_old, 1).await, "recycle_dead");
    refused(
        s.release_order_keys(&["".to_owned()]).await,
        "release_order_keys",
    );
    refused(
        s.release_order_keys(&vec!["k".to_owned(); MAX_BATCH + 1])
            .await,
        "release_order_keys",
    );
    refused(s.order_keys(None, MAX_BATCH + 1).await, "order_keys");
    refused(
        s.register_event_types(&["bad type".to_owned()]).await,
        "register_event_types",
    );
    refused(
        s.enqueue(NewTask::new("E", "k").order_key("")).await,
        "enqueue",
    );
    refused(
        s.recycle_dead(Duration::ZERO, MAX_BATCH + 1).await,
        "recycle_dead",
    );
    refused(
        s.heartbeat(&vec![lease(1); MAX_LEASES + 1]).await,
        "heartbeat",
    );
    refused(
        s.mark(&vec![Mark::success(lease(1)); MAX_LEASES + 1]).await,
        "mark",
    );
    refused(s.mark(&[Mark::retry(lease(1), too_old, "e")]).await, "mark");
    let one = [Mark::success(lease(1))];
    for (marks, event_type, limit) in [
        (vec![Mark::success(lease(1)); MAX_LEASES + 1], "E", 1),
        (vec![Mark::retry(lease(1), too_old, "e")], "E", 1),
        (one.to_vec(), "bad type", 1),
        (one.to_vec(), "", 1),
        (one.to_vec(), "E", MAX_BATCH + 1),
    ] {
        refused(
            s.mark_and_claim(&marks, &owner, event_type, limit).await,
            "mark_and_claim",
        );
    }
    refused(s.manual_reset(1, too_old).await, "manual_reset");
    let long_reason = "r".repeat(MAX_REASON_BYTES + 1);
    for audit in [
        Audit::new("", "why"),
        Audit::new("o".repeat(MAX_OPERATOR_BYTES + 1), "why"),
        Audit::new("bob\n", "why"),
        Audit::new("bob", long_reason),
    ] {
        refused(s.cancel(1, &audit).await, "cancel");
        refused(s.delete(1, &audit).await, "delete");
        refused(s.reset(1, &audit).await, "reset");
        refused(
            s.reset_matching(&TaskFilter::default(), &audit).await,
            "reset_matching",
        );
        refused(
            s.set_queue("MAIL", QueueChange::Pause, &audit).await,
            "set_queue",
        );
        refused(s.edit(1, &TaskEdit::run_now(), &audit).await, "edit");
    }
    let ok = Audit::new("bob", "why");
    for limit in [0, backstop_core::MAX_CONCURRENCY + 1, u32::MAX] {
        let change = QueueChange::Concurrency(Some(limit));
        let e = s.set_queue("MAIL", change, &ok).await.expect_err("refused");
        assert!(e.to_string().contains("concurrency"), "{e}");
        refused(Err::<(), _>(e), "set_queue");
    }
    for (n, per) in [
        (0, Duration::from_secs(60)),
        (backstop_core::MAX_CONCURRENCY + 1, Duration::from_secs(60)),
        (1, Duration::ZERO),
        (1, Duration::from_millis(999)),
        (1, Duration::from_millis(1001)),
        (1, backstop_core::MAX_RATE_WINDOW + Duration::from_secs(1)),
    ] {
        let change = QueueChange::Rate(Some(backstop_core::RateLimit::new(n, per)));
        let e = s.set_queue("MAIL", change, &ok).await.expect_err("refused");
        assert!(e.to_string().contains("rate"), "{e}");
        refused(Err::<(), _>(e), "set_queue");
    }
    for edit in [
        TaskEdit::default(),
        TaskEdit::run_in(MAX_INTERVAL + Duration::from_secs(1)),
        TaskEdit::default().payload("{nope"),
    ] {
        refused(s.edit(1, &edit, &ok).await, "edit");
    }
    let long_type = "a".repeat(MAX_EVENT_TYPE_BYTES + 1);
    for bad in ["", "a b", long_type.as_str()] {
        let ok = Audit::new("bob", "why");
        refused(
            s.set_queue(bad, QueueChange::Resume, &ok).await,
            "set_queue",
        );
        refused(s.queue_log(bad).await, "queue_log");
    }
    let ok = Audit::new("bob", "why");
    for status in [Status::Pending, Status::Running, Status::Succeeded] {
        refused(
            s.reset_matching(&TaskFilter::default().status(status), &ok)
                .await,
            "reset_matching",
        );
    }
    refused(
        s.reset_matching(&TaskFilter::default().limit(MAX_BATCH + 1), &ok)
            .await,
        "reset_matching",
    );
    refused(
        s.list(&TaskFilter::default().limit(MAX_BATCH + 1)).await,
        "list",
    );
    refused(
        s.list(&TaskFilter::default().event_type("bad type")).await,
        "list",
    );
    refused(
        s.list(&TaskFilter::default().older_than(too_old)).await,
        "list",
    );
    refused(s.list(&TaskFilter::default().tag("a b")).await, "list");
    refused(
        s.list(&TaskFilter::default().metadata("a'b", "v")).await,
        "list",
    );
    refused(
        s.count_matching(&TaskFilter::default().metadata("a.b", "v"))
            .await,
        "count_matching",
    );
    let many = (0..=backstop_core::limits::MAX_LABEL_FILTERS)
        .fold(TaskFilter::default(), |f, i| f.tag(format!("t{i}")));
    refused(s.list(&many).await, "list");
    refused(s.set_output(lease(1), "{nope").await, "set_output");
    refused(
        s.set_output(
            lease(1),
            &format!(
                "\"{}\"",
                "x".repeat(backstop_core::limits::MAX_OUTPUT_BYTES)
            ),
        )
        .await,
        "set_output",
    );
    for bad in [
        TaskFilter::default().limit(MAX_BATCH + 1),
        TaskFilter::default().event_type("bad type"),
        TaskFilter::default().older_than(too_old),
    ] {
        refused(s.count_matching(&bad).await, "count_matching");
    }
    refused(s.purge_succeeded(too_old, 1).await, "purge_finished");
    refused(s.purge_audit(too_old, 1).await, "purge_audit");
    refused(s.purge_event_types(too_old, 1).await, "purge_event_types");
    for status in [Status::Pending, Status::Running, Status::Waiting] {
        refused(
            s.purge_finished(status, Duration::ZERO, 1).await,
            "purge_finished",
        );
        refused(s.delete_finished(status, &[1]).await, "delete_finished");
    }
    refused(s.purge_barrier(too_old, 1).await, "purge_barrier");
    let def = SagaDef::builder("order")
        .step(SagaStep::new("pay"))
        .build()
        .unwrap();
    let huge = def.start("k", &"x".repeat(64 * 1024)).unwrap();
    refused(s.start_saga(&huge).await, "start_saga");
    refused(s.start_in(&mut Conn(0), &huge).await, "start_saga");
    for (name, key) in [
        ("", "k"),
        ("a b", "k"),
        ("order", ""),
        (
            "order", "k
",
        ),
    ] {
        refused(s.saga(name, key).await, "saga");
    }
    let lease = Lease {
        task_id: 1,
        token: 1,
    };
    let big = format!("\"{}\"", "x".repeat(64 * 1024));
    for (key, step, output) in [
        ("k", "refund", "1"),
        ("k", "pay", "{nope"),
        ("k", "pay", big.as_str()),
        ("", "pay", "1"),
    ] {
        let outcome = StepOutcome::Done {
            output: output.to_owned(),
        };
        let report = StepReport::new(lease, 1, key, step, outcome);
        refused(s.saga_step(&def, &report).await, "saga_step");
    }
    let ok = Audit::new("ops", "");
    for (command, audit) in [
        (SagaCommand::Retry, Audit::new("", "")),
        (SagaCommand::Resolve(SagaStatus::Running), ok.clone()),
        (SagaCommand::Resolve(SagaStatus::Parked), ok.clone()),
    ] {
        refused(s.command_saga(1, command, &audit).await, "command_saga");
    }
    for bad in [
        SagaFilter::default().limit(0),
        SagaFilter::default().limit(MAX_BATCH + 1),
        SagaFilter::default().name("a b"),
        SagaFilter::default().older_than(too_old),
    ] {
        refused(s.sagas(&bad).await, "sagas");
    }
    refused(s.nudge_saga(&def, 1, "", None).await, "nudge_saga");
    let bad = Audit::new("", "no operator");
    refused(s.nudge_saga(&def, 1, "k", Some(&bad)).await, "nudge_saga");
    for gid in ["", "g\n", &"g".repeat(MAX_BRANCH_ID_BYTES + 1)] {
        refused(s.barrier_records(gid).await, "barrier_records");
    }
    refused(
        s.purge_barrier(Duration::ZERO, MAX_BATCH + 1).await,
        "purge_barrier",
    );
    refused(
        s.purge_succeeded(Duration::ZERO, MAX_BATCH + 1).await,
        "purge_finished",
    );
    refused(
        s.purge_audit(Duration::ZERO, MAX_BATCH + 1).await,
        "purge_audit",
    );
    refused(
        s.purge_event_types(Duration::ZERO, MAX_BATCH + 1).await,
        "purge_event_types",
    );
    refused(
        s.delete_succeeded(&vec![1; MAX_BATCH + 1]).await,
        "delete_finished",
    );
    let (sec, hour) = (Duration::from_secs(1), Duration::from_secs(3600));
    for (window, bucket) in [
        (hour, Duration::from_millis(999)), // bucket under a second
        (sec, Duration::from_secs(2)),      // bucket wider than the window
        (Duration::from_secs(1441), sec),   // too many buckets
        (too_old, too_old),
    ] {
        refused(s.throughput(window, bucket).await, "throughput");
    }
    assert_eq!(s.calls(), 0, "bad input reached the driver");
}

#[tokio::test]
async fn empty_input_is_answered_without_the_driver() {
    let s = store();
    let owner = Owner::new("w").unwrap();
    assert!(s.claim_batch(&owner, &[], 10).await.unwrap().is_empty());
    assert!(s
        .claim_batch(&owner, &["E".into()], 0)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(s.recycle_dead(Duration::ZERO, 0).await.unwrap().total(), 0);
    assert!(s.heartbeat(&[]).await.unwrap().is_empty());
    assert!(s.mark(&[]).await.unwrap().is_empty());
    let (flags, tasks) = s.mark_and_claim(&[], &owner, "E", 0).await.unwrap();
    assert!(flags.is_empty() && tasks.is_empty());
    assert!(s
        .list(&TaskFilter::default().limit(0))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(s.purge_succeeded(Duration::ZERO, 0).await.unwrap(), 0);
    assert_eq!(s.purge_audit(Duration::ZERO, 0).await.unwrap(), 0);
    assert_eq!(s.purge_event_types(Duration::ZERO, 0).await.unwrap(), 0);
    assert_eq!(s.purge_barrier(Duration::ZERO, 0).await.unwrap(), 0);
    assert_eq!(s.delete_succeeded(&[]).await.unwrap(), 0);
    assert!(s.enqueue_many(&[]).await.unwrap().is_empty());
    assert!(s
        .enqueue_many_in(&mut Conn(0), &[])
        .await
        .unwrap()
        .is_empty());
    assert_eq!(s.calls(), 0);
}

#[tokio::test]
async fn input_at_the_limits_reaches_the_driver_checked() {
    let s = store();
    let owner = Owner::new("w").unwrap();
    let enq = s
        .enqueue(NewTask::new("a".repeat(MAX_EVENT_TYPE_BYTES), "k").delay(MAX_INTERVAL))
        .await
        .unwrap();
    assert!(enq.created);
    let mut conn = Conn(0);
    let at_limits = NewTask::new("a".repeat(MAX_EVENT_TYPE_BYTES), "k").delay(MAX_INTERVAL);
    let enq = s.enqueue_in(&mut conn, &at_limits).await.unwrap();
    assert_eq!((enq.id, enq.created, conn.0), (1, true, 1));
    // duplicate types arrive once each
    let types = vec!["B".to_owned(), "A".to_owned(), "B".to_owned()];
    s.claim_batch(&owner, &types, MAX_BATCH).await.unwrap();
    s.recycle_dead(MAX_INTERVAL, MAX_BATCH).await.unwrap();
    assert_eq!(
        s.heartbeat(&vec![lease(1); MAX_LEASES])
            .await
            .unwrap()
            .len(),
        MAX_LEASES
    );
    // an over-long error text arrives cut to the column's bound
    let long = "é".repeat(MAX_ERROR_BYTES);
    let flags = s
        .mark(&[
            Mark::retry(lease(1), MAX_INTERVAL, long.clone()),
            Mark::fail(lease(2), long),
        ])
        .await
        .unwrap();
    assert_eq!(flags, vec![true, true]);
    let marks = vec![Mark::success(lease(1)); MAX_LEASES];
    let (flags, _) = s
        .mark_and_claim(&marks, &owner, &"a".repeat(MAX_EVENT_TYPE_BYTES), MAX_BATCH)
        .await
        .unwrap();
    assert_eq!(flags.len(), MAX_LEASES);
    let e = s.manual_reset(1, MAX_INTERVAL).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    s.list(
        &TaskFilter::default()
            .limit(MAX_BATCH)
            .older_than(MAX_INTERVAL),
    )
    .await
    .unwrap();
    s.purge_succeeded(MAX_INTERVAL, MAX_BATCH).await.unwrap();
    for status in [Status::Failed, Status::Cancelled] {
        s.purge_finished(status, MAX_INTERVAL, MAX_BATCH)
            .await
            .unwrap();
        s.delete_finished(status, &vec![1; MAX_BATCH])
            .await
            .unwrap();
    }
    s.purge_audit(MAX_INTERVAL, MAX_BATCH).await.unwrap();
    s.purge_event_types(MAX_INTERVAL, MAX_BATCH).await.unwrap();
    s.purge_barrier(MAX_INTERVAL, MAX_BATCH).await.unwrap();
    s.barrier_records(&"g".repeat(MAX_BRANCH_ID_BYTES))
        .await
        .unwrap();
    s.delete_succeeded(&vec![1; MAX_BATCH]).await.unwrap();
    let at_limits = Audit::new("o".repeat(MAX_OPERATOR_BYTES), "r".repeat(MAX_REASON_BYTES));
    let missing = s.cancel(1, &at_limits).await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
    let sec = Duration::from_secs(1);
    s.throughput(Duration::from_secs(1440), sec).await.unwrap();
    s.throughput(sec, sec).await.unwrap();
    let batch = vec![NewTask::new("E", "k"); MAX_ENQUEUE_MANY];
    assert_eq!(
        s.enqueue_many(&batch).await.unwrap().len(),
        MAX_ENQUEUE_MANY
    );
    // mark_and_claim counts twice: the tripwire checks it as a mark and a claim
    assert_eq!(s.calls(), 24, "one more: the enqueue_in statement");
}
