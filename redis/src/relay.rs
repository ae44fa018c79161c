//! The relay: the task table as a transactional outbox for Redis Streams.

use std::time::{Duration, Instant};

use backstop_core::{async_trait, BranchCall, Error, Handler, HandlerError, Result, Task};
use redis::Value;

use crate::stream::{parse_id, F_ID, F_KEY, F_PAYLOAD, F_TYPE, HEADER_PREFIX};
use crate::{redis_err, LazyConn, Target};

const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest wait for replicas: within a command's response timeout.
const MAX_REPLICA_WAIT: Duration = Duration::from_secs(4);

/// Options of a [`StreamRelay`]: `Default` (or [`RelayOptions::new`]), then the setters
/// named after the fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RelayOptions {
    /// The stream entries are added to (default `backstop:events`).
    pub stream: String,
    /// Prepended to every message id (default empty): set it when several databases
    /// relay into one stream, so their task ids cannot collide.
    pub id_prefix: String,
    /// Headers added to every entry (as `h.<name>` fields).
    pub headers: Vec<(String, String)>,
    /// The member of a task's JSON payload that holds a participant barrier's call
    /// (default none): when a task's payload has it, the entry carries the call as the
    /// headers [`BranchCall::HEADERS`](backstop_core::BranchCall::HEADERS), and the
    /// consumer's inbox applies the barrier before its handler
    /// ([`Message::branch`](backstop_core::Message::branch)). How a saga's step reaches a
    /// participant through the stream: the step enqueues, on its own transaction, a task
    /// whose payload holds `cx.branch()`. A member that is not a valid call fails the
    /// task for good.
    pub branch_field: Option<String>,
    /// How often the relay trims the entries every consumer group has read (default
    /// every 60 s; `None`: never, trim by your own means). See [`StreamRelay::trim`].
    pub trim_interval: Option<Duration>,
    /// How many replicas must hold an entry before its task succeeds, and how long to
    /// wait for them (default `None`: the master's answer is enough). With replicas the
    /// relay sends `WAIT <n> <ms>` after each `XADD` (one round trip for both); fewer
    /// acknowledgements than `n` fail the attempt as temporary, so the task is retried
    /// and the entry added again (the consumer's inbox drops the copy). Without it, a
    /// failover can lose an entry the old master answered but had not replicated, and
    /// its task has already succeeded: set it wherever Sentinel (or any failover)
    /// promotes a replica. Validated: `n` from 1 to 16, the wait from 1 ms to 4 s. The
    /// relay's publishes share one connection and Redis answers a `WAIT` before the
    /// commands behind it, so while no replica acknowledges, concurrent attempts wait
    /// their turn: keep the wait to a few hundred milliseconds.
    pub replicas: Option<(u32, Duration)>,
}

impl Default for RelayOptions {
    fn default() -> Self {
        Self {
            stream: "backstop:events".to_owned(),
            id_prefix: String::new(),
            headers: Vec::new(),
            branch_field: None,
            trim_interval: Some(Duration::from_secs(60)),
            replicas: None,
        }
    }
}

impl RelayOptions {
    /// Relay into `stream`.
    pub fn new(stream: impl Into<String>) -> Self {
        Self::default().stream(stream)
    }

    /// See [`stream`](Self::stream).
    pub fn stream(mut self, stream: impl Into<String>) -> Self {
        self.stream = stream.into();
        self
    }

