//! Batched completion: executors hand their marks to flushers that apply them in batches
//! (one `TaskStore::mark` call, still fenced lease by lease), group-commit style.
//!
//! No timer: the flusher takes the first waiting mark and everything queued behind it (up
//! to a batch, yielding a few times while more arrives), applies them, and comes back.
//! When the engine is idle a mark is applied at once; under load, marks queue while a
//! batch is in flight and ride the next one.
//!
//! One flusher per engine: it writes fewer, larger batches than two pipelined ones, and a
//! second flusher mostly adds concurrent writers on a shared database (see
//! `bench/NOTES.md`). A limited type's marks go straight to the type's lane instead
//! ([`submit`]), which writes them with its hand-over (see [`apply`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Mutex};
use tokio::task::JoinHandle;

use super::Shared;
use crate::model::Mark;
use crate::store::TaskStore;

/// Most marks per `TaskStore::mark` call.
pub(crate) const MAX_BATCH: usize = 256;
/// Flushers per engine (see the module docs).
const FLUSHERS: usize = 1;
/// Most limited types whose hand-overs are in flight at once per engine: each may wait
/// for its type's turn on a connection of the store's pool, which the engine's
/// heartbeats and claims need too.
const MAX_LANES: usize = 2;
/// How many times a flusher yields to let a batch fill before writing it.
const LINGER_YIELDS: usize = 4;

/// One mark waiting to be applied. Its task is finished (no longer held, nor in flight)
/// when the batch it rides has been applied or given up on.
pub(crate) struct Completion {
    pub mark: Mark,
    pub event_type: Arc<str>,
    /// The task's order key, when this outcome may let the key's next task go.
    pub order_key: Option<String>,
    /// A retry with attempts left: poll its event type this long after the mark is
    /// applied, when the database has made it due.
    pub due_after: Option<Duration>,
}

pub(crate) type Queue = mpsc::UnboundedSender<Completion>;

/// Hand an ended attempt's outcome over to be written: a limited type's straight to the
/// type's lane (see [`apply`]), the others to the flushers' queue.
///
/// A limited type's outcome never queues behind the flushers: under a backlog each of
/// their batches takes seconds on a busy database (MariaDB, durable, 256 marks: 1–4.5 s
/// in the chaos suite's outage lane), and the outcome holds one of the type's slots, on
/// every instance, until it is written. Queued behind them, outcomes waited up to 30 s,
/// and the type ran at 27 tasks/s under a limit of 6 whose handlers take 117 ms on
/// average. When every lane is busy with other types it goes to the queue, and the
/// flusher tries a lane again.
pub(crate) fn submit<S: TaskStore + Clone>(shared: &Arc<Shared<S>>, c: Completion) {
    let c = match shared.is_limited(&c.event_type) {
        true => match to_lane(shared, c) {
            None => return,
            Some(c) => c,
        },
        false => c,
    };
    if let Err(unsent) = shared.completions.send(c) {
        shared.tracker.finished(&[unsent.0.mark.lease]);
    }
}

/// Give `c`, of a limited type, to its type's lane: to the marks waiting for the lane in
/// flight, or to a lane started for it, which first lets the outcomes ending with it
/// join ([`lane`]). Back when [`MAX_LANES`] lanes are busy with other types.
fn to_lane<S: TaskStore + Clone>(shared: &Arc<Shared<S>>, c: Completion) -> Option<Completion> {
    let mut lanes = shared.lanes.lock();
    if let Some(waiting) = lanes.get_mut(&c.event_type) {
        waiting.push(c);
        return None;
    }
    if lanes.len() >= MAX_LANES {
        return Some(c);
    }
    let event_type = Arc::clone(&c.event_type);
    lanes.insert(Arc::clone(&event_type), vec![c]);
    drop(lanes);
    tokio::spawn(lane(Arc::clone(shared), event_type));
    None
}

/// Start the flushers on `rx`.
pub(crate) fn spawn<S: TaskStore + Clone>(
    runtime: &tokio::runtime::Handle,
    shared: &Arc<Shared<S>>,
    rx: mpsc::UnboundedReceiver<Completion>,
) -> Vec<JoinHandle<()>> {
    let rx = Arc::new(Mutex::new(rx));
    (0..FLUSHERS)
        .map(|_| runtime.spawn(flusher(Arc::clone(shared), Arc::clone(&rx))))
        .collect()
}

async fn flusher<S: TaskStore + Clone>(
    shared: Arc<Shared<S>>,
    rx: Arc<Mutex<mpsc::UnboundedReceiver<Completion>>>,
) {
    loop {
        let batch = {
            let mut rx = rx.lock().await;
            let Some(first) = rx.recv().await else {
                return;
            };
            let mut batch = vec![first];
            // Take what is queued; then yield a few times while more keeps arriving (other
            // attempts finishing right now), so a busy engine writes few, large batches.
            // An idle engine pays one yield: microseconds, not a timer.
            for _ in 0..LINGER_YIELDS {
                let before = batch.len();
                while batch.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(c) => batch.push(c),
                        Err(_) => break,
                    }
                }
                if batch.len() >= MAX_BATCH || (batch.len() == before && before > 1) {
                    break;
                }
                tokio::task::yield_now().await;
            }
            batch
        };
        apply(&shared, batch).await;
    }
}

