//! Reconcilers (对账, the source articles' §5.2): periodic jobs that find what is stuck in
//! an intermediate state longer than it should be (`WHERE status IN (...) AND
//! updated_at < now() - T`) and resolve each finding by policy: push it forward,
//! compensate it, or open an operator item with the evidence.
//!
//! A reconciler registered with [`EngineBuilder::reconciler`](crate::EngineBuilder::reconciler)
//! is a periodic task (`reconcile:<name>`, leaderless: each tick fires once whatever the
//! number of instances) whose handler [scans](Reconciler::scan), then one task per
//! finding (the event type `reconcile:<name>`, the finding's key as business key, its
//! evidence as payload) whose handler [resolves](Reconciler::resolve) it, retried like
//! any task. A finding still being resolved is not enqueued twice, and one with an open
//! operator item is not resolved again (its task ends at once). An operator item is the finding's task parked as failed with a last
//! error beginning `to reconcile:`: the reconciliation inbox is
//! `backstop tasks list --status failed --event-type reconcile:<name>`, where an
//! operator's reset runs the resolution again and a cancel or delete closes the item,
//! each audited with its operator and reason.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::handler::{Handler, HandlerError};
use super::Context;
use crate::error::Result;
use crate::limits;
use crate::model::{NewTask, RetryPolicy, Status, Task, TaskFilter};
use crate::schedule::{Periodic, Schedule};

/// One thing a reconciler found stuck: a key (the business row's id, at most
/// [`MAX_BIZ_KEY_BYTES`](limits::MAX_BIZ_KEY_BYTES) bytes, no control characters) and the
/// evidence an operator would need (any JSON: its status, since when, amounts).
///
/// ```
/// use backstop_core::Finding;
/// let f = Finding::new("order-42", serde_json::json!({"status": "paying", "since": "09:10"})).unwrap();
/// assert_eq!(f.key(), "order-42");
/// assert!(Finding::new("", 1).is_err());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    key: String,
    evidence: serde_json::Value,
}

impl Finding {
    /// A finding of `key` with `evidence`; `InvalidInput` for a bad key or evidence that
    /// does not serialize.
    pub fn new(key: impl Into<String>, evidence: impl Serialize) -> Result<Self> {
        const OP: &str = "reconcile_finding";
        let key = key.into();
        limits::check_key(OP, "finding key", &key, limits::MAX_BIZ_KEY_BYTES)?;
        let evidence = serde_json::to_value(evidence).map_err(|e| {
            crate::error::Error::invalid_input(OP, format!("the finding's evidence: {e}"))
        })?;
        Ok(Finding { key, evidence })
    }

    /// The key of what was found.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The evidence.
    pub fn evidence(&self) -> &serde_json::Value {
        &self.evidence
    }
}

/// How a finding was resolved ([`Reconciler::resolve`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resolution {
    /// Pushed forward (re-sent, completed, confirmed), and what was done.
    PushedForward(String),
    /// Compensated (rolled back, refunded, released), and what was done.
    Compensated(String),
    /// Nothing to do any more: it moved on since the scan.
    Settled,
    /// A person must look: the finding's task parks as failed, `to reconcile:` and this
    /// reason, with the evidence, in the reconciliation inbox.
    Operator(String),
}

impl Resolution {
    /// Its name, as the `resolution` label of `backstop_reconcile_resolutions_total`
    /// has it: `pushed_forward`, `compensated`, `settled`, `operator`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Resolution::PushedForward(_) => "pushed_forward",
            Resolution::Compensated(_) => "compensated",
            Resolution::Settled => "settled",
            Resolution::Operator(_) => "operator",
        }
    }
}

/// A user-supplied reconciler: what is stuck, and how each finding is resolved. Both run
/// inside an engine's attempt (`cx`: the store, shared state, cancellation); an error
/// retries the attempt under the reconciler's retry policy.
///
/// Make [`resolve`](Self::resolve) check again before it acts, on the row's current
/// state and in the same transaction as its fix (`UPDATE ... WHERE status = 'paying'`):
/// a finding may have moved on since the scan, and its task may run twice.
///
/// ```
/// use backstop_core::{Context, Finding, HandlerError, Reconciler, Resolution};
///
/// struct StuckPayments;
///
/// #[backstop_core::async_trait]
/// impl Reconciler for StuckPayments {
///     async fn scan(&self, _cx: &Context) -> Result<Vec<Finding>, HandlerError> {
///         // SELECT id, status, updated_at FROM payments
///         //  WHERE status = 'paying' AND updated_at < now() - interval '10 minutes'
///         Ok(vec![Finding::new("pay-7", serde_json::json!({"status": "paying"}))?])
///     }
///     async fn resolve(&self, f: &Finding, _cx: &Context) -> Result<Resolution, HandlerError> {
///         // ask the provider; mark paid, or refund, or hand it over
///         Ok(Resolution::Operator(format!("{} is unknown to the provider", f.key())))
///     }
/// }
/// ```
#[async_trait]
pub trait Reconciler: Send + Sync + 'static {
    /// What is stuck now.
    async fn scan(&self, cx: &Context) -> std::result::Result<Vec<Finding>, HandlerError>;

    /// Resolve one finding.
    async fn resolve(
        &self,
        finding: &Finding,
        cx: &Context,
    ) -> std::result::Result<Resolution, HandlerError>;
}

/// The payload of a reconciler's tasks: a tick, or a finding's evidence.
#[derive(Debug, Serialize, Deserialize)]
struct Payload {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    tick: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    evidence: Option<serde_json::Value>,
}

/// The pages of open operator items a tick reads at most.
const OPEN_ITEM_PAGES: usize = 10;

