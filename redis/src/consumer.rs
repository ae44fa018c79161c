//! The consumer: a consumer-group reader that runs a handler per message through the
//! database inbox, then acknowledges.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use backstop_core::{Error, ErrorAction, HandlerError, Inbox, Owner, Processed, Result};
use redis::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::redis_err;
use crate::stream::{autoclaim_reply, read_reply, Entry};
use crate::{KeyLock, LazyConn, Target};

const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// Options of a [`StreamConsumer`]: [`ConsumerOptions::new`], then the setters named after
/// the fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConsumerOptions {
    /// The stream to read.
    pub stream: String,
    /// The consumer group, created at the stream's start (`0`) when missing. Also the
    /// inbox's consumer key: every process of one group shares it, so a message is
    /// processed once per group.
    pub group: String,
    /// This process's consumer name in the group (default: generated, unique per
    /// process start — names reused across replicas break recovery).
    pub consumer_name: Option<String>,
    /// Most entries one read returns (default 16).
    pub batch: usize,
    /// How long a read blocks waiting for new entries (default 5 s). Reads run on a
    /// connection of their own, with a response timeout longer than this.
    pub block: Duration,
    /// How long the handler (and its transaction) may take (default 30 s); past it the
    /// attempt is abandoned and the entry stays pending for a redelivery.
    pub handler_timeout: Duration,
    /// An entry pending this long with a consumer is taken over by another (default
    /// 60 s). Must be longer than `handler_timeout`, or a live consumer's entry would be
    /// handed to a second one.
    pub reclaim_idle: Duration,
    /// How often this consumer looks for entries to take over (default 10 s).
    pub reclaim_interval: Duration,
    /// A message delivered this many times without success goes to the dead-letter
    /// stream (default 5).
    pub max_deliveries: u64,
    /// Where dead messages go (default `<stream>:dead`): their fields, plus `dead.reason`,
    /// `dead.deliveries`, `dead.group` and `dead.entry_id`.
    pub dead_letter_stream: Option<String>,
    /// Inbox rows older than this are purged, hourly (default 14 days; `None`: never).
    /// Keep it longer than a message can be redelivered: the outbox's retry horizon plus
    /// the stream's retention.
    pub inbox_retention: Option<Duration>,
    /// Hold a Redis lock on the message's business key for this long while handling it
    /// (default `None`): for handlers with side effects outside the database. A message
    /// whose key is locked by another consumer is left pending for a later delivery,
    /// which does not count toward `max_deliveries`. Must be longer than
    /// `handler_timeout`. The inbox stays the arbiter: see
    /// [`KeyLock`](crate::KeyLock) for why the lock can only save work.
    pub key_lock: Option<Duration>,
}

impl ConsumerOptions {
    /// Read `stream` as a member of `group`.
    pub fn new(stream: impl Into<String>, group: impl Into<String>) -> Self {
        Self {
            stream: stream.into(),
            group: group.into(),
            consumer_name: None,
            batch: 16,
            block: Duration::from_secs(5),
            handler_timeout: Duration::from_secs(30),
            reclaim_idle: Duration::from_secs(60),
            reclaim_interval: Duration::from_secs(10),
            max_deliveries: 5,
            dead_letter_stream: None,
            inbox_retention: Some(Duration::from_secs(14 * 24 * 3600)),
            key_lock: None,
        }
    }

    backstop_core::driver::setters! {
        /// See [`consumer_name`](Self::consumer_name).
        consumer_name: Option<String>,
        /// See [`batch`](Self::batch).
        batch: usize,
        /// See [`block`](Self::block).
        block: Duration,
        /// See [`handler_timeout`](Self::handler_timeout).
        handler_timeout: Duration,
        /// See [`reclaim_idle`](Self::reclaim_idle).
        reclaim_idle: Duration,
        /// See [`reclaim_interval`](Self::reclaim_interval).
        reclaim_interval: Duration,
        /// See [`max_deliveries`](Self::max_deliveries).
        max_deliveries: u64,
        /// See [`dead_letter_stream`](Self::dead_letter_stream).
        dead_letter_stream: Option<String>,
        /// See [`inbox_retention`](Self::inbox_retention).
        inbox_retention: Option<Duration>,
        /// See [`key_lock`](Self::key_lock).
        key_lock: Option<Duration>,
    }

