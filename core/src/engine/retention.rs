//! The retention job: what the engine deletes once it is old enough — finished tasks per
//! terminal state (through the archive hook when one is set), the operators' logs, the
//! decommissioned event types of the registry, the participant barrier's records, and
//! the inbox's rows when the engine is given the inbox.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::loops::pause;
use super::{Shared, State};
use crate::error::Result;
use crate::model::{Status, TaskFilter};
use crate::store::TaskStore;

/// The inbox's purge ([`Inbox::purge_inbox`](crate::Inbox::purge_inbox)) of the engine's
/// store, given with [`EngineBuilder::inbox_retention`](crate::EngineBuilder::inbox_retention).
pub(crate) type InboxPurge =
    Arc<dyn Fn(Duration, usize) -> Pin<Box<dyn Future<Output = Result<u64>> + Send>> + Send + Sync>;

/// Whether an engine with `config` (and an inbox purge or not) has anything to purge.
pub(crate) fn needed(config: &super::EngineConfig, inbox: bool) -> bool {
    inbox
        || [
            config.retention,
            config.failed_retention,
            config.cancelled_retention,
            config.audit_retention,
            config.registry_retention,
            config.barrier_retention,
        ]
        .iter()
        .any(Option::is_some)
}

/// Every `purge_interval` (the first time after the first-poll delay), purge in small
/// batches whatever is older than its retention.
pub(crate) async fn retention<S: TaskStore + Clone>(shared: Arc<Shared<S>>) {
    let mut state = shared.state.subscribe();
    if !pause(&shared, &mut state, shared.config.first_poll_delay).await {
        return;
    }
    let cfg = &shared.config;
    let batch = cfg.purge_batch;
    loop {
        for (status, age) in [
            (Status::Succeeded, cfg.retention),
            (Status::Failed, cfg.failed_retention),
            (Status::Cancelled, cfg.cancelled_retention),
        ] {
            let Some(age) = age else { continue };
            let purge = || purge_tasks(&shared, status, age, batch);
            let Some(total) = in_batches(&shared, status.as_str(), purge).await else {
                return;
            };
            if total > 0 {
                metrics::counter!("backstop_purged_total", "status" => status.as_str())
                    .increment(total);
                tracing::info!(purged = total, %status, "retention purged finished tasks");
            }
        }
        let others: [(&str, Option<Duration>); 3] = [
            ("operators' log entries", cfg.audit_retention),
            ("decommissioned event types", cfg.registry_retention),
            ("barrier records", cfg.barrier_retention),
        ];
        let store = &shared.store;
        for (what, age) in others {
            let Some(age) = age else { continue };
            let purge = || async move {
                match what {
                    "operators' log entries" => store.purge_audit(age, batch).await,
                    "decommissioned event types" => store.purge_event_types(age, batch).await,
                    _ => store.purge_barrier(age, batch).await,
                }
            };
            let Some(total) = in_batches(&shared, what, purge).await else {
                return;
            };
            if total > 0 {
                tracing::info!(purged = total, "retention purged {what}");
            }
        }
        if let Some((age, purge_inbox)) = &shared.inbox_purge {
            let purge = || purge_inbox(*age, batch);
            let Some(total) = in_batches(&shared, "inbox rows", purge).await else {
                return;
            };
            if total > 0 {
                tracing::info!(purged = total, "retention purged inbox rows");
            }
        }
        if !pause(&shared, &mut state, shared.config.purge_interval).await {
            return;
        }
    }
}

/// One batch of `status` tasks older than `age`: deleted at once, or with an archive,
/// listed, archived, and exactly those deleted (a task reset since it was listed stays).
async fn purge_tasks<S: TaskStore + Clone>(
    shared: &Shared<S>,
    status: Status,
    age: Duration,
    batch: usize,
) -> Result<u64> {
    let Some(archive) = &shared.archive else {
        return shared.store.purge_finished(status, age, batch).await;
    };
    let filter = TaskFilter {
        status: Some(status),
        older_than: Some(age),
        limit: batch,
        ..TaskFilter::default()
    };
    let tasks = shared.store.list(&filter).await?;
    if tasks.is_empty() {
        return Ok(0);
    }
    if let Err(e) = archive.archive(&tasks).await {
        tracing::warn!(error = %e, %status, "archive failed: nothing purged this round");
        return Ok(0);
    }
    let ids: Vec<_> = tasks.iter().map(|t| t.id).collect();
    shared.store.delete_finished(status, &ids).await
}

/// Run `purge` until a batch comes back short; the total, or `None` when the engine
/// stopped. A failure is counted and logged, and ends this round.
async fn in_batches<S, F, Fut>(shared: &Shared<S>, what: &str, mut purge: F) -> Option<u64>
where
    S: TaskStore + Clone,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64>>,
{
    let mut total = 0u64;
    loop {
        if shared.state() != State::Running {
            return None;
        }
        match purge().await {
            Ok(n) => {
                total += n;
                if n < shared.config.purge_batch as u64 {
                    return Some(total);
                }
                tokio::task::yield_now().await;
            }
            Err(e) => {
                shared.counters.store_errors("*");
                tracing::warn!(error = %e, "retention purge of {what} failed");
                return Some(total);
            }
        }
    }
}
