//! Wake-ups across processes: an engine that is idle starts a task committed by another
//! process within milliseconds instead of at its next poll.
//!
//! A [`Notifier`] carries two facts from the process that wrote them to every engine that
//! listens: "tasks of this event type were committed", and "an operator took the lease of
//! this running task" (a cancel), which the engine holding it checks at once instead of
//! at its next heartbeat. Wake-ups are an
//! accelerator, never the source of truth: a lost notification costs latency (the poller
//! still finds the task), never a task. So every listener's first message after a
//! (re)connect is [`Wake::All`]: whatever was announced while it was away, the engine
//! polls every event type at once.
//!
//! Backends and brokers supply notifiers: PostgreSQL's `LISTEN`/`NOTIFY`
//! (`backstop_postgres::PgListener`, announced inside the enqueue transaction so only
//! commits are announced), Redis pub/sub for MySQL and SQLite deployments
//! (`backstop_redis::RedisNotifier`, announced after commit). An engine listens to one
//! with [`EngineBuilder::notifier`](crate::EngineBuilder::notifier), and announces
//! through it the tasks it enqueues but does not run itself.
//!
//! A process that enqueues without an engine (an API instance) gives its store the
//! notifier ([`StoreConfig::notifier`](crate::StoreConfig::notifier)): every enqueue path
//! then announces the due tasks it commits ([`Announcer`]), the caller's transactions
//! included.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::Result;
use crate::model::TaskId;

/// One wake-up, as a listener hands it to its engine.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wake {
    /// Tasks of this event type were committed: poll it now.
    EventType(String),
    /// Notifications may have been missed (the listener has just (re)connected): poll
    /// every event type now.
    All,
    /// An operator took the lease of this task while it ran (cancelled it, or reset it
    /// as stuck): the engine that holds it checks its lease now (a heartbeat of that one
    /// lease) and, finding it gone, tells the handler ([`Context::cancelled`]
    /// completes with `LeaseLost`) within a round trip instead of at its next
    /// heartbeat. An engine that does not hold the task, or still holds its lease,
    /// does nothing.
    ///
    /// [`Context::cancelled`]: crate::Context::cancelled
    Revoked(TaskId),
    /// This task, of this event type, was committed due, alone (a single enqueue's
    /// announcement, [`task_message`](Self::task_message): PostgreSQL's `NOTIFY` inside
    /// its transaction, or [`Notifier::notify_task`] after its commit): an engine that
    /// handles the type and has drained it claims the task by id
    /// ([`TaskStore::claim_by_id`](crate::TaskStore::claim_by_id), one row by its primary
    /// key instead of a walk of the type's due tasks), else polls the type as for
    /// [`Wake::EventType`]; so does one whose claim by id finds nothing, or that has
    /// one under way (one at a time: polls of a type coalesce). (A type the
    /// engine has not drained, whose last claim came back full, is polled: its older due
    /// tasks go first.)
    Task {
        /// The committed task.
        id: TaskId,
        /// Its event type.
        event_type: String,
    },
}

/// The text of a revocation on the wire: never an event type (those have no space).
const REVOKED: &str = "revoked ";

/// The text of one committed task on the wire, before its id, a space and its event type.
const TASK: &str = "task ";

impl Wake {
    /// The message text that carries [`Wake::Revoked`] of `task_id` through a channel
    /// whose other messages are event types: what a notifier's
    /// [`notify_revoked`](Notifier::notify_revoked) sends.
    ///
    /// ```
    /// use backstop_core::Wake;
    ///
    /// let text = Wake::revoked_message(42);
    /// assert_eq!(text, "revoked 42");
    /// assert_eq!(Wake::from_message(&text), Wake::Revoked(42));
    /// assert_eq!(Wake::from_message("SEND_EMAIL"), Wake::EventType("SEND_EMAIL".into()));
    /// ```
    pub fn revoked_message(task_id: TaskId) -> String {
        format!("{REVOKED}{task_id}")
    }