/// A claim that rides a batch of marks: the slots of a limited type's finished tasks
/// go straight to its next due tasks, in the marks' transaction
/// ([`TaskStore::mark_and_claim`]), with no commit and no poll between a task's end and
/// the next one's claim. Where the unlimited engines hide their claims behind their
/// queues, a limited type's slot is held from the claim's commit to the mark's, so this
/// is what its throughput turns on.
struct Handover<'a> {
    exec: Arc<super::executor::Executor>,
    /// The executor's room, reserved for what the claim returns.
    permits: tokio::sync::OwnedSemaphorePermit,
    n: usize,
    _claim: super::tracker::ClaimGuard<'a>,
}

impl<'a> Handover<'a> {
    /// The hand-over for `event_type`, if this engine can run more of it.
    fn of<S: TaskStore + Clone>(shared: &'a Shared<S>, event_type: &str) -> Option<Self> {
        let exec = shared.executors.get(event_type)?;
        let n = shared.config.batch_size.min(exec.slots.available_permits());
        if n == 0 {
            return None;
        }
        let permits = Arc::clone(&exec.slots)
            .try_acquire_many_owned(n as u32)
            .ok()?;
        Some(Handover {
            exec: Arc::clone(exec),
            permits,
            n,
            _claim: shared.begin_claim()?,
        })
    }
}

/// Per limited event type with a hand-over in flight, the marks of the type waiting
/// for it: they ride the next.
#[derive(Default)]
pub(crate) struct Lanes(std::sync::Mutex<HashMap<Arc<str>, Vec<Completion>>>);