/// The handler of a reconciler's event type.
pub(crate) struct ReconcileRunner {
    name: String,
    event_type: String,
    inner: Arc<dyn Reconciler>,
    /// The retry policy of its ticks and findings.
    retry: RetryPolicy,
}

/// The event type of reconciler `name`'s tasks.
pub(crate) fn event_type(name: &str) -> String {
    format!("reconcile:{name}")
}

/// Reconciler `name`'s runner and periodic tick, every `every`; `InvalidInput` for a bad
/// name (as a saga's) or interval.
pub(crate) fn register(
    name: &str,
    every: Duration,
    reconciler: impl Reconciler,
    retry: RetryPolicy,
) -> Result<(ReconcileRunner, Periodic)> {
    crate::model::check_name(
        "register_reconciler",
        "reconciler name",
        name,
        limits::MAX_SAGA_NAME_BYTES,
    )?;
    let event_type = event_type(name);
    let tick = Payload {
        tick: true,
        evidence: None,
    };
    let periodic = Periodic::new(
        event_type.clone(),
        Schedule::every(every)?,
        NewTask::new(event_type.clone(), "-")
            .json(&tick)
            .retry(retry),
    );
    let runner = ReconcileRunner {
        name: name.to_owned(),
        event_type,
        inner: Arc::new(reconciler),
        retry,
    };
    Ok((runner, periodic))
}

#[async_trait]
impl Handler for ReconcileRunner {
    async fn handle(&self, task: &Task) -> std::result::Result<(), HandlerError> {
        let cx = Context::current().ok_or_else(|| {
            HandlerError::fail(format!(
                "task {}: a reconciler runs inside an engine's attempt",
                task.id
            ))
        })?;
        let payload: Payload = serde_json::from_str(&task.payload).map_err(|e| {
            HandlerError::fail(format!(
                "the payload is not a reconciler's tick or finding: {e}"
            ))
        })?;
        match payload.evidence {
            _ if payload.tick => self.tick(&cx).await,
            Some(evidence) => {
                let finding = Finding {
                    key: task.biz_key.clone(),
                    evidence,
                };
                self.resolve(&cx, finding).await
            }
            None => Err(HandlerError::fail(
                "a reconciler's task without a tick or evidence",
            )),
        }
    }
}

impl ReconcileRunner {
    /// Scan, and enqueue a task for each finding that has neither a task under way
    /// (deduplicated while active) nor an open operator item.
    async fn tick(&self, cx: &Context) -> std::result::Result<(), HandlerError> {
        let findings = self.inner.scan(cx).await?;
        if findings.is_empty() {
            return Ok(());
        }
        let store = cx.store();
        let mut open = std::collections::HashSet::new();
        let mut filter = TaskFilter::default()
            .event_type(self.event_type.clone())
            .status(Status::Failed)
            .limit(limits::MAX_BATCH);
        for _ in 0..OPEN_ITEM_PAGES {
            let page = store
                .list(&filter)
                .await
                .map_err(|e| HandlerError::retry(format!("listing open items: {e}")))?;
            let full = page.len() == limits::MAX_BATCH;
            if let Some(last) = page.last() {
                filter = filter.after_id(last.id);
            }
            open.extend(page.into_iter().map(|t| t.biz_key));
            if !full {
                break;
            }
        }
        let tasks: Vec<NewTask> = findings
            .into_iter()
            .filter(|f| !open.contains(&f.key))
            .map(|f| {
                let payload = Payload {
                    tick: false,
                    evidence: Some(f.evidence),
                };
                NewTask::new(self.event_type.clone(), f.key)
                    .json(&payload)
                    .retry(self.retry)
            })
            .collect();
        metrics::counter!("backstop_reconcile_findings_total", "reconciler" => self.name.clone())
            .increment(tasks.len() as u64);
        for chunk in tasks.chunks(limits::MAX_BATCH) {
            store
                .enqueue_many(chunk)
                .await
                .map_err(|e| HandlerError::retry(format!("enqueueing findings: {e}")))?;
        }
        Ok(())
    }

    /// Resolve one finding: done, or an operator item.
    async fn resolve(
        &self,
        cx: &Context,
        finding: Finding,
    ) -> std::result::Result<(), HandlerError> {
        // an operator item of this key open already: it is the operator's. Exact, since
        // a key's finding tasks never overlap (deduplicated while active): an item that
        // parked before this task was enqueued is committed and seen here.
        let open = TaskFilter::default()
            .event_type(self.event_type.clone())
            .biz_key(finding.key.clone())
            .status(Status::Failed)
            .limit(1);
        let items = cx
            .store()
            .list(&open)
            .await
            .map_err(|e| HandlerError::retry(format!("looking for an open item: {e}")))?;
        if !items.is_empty() {
            tracing::debug!(reconciler = %self.name, key = %finding.key, "an operator item is open already");
            return Ok(());
        }
        let resolution = self.inner.resolve(&finding, cx).await?;
        metrics::counter!("backstop_reconcile_resolutions_total", "reconciler" => self.name.clone(), "resolution" => resolution.as_str())
            .increment(1);
        match resolution {
            Resolution::Operator(why) => {
                tracing::warn!(reconciler = %self.name, key = %finding.key, %why, "finding left to an operator");
                Err(HandlerError::fail(format!(
                    "{} {why}; evidence: {}",
                    RetryPolicy::TO_RECONCILE,
                    finding.evidence
                )))
            }
            done => {
                let what = match &done {
                    Resolution::PushedForward(w) | Resolution::Compensated(w) => w.as_str(),
                    _ => "",
                };
                tracing::info!(reconciler = %self.name, key = %finding.key, resolution = done.as_str(), %what, "finding resolved");
                Ok(())
            }
        }
    }
}
