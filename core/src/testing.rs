//! Helpers for testing an application's handlers and the code that enqueues (feature
//! `testing`): assert what was enqueued, move time along for due dates and backoffs
//! without sleeping, and, with [`Engine::drain`](crate::Engine::drain), run what is due
//! through the registered handlers and wait for the outcomes.
//!
//! They use only the [`TaskStore`] contract, so they work on any store: SQLite in memory
//! (`SqliteStore::open_in_memory`, fast and private to the test), a test database of
//! the backend the application runs on, a store wrapped in layers.
//!
//! ```no_run
//! # async fn demo<S: backstop_core::TaskStore + Clone>(store: S, engine: backstop_core::Engine<S>) -> backstop_core::Result<()> {
//! use std::time::Duration;
//! use backstop_core::{testing, Status};
//!
//! // … the code under test enqueued a SEND_EMAIL for order 42 …
//! let task = testing::assert_enqueued(&store, "SEND_EMAIL", "order-42").await;
//! assert_eq!(task.payload, r#"{"to":"ada@example.com"}"#);
//!
//! engine.drain().await?; // the first attempt failed: a retry in 10 s
//! testing::advance(&store, Duration::from_secs(10)).await?;
//! engine.drain().await?; // the retry ran
//! assert_eq!(store.get(task.id).await?.map(|t| t.status), Some(Status::Succeeded));
//! # Ok(()) }
//! ```

use std::time::Duration;

use crate::error::Result;
use crate::limits::{self, MAX_BATCH};
use crate::model::{Audit, Status, Task, TaskEdit, TaskFilter, TaskId};
use crate::store::TaskStore;
use crate::ErrorKind;

/// The operator [`advance`]'s edits are recorded under, in each task's audit log.
pub const OPERATOR: &str = "backstop::testing";

/// Every task of `event_type` in the store, whatever its status (run, running or
/// waiting), in id order: the first [`MAX_BATCH`].
pub async fn enqueued<S: TaskStore + ?Sized>(store: &S, event_type: &str) -> Result<Vec<Task>> {
    store
        .list(
            &TaskFilter::default()
                .event_type(event_type)
                .limit(MAX_BATCH),
        )
        .await
}

/// The task of `event_type` and `biz_key`, whatever its status (it may have run
/// already): check its payload, attempts, due time.
///
/// # Panics
/// When there is none, naming the business keys of the type that there are (or a store
/// error).
pub async fn assert_enqueued<S: TaskStore + ?Sized>(
    store: &S,
    event_type: &str,
    biz_key: &str,
) -> Task {
    let found = store
        .list(
            &TaskFilter::default()
                .event_type(event_type)
                .biz_key(biz_key)
                .limit(1),
        )
        .await;
    match found {
        Ok(mut tasks) if !tasks.is_empty() => tasks.remove(0),
        Ok(_) => {
            let others = match enqueued(store, event_type).await {
                Ok(tasks) if tasks.is_empty() => "none".to_owned(),
                Ok(tasks) => keys(&tasks),
                Err(e) => format!("(listing them failed: {e})"),
            };
            panic!(
                "no {event_type} task was enqueued with key {biz_key:?}; the {event_type} tasks \
                 there are: {others}"
            )
        }
        Err(e) => panic!("looking for the {event_type} task {biz_key:?} failed: {e}"),
    }
}

/// Check no task of `event_type` and `biz_key` was enqueued.
///
/// # Panics
/// When there is one, showing it (or on a store error).
pub async fn assert_not_enqueued<S: TaskStore + ?Sized>(
    store: &S,
    event_type: &str,
    biz_key: &str,
) {
    let filter = TaskFilter::default()
        .event_type(event_type)
        .biz_key(biz_key)
        .limit(1);
    match store.list(&filter).await {
        Ok(tasks) if tasks.is_empty() => {}
        Ok(tasks) => panic!(
            "a {event_type} task was enqueued with key {biz_key:?}: {:?}",
            tasks[0]
        ),
        Err(e) => panic!("looking for the {event_type} task {biz_key:?} failed: {e}"),
    }
}

/// Move time along by `by` for the tasks waiting to run: each pending or waiting task
/// not due yet becomes due `by` earlier (a retry's backoff, a snooze, a delayed task),
/// and those whose time comes become due now. Returns the tasks made due now, in id
/// order. Then [`Engine::drain`](crate::Engine::drain) runs them.
///
/// # Behavior
/// - Through the operators' edit ([`TaskStore::edit`], `reschedule`), so each task
///   moved has an entry in its audit log under the operator [`OPERATOR`]. A task claimed
///   meanwhile (so running) is left as it is.
/// - Time is the tasks' due times, not a clock: a task enqueued after the call is due
///   when its own delay says. Periodic tasks' ticks are the engine's clock and are not
///   moved.
/// - `InvalidInput` naming `by` when it is over
///   [`MAX_INTERVAL`](crate::limits::MAX_INTERVAL); nothing is moved then.
///
/// ```no_run
/// # async fn demo(store: &dyn backstop_core::TaskStore) -> backstop_core::Result<()> {
/// use std::time::Duration;
/// let due = backstop_core::testing::advance(store, Duration::from_secs(3600)).await?;
/// println!("{} tasks fell due within the hour", due.len());
/// # Ok(()) }
/// ```
pub async fn advance<S: TaskStore + ?Sized>(store: &S, by: Duration) -> Result<Vec<TaskId>> {
    limits::check_duration("advance", "by", by)?;
    let mut due = Vec::new();
    if by.is_zero() {
        return Ok(due);
    }
    let step = chrono::Duration::from_std(by).unwrap_or(chrono::Duration::MAX);
    let audit = Audit::new(OPERATOR, format!("advance {by:?}"));
    for status in [Status::Pending, Status::Waiting] {
        let mut after = None;
        loop {
            let mut filter = TaskFilter::default().status(status).limit(MAX_BATCH);
            filter.after_id = after;
            let page = store.list(&filter).await?;
            let now = chrono::Utc::now();
            for task in &page {
                if task.next_run_at <= now {
                    continue; // due already
                }
                let at = task.next_run_at - step;
                match store.edit(task.id, &TaskEdit::run_at(at), &audit).await {
                    Ok(_) if at <= now => due.push(task.id),
                    Ok(_) => {}
                    // claimed, or removed, since the list: not waiting any more
                    Err(e) if matches!(e.kind(), ErrorKind::Conflict | ErrorKind::NotFound) => {}
                    Err(e) => return Err(e.with_operation("advance")),
                }
            }
            match page.last() {
                Some(last) if page.len() == MAX_BATCH => after = Some(last.id),
                _ => break,
            }
        }
    }
    due.sort_unstable();
    Ok(due)
}

/// `key (status), …` of at most ten tasks.
fn keys(tasks: &[Task]) -> String {
    let mut shown: Vec<String> = tasks
        .iter()
        .take(10)
        .map(|t| format!("{:?} ({})", t.biz_key, t.status))
        .collect();
    if tasks.len() > 10 {
        shown.push(format!("and {} more", tasks.len() - 10));
    }
    shown.join(", ")
}
