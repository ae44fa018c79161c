//! Draining on demand ([`Engine::drain`]): every due task of the handled types run now,
//! through the engine's own executors, and awaited — for tests and one-shot scripts.

use super::loops::{poll_round, Round};
use super::{Engine, EngineCounters};
use crate::error::{Error, ErrorKind, Result};
use crate::limits::MAX_DRAIN_ROUNDS;
use crate::store::TaskStore;

impl<S: TaskStore + Clone> Engine<S> {
    /// Run every task that is due now of the event types this engine handles, and
    /// return once their outcomes are applied; then again while that made more due
    /// (follow-up tasks a handler enqueued, a saga's next steps, a retry due at once),
    /// until a round finds nothing due. Answers what the engine did meanwhile
    /// ([`EngineCounters::since`] the start: with a background poller, its work too).
    ///
    /// # Behavior
    /// - Claims as the poller does (batches per event type within each executor's
    ///   room; paused types left, limited types within their room) and runs the tasks on
    ///   the same executors: retries, snoozes, timeouts, the handlers' context and
    ///   state are as in production.
    /// - A task not due yet stays (a retry's backoff, a delayed task): move time along
    ///   with `backstop::testing::advance`, then drain again.
    /// - An engine for tests usually never polls on its own
    ///   (`first_poll_delay` of an hour): then what runs is what run-ahead or a drain
    ///   started.
    /// - `Unavailable` when a claim failed (the tasks stay for the next drain or poll);
    ///   `Conflict` when the engine is shutting down, or when work is still due after
    ///   [`MAX_DRAIN_ROUNDS`](crate::limits::MAX_DRAIN_ROUNDS) rounds (a handler that enqueues due work without end).
    ///
    /// ```no_run
    /// # async fn demo<S: backstop_core::TaskStore + Clone>(engine: backstop_core::Engine<S>) -> backstop_core::Result<()> {
    /// let done = engine.drain().await?;
    /// assert_eq!(done.failed, 0);
    /// println!("{} tasks succeeded", done.succeeded);
    /// # Ok(()) }
    /// ```
    pub async fn drain(&self) -> Result<EngineCounters> {
        const OP: &str = "drain";
        let shared = &self.inner.shared;
        let before = shared.counters.snapshot();
        for _ in 0..MAX_DRAIN_ROUNDS {
            let start = shared.counters.snapshot();
            let mut full = false;
            loop {
                let Some((again, wait)) = poll_round(shared, &Round::All, false).await else {
                    return Err(Error::new(
                        ErrorKind::Conflict,
                        OP,
                        "the engine is shutting down: nothing more is claimed",
                    ));
                };
                full |= wait;
                if !again {
                    break;
                }
            }
            // every attempt started so far ended and its outcome applied
            shared.tracker.wait_idle().await;
            let now = shared.counters.snapshot();
            if now.store_errors > start.store_errors {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    OP,
                    format!(
                        "the store failed {} time(s) during the drain (logged): what was not \
                         claimed stays due",
                        now.store_errors - start.store_errors
                    ),
                )
                .with_temporary(true));
            }
            let claimed = (now.polled + now.run_ahead) - (start.polled + start.run_ahead);
            if claimed == 0 && !full {
                return Ok(now.since(&before));
            }
        }
        Err(Error::new(
            ErrorKind::Conflict,
            OP,
            format!(
                "tasks were still coming due after {MAX_DRAIN_ROUNDS} rounds: does a handler \
                 enqueue due work without end?"
            ),
        ))
    }
}
