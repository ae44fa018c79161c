//! Step reports batched: the steps of a saga runner hand their reports to one flusher,
//! which writes what has arrived in one [`TaskStore::saga_step_many`] call (one statement
//! on PostgreSQL for the common case), group-commit style, as the completion flusher
//! writes marks (`engine/completer.rs`).
//!
//! No timer: the flusher takes the first waiting report and what is queued behind it
//! (yielding a few times while more arrives), writes them, answers each, and comes back.
//! An idle runner's report is written at once; under load, reports queue while a call is
//! in flight and ride the next one. The flusher starts with the first report (on the
//! engine's runtime) and ends when the runner is dropped.

use std::sync::{Arc, OnceLock};

use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, ErrorKind, Result};
use crate::model::{SagaDef, StepApplied, StepReport};
use crate::store::TaskStore;

/// Most reports per call.
const MAX_BATCH: usize = 64;
/// How many times the flusher yields to let a batch fill before writing it.
const LINGER_YIELDS: usize = 2;

type Waiting = (StepReport, oneshot::Sender<Result<StepApplied>>);

/// A runner's report queue (see the module docs).
#[derive(Default)]
pub(crate) struct Reports {
    queue: OnceLock<mpsc::UnboundedSender<Waiting>>,
}

impl Reports {
    /// Write `report` (with others waiting, when there are) and answer it.
    pub(crate) async fn report(
        &self,
        store: &Arc<dyn TaskStore>,
        def: &Arc<SagaDef>,
        report: StepReport,
    ) -> Result<StepApplied> {
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(flusher(Arc::clone(store), Arc::clone(def), rx));
            tx
        });
        let (tx, rx) = oneshot::channel();
        if queue.send((report, tx)).is_err() {
            return Err(gone());
        }
        rx.await.unwrap_or_else(|_| Err(gone()))
    }
}

fn gone() -> Error {
    Error::new(
        ErrorKind::Unavailable,
        "saga_step",
        "the step reports' flusher stopped",
    )
}

/// `e` for each report of a call that failed as a whole.
fn each(e: &Error) -> Error {
    Error::new(e.kind(), e.operation(), e.to_string()).with_temporary(e.is_temporary())
}

async fn flusher(
    store: Arc<dyn TaskStore>,
    def: Arc<SagaDef>,
    mut rx: mpsc::UnboundedReceiver<Waiting>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        for _ in 0..LINGER_YIELDS {
            let before = batch.len();
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(w) => batch.push(w),
                    Err(_) => break,
                }
            }
            if batch.len() >= MAX_BATCH || (batch.len() == before && before > 1) {
                break;
            }
            tokio::task::yield_now().await;
        }
        let (reports, answer): (Vec<StepReport>, Vec<_>) = batch.into_iter().unzip();
        match store.saga_step_many(&def, &reports).await {
            Ok(answers) if answers.len() == reports.len() => {
                for (tx, a) in answer.into_iter().zip(answers) {
                    let _ = tx.send(a);
                }
            }
            Ok(answers) => {
                let e = Error::new(
                    ErrorKind::Unexpected,
                    "saga_step",
                    format!("{} answers for {} reports", answers.len(), reports.len()),
                );
                for tx in answer {
                    let _ = tx.send(Err(each(&e)));
                }
            }
            Err(e) => {
                for tx in answer {
                    let _ = tx.send(Err(each(&e)));
                }
            }
        }
    }
}
