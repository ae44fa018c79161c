//! One bounded executor per event type, and the life of one claimed task in it.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

use super::completer::Completion;
use super::counters::Counters;
use super::{ErrorAction, Handler, HandlerOptions, Origin, Shared, State};
use crate::model::{Backoff, Mark, RetryPolicy, Task};
use crate::store::TaskStore;

/// The executor of one event type: `slots` bound what it holds (running + queued),
/// `runners` how many run at once.
pub(crate) struct Executor {
    pub event_type: String,
    pub event_type_arc: Arc<str>,
    pub handler: Arc<dyn Handler>,
    pub options: HandlerOptions,
    pub slots: Arc<Semaphore>,
    pub runners: Arc<Semaphore>,
}

/// How one attempt ended.
enum Outcome {
    Done,
    Skipped,
    Error(ErrorAction, String),
    Panicked(String),
    TimedOut,
    /// Never started, or interrupted by shutdown: give the task back.
    Released,
    /// The handler recorded its own success in its transaction (`complete_tx`).
    CompletedInTx,
    /// The handler recorded the task's failure in its transaction (a saga step out of
    /// attempts).
    FailedInTx,
    /// Never started: its lease was found gone before it started (it waited past
    /// `dead_after` and was recycled meanwhile); another claim runs it.
    LeaseGone,
}

/// Hand a claimed task to its executor. `slot` is the executor capacity the caller
/// reserved before claiming. Runs on a spawned task; never on the caller's.
pub(crate) fn dispatch<S: TaskStore + Clone>(
    shared: Arc<Shared<S>>,
    exec: Arc<Executor>,
    task: Task,
    slot: OwnedSemaphorePermit,
    origin: Origin,
) {
    let lease = task.lease();
    let claimed_at = Instant::now();
    let lost = shared.tracker.started(lease);
    // shared with the attempt's context: no copy of the payload per task
    let task = Arc::new(task);
    let cx = super::Context::new(
        Arc::clone(&task),
        Arc::clone(&lost),
        shared.state.subscribe(),
        Arc::clone(&shared.dyn_store),
        Arc::clone(&shared.states),
        Arc::new(super::EngineAhead(Arc::clone(&shared))),
    );
    let span = tracing::info_span!(
        "backstop.task",
        task_id = task.id,
        event_type = %task.event_type,
        biz_key = %task.biz_key,
        attempt = task.attempts,
        origin = ?origin,
    );
    // the span of the request that enqueued the task (feature `otel`)
    crate::otel::link(&span, task.traceparent.as_deref());
    tokio::spawn(
        async move {
            let attempt = cx
                .clone()
                .scope(run(&shared, &exec, &task, origin, claimed_at));
            let mut outcome = super::attempt::scoped(lost, attempt).await;
            if matches!(outcome, Outcome::Done) && cx.is_completed() {
                outcome = Outcome::CompletedInTx;
            }
            if matches!(outcome, Outcome::Done) && cx.is_failed_in_tx() {
                outcome = Outcome::FailedInTx;
            }
            drop(cx);
            if let Outcome::LeaseGone = outcome {
                // Nothing ran and nothing is to be written: the new claim's holder runs it
                // (the lost lease was counted where it was found).
                tracing::warn!(
                    "not started: the lease was recycled while the task waited past dead_after"
                );
                shared.tracker.attempt_ended(lease);
                drop(slot);
                shared.tracker.slot_freed();
                shared.tracker.finished(&[lease]);
                return;
            }
            if let Outcome::CompletedInTx | Outcome::FailedInTx = outcome {
                // Recorded, with the handler's own writes: nothing to mark.
                if let Outcome::FailedInTx = outcome {
                    shared.counters.failed(&exec.event_type);
                    tracing::warn!("task failed (in the handler's transaction)");
                } else {
                    shared.counters.succeeded(&exec.event_type);
                    tracing::debug!("task succeeded (completed in the handler's transaction)");
                }
                shared.tracker.attempt_ended(lease);
                drop(slot);
                shared.tracker.slot_freed();
                shared.tracker.finished(&[lease]);
                shared.slot_left(&exec.event_type);
                if let Some(key) = task.order_key.clone() {
                    super::keys::release_keys(&shared, &[key]).await;
                }
                return;
            }
            let mark = outcome_mark(&exec, &task, outcome, &shared.counters);
            let retry_later = task.has_attempts_left();
            // run the retry when it is due, not at the next tick (armed once applied)
            let due_after = match &mark.action {
                crate::model::MarkAction::Retry { delay, .. } if retry_later => Some(*delay),
                crate::model::MarkAction::Snooze { delay, .. } => Some(*delay),
                _ => None,
            };
            // Whether the outcome may let the next task of the task's order key go: it
            // left the way (succeeded, failed), unless it stays in line (a retry with
            // attempts left, a release).
            let order_key = match &mark.action {
                crate::model::MarkAction::Release => None,
                crate::model::MarkAction::Retry { .. } if retry_later => None,
                // stays in line, unless past its snoozes with no attempt left (failed)
                crate::model::MarkAction::Snooze { .. } if retry_later => None,
                _ => task.order_key.clone(),
            };
            drop(task);
            // The attempt is over: its executor slot is free for the next task while the
            // mark waits for its batch (bounded by `EngineConfig::max_unmarked`). The task stays held
            // (heartbeated) and in flight (shutdown waits for it) until the mark is applied.
            shared.tracker.attempt_ended(lease);
            drop(slot);
            shared.tracker.slot_freed();
            // The flusher finishes the bookkeeping once the mark is applied; this task ends.
            let completion = Completion {
                mark,
                event_type: Arc::clone(&exec.event_type_arc),
                order_key,
                due_after,
            };
            super::completer::submit(&shared, completion);
        }
        .instrument(span),
    );
}