    /// The message text that carries [`Wake::Task`]: `task <id> <event type>`. A store
    /// that writes it in SQL (PostgreSQL's `NOTIFY` inside the enqueue transaction)
    /// writes this text.
    ///
    /// ```
    /// use backstop_core::Wake;
    ///
    /// let text = Wake::task_message(42, "SEND_EMAIL");
    /// assert_eq!(text, "task 42 SEND_EMAIL");
    /// assert_eq!(
    ///     Wake::from_message(&text),
    ///     Wake::Task { id: 42, event_type: "SEND_EMAIL".into() }
    /// );
    /// // not an id: an event type, as any other text
    /// assert_eq!(Wake::from_message("task x Y"), Wake::EventType("task x Y".into()));
    /// ```
    pub fn task_message(task_id: TaskId, event_type: &str) -> String {
        format!("{TASK}{task_id} {event_type}")
    }

    /// The wake-up a message's text carries: a revocation
    /// ([`revoked_message`](Self::revoked_message)), a committed task
    /// ([`task_message`](Self::task_message)), else an event type.
    pub fn from_message(text: &str) -> Wake {
        if let Some(Ok(id)) = text.strip_prefix(REVOKED).map(str::parse::<i64>) {
            return Wake::Revoked(id);
        }
        let task = text
            .strip_prefix(TASK)
            .and_then(|rest| rest.split_once(' '))
            .and_then(|(id, t)| Some((id.parse::<i64>().ok()?, t)))
            .filter(|(_, t)| !t.is_empty() && !t.contains(' '));
        match task {
            Some((id, t)) => Wake::Task {
                id,
                event_type: t.to_owned(),
            },
            None => Wake::EventType(text.to_owned()),
        }
    }
}

/// Where a listener delivers wake-ups; given to [`Notifier::listen`] by the engine.
/// Sending never blocks and never fails: wake-ups for event types the engine does not
/// handle are ignored, and a burst of them costs one poll per type.
#[derive(Clone)]
pub struct Wakes {
    sink: Arc<dyn Fn(Wake) + Send + Sync>,
}

impl Wakes {
    /// A sink calling `f` for every wake-up (for tests of a notifier, or to drive
    /// something other than an engine).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use backstop_core::{Wake, Wakes};
    ///
    /// let got = Arc::new(Mutex::new(Vec::new()));
    /// let sink = Arc::clone(&got);
    /// let wakes = Wakes::new(move |w| sink.lock().unwrap().push(w));
    /// wakes.send(Wake::All);
    /// assert_eq!(*got.lock().unwrap(), vec![Wake::All]);
    /// ```
    pub fn new(f: impl Fn(Wake) + Send + Sync + 'static) -> Self {
        Self { sink: Arc::new(f) }
    }

    /// Deliver `wake`.
    pub fn send(&self, wake: Wake) {
        (self.sink)(wake)
    }
}

impl fmt::Debug for Wakes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Wakes")
    }
}

/// Carries "tasks of this event type were committed" and "this running task's lease was
/// taken by an operator" between processes.
///
/// # Contract
/// - [`notify`](Self::notify) is called only **after** the enqueue committed (a
///   notifier whose store already announces inside the enqueue transaction, like
///   PostgreSQL's, does nothing there). It is best effort: an error is logged by the
///   engine and never fails the enqueue; the poller runs the task anyway.
/// - [`listen`](Self::listen) opens its own connection (never a pooled one: a pool may
///   hand it to a statement or close it), subscribes, then sends [`Wake::All`] — every
///   announcement made before the subscription is lost — and forwards each
///   announcement as [`Wake::from_message`] decodes it ([`Wake::EventType`], or
///   [`Wake::Task`] for one that names its task). It returns `Err` when the connection is lost;
///   the engine logs it and calls `listen` again after a backoff (100 ms doubling to
///   5 s). The engine drops the future when it stops, which must close the connection.
/// - [`notify_task`](Self::notify_task) announces one task a single enqueue committed
///   due: a notifier that can carries its id and type ([`Wake::task_message`]), so
///   that an engine which has drained the type claims that task by id; the default
///   announces the type ([`notify`](Self::notify)). Announcements may be merged or
///   dropped under load (a store announces one event type at most a few times per short
///   window, then once more by type for all it held back); a wake-up by type polls the
///   event type, which claims everything due.
/// - [`notify_revoked`](Self::notify_revoked) is called after an operator's change that
///   took a running task's lease committed (a store announces it:
///   [`Announcer::revoked`]); listeners hand it on as [`Wake::Revoked`]. A notifier
///   that shares one channel with event types sends [`Wake::revoked_message`] and
///   decodes every message with [`Wake::from_message`]. Best effort as well: a lost one
///   leaves the news to the engine's next heartbeat.
#[async_trait]
pub trait Notifier: Send + Sync + 'static {
    /// Announce, after commit, that tasks of `event_type` are ready.
    async fn notify(&self, event_type: &str) -> Result<()>;

    /// Announce, after commit, that task `task_id` of `event_type` is ready (see the
    /// contract): by default as [`notify`](Self::notify) of its type.
    async fn notify_task(&self, task_id: TaskId, event_type: &str) -> Result<()> {
        let _ = task_id;
        self.notify(event_type).await
    }

    /// Announce, after commit, that an operator took the lease of running task
    /// `task_id` (see [`Wake::Revoked`]).
    async fn notify_revoked(&self, task_id: TaskId) -> Result<()>;

    /// Listen until the connection is lost (see the contract above).
    async fn listen(&self, wakes: &Wakes) -> Result<()>;
}

