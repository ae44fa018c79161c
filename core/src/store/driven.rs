//! The [`TaskStore`] contract implemented once, over a backend's [`Driver`].

use std::time::Duration;

use async_trait::async_trait;

use super::answers::{
    aged_batch, bound_errors, decode_all, decode_stats, finished, one_flag_each, operator_change,
    reset_refused, saga_not_found,
};
use super::TaskStore;
use crate::driver::{
    check_ids, check_leases, check_marks, check_start, check_task, check_tasks, due_created,
    enqueued, enqueued_all, retry_contention, schema, Buckets, Change, Checked, Claim, Driver,
    RawSaga, RawSagaStep, RawTask, SagaWrite, SagaWritten,
};
use crate::driver::{count_sql, list_values, Answer, Returns, Statement};
use crate::error::{Error, ErrorKind, Result};
use crate::limits;
use crate::model::{
    Audit, AuditEntry, BarrierRecord, Enqueued, EventTypeSeen, Lease, Mark, NewTask, Owner, Queue,
    QueueChange, QueueLogEntry, Recycled, Saga, SagaCommand, SagaCount, SagaDef, SagaFilter,
    SagaId, SagaLogEntry, SagaStart, SagaStarted, SagaStatus, SagaStepRecord, Stats, Status,
    StepApplied, StepReport, Task, TaskEdit, TaskFilter, TaskId, Throughput,
};

/// The contract, implemented once for every driver: check the input, shortcut empty
/// input, run the driver's statement shape (again, on contention), decode and order what
/// it returns, and name the operation in every error. A backend's store reaches it
/// through [`Backend::driver`](crate::driver::Backend::driver) (see [`StoreLayer`](crate::StoreLayer)).
#[async_trait]
impl TaskStore for dyn Driver {
    async fn migrate(&self) -> Result<()> {
        let d: &dyn Driver = self;
        run(d, "migrate", || Driver::migrate(d, schema::LATEST)).await
    }

    async fn migrate_to(&self, version: u32) -> Result<()> {
        let d: &dyn Driver = self;
        if version == 0 || version > schema::LATEST {
            return Err(Error::invalid_input(
                "migrate",
                format!(
                    "no schema version {version}: this release knows versions 1 to {}",
                    schema::LATEST
                ),
            ));
        }
        run(d, "migrate", || Driver::migrate(d, version)).await
    }

    async fn enqueue(&self, task: NewTask) -> Result<Enqueued> {
        let d: &dyn Driver = self;
        let checked = check_task(Driver::config(d), &task)?;
        let inserted = run(d, "enqueue", || Driver::enqueue(d, checked)).await?;
        let done = enqueued(inserted, &task)?;
        announce(d, std::slice::from_ref(&task), std::slice::from_ref(&done));
        Ok(done)
    }

    async fn enqueue_many(&self, tasks: &[NewTask]) -> Result<Vec<Enqueued>> {
        let d: &dyn Driver = self;
        let checked = check_tasks(Driver::config(d), tasks)?;
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let inserted = run(d, "enqueue_many", || Driver::enqueue_many(d, checked)).await?;
        let done = enqueued_all(inserted, tasks)?;
        announce(d, tasks, &done);
        Ok(done)
    }

    async fn claim_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<Task>> {
        let d: &dyn Driver = self;
        let row = run(d, "claim_by_id", || Driver::claim_by_id(d, id, owner)).await?;
        row.map(RawTask::decode).transpose()
    }

    async fn claim_batch(
        &self,
        owner: &Owner,
        event_types: &[String],
        limit: usize,
    ) -> Result<Vec<Task>> {
        const OP: &str = "claim_batch";
        limits::check_limit(OP, limit)?;
        limits::check_event_types(OP, event_types)?;
        if limit == 0 || event_types.is_empty() {
            return Ok(Vec::new());
        }
        // distinct types: each is one ordered walk of its due rows
        let mut types = event_types.to_vec();
        types.sort_unstable();
        types.dedup();
        let d: &dyn Driver = self;
        let claim = Checked::new(Claim {
            owner,
            event_types: &types,
            limit,
        });
        let rows = run(d, OP, || Driver::claim_batch(d, claim)).await?;
        let mut tasks = decode_all(rows)?;
        tasks.sort_by_key(|t| (t.priority, t.next_run_at, t.id));
        Ok(tasks)
    }