    /// The dead-letter stream.
    pub fn dead_letters(&self) -> String {
        self.dead_letter_stream
            .clone()
            .unwrap_or_else(|| format!("{}:dead", self.stream))
    }

    fn validate(&self) -> Result<()> {
        const OP: &str = "start_consumer";
        if self.stream.is_empty() || self.group.is_empty() {
            return Err(Error::config(
                OP,
                "the stream and group names must not be empty",
            ));
        }
        backstop_core::inbox::inbox_key(&self.group, "x")
            .map_err(|e| Error::config(OP, format!("group: {}", e.message())))?;
        if self.batch == 0 || self.batch > 1000 {
            return Err(Error::config(OP, "batch must be 1 to 1000"));
        }
        if self.block.is_zero() || self.handler_timeout.is_zero() || self.reclaim_interval.is_zero()
        {
            return Err(Error::config(
                OP,
                "block, handler_timeout and reclaim_interval must be positive",
            ));
        }
        if self.reclaim_idle <= self.handler_timeout {
            return Err(Error::config(
                OP,
                format!(
                    "reclaim_idle ({:?}) must be longer than handler_timeout ({:?}), or an entry still being handled would be handed to a second consumer",
                    self.reclaim_idle, self.handler_timeout
                ),
            ));
        }
        if self.key_lock.is_some_and(|ttl| ttl <= self.handler_timeout) {
            return Err(Error::config(
                OP,
                "key_lock must be longer than handler_timeout, or it would expire while the handler runs",
            ));
        }
        if self.max_deliveries == 0 {
            return Err(Error::config(OP, "max_deliveries must be at least 1"));
        }
        Ok(())
    }
}

/// What a consumer has done since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerCounters {
    /// Messages whose handler ran and committed.
    pub processed: u64,
    /// Messages the inbox had already seen (acknowledged without running).
    pub duplicates: u64,
    /// Attempts that failed or timed out (the entry stays pending for a redelivery).
    pub failed: u64,
    /// Messages sent to the dead-letter stream.
    pub dead_lettered: u64,
    /// Entries taken over from idle consumers.
    pub reclaimed: u64,
    /// Pending entries acknowledged away because the stream no longer holds them.
    pub trimmed_acked: u64,
    /// Deliveries left pending because another consumer held the business key's lock
    /// (not counted toward `max_deliveries`).
    pub lock_busy: u64,
    /// Redis or database errors outside handlers.
    pub errors: u64,
}

#[derive(Default)]
struct Counters {
    processed: AtomicU64,
    duplicates: AtomicU64,
    failed: AtomicU64,
    dead_lettered: AtomicU64,
    reclaimed: AtomicU64,
    trimmed_acked: AtomicU64,
    lock_busy: AtomicU64,
    errors: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> ConsumerCounters {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ConsumerCounters {
            processed: l(&self.processed),
            duplicates: l(&self.duplicates),
            failed: l(&self.failed),
            dead_lettered: l(&self.dead_lettered),
            reclaimed: l(&self.reclaimed),
            trimmed_acked: l(&self.trimmed_acked),
            lock_busy: l(&self.lock_busy),
            errors: l(&self.errors),
        }
    }
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Reads a stream as a member of a consumer group and processes each message through
/// the database inbox: the handler's business writes and the inbox row commit in one
/// transaction, then the entry is acknowledged (`XACK`). Exactly once in effect, whatever
/// crashes: an entry whose commit happened but whose `XACK` did not is redelivered, found
/// in the inbox, and acknowledged without running again.
///
/// - On start it drains its **own pending entries** (delivered before a crash) before
///   reading new ones (`>`); pending entries never expire by themselves.
/// - A **reclaimer** (`XAUTOCLAIM`, idle longer than `reclaim_idle` >
///   `handler_timeout`) takes over entries of dead consumers.
/// - Pending entries that were **trimmed** from the stream are acknowledged away.
/// - A message that failed `max_deliveries` times, or whose handler failed permanently
///   ([`HandlerError::fail`]), goes to the **dead-letter stream** with the reason.
/// - The inbox's rows are purged after `inbox_retention`.
///
/// ```no_run
/// # async fn demo(store: backstop_sqlite::SqliteStore) -> backstop_core::Result<()> {
/// use backstop_redis::{ConsumerOptions, StreamConsumer};
/// use backstop_sqlite::sqlite_handler;
///
/// let handler = sqlite_handler(|tx, message| {
///     tx.execute("UPDATE orders SET paid = 1 WHERE id = ?1", [&message.biz_key])?;
///     Ok(())
/// });
/// let consumer = StreamConsumer::start(
///     "redis://127.0.0.1/",
///     store,
///     handler,
///     ConsumerOptions::new("orders", "payments"),
/// )?;
/// // …
/// consumer.shutdown().await;
/// # Ok(()) }
/// ```
pub struct StreamConsumer {
    name: String,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for StreamConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamConsumer")
            .field("name", &self.name)
            .finish()
    }
}