#[async_trait]
impl<N: Notifier + ?Sized> Notifier for Arc<N> {
    async fn notify(&self, event_type: &str) -> Result<()> {
        (**self).notify(event_type).await
    }

    async fn notify_task(&self, task_id: TaskId, event_type: &str) -> Result<()> {
        (**self).notify_task(task_id, event_type).await
    }

    async fn notify_revoked(&self, task_id: TaskId) -> Result<()> {
        (**self).notify_revoked(task_id).await
    }

    async fn listen(&self, wakes: &Wakes) -> Result<()> {
        (**self).listen(wakes).await
    }
}

/// What [`Throttle::admit`] decided for one announcement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Announce now.
    Now,
    /// Do not announce now; announce once after this delay (the trailing announcement
    /// of the window), then call [`Throttle::trailing_sent`].
    Later(std::time::Duration),
    /// A trailing announcement is already scheduled: nothing to do.
    Covered,
}

/// Announces each event type at most [`Throttle::BURST`] times per window (one
/// announcement regained every window / `BURST`), plus one trailing announcement when
/// others were held back, made once one is regained and a window has passed since the
/// last enqueue it covers (so that enqueue has committed). So a burst of enqueues costs
/// at most `BURST` + 1 announcements per window, and the last task of a burst still
/// wakes listeners about a window after it. For notifiers whose announcement has a cost
/// at the database: PostgreSQL's `NOTIFY` takes a global lock at commit, held through
/// the commit's log flush, so transactions that announce and commit together commit one
/// after the other.
///
/// That cost comes from announcing transactions that overlap. An enqueue that counts
/// itself under way ([`flight`](Throttle::flight)) and asks with
/// [`admit_flying`](Throttle::admit_flying) is announced at once, without spending the
/// window's announcements, when no other enqueue of the store is under way and the
/// recent ones mostly found none either: a steady producer that enqueues one task at a
/// time is announced at every commit whatever its rate, while many producers at once
/// share the bucket.
///
/// ```
/// use std::time::Duration;
/// use backstop_core::driver::{Admit, Throttle};
///
/// let t = Throttle::new(Duration::from_secs(60));
/// for _ in 0..Throttle::BURST {
///     assert_eq!(t.admit("A"), Admit::Now);
/// }
/// assert!(matches!(t.admit("A"), Admit::Later(_)));
/// assert_eq!(t.admit("A"), Admit::Covered);
/// assert_eq!(t.admit("B"), Admit::Now); // per event type
///
/// // one enqueue at a time: announced at every commit
/// for _ in 0..10 {
///     let _flight = t.flight();
///     assert_eq!(t.admit_flying("C"), Admit::Now);
/// }
/// // two under way at once: they share the bucket
/// let (_one, _two) = (t.flight(), t.flight());
/// for _ in 0..Throttle::BURST {
///     assert_eq!(t.admit_flying("D"), Admit::Now);
/// }
/// assert!(matches!(t.admit_flying("D"), Admit::Later(_)));
/// ```
#[derive(Debug)]
pub struct Throttle {
    window: std::time::Duration,
    /// Per event type: the announcements in hand (at most `BURST`), when they were
    /// counted, and whether a trailing one is scheduled.
    state: std::sync::Mutex<std::collections::HashMap<String, Bucket>>,
    /// The store's enqueues under way ([`flight`](Self::flight)).
    flights: std::sync::atomic::AtomicUsize,
    /// A moving average of how many other enqueues each one that asked
    /// [`admit_flying`](Self::admit_flying) found under way.
    crowd: std::sync::Mutex<f64>,
}