    async fn recycle_dead(&self, older_than: Duration, limit: usize) -> Result<Recycled> {
        const OP: &str = "recycle_dead";
        let Some(batch) = aged_batch(OP, older_than, limit)? else {
            return Ok(Recycled::default());
        };
        let d: &dyn Driver = self;
        run(d, OP, || Driver::recycle_dead(d, batch)).await
    }

    async fn heartbeat(&self, leases: &[Lease]) -> Result<Vec<bool>> {
        const OP: &str = "heartbeat";
        check_leases(OP, leases)?;
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let d: &dyn Driver = self;
        let leases = Checked::new(leases);
        let flags = run(d, OP, || Driver::heartbeat(d, leases)).await?;
        one_flag_each(OP, flags, leases.len())
    }

    async fn set_output(&self, lease: Lease, output: &str) -> Result<bool> {
        const OP: &str = "set_output";
        crate::model::check_output(OP, output)?;
        let d: &dyn Driver = self;
        let output = Checked::new(output);
        run(d, OP, || Driver::set_output(d, lease, output)).await
    }

    async fn mark(&self, marks: &[Mark]) -> Result<Vec<bool>> {
        const OP: &str = "mark";
        check_marks(OP, marks)?;
        if marks.is_empty() {
            return Ok(Vec::new());
        }
        let marks = bound_errors(marks);
        let marks = &*marks;
        let d: &dyn Driver = self;
        let marks = Checked::new(marks);
        let flags = run(d, OP, || Driver::mark(d, marks)).await?;
        one_flag_each(OP, flags, marks.len())
    }

    async fn mark_and_claim(
        &self,
        marks: &[Mark],
        owner: &Owner,
        event_type: &str,
        limit: usize,
    ) -> Result<(Vec<bool>, Vec<Task>)> {
        const OP: &str = "mark_and_claim";
        check_marks(OP, marks)?;
        limits::check_limit(OP, limit)?;
        let types = [event_type.to_owned()];
        limits::check_event_types(OP, &types)?;
        if marks.is_empty() {
            return Ok((
                Vec::new(),
                TaskStore::claim_batch(self, owner, &types, limit).await?,
            ));
        }
        if limit == 0 {
            return Ok((TaskStore::mark(self, marks).await?, Vec::new()));
        }
        let marks = bound_errors(marks);
        let marks = &*marks;
        let d: &dyn Driver = self;
        let checked = Checked::new(marks);
        let claim = Checked::new(Claim {
            owner,
            event_types: &types,
            limit,
        });
        let (flags, claimed) = run(d, OP, || Driver::mark_and_claim(d, checked, claim)).await?;
        let flags = one_flag_each(OP, flags, marks.len())?;
        let tasks = match claimed {
            Some(rows) => {
                let mut tasks = decode_all(rows)?;
                tasks.sort_by_key(|t| (t.priority, t.next_run_at, t.id));
                tasks
            }
            // no limit: the marks are committed; a claim that fails now is the next
            // poll's to make, not an error of marks that applied
            None => match TaskStore::claim_batch(self, owner, &types, limit).await {
                Ok(tasks) => tasks,
                Err(e) => {
                    tracing::debug!(error = %e, event_type, "the claim after marks failed");
                    Vec::new()
                }
            },
        };
        Ok((flags, tasks))
    }

    async fn manual_reset(&self, id: TaskId, stuck_after: Duration) -> Result<Task> {
        const OP: &str = "manual_reset";
        limits::check_duration(OP, "stuck_after", stuck_after)?;
        let d: &dyn Driver = self;
        let stuck_after = Checked::new(stuck_after);
        match run(d, OP, || Driver::manual_reset(d, id, stuck_after)).await? {
            Change::Done(row) => {
                // it may have been running stuck, with its holder alive after all
                d.announce_revoked(id).await;
                reread_after_release(self, OP, row.decode()?).await
            }
            Change::Missing => Err(Error::task_not_found(OP, id)),
            Change::Refused(code) => Err(reset_refused(OP, id, Status::from_code(code)?)),
        }
    }