impl Lanes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Vec<Completion>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Apply a batch, retrying temporary store errors (50 ms doubling to at most 1 s, or
/// the heartbeat interval when shorter) until they apply, for as long as the engine has
/// not stopped: the tasks stay held and heartbeated meanwhile, so an outage of any length
/// ends with their outcomes written rather than with them recycled and run again. Past
/// the end of shutdown, or on a permanent error, it gives up: the tasks stay running
/// without heartbeats and are recycled after `dead_after` (a re-run, which
/// at-least-once allows).
///
/// The marks of a limited type go to its lane, a task of its own that writes them with a
/// hand-over, one at a time per type (and lanes for [`MAX_LANES`] types at once), while
/// the flusher writes the other marks and goes on with the next batches. A hand-over
/// waits for the type's turn (its queue row's lock, which every claim of the type on
/// every instance takes) and holds it until it commits: were other types' marks in its
/// transaction, the turn would be held while they are written (a batch of 256 marks
/// under a backlog on MariaDB: seconds), and their outcomes, and the flusher with them,
/// would wait for the limited type's turn.
async fn apply<S: TaskStore + Clone>(shared: &Arc<Shared<S>>, batch: Vec<Completion>) {
    let mut plain = Vec::with_capacity(batch.len());
    for c in batch {
        if !shared.is_limited(&c.event_type) {
            plain.push(c);
        } else if let Some(c) = to_lane(shared, c) {
            // every lane busy: written with the rest, its slot left to a re-poll
            plain.push(c);
        }
    }
    if !plain.is_empty() {
        let answer = write(shared, &marks_of(&plain), None).await;
        finish(shared, &plain, answer).await;
    }
}

/// A limited type's lane: its marks with a hand-over, then the marks that came while it
/// was in flight with the next (a batch at most each time), until none wait.
///
/// Started ([`to_lane`]) with the first outcome waiting in [`Lanes`], it first yields
/// while the attempts ending at the same moment join it (tasks claimed together end
/// together), as the flusher lingers: one hand-over for them all rather than one for
/// the first and another for the rest (the limit bench's even handlers on PostgreSQL:
/// 15 % slower).
async fn lane<S: TaskStore + Clone>(shared: Arc<Shared<S>>, event_type: Arc<str>) {
    let waiting = || shared.lanes.lock().get(&event_type).map_or(0, Vec::len);
    for _ in 0..LINGER_YIELDS {
        let before = waiting();
        tokio::task::yield_now().await;
        if waiting() == before || before >= MAX_BATCH {
            break;
        }
    }
    while let Some(marks) = next(&shared, &event_type) {
        let handover = Handover::of(&shared, &event_type);
        let answer = write(&shared, &marks_of(&marks), handover).await;
        finish(&shared, &marks, answer).await;
    }
}

/// The marks waiting for `event_type`'s lane, a batch at most; `None` (and the lane
/// closed) when none wait.
fn next<S>(shared: &Shared<S>, event_type: &Arc<str>) -> Option<Vec<Completion>> {
    let mut lanes = shared.lanes.lock();
    match lanes.get_mut(event_type) {
        Some(waiting) if !waiting.is_empty() => {
            let n = waiting.len().min(MAX_BATCH);
            Some(waiting.drain(..n).collect())
        }
        _ => {
            lanes.remove(event_type);
            None
        }
    }
}

fn marks_of(batch: &[Completion]) -> Vec<Mark> {
    batch.iter().map(|c| c.mark.clone()).collect()
}

/// What a written batch leaves to do: each applied mark's order key moved along and
/// retry armed, each refused one counted; the tasks finished, and their slots left to a
/// re-poll unless the hand-over took all a poll would find.
async fn finish<S: TaskStore + Clone>(
    shared: &Arc<Shared<S>>,
    batch: &[Completion],
    answer: Written,
) {
    let mut keys = Vec::new();
    if let Some(flags) = &answer.flags {
        for (c, applied) in batch.iter().zip(flags) {
            if *applied {
                keys.extend(c.order_key.clone());
                // armed now, not when the attempt ended: the retry's due time is the
                // mark's (applied a batch and a round trip later)
                if let Some(delay) = c.due_after {
                    shared.wake_after(delay, &c.event_type);
                }
            } else {
                shared.counters.stale_completions(&c.event_type);
                tracing::warn!(
                    owner = %shared.owner,
                    task_id = c.mark.lease.task_id,
                    lease = c.mark.lease.token,
                    "completion refused: the lease is no longer current (the task was recycled); not applied"
                );
            }
        }
    }
    let leases: Vec<_> = batch.iter().map(|c| c.mark.lease).collect();
    shared.tracker.finished(&leases);
    for c in batch {
        if answer.handed_over.as_ref() != Some(&c.event_type) {
            shared.slot_left(&c.event_type);
        }
    }
    if !keys.is_empty() {
        super::keys::release_keys(shared, &keys).await;
    }
}

/// A batch's write: each mark's answer (`None`: given up), and the hand-over's type when
/// its claim took all a poll would find (no poll for its slots).
struct Written {
    flags: Option<Vec<bool>>,
    handed_over: Option<Arc<str>>,
}

/// Write `marks`, the hand-over's claim riding the first attempt (its marks are all of
/// its type), retrying as [`apply`] says.
async fn write<S: TaskStore + Clone>(
    shared: &Arc<Shared<S>>,
    marks: &[Mark],
    mut handover: Option<Handover<'_>>,
) -> Written {
    let mut backoff = Duration::from_millis(50);
    let max_backoff = Duration::from_secs(1).min(shared.config.heartbeat_interval);
    let mut handed_over = None;
    let mut attempt = 0u64;
    loop {
        attempt += 1;
        // the first attempt carries the claim; a retry is the marks alone
        let answer = match handover.take() {
            Some(h) => {
                let event_type = &h.exec.event_type;
                let answer = shared
                    .store
                    .mark_and_claim(marks, &shared.owner, event_type, h.n)
                    .await;
                answer.map(|(flags, tasks)| {
                    // A claim short of the n it could take took all the store would
                    // give (every due task within the room; for a type limited by its
                    // concurrency alone, at most what the marks of the type freed): no
                    // poll finds more. One that took exactly what the marks freed left
                    // the room as it was before those tasks ended. Only a claim of all n
                    // that differs from what they freed, cut by this engine's room, may
                    // leave room or due tasks to a poll. Room made elsewhere (a raised
                    // limit, a recycled task) is the poller's, as for any type.
                    let freed = flags.iter().filter(|applied| **applied).count();
                    if tasks.len() < h.n || tasks.len() == freed {
                        handed_over = Some(Arc::clone(&h.exec.event_type_arc));
                    }
                    if let (false, Some(window)) =
                        (tasks.is_empty(), shared.rate_window(event_type))
                    {
                        shared.wake_after(window, event_type);
                    }
                    let mut permits = h.permits;
                    for task in tasks {
                        let Some(slot) = permits.split(1) else {
                            // cannot happen: n permits for at most n tasks
                            break;
                        };
                        super::loops::polled(shared, &h.exec, task, slot);
                    }
                    flags
                })
            }
            None => {
                let began = std::time::Instant::now();
                let answer = shared.store.mark(marks).await;
                if answer.is_ok() {
                    shared.tracker.marks_written(marks.len(), began.elapsed());
                }
                answer
            }
        };
        match answer {
            Ok(flags) => {
                return Written {
                    flags: Some(flags),
                    handed_over,
                }
            }
            Err(e) => {
                shared.counters.store_errors("*");
                if !e.is_temporary() || shared.state() == super::State::Stopped {
                    tracing::error!(error = %e, marks = marks.len(),
                        "could not record outcomes; the tasks will be recycled and run again");
                    return Written {
                        flags: None,
                        handed_over,
                    };
                }
                if attempt == 1 || attempt % 20 == 0 {
                    tracing::warn!(error = %e, marks = marks.len(), attempt,
                        "recording outcomes failed; retrying until the store answers");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(max_backoff);
            }
        }
    }
}