/// One enqueue of a store under way, counted by its [`Throttle`] until dropped (see
/// [`Throttle::flight`]).
#[derive(Debug)]
#[must_use = "the enqueue is counted under way only while the flight is held"]
pub struct Flight<'a>(&'a Throttle);

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.0
            .flights
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: std::time::Instant,
    trailing: bool,
    /// When the trailing announcement was scheduled, and the last enqueue it covers
    /// was admitted (its transaction may still be open).
    scheduled: std::time::Instant,
    held: std::time::Instant,
}

impl Bucket {
    /// Count in what was regained since `at`, one every `per`.
    fn refill(&mut self, now: std::time::Instant, per: std::time::Duration) {
        let regained = now.duration_since(self.at).as_secs_f64() / per.as_secs_f64();
        self.tokens = (self.tokens + regained).min(f64::from(Throttle::BURST));
        self.at = now;
    }
}

impl Throttle {
    /// The announcements of an event type a window holds.
    pub const BURST: u32 = 4;

    /// At most [`BURST`](Self::BURST) announcements per event type per `window` (zero:
    /// every one).
    pub fn new(window: std::time::Duration) -> Self {
        Self {
            window,
            state: Default::default(),
            flights: Default::default(),
            crowd: Default::default(),
        }
    }

    /// Count one enqueue of the store under way until the guard drops: taken before its
    /// statements are built (they ask [`admit_flying`](Self::admit_flying)), held to the
    /// end of its transaction where the store sees that end (a transaction of its own),
    /// else to the end of its statements (on the caller's transaction, whose commit
    /// follows).
    pub fn flight(&self) -> Flight<'_> {
        self.flights
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Flight(self)
    }

    /// As [`admit`](Self::admit), for an enqueue inside a [`flight`](Self::flight):
    /// [`Admit::Now`], without spending the window's announcements, when no other
    /// enqueue of the store is under way and the recent ones found on average fewer than
    /// one half under way beside them (a moving average over about 16 enqueues: where
    /// many producers overlap, the moment one of them happens to find none is no sign
    /// that its commit will meet none). A caller outside a flight is taken for one of
    /// those counted.
    pub fn admit_flying(&self, event_type: &str) -> Admit {
        let others = self
            .flights
            .load(std::sync::atomic::Ordering::Acquire)
            .saturating_sub(1);
        let calm = {
            let mut crowd = self.crowd.lock().unwrap_or_else(|p| p.into_inner());
            *crowd += (others as f64 - *crowd) / 16.0;
            *crowd < 0.5
        };
        if others == 0 && calm {
            return Admit::Now;
        }
        self.admit(event_type)
    }

    fn per(&self) -> std::time::Duration {
        self.window / Self::BURST
    }

    /// Whether to announce `event_type` now, later, or not at all.
    pub fn admit(&self, event_type: &str) -> Admit {
        if self.window.is_zero() {
            return Admit::Now;
        }
        let now = std::time::Instant::now();
        let per = self.per();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let bucket = state
            .entry(event_type.to_owned())
            .or_insert_with(|| Bucket {
                tokens: f64::from(Self::BURST),
                at: now,
                trailing: false,
                scheduled: now,
                held: now,
            });
        if bucket.trailing {
            bucket.held = now;
            return Admit::Covered;
        }
        bucket.refill(now, per);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Admit::Now;
        }
        bucket.trailing = true;
        (bucket.scheduled, bucket.held) = (now, now);
        Admit::Later(per.mul_f64(1.0 - bucket.tokens))
    }

    /// Called when an [`Admit::Later`] delay has passed: `None` when the trailing
    /// announcement is to be made now (then it is counted as made, as
    /// [`trailing_sent`](Self::trailing_sent)), or how much longer to wait. It waits
    /// until a window has passed since the last enqueue it covers was admitted, so that
    /// enqueue's transaction has most likely committed when listeners look (a `NOTIFY`
    /// heard before the commit finds nothing, and the task would wait for a poll); but
    /// not past two windows after it was scheduled, so a steady stream of enqueues
    /// cannot put it off for ever.
    pub fn trailing_due(&self, event_type: &str) -> Option<std::time::Duration> {
        let now = std::time::Instant::now();
        {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let bucket = state.get_mut(event_type)?;
            let settled = bucket.held + self.window;
            if bucket.trailing && now < settled && now < bucket.scheduled + 2 * self.window {
                return Some(settled - now);
            }
        }
        self.trailing_sent(event_type);
        None
    }

    /// Wait out an [`Admit::Later`] delay `after`, then until
    /// [`trailing_due`](Self::trailing_due) says the trailing announcement of
    /// `event_type` is due (counted as made): the caller makes it next.
    pub async fn wait_trailing(&self, event_type: &str, after: std::time::Duration) {
        tokio::time::sleep(after).await;
        while let Some(more) = self.trailing_due(event_type) {
            tokio::time::sleep(more).await;
        }
    }

    /// The trailing announcement of `event_type` was made (or given up): it spends what
    /// was regained meanwhile, and the next enqueue is admitted afresh.
    pub fn trailing_sent(&self, event_type: &str) {
        let now = std::time::Instant::now();
        let per = self.per();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(bucket) = state.get_mut(event_type) {
            bucket.refill(now, per);
            bucket.tokens = (bucket.tokens - 1.0).max(0.0);
            bucket.trailing = false;
        }
    }
}