    /// See [`id_prefix`](Self::id_prefix).
    pub fn id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.id_prefix = prefix.into();
        self
    }

    /// Add a header to every entry.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// See [`branch_field`](Self::branch_field).
    ///
    /// ```
    /// use backstop_core::{BranchCall, BranchOp, NewTask};
    /// use backstop_redis::RelayOptions;
    ///
    /// #[derive(serde::Serialize)]
    /// struct Reserve { sku: u32, branch: BranchCall }
    ///
    /// // in a saga step: `let branch = cx.branch()?;`
    /// let branch = BranchCall::new("saga:order:42", "stock", BranchOp::Action).unwrap();
    /// let task = NewTask::new("RESERVE_STOCK", "42").json(&Reserve { sku: 7, branch });
    /// let options = RelayOptions::new("stock").branch_field("branch");
    /// # let _ = (task, options);
    /// ```
    pub fn branch_field(mut self, field: impl Into<String>) -> Self {
        self.branch_field = Some(field.into());
        self
    }

    /// See [`trim_interval`](Self::trim_interval).
    pub fn trim_interval(mut self, every: Option<Duration>) -> Self {
        self.trim_interval = every;
        self
    }

    /// See [`replicas`](Self::replicas).
    ///
    /// ```
    /// use std::time::Duration;
    /// use backstop_redis::RelayOptions;
    ///
    /// // a task succeeds once one replica holds its entry (or fails after 500 ms)
    /// let options = RelayOptions::new("orders").replicas(1, Duration::from_millis(500));
    /// # let _ = options;
    /// ```
    pub fn replicas(mut self, n: u32, wait: Duration) -> Self {
        self.replicas = Some((n, wait));
        self
    }

    fn validate(&self) -> Result<()> {
        const OP: &str = "open_relay";
        if let Some((n, wait)) = self.replicas {
            if !(1..=16).contains(&n) {
                return Err(Error::config(OP, "replicas must be 1 to 16"));
            }
            if wait < Duration::from_millis(1) || wait > MAX_REPLICA_WAIT {
                return Err(Error::config(
                    OP,
                    "the wait for replicas must be 1 ms to 4 s",
                ));
            }
        }
        if self.stream.is_empty() {
            return Err(Error::config(OP, "the stream name is empty"));
        }
        if self.id_prefix.len() > 64 {
            return Err(Error::config(OP, "id_prefix must be at most 64 bytes"));
        }
        if self.headers.iter().any(|(k, _)| k.is_empty()) {
            return Err(Error::config(OP, "a header name is empty"));
        }
        if self.branch_field.as_deref() == Some("") {
            return Err(Error::config(OP, "the branch field's name is empty"));
        }
        Ok(())
    }
}

/// A ready-made [`Handler`] that publishes each task to a Redis stream, so the task
/// table is a transactional outbox for a broker: the business transaction enqueues the
/// task, the engine runs the relay, and the entry appears once the task is handled.
///
/// - **Entries**: `XADD <stream> * msg_id … event_type … biz_key … payload … h.<name> …`;
///   a task's trace context goes as the header `traceparent` (W3C's name), so the
///   consumer's span links to the span that enqueued it (feature `otel`).
///   The entry id is Redis's own (`*`), never derived from the table's ids (commits land
///   out of id order).
/// - **The message id** (`msg_id`) is the same across every retry of a task
///   ([`StreamRelay::message_id`]): `<id_prefix><task id>.<created at, ms>`.
/// - **At-least-once**: an `XADD` whose reply was lost is retried as a failed attempt
///   and may add the entry twice; the consumer's inbox (keyed by `msg_id`) removes the
///   duplicate. A failed `XADD` is a retryable failure of the task.
/// - **Trimming never drops unread entries**: every `trim_interval` the relay trims by
///   `MINID` below what every consumer group has read and acknowledged (the smallest
///   pending id, or the last delivered id), and never without a group. A stream that no
///   group reads is not trimmed: create the consumer group before relaying, or trim by
///   your own bound.
///
/// ```no_run
/// # async fn demo(store: impl backstop_core::TaskStore + Clone) -> backstop_core::Result<()> {
/// use backstop_core::{Engine, HandlerOptions};
/// use backstop_redis::{RelayOptions, StreamRelay};
///
/// let relay = StreamRelay::open("redis://127.0.0.1/", RelayOptions::new("orders"))?;
/// let engine = Engine::builder(store)
///     .handler("ORDER_PLACED", relay, HandlerOptions::default().concurrency(16))
///     .start()?;
/// # Ok(()) }
/// ```
pub struct StreamRelay {
    options: RelayOptions,
    conn: LazyConn,
    last_trim: std::sync::Mutex<Instant>,
}