/// Wait for a runner, then run the attempt with its timeout, catching panics.
///
/// A task that waited for its runner longer than `dead_after` since its lease was last
/// known fresh (its claim, or this instance's last applied heartbeat) may have been
/// recycled and claimed by another instance meanwhile: this process was stopped (a
/// paused VM, `SIGSTOP`), or its heartbeats failed. Its lease is checked first (one
/// heartbeat, which also refreshes it) so that it does not run a second time; a lease
/// found gone ends the attempt unstarted. When the store does not answer, the task runs
/// (at least once: its mark is fenced anyway).
async fn run<S: TaskStore + Clone>(
    shared: &Arc<Shared<S>>,
    exec: &Arc<Executor>,
    task: &Task,
    origin: Origin,
    claimed_at: Instant,
) -> Outcome {
    let mut state = shared.state.subscribe();
    // Once the engine is draining, a task still waiting for a runner (queued, or claimed
    // by a claim that was in flight when shutdown began) is given back, never started.
    let runner = tokio::select! {
        biased;
        _ = state.wait_for(|s| *s != State::Running) => None,
        permit = Arc::clone(&exec.runners).acquire_owned() => permit.ok(),
    };
    let Some(_runner) = runner else {
        tracing::debug!("shutdown before the task started: releasing it");
        return Outcome::Released;
    };
    // a heartbeat found the lease gone while the task waited
    if super::attempt::is_lease_lost() {
        return Outcome::LeaseGone;
    }
    let refreshed = *shared
        .last_refreshed
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let fresh_since = refreshed.map_or(claimed_at, |r| r.max(claimed_at));
    if fresh_since.elapsed() >= shared.config.dead_after {
        if let Ok(flags) = shared.store.heartbeat(&[task.lease()]).await {
            if flags.first() == Some(&false) {
                if shared.tracker.lease_gone(task.lease()) {
                    shared.counters.leases_lost(&exec.event_type);
                }
                return Outcome::LeaseGone;
            }
        }
    }
    let now = chrono::Utc::now();
    let waited = (now - task.next_run_at).to_std().unwrap_or_default();
    metrics::histogram!("backstop_start_delay_seconds", "event_type" => exec.event_type.clone())
        .record(waited.as_secs_f64());
    if origin == Origin::RunAhead {
        let latency = (chrono::Utc::now() - task.created_at)
            .to_std()
            .unwrap_or_default();
        metrics::histogram!("backstop_run_ahead_latency_seconds", "event_type" => exec.event_type.clone())
            .record(latency.as_secs_f64());
    }
    let started = Instant::now();
    let handler = &exec.handler;
    // The attempt runs on this task (no extra spawn); a panic is caught, and dropping the
    // future at the timeout or at a forced shutdown cancels it at its next await.
    let attempt = AssertUnwindSafe(async {
        if handler.pre_check_skip(task).await? {
            return Ok(true);
        }
        handler.handle(task).await.map(|()| false)
    })
    .catch_unwind();
    let timeout = task.timeout.unwrap_or(exec.options.timeout);
    let outcome = tokio::select! {
        r = attempt => match r {
            Ok(Ok(true)) => Outcome::Skipped,
            Ok(Ok(false)) => Outcome::Done,
            // A handler that stops because the engine is shutting down
            // (`Context::cancelled`) can only say so with an error: a retryable one
            // returned while the engine drains gives the task back, spending no
            // attempt (on its last attempt it would otherwise fail).
            Ok(Err(e))
                if shared.state() != State::Running
                    && !matches!(e.action(), ErrorAction::Fail | ErrorAction::Cancel) =>
            {
                tracing::info!(error = %e.message(), "stopped for the shutdown: releasing the task");
                Outcome::Released
            }
            Ok(Err(e)) => Outcome::Error(e.action(), e.message().to_owned()),
            Err(panic) => Outcome::Panicked(panic_message(panic)),
        },
        _ = tokio::time::sleep(timeout) => Outcome::TimedOut,
        _ = state.wait_for(|s| *s == State::Stopped) => {
            tracing::warn!("interrupted by shutdown: releasing the task");
            Outcome::Released
        }
    };
    metrics::histogram!("backstop_handler_duration_seconds", "event_type" => exec.event_type.clone())
        .record(started.elapsed().as_secs_f64());
    outcome
}