/// **For backend authors**: a store's own announcements through an application's
/// [`Notifier`] (Redis pub/sub beside MySQL or SQLite), so that every enqueue path
/// announces — not only an engine's — when the store is given a notifier.
///
/// - [`committed`](Self::committed): the store's own transaction committed tasks of an
///   event type (`enqueue`, `enqueue_many`, `start_saga`): announce now.
/// - [`revoked`](Self::revoked): an operator's change took a running task's lease
///   (core calls it through [`Driver::announce_revoked`](crate::driver::Driver::announce_revoked)):
///   announce now, unthrottled, and wait for it (at most [`REVOKED_WAIT`]).
/// - [`when_visible`](Self::when_visible): a task was written on the caller's
///   transaction, whose commit the store cannot see: announce once the task can be read
///   from another connection (it committed), checking six times over about 2.5 s; a
///   transaction that rolled back, or commits later, is announced never (the poller
///   finds a late one).
///
/// Announcements of an event type are throttled ([`Throttle`]) and best effort: a
/// failed one is logged at debug level and costs latency only. They run on the tokio
/// runtime of the caller, or else the one the announcer was made on; without either,
/// nothing is announced.
#[derive(Debug)]
pub struct Announcer {
    notifier: Arc<dyn Notifier>,
    throttle: Throttle,
    /// The runtime the store was opened on: for announcements from a thread outside it
    /// (an embedded database's writer thread).
    runtime: Option<tokio::runtime::Handle>,
}

/// Announcers are equal when they are the same one (a store's config compares so).
impl PartialEq for Announcer {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Announcer {}

/// What [`Announcer::when_visible`] waits to see committed: a task, or a saga (its first
/// steps' tasks commit with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Written {
    /// The task of this id.
    Task(crate::model::TaskId),
    /// The task of this id, the only one its enqueue wrote: the announcement names it
    /// ([`Announcer::committed_task`]).
    Alone(crate::model::TaskId),
    /// The saga of this id.
    Saga(crate::model::SagaId),
}

impl fmt::Debug for dyn Notifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Notifier")
    }
}

/// How long an operator's change waits for its announcement ([`Announcer::revoked`])
/// before it returns without: the engine's heartbeat tells the handler then.
pub const REVOKED_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// When [`Announcer::when_visible`] looks for the task, after the enqueue.
const VISIBLE_CHECKS_MS: [u64; 6] = [5, 20, 80, 320, 1280, 2560];