impl std::fmt::Debug for StreamRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamRelay")
            .field("stream", &self.options.stream)
            .finish()
    }
}

impl StreamRelay {
    /// A relay to the Redis at `url` (`redis://…`, or `redis+sentinel://…` for the
    /// master a set of Sentinels names: see the crate docs); connects lazily.
    pub fn open(url: &str, options: RelayOptions) -> Result<Self> {
        Self::with_target(Target::open(url, "open_relay")?, options)
    }

    /// A relay with an existing client.
    pub fn new(client: redis::Client, options: RelayOptions) -> Result<Self> {
        Self::with_target(Target::Server(Box::new(client)), options)
    }

    fn with_target(target: Target, options: RelayOptions) -> Result<Self> {
        options.validate()?;
        Ok(Self {
            conn: LazyConn::new(target, RESPONSE_TIMEOUT),
            options,
            last_trim: std::sync::Mutex::new(Instant::now()),
        })
    }

    /// The relay's options.
    pub fn options(&self) -> &RelayOptions {
        &self.options
    }

    /// The message id of `task`'s entry: the same for every attempt of the task.
    pub fn message_id(&self, task: &Task) -> String {
        format!(
            "{}{}.{}",
            self.options.id_prefix,
            task.id,
            task.created_at.timestamp_millis()
        )
    }

    async fn query(&self, cmd: &redis::Cmd) -> redis::RedisResult<Value> {
        self.conn.query(cmd).await
    }

    /// Add `task`'s entry to the stream; its entry id.
    pub async fn publish(&self, task: &Task) -> Result<String> {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(&self.options.stream)
            .arg("*")
            .arg(F_ID)
            .arg(self.message_id(task))
            .arg(F_TYPE)
            .arg(&task.event_type)
            .arg(F_KEY)
            .arg(&task.biz_key)
            .arg(F_PAYLOAD)
            .arg(&task.payload);
        for (k, v) in &self.options.headers {
            if task.traceparent.is_some() && k == backstop_core::otel::HEADER {
                continue; // the task's own trace context wins
            }
            cmd.arg(format!("{HEADER_PREFIX}{k}")).arg(v);
        }
        if let Some(tp) = &task.traceparent {
            cmd.arg(format!("{HEADER_PREFIX}{}", backstop_core::otel::HEADER))
                .arg(tp);
        }
        if let Some(field) = &self.options.branch_field {
            let call = BranchCall::from_payload_field(&task.payload, field)
                .map_err(|e| e.with_operation("relay"))?;
            for (k, v) in call.iter().flat_map(BranchCall::headers) {
                cmd.arg(format!("{HEADER_PREFIX}{k}")).arg(v);
            }
        }
        let Some((n, wait)) = self.options.replicas else {
            return entry_id(self.query(&cmd).await.map_err(|e| redis_err("relay", e))?);
        };
        let mut pipe = redis::pipe();
        pipe.add_command(cmd)
            .cmd("WAIT")
            .arg(n)
            .arg(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
        let (id, acked): (Value, i64) = self
            .conn
            .pipeline(&pipe)
            .await
            .map_err(|e| redis_err("relay", e))?;
        let id = entry_id(id)?;
        if acked < i64::from(n) {
            return Err(Error::new(
                backstop_core::ErrorKind::Unavailable,
                "relay",
                format!(
                    "redis: entry {id} reached {acked} of {n} replicas within {wait:?}; \
                     a failover could lose it, so the task is retried"
                ),
            )
            .with_temporary(true));
        }
        Ok(id)
    }

    /// Trim the entries every consumer group of the stream has read and acknowledged
    /// (`XTRIM MINID` at the smallest id a group still needs: its smallest pending id,
    /// or the one after its last delivered id); returns how many were removed. Without
    /// any group, nothing is trimmed.
    pub async fn trim(&self) -> Result<u64> {
        const OP: &str = "trim_stream";
        let stream = &self.options.stream;
        let groups = self
            .query(redis::cmd("XINFO").arg("GROUPS").arg(stream))
            .await;
        let groups = match groups {
            Ok(v) => v,
            // no such stream yet: nothing to trim
            Err(e) if e.code() == Some("ERR") => return Ok(0),
            Err(e) => return Err(redis_err(OP, e)),
        };
        let mut floor: Option<(u64, u64)> = None;
        let Value::Array(groups) = groups else {
            return Ok(0);
        };
        if groups.is_empty() {
            return Ok(0);
        }
        for g in &groups {
            let info = pairs(g);
            let name = info
                .iter()
                .find(|(k, _)| k == "name")
                .map(|(_, v)| v.clone());
            let pending: u64 = info
                .iter()
                .find(|(k, _)| k == "pending")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0);
            let last = info
                .iter()
                .find(|(k, _)| k == "last-delivered-id")
                .and_then(|(_, v)| parse_id(v))
                .unwrap_or((0, 0));
            let needed = if pending > 0 {
                let Some(name) = name else { return Ok(0) };
                let summary = self
                    .query(redis::cmd("XPENDING").arg(stream).arg(name))
                    .await
                    .map_err(|e| redis_err(OP, e))?;
                match &summary {
                    Value::Array(parts) => parts
                        .get(1)
                        .and_then(|v| match v {
                            Value::BulkString(b) => parse_id(&String::from_utf8_lossy(b)),
                            _ => None,
                        })
                        .unwrap_or((0, 0)),
                    _ => (0, 0),
                }
            } else {
                (last.0, last.1.saturating_add(1))
            };
            floor = Some(floor.map_or(needed, |f| f.min(needed)));
        }
        let Some((ms, seq)) = floor else {
            return Ok(0);
        };
        if (ms, seq) <= (0, 1) {
            return Ok(0);
        }
        let removed = self
            .query(
                redis::cmd("XTRIM")
                    .arg(stream)
                    .arg("MINID")
                    .arg(format!("{ms}-{seq}")),
            )
            .await
            .map_err(|e| redis_err(OP, e))?;
        Ok(match removed {
            Value::Int(n) => n.max(0) as u64,
            _ => 0,
        })
    }