    async fn cancel(&self, id: TaskId, audit: &Audit) -> Result<Task> {
        const OP: &str = "cancel";
        audit.check(OP)?;
        let d: &dyn Driver = self;
        let audit = Checked::new(audit);
        let answer = run(d, OP, || Driver::cancel(d, id, audit)).await?;
        let task = operator_change(OP, id, answer, "pending, waiting or running")?;
        // whether it ran is not in the answer: announced always, an engine that does not
        // hold it ignores the news
        d.announce_revoked(id).await;
        move_key_along(self, OP, &task).await?;
        Ok(task)
    }

    async fn edit(&self, id: TaskId, edit: &TaskEdit, audit: &Audit) -> Result<Task> {
        const OP: &str = "edit";
        edit.check(OP, Driver::config(self).max_payload_bytes)?;
        audit.check(OP)?;
        let d: &dyn Driver = self;
        let (edit, audit) = (Checked::new(edit), Checked::new(audit));
        let answer = run(d, OP, || Driver::edit(d, id, edit, audit)).await?;
        operator_change(OP, id, answer, "pending or waiting")
    }

    async fn delete(&self, id: TaskId, audit: &Audit) -> Result<Task> {
        const OP: &str = "delete";
        audit.check(OP)?;
        let d: &dyn Driver = self;
        let audit = Checked::new(audit);
        let answer = run(d, OP, || Driver::delete(d, id, audit)).await?;
        let task = operator_change(
            OP,
            id,
            answer,
            "pending, waiting, succeeded, failed or cancelled (not running)",
        )?;
        move_key_along(self, OP, &task).await?;
        Ok(task)
    }

    async fn reset(&self, id: TaskId, audit: &Audit) -> Result<Task> {
        const OP: &str = "reset";
        audit.check(OP)?;
        let d: &dyn Driver = self;
        let audit = Checked::new(audit);
        let expected = [Status::Failed.code(), Status::Cancelled.code()];
        let answer = run(d, OP, || Driver::reset(d, id, expected, audit)).await?;
        let task = operator_change(OP, id, answer, "failed or cancelled")?;
        reread_after_release(self, OP, task).await
    }

    async fn reset_matching(&self, filter: &TaskFilter, audit: &Audit) -> Result<Vec<Task>> {
        const OP: &str = "reset_matching";
        audit.check(OP)?;
        filter.check().map_err(|e| e.with_operation(OP))?;
        let expected = match filter.status {
            None => [Status::Failed.code(), Status::Cancelled.code()],
            Some(s @ (Status::Failed | Status::Cancelled)) => [s.code(), s.code()],
            Some(other) => {
                return Err(Error::invalid_input(
                    OP,
                    format!(
                        "only failed or cancelled tasks can be reset, the filter asks for {other}"
                    ),
                ))
            }
        };
        if filter.limit == 0 {
            return Ok(Vec::new());
        }
        let d: &dyn Driver = self;
        // The candidates, then each reset on its own with its status checked again: a
        // task another operator reset meanwhile is refused and skipped.
        let mut candidates = Vec::new();
        for status in [expected[0], expected[1]] {
            let mut f = filter.clone();
            f.status = Some(Status::from_code(i64::from(status))?);
            let f = Checked::new(&f);
            candidates.extend(run(d, OP, || Driver::list(d, f)).await?);
            if expected[0] == expected[1] {
                break;
            }
        }
        candidates.sort_by_key(|t| t.id);
        candidates.truncate(filter.limit);
        let audit = Checked::new(audit);
        let mut reset = Vec::new();
        for c in candidates {
            match run(d, OP, || Driver::reset(d, c.id, expected, audit)).await? {
                Change::Done(row) => {
                    reset.push(reread_after_release(self, OP, row.decode()?).await?)
                }
                Change::Missing | Change::Refused(_) => {} // changed meanwhile: not ours
            }
        }
        Ok(reset)
    }