impl StreamConsumer {
    /// Validate `options` and start consuming on the current tokio runtime.
    pub fn start<I: Inbox>(
        url: &str,
        inbox: I,
        handler: I::Handler,
        options: ConsumerOptions,
    ) -> Result<StreamConsumer> {
        const OP: &str = "start_consumer";
        options.validate()?;
        let target = Target::open(url, OP)?;
        let name = options
            .consumer_name
            .clone()
            .unwrap_or_else(|| format!("{}-{}", options.group, Owner::generate()));
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::config(OP, "start a consumer within a tokio runtime"))?;
        let (stop, stopped) = watch::channel(false);
        let counters = Arc::new(Counters::default());
        let locks = options
            .key_lock
            .map(|_| {
                KeyLock::open(
                    url,
                    format!("backstop:lock:{}:{}:", options.stream, options.group),
                )
            })
            .transpose()?;
        let worker = Worker {
            locks,
            reader: LazyConn::new(target.clone(), options.block + COMMAND_TIMEOUT),
            commands: LazyConn::new(target, COMMAND_TIMEOUT),
            inbox,
            handler,
            dead: options.dead_letters(),
            options,
            name: name.clone(),
            counters: Arc::clone(&counters),
        };
        let task = runtime.spawn(worker.run(stopped));
        Ok(StreamConsumer {
            name,
            stop,
            task,
            counters,
        })
    }

    /// This consumer's name in the group.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it has done so far.
    pub fn counters(&self) -> ConsumerCounters {
        self.counters.snapshot()
    }

    /// Stop after the message in hand (a blocked read is abandoned; its entries, if any
    /// were delivered, stay pending for the next start or another consumer).
    pub async fn shutdown(self) {
        self.stop.send_replace(true);
        let _ = self.task.await;
    }
}

struct Worker<I: Inbox> {
    locks: Option<KeyLock>,
    inbox: I,
    handler: I::Handler,
    options: ConsumerOptions,
    dead: String,
    name: String,
    counters: Arc<Counters>,
    /// Blocking reads: a connection of their own (a blocked read occupies it), whose
    /// response timeout is longer than `BLOCK`.
    reader: LazyConn,
    /// Everything else.
    commands: LazyConn,
}

/// Which connection a command runs on.
#[derive(Clone, Copy)]
enum Conn {
    Reader,
    Commands,
}