pub(super) fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// The lease-fenced mark that records `outcome`, counted and logged.
/// A handler's delay cut to the longest a store takes
/// ([`MAX_INTERVAL`](crate::limits::MAX_INTERVAL)): a mark past it would be refused, and
/// with it every mark of its batch (the tasks beside it left running until recycled).
fn within_limit(delay: Duration) -> Duration {
    if delay > crate::limits::MAX_INTERVAL {
        tracing::warn!(
            ?delay,
            "the handler's delay is past the longest a store takes (365 days): cut to it"
        );
    }
    delay.min(crate::limits::MAX_INTERVAL)
}

fn outcome_mark(exec: &Executor, task: &Task, outcome: Outcome, c: &Counters) -> Mark {
    let lease = task.lease();
    let et = exec.event_type.as_str();
    let retry = |delay: Duration, error: String| {
        if task.has_attempts_left() {
            c.retried(et);
            tracing::info!(?delay, %error, "attempt failed: retry scheduled");
            return Mark::retry(lease, delay, error);
        }
        c.failed(et);
        tracing::warn!(%error, "attempt failed and no attempts are left: task failed");
        // best-effort notification: the schedule used up, the task waits for
        // reconciliation, and says so
        let error = match task.retry.backoff {
            Backoff::Notify { .. } => format!(
                "{} the notification schedule is used up ({} attempts): {error}",
                RetryPolicy::TO_RECONCILE,
                task.attempts
            ),
            _ => error,
        };
        Mark::retry(lease, delay, error)
    };
    match outcome {
        Outcome::Done => {
            c.succeeded(et);
            tracing::debug!("task succeeded");
            Mark::success(lease)
        }
        Outcome::Skipped => {
            c.skipped(et);
            c.succeeded(et);
            tracing::debug!("pre_check_skip: business already done; task succeeded");
            Mark::success(lease)
        }
        Outcome::Error(ErrorAction::Retry, msg) => retry(task.retry_delay(), msg),
        Outcome::Error(ErrorAction::RetryAfter(d), msg) => retry(within_limit(d), msg),
        Outcome::Error(ErrorAction::Snooze(delay), msg) => {
            let delay = within_limit(delay);
            let max = exec.options.max_snoozes;
            if task.snoozes >= max {
                // past its bound a snooze is a retry after the delay: counted (and
                // failed, with no attempt left) as one
                return retry(
                    delay,
                    format!("snoozed more than {max} times, this one spends an attempt: {msg}"),
                );
            }
            c.snoozed(et);
            tracing::debug!(?delay, %msg, "the handler snoozed the task");
            let error = format!("snoozed more than {max} times, this one spends an attempt: {msg}");
            Mark::snooze(lease, delay, max, error)
        }
        Outcome::Error(ErrorAction::Cancel, reason) => {
            c.cancelled(et);
            tracing::info!(%reason, "the handler cancelled the task");
            Mark::cancel(lease, reason)
        }
        Outcome::Error(ErrorAction::Fail, msg) => {
            c.failed(et);
            tracing::warn!(error = %msg, "permanent failure: task failed");
            Mark::fail(lease, msg)
        }
        Outcome::Panicked(msg) => {
            c.panics(et);
            retry(task.retry_delay(), format!("handler panicked: {msg}"))
        }
        Outcome::TimedOut => {
            c.timeouts(et);
            retry(
                task.retry_delay(),
                format!(
                    "timed out after {:?}",
                    task.timeout.unwrap_or(exec.options.timeout)
                ),
            )
        }
        Outcome::Released => {
            c.released(et);
            Mark::release(lease)
        }
        // handled before a mark is made; marked as a success should it ever get here
        Outcome::CompletedInTx => Mark::success(lease),
        // handled before a mark is made; a release (refused: the task is failed)
        Outcome::FailedInTx => Mark::release(lease),
        // handled before a mark is made; a release (refused: the lease is gone) otherwise
        Outcome::LeaseGone => Mark::release(lease),
    }
}