    async fn audit_log(&self, id: TaskId) -> Result<Vec<AuditEntry>> {
        let d: &dyn Driver = self;
        let rows = run(d, "audit_log", || Driver::audit_log(d, id)).await?;
        Ok(rows
            .into_iter()
            .map(|r| AuditEntry {
                task_id: r.task_id,
                action: r.action,
                operator: r.operator,
                reason: r.reason,
                at: r.at,
            })
            .collect())
    }

    async fn get(&self, id: TaskId) -> Result<Option<Task>> {
        let d: &dyn Driver = self;
        let row = run(d, "get", || Driver::get(d, id)).await?;
        row.map(RawTask::decode).transpose()
    }

    async fn list(&self, filter: &TaskFilter) -> Result<Vec<Task>> {
        const OP: &str = "list";
        filter.check()?;
        if filter.limit == 0 {
            return Ok(Vec::new());
        }
        let d: &dyn Driver = self;
        let filter = Checked::new(filter);
        decode_all(run(d, OP, || Driver::list(d, filter)).await?)
    }

    async fn count_matching(&self, filter: &TaskFilter) -> Result<u64> {
        const OP: &str = "count_matching";
        filter.check().map_err(|e| e.with_operation(OP))?;
        let d: &dyn Driver = self;
        let (tasks, dialect) = Driver::tasks_table(d);
        let (sql, args) = count_sql(tasks, dialect, filter, limits::MAX_COUNT);
        let statement = Statement::owned(sql, list_values(dialect, args), Returns::Row);
        let answer = run(d, OP, || Driver::run(d, &statement)).await?;
        match answer {
            Answer::Row(Some(row)) => match row.first() {
                Some(n) => Ok(u64::try_from(*n).unwrap_or(0)),
                None => Err(Error::new(
                    ErrorKind::Unexpected,
                    OP,
                    "the count has no column",
                )),
            },
            other => Err(Error::new(
                ErrorKind::Unexpected,
                OP,
                format!("the count was answered with {other:?}"),
            )),
        }
    }

    async fn stats(&self) -> Result<Stats> {
        let d: &dyn Driver = self;
        decode_stats(run(d, "stats", || Driver::stats(d, false)).await?)
    }

    async fn backlog(&self) -> Result<Stats> {
        let d: &dyn Driver = self;
        decode_stats(run(d, "backlog", || Driver::stats(d, true)).await?)
    }

    async fn throughput(&self, window: Duration, bucket: Duration) -> Result<Vec<Throughput>> {
        const OP: &str = "throughput";
        limits::check_buckets(OP, window, bucket)?;
        let last = u32::try_from(window.as_millis().div_ceil(bucket.as_millis()) - 1).unwrap_or(0);
        let d: &dyn Driver = self;
        let buckets = Checked::new(Buckets {
            window,
            bucket,
            cap: limits::MAX_THROUGHPUT_ROWS,
        });
        let rows = run(d, OP, || Driver::throughput(d, buckets)).await?;
        // rows on a bucket's edge (or a clock step) may land one bucket out: clamp, merge
        let mut merged: std::collections::BTreeMap<(String, i64, u32), u64> = Default::default();
        for (event_type, code, bucket, count) in rows {
            let b = u32::try_from(bucket.max(0)).unwrap_or(u32::MAX).min(last);
            *merged.entry((event_type, code, b)).or_default() += u64::try_from(count).unwrap_or(0);
        }
        merged
            .into_iter()
            .map(|((event_type, code, bucket), count)| {
                Ok(Throughput {
                    event_type,
                    status: Status::from_code(code)?,
                    bucket,
                    count,
                })
            })
            .collect()
    }

    async fn purge_finished(
        &self,
        status: Status,
        older_than: Duration,
        limit: usize,
    ) -> Result<u64> {
        const OP: &str = "purge_finished";
        let status = finished(OP, status)?;
        let Some(batch) = aged_batch(OP, older_than, limit)? else {
            return Ok(0);
        };
        let d: &dyn Driver = self;
        run(d, OP, || Driver::purge_finished(d, status, batch)).await
    }