impl<I: Inbox> Worker<I> {
    async fn run(mut self, mut stopped: watch::Receiver<bool>) {
        const MIN: Duration = Duration::from_millis(100);
        const MAX: Duration = Duration::from_secs(5);
        let mut backoff = MIN;
        let mut last_purge: Option<Instant> = None;
        'session: loop {
            if *stopped.borrow() {
                return;
            }
            // (re)start: make sure the group exists, then drain what was delivered to us
            let started = async {
                self.ensure_group().await?;
                self.drain_own_pending(&stopped).await
            }
            .await;
            if let Err(e) = started {
                self.failed_session(&e, &mut backoff, &mut stopped).await;
                backoff = (backoff * 2).min(MAX);
                continue 'session;
            }
            backoff = MIN;
            let mut last_reclaim = Instant::now();
            loop {
                if *stopped.borrow() {
                    return;
                }
                if last_reclaim.elapsed() >= self.options.reclaim_interval {
                    last_reclaim = Instant::now();
                    if let Err(e) = self.reclaim(&stopped).await {
                        self.failed_session(&e, &mut backoff, &mut stopped).await;
                        continue 'session;
                    }
                }
                if let Some(retention) = self.options.inbox_retention {
                    if last_purge.is_none_or(|t| t.elapsed() >= Duration::from_secs(3600)) {
                        last_purge = Some(Instant::now());
                        self.purge_inbox(retention).await;
                    }
                }
                let read = tokio::select! {
                    r = self.read_new() => r,
                    _ = stopped.wait_for(|s| *s) => return,
                };
                match read {
                    Ok(entries) => {
                        for entry in entries {
                            self.handle(entry, 1).await;
                        }
                    }
                    Err(e) => {
                        self.failed_session(&e, &mut backoff, &mut stopped).await;
                        continue 'session;
                    }
                }
            }
        }
    }

    /// Log a lost connection, drop the connections and wait `backoff`.
    async fn failed_session(
        &mut self,
        e: &Error,
        backoff: &mut Duration,
        stopped: &mut watch::Receiver<bool>,
    ) {
        add(&self.counters.errors, 1);
        tracing::warn!(consumer = %self.name, error = %e, "stream consumer: reconnecting");
        self.reader.reset().await;
        self.commands.reset().await;
        tokio::select! {
            _ = tokio::time::sleep(*backoff) => {}
            _ = stopped.wait_for(|s| *s) => {}
        }
        *backoff = (*backoff * 2).min(Duration::from_secs(5));
    }

    async fn query(&mut self, which: Conn, cmd: &redis::Cmd) -> Result<Value> {
        let conn = match which {
            Conn::Reader => &self.reader,
            Conn::Commands => &self.commands,
        };
        conn.query(cmd).await.map_err(|e| redis_err("consume", e))
    }

    async fn ensure_group(&mut self) -> Result<()> {
        let mut cmd = redis::cmd("XGROUP");
        cmd.arg("CREATE")
            .arg(&self.options.stream)
            .arg(&self.options.group)
            .arg("0")
            .arg("MKSTREAM");
        match self.query(Conn::Commands, &cmd).await {
            Ok(_) => Ok(()),
            Err(e) if e.to_string().contains("BUSYGROUP") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Entries delivered to this consumer name and never acknowledged (a crash, a lost
    /// reply): read from `0` until none are left.
    async fn drain_own_pending(&mut self, stopped: &watch::Receiver<bool>) -> Result<()> {
        let mut after = "0".to_owned();
        loop {
            if *stopped.borrow() {
                return Ok(());
            }
            let mut cmd = redis::cmd("XREADGROUP");
            cmd.arg("GROUP")
                .arg(&self.options.group)
                .arg(&self.name)
                .arg("COUNT")
                .arg(self.options.batch)
                .arg("STREAMS")
                .arg(&self.options.stream)
                .arg(&after);
            let entries = read_reply(&self.query(Conn::Commands, &cmd).await?)?;
            let Some(last) = entries.last() else {
                return Ok(());
            };
            after = last.id.clone();
            for entry in entries {
                let deliveries = self.deliveries(&entry.id).await?;
                self.handle(entry, deliveries).await;
            }
        }
    }

    async fn read_new(&mut self) -> Result<Vec<Entry>> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(&self.options.group)
            .arg(&self.name)
            .arg("COUNT")
            .arg(self.options.batch)
            .arg("BLOCK")
            .arg(self.options.block.as_millis() as u64)
            .arg("STREAMS")
            .arg(&self.options.stream)
            .arg(">");
        read_reply(&self.query(Conn::Reader, &cmd).await?)
    }

    /// Take over entries idle longer than `reclaim_idle` (dead consumers'), and process
    /// them; entries no longer in the stream are dropped from the pending list by
    /// `XAUTOCLAIM` itself.
    async fn reclaim(&mut self, stopped: &watch::Receiver<bool>) -> Result<()> {
        let mut cursor = "0-0".to_owned();
        loop {
            if *stopped.borrow() {
                return Ok(());
            }
            let mut cmd = redis::cmd("XAUTOCLAIM");
            cmd.arg(&self.options.stream)
                .arg(&self.options.group)
                .arg(&self.name)
                .arg(self.options.reclaim_idle.as_millis() as u64)
                .arg(&cursor)
                .arg("COUNT")
                .arg(self.options.batch);
            let (next, claimed, deleted) =
                autoclaim_reply(&self.query(Conn::Commands, &cmd).await?)?;
            add(&self.counters.trimmed_acked, deleted.len() as u64);
            add(&self.counters.reclaimed, claimed.len() as u64);
            for entry in claimed {
                let deliveries = self.deliveries(&entry.id).await?;
                tracing::info!(consumer = %self.name, entry = %entry.id, deliveries,
                    "took over an entry of an idle consumer");
                self.handle(entry, deliveries).await;
            }
            if next == "0-0" {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// How many times entry `id` has been delivered (from the pending list).
    async fn deliveries(&mut self, id: &str) -> Result<u64> {
        let mut cmd = redis::cmd("XPENDING");
        cmd.arg(&self.options.stream)
            .arg(&self.options.group)
            .arg(id)
            .arg(id)
            .arg(1);
        let v = self.query(Conn::Commands, &cmd).await?;
        let n = match &v {
            Value::Array(rows) => match rows.first() {
                Some(Value::Array(row)) => match row.get(3) {
                    Some(Value::Int(n)) => *n,
                    _ => 1,
                },
                _ => 1,
            },
            _ => 1,
        };
        Ok(n.max(1) as u64)
    }

    /// Process one delivered entry; never returns an error (what fails stays pending,
    /// goes to the dead letters, or is counted).
    async fn handle(&mut self, entry: Entry, deliveries: u64) {
        let message = match entry.message(deliveries) {
            Ok(m) => m,
            Err(why) if entry.fields.is_none() => {
                tracing::info!(consumer = %self.name, entry = %entry.id, %why, "acknowledging away");
                if self.ack(&entry.id).await {
                    add(&self.counters.trimmed_acked, 1);
                }
                return;
            }
            Err(why) => {
                self.dead_letter(&entry, deliveries, &why).await;
                return;
            }
        };
        if deliveries > self.options.max_deliveries {
            let why = format!("delivered {deliveries} times without success");
            self.dead_letter(&entry, deliveries, &why).await;
            return;
        }
        let lock = match (&self.locks, self.options.key_lock) {
            (Some(locks), Some(ttl)) => match locks.acquire(&message.biz_key, ttl).await {
                Ok(Some(guard)) => Some(guard),
                Ok(None) => {
                    add(&self.counters.lock_busy, 1);
                    tracing::debug!(consumer = %self.name, biz_key = %message.biz_key,
                        "business key locked by another consumer: left pending");
                    self.uncount(&entry.id, deliveries).await;
                    return;
                }
                Err(e) => {
                    // the lock only saves work: go on without it, the inbox decides
                    tracing::warn!(consumer = %self.name, error = %e, "key lock unavailable");
                    None
                }
            },
            _ => None,
        };
        let span = tracing::info_span!(
            "backstop.consume",
            consumer = %self.name,
            message_id = %message.id,
            event_type = %message.event_type,
            biz_key = %message.biz_key,
            deliveries,
        );
        let trace = message
            .headers
            .iter()
            .find(|(k, _)| k == backstop_core::otel::HEADER)
            .map(|(_, v)| v.as_str());
        backstop_core::otel::link(&span, trace);
        let outcome = tracing::Instrument::instrument(
            tokio::time::timeout(
                self.options.handler_timeout,
                self.inbox
                    .process(&self.options.group, &message, &self.handler),
            ),
            span,
        )
        .await;
        if let (Some(locks), Some(guard)) = (&self.locks, &lock) {
            if let Err(e) = locks.release(guard).await {
                tracing::debug!(error = %e, "releasing the key lock failed: it expires");
            }
        }
        let failure = match outcome {
            Ok(Ok(Processed::Done(()))) => {
                add(&self.counters.processed, 1);
                self.ack(&entry.id).await;
                return;
            }
            Ok(Ok(Processed::Duplicate)) => {
                add(&self.counters.duplicates, 1);
                self.ack(&entry.id).await;
                return;
            }
            // a cancel of a message is a permanent failure: it goes to the dead letters
            Ok(Err(e)) if matches!(e.action(), ErrorAction::Fail | ErrorAction::Cancel) => {
                add(&self.counters.failed, 1);
                self.dead_letter(&entry, deliveries, e.message()).await;
                return;
            }
            Ok(Err(e)) => e,
            Err(_) => HandlerError::retry(format!(
                "the handler took longer than {:?}",
                self.options.handler_timeout
            )),
        };
        add(&self.counters.failed, 1);
        tracing::warn!(consumer = %self.name, message_id = %message.id, deliveries,
            error = %failure, "message failed: it stays pending for a redelivery");
        if deliveries >= self.options.max_deliveries {
            let why = format!("failed {deliveries} times; last: {}", failure.message());
            self.dead_letter(&entry, deliveries, &why).await;
        }
    }

    /// Give back the delivery of entry `id` that found its key locked: a delivery that
    /// did not run the handler does not count toward `max_deliveries` (a message that
    /// never failed is never dead-lettered for waiting). `XCLAIM … RETRYCOUNT n JUSTID`
    /// keeps the entry pending with this consumer, its count set back to what it was
    /// before this delivery, and its idle time restarted: it is taken over again after
    /// `reclaim_idle`. A failure is logged: the delivery then counts.
    async fn uncount(&mut self, id: &str, deliveries: u64) {
        let mut cmd = redis::cmd("XCLAIM");
        cmd.arg(&self.options.stream)
            .arg(&self.options.group)
            .arg(&self.name)
            .arg(0)
            .arg(id)
            .arg("RETRYCOUNT")
            .arg(deliveries.saturating_sub(1))
            .arg("JUSTID");
        if let Err(e) = self.query(Conn::Commands, &cmd).await {
            add(&self.counters.errors, 1);
            tracing::debug!(consumer = %self.name, entry = %id, error = %e,
                "could not give back a delivery that found its key locked: it counts");
        }
    }

    /// `XACK`; false (logged, counted) when it failed: the entry will be redelivered and
    /// found in the inbox.
    async fn ack(&mut self, id: &str) -> bool {
        let mut cmd = redis::cmd("XACK");
        cmd.arg(&self.options.stream)
            .arg(&self.options.group)
            .arg(id);
        match self.query(Conn::Commands, &cmd).await {
            Ok(_) => true,
            Err(e) => {
                add(&self.counters.errors, 1);
                tracing::warn!(consumer = %self.name, entry = %id, error = %e,
                    "XACK failed: the entry will be redelivered and found in the inbox");
                false
            }
        }
    }

    /// Copy the entry to the dead-letter stream with the reason, then acknowledge it.
    async fn dead_letter(&mut self, entry: &Entry, deliveries: u64, why: &str) {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(&self.dead).arg("*");
        for (k, v) in entry.fields.iter().flatten() {
            cmd.arg(k).arg(v);
        }
        cmd.arg("dead.reason")
            .arg(why)
            .arg("dead.deliveries")
            .arg(deliveries)
            .arg("dead.group")
            .arg(&self.options.group)
            .arg("dead.entry_id")
            .arg(&entry.id);
        match self.query(Conn::Commands, &cmd).await {
            Ok(_) => {
                add(&self.counters.dead_lettered, 1);
                tracing::warn!(consumer = %self.name, entry = %entry.id, reason = %why,
                    "message sent to the dead-letter stream");
                self.ack(&entry.id).await;
            }
            Err(e) => {
                add(&self.counters.errors, 1);
                tracing::warn!(consumer = %self.name, entry = %entry.id, error = %e,
                    "dead-lettering failed: the entry stays pending");
            }
        }
    }

    async fn purge_inbox(&mut self, retention: Duration) {
        loop {
            match self.inbox.purge_inbox(retention, 500).await {
                Ok(n) if n >= 500 => continue,
                Ok(_) => return,
                Err(e) => {
                    add(&self.counters.errors, 1);
                    tracing::warn!(error = %e, "purging the inbox failed");
                    return;
                }
            }
        }
    }
}