    fn trim_due(&self) -> bool {
        let Some(every) = self.options.trim_interval else {
            return false;
        };
        let mut last = self.last_trim.lock().unwrap_or_else(|p| p.into_inner());
        if last.elapsed() < every {
            return false;
        }
        *last = Instant::now();
        true
    }
}

/// The entry id an `XADD` answered.
fn entry_id(answer: Value) -> Result<String> {
    match answer {
        Value::BulkString(id) => Ok(String::from_utf8_lossy(&id).into_owned()),
        Value::SimpleString(id) => Ok(id),
        other => Err(Error::new(
            backstop_core::ErrorKind::Unexpected,
            "relay",
            format!("redis: XADD answered {other:?}"),
        )),
    }
}

/// The key/value pairs of an `XINFO` map (RESP2 flat array or RESP3 map).
fn pairs(v: &Value) -> Vec<(String, String)> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        Value::Nil => Some(String::new()),
        _ => None,
    };
    match v {
        Value::Array(kv) => kv
            .chunks(2)
            .filter_map(|p| Some((text(p.first()?)?, text(p.get(1)?)?)))
            .collect(),
        Value::Map(kv) => kv
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, text(v)?)))
            .collect(),
        _ => Vec::new(),
    }
}

#[async_trait]
impl Handler for StreamRelay {
    async fn handle(&self, task: &Task) -> std::result::Result<(), HandlerError> {
        self.publish(task).await.map_err(|e| match e.kind() {
            // a payload whose branch call is not valid: no retry can fix it
            backstop_core::ErrorKind::InvalidInput => HandlerError::from(e).permanent(),
            _ => HandlerError::from(e),
        })?;
        if self.trim_due() {
            if let Err(e) = self.trim().await {
                tracing::warn!(error = %e, stream = %self.options.stream, "trimming the stream failed");
            }
        }
        Ok(())
    }
}