    async fn purge_audit(&self, older_than: Duration, limit: usize) -> Result<u64> {
        const OP: &str = "purge_audit";
        let Some(batch) = aged_batch(OP, older_than, limit)? else {
            return Ok(0);
        };
        let d: &dyn Driver = self;
        run(d, OP, || Driver::purge_audit(d, batch)).await
    }

    async fn purge_event_types(&self, older_than: Duration, limit: usize) -> Result<u64> {
        const OP: &str = "purge_event_types";
        let Some(batch) = aged_batch(OP, older_than, limit)? else {
            return Ok(0);
        };
        let d: &dyn Driver = self;
        run(d, OP, || Driver::purge_event_types(d, batch)).await
    }

    async fn purge_barrier(&self, older_than: Duration, limit: usize) -> Result<u64> {
        const OP: &str = "purge_barrier";
        let Some(batch) = aged_batch(OP, older_than, limit)? else {
            return Ok(0);
        };
        let d: &dyn Driver = self;
        run(d, OP, || Driver::purge_barrier(d, batch)).await
    }

    async fn start_saga(&self, start: &SagaStart) -> Result<SagaStarted> {
        const OP: &str = "start_saga";
        let d: &dyn Driver = self;
        let checked = check_start(Driver::config(d), start)?;
        let started = run(d, OP, || Driver::start_saga(d, checked)).await?;
        if started.created {
            if let Some(first) = start.first_tasks().first() {
                d.announce_committed(first.event_type());
            }
        }
        Ok(started)
    }

    async fn saga(&self, name: &str, key: &str) -> Result<Option<Saga>> {
        const OP: &str = "saga";
        crate::model::check_saga_ids(OP, name, key)?;
        let d: &dyn Driver = self;
        let (name, key) = (Checked::new(name), Checked::new(key));
        run(d, OP, || Driver::saga(d, name, key))
            .await?
            .map(RawSaga::decode)
            .transpose()
    }

    async fn saga_step_many(
        &self,
        def: &SagaDef,
        reports: &[StepReport],
    ) -> Result<Vec<Result<StepApplied>>> {
        const OP: &str = "saga_step";
        let d: &dyn Driver = self;
        let config = Driver::config(d);
        let mut answers: Vec<Option<Result<StepApplied>>> = reports.iter().map(|_| None).collect();
        // each report checked alone: a bad one is answered in its slot
        let mut writes = Vec::with_capacity(reports.len());
        for (i, report) in reports.iter().enumerate() {
            match crate::driver::step_write(config, def, report) {
                Ok(w) => writes.push(Some(w)),
                Err(e) => {
                    answers[i] = Some(Err(e));
                    writes.push(None);
                }
            }
        }
        // the common case (a lone step's action done) of every report at once, in one
        // statement where the backend can; a saga's second report in the call, and any
        // report the advance did not apply (the saga elsewhere, the lease gone), take
        // the general write after it, which decides and answers as always
        if Driver::advances_sagas(d) {
            let (mut at, mut advances) = (Vec::new(), Vec::new());
            let mut sagas = std::collections::HashSet::new();
            for (i, write) in writes.iter().enumerate() {
                let Some(write) = write else { continue };
                match crate::driver::step_advance(config, write) {
                    Ok(Some(a)) if sagas.insert(a.saga) => {
                        at.push(i);
                        advances.push(a);
                    }
                    Ok(_) => {}
                    Err(e) => answers[i] = Some(Err(e)),
                }
            }
            if !advances.is_empty() {
                let checked = Checked::new(advances.as_slice());
                let applied = run(d, OP, || Driver::saga_advance(d, checked)).await?;
                if applied.len() != advances.len() {
                    return Err(Error::new(
                        ErrorKind::Unexpected,
                        OP,
                        format!("{} answers for {} advances", applied.len(), advances.len()),
                    ));
                }
                for ((i, advance), done) in at.into_iter().zip(&advances).zip(applied) {
                    if let Some(done) = done {
                        answers[i] = Some(advance.applied(done));
                    }
                }
            }
        }
        // the rest by the general write: the reports of distinct sagas at once (each its
        // own transaction, on its own connection where the backend pools them), those of
        // one saga in order
        let mut sagas: Vec<(crate::model::SagaId, Vec<usize>)> = Vec::new();
        for (i, answer) in answers.iter().enumerate() {
            if answer.is_none() {
                let saga = reports[i].saga;
                match sagas.iter_mut().find(|(s, _)| *s == saga) {
                    Some((_, all)) => all.push(i),
                    None => sagas.push((saga, vec![i])),
                }
            }
        }
        let writes = &writes;
        let general = sagas.into_iter().map(|(_, at)| async move {
            let mut out = Vec::with_capacity(at.len());
            for i in at {
                let answer = match &writes[i] {
                    Some(write) => {
                        let checked = Checked::new(write);
                        match run(d, OP, || Driver::saga_write(d, checked)).await {
                            Ok(written) => crate::driver::step_applied(written),
                            Err(e) => Err(e),
                        }
                    }
                    None => Err(Error::new(ErrorKind::Unexpected, OP, "a report unanswered")),
                };
                out.push((i, answer));
            }
            out
        });
        for (i, answer) in futures_util::future::join_all(general)
            .await
            .into_iter()
            .flatten()
        {
            answers[i] = Some(answer);
        }
        Ok(answers
            .into_iter()
            .map(|a| {
                a.unwrap_or_else(|| {
                    Err(Error::new(ErrorKind::Unexpected, OP, "a report unanswered"))
                })
            })
            .collect())
    }

