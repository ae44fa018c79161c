//! Wake-ups over Redis pub/sub.

use std::time::Duration;

use crate::{redis_err, LazyConn, Target};
use backstop_core::{async_trait, Error, ErrorKind, Notifier, Result, Wake, Wakes};
use futures_util::StreamExt;

/// How often the listener checks that its subscription is alive: a half-open TCP
/// connection delivers nothing and reports nothing, and a subscription whose connection
/// was closed has been seen (rarely) to stay silent instead of ending; the failed ping
/// ends it, and the reconnect polls every event type.
const PING_EVERY: Duration = Duration::from_secs(5);
/// How long a command may take before the connection is taken as lost.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A [`Notifier`] over Redis pub/sub: announcements are `PUBLISH <channel> <event type>`
/// (or a revoked lease's [`Wake::revoked_message`]) after commit; listeners `SUBSCRIBE`
/// on a dedicated connection.
///
/// Use one channel per task table (engines on other tables would poll for nothing).
/// Pub/sub is fire-and-forget: a message published while a listener is disconnected
/// is lost, which costs latency only — the engine polls every event type when its
/// listener reconnects, and the poller runs on its clock regardless.
///
/// ```no_run
/// # async fn demo(store: impl backstop_core::TaskStore + Clone, h: impl backstop_core::Handler) -> backstop_core::Result<()> {
/// use backstop_core::{Engine, HandlerOptions};
/// use backstop_redis::RedisNotifier;
///
/// let notifier = RedisNotifier::open("redis://127.0.0.1/", "backstop:orders")?;
/// let engine = Engine::builder(store)
///     .handler("SEND_EMAIL", h, HandlerOptions::default())
///     .notifier(notifier)
///     .start()?;
/// # Ok(()) }
/// ```
pub struct RedisNotifier {
    target: Target,
    channel: String,
    /// Shared by announcements; dropped after an error, so the next one reconnects.
    publisher: LazyConn,
}

impl std::fmt::Debug for RedisNotifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisNotifier")
            .field("channel", &self.channel)
            .finish()
    }
}

impl RedisNotifier {
    /// A notifier on the Redis at `url` (`redis://[user:pass@]host[:port][/db]`) and
    /// `channel`. Connects lazily: a bad URL is a `Config` error here, an unreachable
    /// server an error of the first announcement or listen.
    pub fn open(url: &str, channel: impl Into<String>) -> Result<Self> {
        Self::with_target(Target::open(url, "open_notifier")?, channel)
    }

    /// A notifier with an existing client.
    pub fn new(client: redis::Client, channel: impl Into<String>) -> Result<Self> {
        Self::with_target(Target::Server(Box::new(client)), channel)
    }

    fn with_target(target: Target, channel: impl Into<String>) -> Result<Self> {
        let channel = channel.into();
        if channel.is_empty() {
            return Err(Error::config("open_notifier", "the channel name is empty"));
        }
        Ok(Self {
            publisher: LazyConn::new(target.clone(), RESPONSE_TIMEOUT),
            target,
            channel,
        })
    }

    /// The channel.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    async fn publish(&self, message: &str) -> redis::RedisResult<()> {
        let mut cmd = redis::cmd("PUBLISH");
        cmd.arg(&self.channel).arg(message);
        self.publisher.query::<i64>(&cmd).await.map(|_| ())
    }
}

#[async_trait]
impl Notifier for RedisNotifier {
    async fn notify(&self, event_type: &str) -> Result<()> {
        self.publish(event_type)
            .await
            .map_err(|e| redis_err("notify", e))
    }

    async fn notify_task(&self, task_id: backstop_core::TaskId, event_type: &str) -> Result<()> {
        self.publish(&Wake::task_message(task_id, event_type))
            .await
            .map_err(|e| redis_err("notify", e))
    }

    async fn notify_revoked(&self, task_id: backstop_core::TaskId) -> Result<()> {
        self.publish(&Wake::revoked_message(task_id))
            .await
            .map_err(|e| redis_err("notify", e))
    }

    async fn listen(&self, wakes: &Wakes) -> Result<()> {
        let connect = async { self.target.client().await?.get_async_pubsub().await };
        let pubsub = tokio::time::timeout(RESPONSE_TIMEOUT, connect)
            .await
            .map_err(|_| lost("connecting timed out"))?
            .map_err(|e| redis_err("listen", e))?;
        let (mut sink, mut stream) = pubsub.split();
        tokio::time::timeout(RESPONSE_TIMEOUT, sink.subscribe(&self.channel))
            .await
            .map_err(|_| lost("no answer to SUBSCRIBE"))?
            .map_err(|e| redis_err("listen", e))?;
        wakes.send(Wake::All);
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.reset();
        loop {
            tokio::select! {
                m = stream.next() => match m {
                    Some(msg) => match msg.get_payload::<String>() {
                        Ok(text) => wakes.send(Wake::from_message(&text)),
                        Err(e) => tracing::debug!(error = %e, "ignored a pub/sub message that is not text"),
                    },
                    None => return Err(lost("the subscription's connection was closed")),
                },
                _ = ping.tick() => {
                    match tokio::time::timeout(RESPONSE_TIMEOUT, sink.ping::<redis::Value>()).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => return Err(redis_err("listen", e)),
                        Err(_) => return Err(lost("no answer to a ping")),
                    }
                }
            }
        }
    }
}

fn lost(why: &str) -> Error {
    Error::new(ErrorKind::Unavailable, "listen", format!("redis: {why}")).with_temporary(true)
}