impl Announcer {
    /// Announce through `notifier`, each event type at most [`Throttle::BURST`] times per
    /// `window` (plus a trailing one; zero: every time).
    pub fn new(notifier: Arc<dyn Notifier>, window: std::time::Duration) -> Arc<Self> {
        Arc::new(Self {
            notifier,
            throttle: Throttle::new(window),
            runtime: tokio::runtime::Handle::try_current().ok(),
        })
    }

    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        tokio::runtime::Handle::try_current()
            .ok()
            .or_else(|| self.runtime.clone())
    }

    /// Tasks of `event_type` committed: announce (throttled).
    pub fn committed(self: &Arc<Self>, event_type: &str) {
        self.announce(event_type, None);
    }

    /// Task `task_id` of `event_type` committed, alone: announce it by id
    /// ([`Notifier::notify_task`]), or by type when the throttle holds it back for its
    /// trailing announcement (which covers every task it held).
    pub fn committed_task(self: &Arc<Self>, task_id: TaskId, event_type: &str) {
        self.announce(event_type, Some(task_id));
    }

    fn announce(self: &Arc<Self>, event_type: &str, task_id: Option<TaskId>) {
        let Some(runtime) = self.runtime() else {
            return;
        };
        let (delay, task_id) = match self.throttle.admit(event_type) {
            Admit::Now => (None, task_id),
            Admit::Later(after) => (Some(after), None),
            Admit::Covered => return,
        };
        let (this, event_type) = (Arc::clone(self), event_type.to_owned());
        runtime.spawn(async move {
            if let Some(after) = delay {
                this.throttle.wait_trailing(&event_type, after).await;
            }
            let sent = match task_id {
                Some(id) => this.notifier.notify_task(id, &event_type).await,
                None => this.notifier.notify(&event_type).await,
            };
            if let Err(e) = sent {
                tracing::debug!(error = %e, %event_type, "the store's announcement failed");
            }
        });
    }

    /// An operator's change that took the lease of running task `task_id` committed:
    /// announce it, and return once announced (or after [`REVOKED_WAIT`], or a failure,
    /// logged): an operator's command may be a process about to exit. Operators' changes
    /// are few: no throttle.
    pub async fn revoked(&self, task_id: TaskId) {
        match tokio::time::timeout(REVOKED_WAIT, self.notifier.notify_revoked(task_id)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(error = %e, task_id, "the store's announcement of a revoked lease failed")
            }
            Err(_) => {
                tracing::debug!(
                    task_id,
                    "the store's announcement of a revoked lease timed out"
                )
            }
        }
    }

    /// A task of `event_type` was written on the caller's transaction (`written`):
    /// announce once `visible()` says it can be read from another connection, by id when
    /// it was written [alone](Written::Alone).
    pub fn when_visible<F, Fut>(self: &Arc<Self>, event_type: &str, written: Written, visible: F)
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<bool>> + Send + 'static,
    {
        let Some(runtime) = self.runtime() else {
            return;
        };
        let named = match written {
            Written::Alone(id) => Some(id),
            _ => None,
        };
        let (this, event_type) = (Arc::clone(self), event_type.to_owned());
        runtime.spawn(async move {
            let mut waited = 0;
            for at in VISIBLE_CHECKS_MS {
                tokio::time::sleep(std::time::Duration::from_millis(at - waited)).await;
                waited = at;
                match visible().await {
                    Ok(true) => return this.announce(&event_type, named),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::debug!(error = %e, %event_type, "looking for a task to announce failed");
                        return;
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::{Admit, Throttle};
    use std::time::Duration;

    /// After a spell of enqueues that overlapped, one that happens to find none other
    /// under way still shares the bucket, until the enqueues found alone bring the
    /// moving average below one half; then every one alone is announced.
    #[test]
    fn a_lone_enqueue_after_a_crowd_shares_the_bucket_until_the_crowd_thins() {
        let t = Throttle::new(Duration::from_secs(60));
        {
            let _others = (t.flight(), t.flight(), t.flight());
            for _ in 0..32 {
                let _flight = t.flight();
                let _ = t.admit_flying("A");
            }
        }
        // the bucket of A is spent and its trailing announcement scheduled
        let _flight = t.flight();
        assert_eq!(t.admit_flying("A"), Admit::Covered);
        let mut alone = 1;
        while t.admit_flying("A") == Admit::Covered {
            alone += 1;
            assert!(alone < 64, "the crowd never thinned");
        }
        // from 3 others towards 0 by a sixteenth a time: below one half after ~28
        assert!((20..40).contains(&alone), "{alone}");
        for _ in 0..100 {
            assert_eq!(t.admit_flying("A"), Admit::Now);
        }
    }
}