    async fn command_saga(&self, id: SagaId, command: SagaCommand, audit: &Audit) -> Result<Saga> {
        const OP: &str = "command_saga";
        audit.check(OP)?;
        if let SagaCommand::Resolve(status) = command {
            if !status.is_final() {
                return Err(Error::invalid_input(
                    OP,
                    format!("a saga is resolved as completed or compensated, not {status}"),
                ));
            }
        }
        let d: &dyn Driver = self;
        let Some(saga) = run(d, OP, || Driver::saga_by_id(d, id)).await? else {
            return Err(saga_not_found(OP, id));
        };
        let write = SagaWrite::Command {
            id,
            name: saga.name,
            key: saga.saga_key,
            command,
            audit: audit.clone(),
        };
        let checked = Checked::new(&write);
        match run(d, OP, || Driver::saga_write(d, checked)).await? {
            SagaWritten::Applied(_) => run(d, OP, || Driver::saga_by_id(d, id))
                .await?
                .ok_or_else(|| saga_not_found(OP, id))?
                .decode(),
            SagaWritten::Missing => Err(saga_not_found(OP, id)),
            SagaWritten::Refused(status) => Err(Error::new(
                ErrorKind::Conflict,
                OP,
                format!(
                    "saga {id} is {status}: {} is for a saga {}",
                    command.as_str(),
                    command.allowed()
                ),
            )),
        }
    }

    async fn nudge_saga(
        &self,
        def: &SagaDef,
        id: SagaId,
        key: &str,
        audit: Option<&Audit>,
    ) -> Result<Option<StepApplied>> {
        const OP: &str = "nudge_saga";
        limits::check_key(OP, "saga key", key, limits::MAX_SAGA_KEY_BYTES)?;
        if let Some(audit) = audit {
            audit.check(OP)?;
        }
        let d: &dyn Driver = self;
        let write = SagaWrite::Nudge {
            def: def.clone(),
            id,
            key: key.to_owned(),
            audit: audit.cloned(),
        };
        let checked = Checked::new(&write);
        match run(d, OP, || Driver::saga_write(d, checked)).await? {
            SagaWritten::Applied(applied) => Ok(Some(applied)),
            SagaWritten::Missing => Ok(None),
            other => Err(Error::new(
                ErrorKind::Unexpected,
                OP,
                format!("a nudge was answered {other:?}"),
            )),
        }
    }

    async fn saga_by_id(&self, id: SagaId) -> Result<Option<Saga>> {
        const OP: &str = "saga_by_id";
        let d: &dyn Driver = self;
        run(d, OP, || Driver::saga_by_id(d, id))
            .await?
            .map(RawSaga::decode)
            .transpose()
    }

    async fn sagas(&self, filter: &SagaFilter) -> Result<Vec<Saga>> {
        const OP: &str = "sagas";
        filter.check(OP)?;
        let d: &dyn Driver = self;
        let checked = Checked::new(filter);
        let mut all = run(d, OP, || Driver::sagas(d, checked))
            .await?
            .into_iter()
            .map(RawSaga::decode)
            .collect::<Result<Vec<_>>>()?;
        all.sort_by_key(|s| s.id);
        Ok(all)
    }

    async fn saga_backlog(&self) -> Result<Vec<SagaCount>> {
        const OP: &str = "saga_backlog";
        let d: &dyn Driver = self;
        run(d, OP, || Driver::saga_backlog(d))
            .await?
            .into_iter()
            .map(|(name, status, count, ms)| {
                let status = SagaStatus::from_code(status).ok_or_else(|| {
                    Error::new(
                        ErrorKind::Unexpected,
                        OP,
                        format!("sagas {name:?} have the unknown status code {status}"),
                    )
                })?;
                Ok(SagaCount {
                    name,
                    status,
                    count: u64::try_from(count).unwrap_or(0),
                    oldest_unchanged: Duration::from_millis(u64::try_from(ms).unwrap_or(0)),
                })
            })
            .collect()
    }

    async fn saga_log(&self, id: SagaId) -> Result<Vec<SagaLogEntry>> {
        const OP: &str = "saga_log";
        let d: &dyn Driver = self;
        Ok(run(d, OP, || Driver::saga_log(d, id))
            .await?
            .into_iter()
            .map(|a| SagaLogEntry {
                saga_id: a.task_id,
                action: a.action,
                operator: a.operator,
                reason: a.reason,
                at: a.at,
            })
            .collect())
    }

    async fn saga_steps(&self, id: SagaId) -> Result<Vec<SagaStepRecord>> {
        const OP: &str = "saga_steps";
        let d: &dyn Driver = self;
        run(d, OP, || Driver::saga_steps(d, id))
            .await?
            .into_iter()
            .map(RawSagaStep::decode)
            .collect()
    }

    async fn barrier_records(&self, gid: &str) -> Result<Vec<BarrierRecord>> {
        const OP: &str = "barrier_records";
        crate::model::check_gid(OP, gid)?;
        let d: &dyn Driver = self;
        let gid = Checked::new(gid);
        run(d, OP, || Driver::barrier_records(d, gid))
            .await?
            .into_iter()
            .map(|r| r.decode())
            .collect()
    }

    async fn delete_finished(&self, status: Status, ids: &[TaskId]) -> Result<u64> {
        const OP: &str = "delete_finished";
        let status = finished(OP, status)?;
        check_ids(OP, ids)?;
        if ids.is_empty() {
            return Ok(0);
        }
        let d: &dyn Driver = self;
        let ids = Checked::new(ids);
        run(d, OP, || Driver::delete_finished(d, status, ids)).await
    }

    async fn release_order_keys(&self, keys: &[String]) -> Result<Vec<TaskId>> {
        const OP: &str = "release_order_keys";
        if keys.len() > limits::MAX_BATCH {
            return Err(Error::invalid_input(
                OP,
                format!(
                    "at most {} keys per call, got {}",
                    limits::MAX_BATCH,
                    keys.len()
                ),
            ));
        }
        for k in keys {
            limits::check_order_key(OP, k)?;
        }
        let mut keys = keys.to_vec();
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let d: &dyn Driver = self;
        let keys = Checked::new(keys.as_slice());
        run(d, OP, || Driver::release_order_keys(d, keys)).await
    }

    async fn register_event_types(&self, event_types: &[String]) -> Result<()> {
        const OP: &str = "register_event_types";
        limits::check_event_types(OP, event_types)?;
        let mut types = event_types.to_vec();
        types.sort_unstable();
        types.dedup();
        if types.is_empty() {
            return Ok(());
        }
        let d: &dyn Driver = self;
        let types = Checked::new(types.as_slice());
        run(d, OP, || Driver::register_event_types(d, types)).await
    }

    async fn event_types(&self) -> Result<Vec<EventTypeSeen>> {
        let d: &dyn Driver = self;
        let mut rows = run(d, "event_types", || Driver::event_types(d)).await?;
        rows.sort();
        Ok(rows
            .into_iter()
            .map(|(event_type, first_seen, last_seen)| EventTypeSeen {
                event_type,
                first_seen,
                last_seen,
            })
            .collect())
    }

    async fn set_queue(
        &self,
        event_type: &str,
        change: QueueChange,
        audit: &Audit,
    ) -> Result<Queue> {
        const OP: &str = "set_queue";
        limits::check_event_type(OP, event_type)?;
        change.check(OP)?;
        audit.check(OP)?;
        let d: &dyn Driver = self;
        let name = event_type;
        let (event_type, audit) = (Checked::new(event_type), Checked::new(audit));
        let queue = run(d, OP, || Driver::set_queue(d, event_type, change, audit)).await?;
        // A change that may let tasks start (a resume, a limit raised, removed or
        // partitioned): engines that listen poll the type now, not at their next tick.
        if !matches!(change, QueueChange::Pause) {
            d.announce_queue_change(name).await;
        }
        Ok(queue)
    }

    async fn queues(&self) -> Result<Vec<Queue>> {
        let d: &dyn Driver = self;
        let mut queues = run(d, "queues", || Driver::queues(d)).await?;
        queues.sort_by(|a, b| a.event_type.cmp(&b.event_type));
        Ok(queues)
    }

    async fn queue_log(&self, event_type: &str) -> Result<Vec<QueueLogEntry>> {
        const OP: &str = "queue_log";
        limits::check_event_type(OP, event_type)?;
        let d: &dyn Driver = self;
        let event_type = Checked::new(event_type);
        run(d, OP, || Driver::queue_log(d, event_type)).await
    }

    async fn order_keys(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>> {
        const OP: &str = "order_keys";
        limits::check_limit(OP, limit)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let d: &dyn Driver = self;
        let limit = Checked::new(limit);
        run(d, OP, || Driver::order_keys(d, after, limit)).await
    }
}

/// Run one driver call as operation `op`: again (with backoff and jitter) while the
/// database rolls it back on contention, up to the store's `contention_retries`; every
/// error it returns names `op`.
/// Announce the due tasks an enqueue of the store's own created (committed).
fn announce(d: &dyn Driver, tasks: &[NewTask], done: &[Enqueued]) {
    for (event_type, id) in due_created(tasks, done) {
        match tasks.len() {
            1 => d.announce_committed_task(id, event_type),
            _ => d.announce_committed(event_type),
        }
    }
}

async fn run<T, F, Fut>(driver: &dyn Driver, op: &'static str, call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    retry_contention(driver.config(), op, call).await
}

/// After an operator's change of a task with an order key: move the key along (the
/// task may have left the way, or, reset, joined the line).
async fn move_key_along<S: TaskStore + ?Sized>(
    store: &S,
    op: &'static str,
    task: &Task,
) -> Result<()> {
    if let Some(key) = &task.order_key {
        store
            .release_order_keys(std::slice::from_ref(key))
            .await
            .map_err(|e| e.with_operation(op))?;
    }
    Ok(())
}

/// [`move_key_along`] for a reset task (reset into the line as waiting), answered as it
/// then is: pending if it was first in line.
async fn reread_after_release<S: TaskStore + ?Sized>(
    store: &S,
    op: &'static str,
    task: Task,
) -> Result<Task> {
    if task.order_key.is_none() {
        return Ok(task);
    }
    move_key_along(store, op, &task).await?;
    Ok(store
        .get(task.id)
        .await
        .map_err(|e| e.with_operation(op))?
        .unwrap_or(task))
}
