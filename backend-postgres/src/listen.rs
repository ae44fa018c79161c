//! Wake-ups through `LISTEN`/`NOTIFY`: the store announces new tasks inside the enqueue
//! transaction (see [`PgOptions::notify`](crate::PgOptions::notify)); a [`PgListener`]
//! hears them on a dedicated connection and wakes its engine.

use std::time::Duration;

use backstop_core::{async_trait, Error, ErrorKind, Notifier, Result, Wake, Wakes};
use deadpool_postgres::Pool;
use futures_util::StreamExt;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::connect::pg_err;
use crate::PgStore;

/// Hears the announcements of a [`PgStore`] (made with [`PgStore::listener`]) and wakes
/// the engine it is given to with
/// [`EngineBuilder::notifier`](backstop_core::EngineBuilder::notifier).
///
/// - **Its own connection**, not a pooled one (a pool hides the notifications and may
///   close the connection), named `backstop-listener` in `pg_stat_activity`, with TCP
///   keepalives so a dead server is noticed. One per engine.
/// - **Lost notifications** (the connection dropped, the server restarted) are covered
///   by the engine, which polls every event type after each reconnect, and by the
///   poller.
/// - [`notify`](Notifier::notify) (the engine's announcement after commit) does nothing
///   while the store announces inside the enqueue transaction (the default); with
///   [`PgOptions::notify`](crate::PgOptions::notify) off it sends a `NOTIFY` on a pooled
///   connection. The store announces an operator's cancel (or reset) of a task itself,
///   after its commit ([`Wake::Revoked`]); [`notify_revoked`](Notifier::notify_revoked)
///   sends one more.
/// - Not through PgBouncer in transaction pooling mode: `LISTEN` does not survive it.
///   Point the listener at the database directly (a second URL for
///   [`with_url`](Self::with_url), TLS included), or use Redis pub/sub.
#[derive(Clone)]
pub struct PgListener {
    config: tokio_postgres::Config,
    tls: Option<crate::tls::Tls>,
    channel: String,
    listen: String,
    pool: Pool,
    store_notifies: bool,
}

impl std::fmt::Debug for PgListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgListener")
            .field("channel", &self.channel)
            .finish()
    }
}

impl PgListener {
    /// A listener for `store`'s announcements that connects with `config` (a store made
    /// from a pool has no URL of its own; or to bypass a connection pooler), without
    /// TLS: for TLS, give the URL to [`with_url`](Self::with_url).
    pub fn with_config(store: &PgStore, mut config: tokio_postgres::Config) -> Self {
        config
            .application_name("backstop-listener")
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(10));
        let inner = &store.inner;
        PgListener {
            config,
            tls: None,
            channel: inner.sql.channel.clone(),
            listen: inner.sql.listen.clone(),
            pool: inner.pool.clone(),
            store_notifies: inner.options.notify,
        }
    }

    /// A listener for `store`'s announcements that connects to `url`, with its TLS as a
    /// store's URL has it (`sslmode`, `sslrootcert`; see [`PgStore::connect`]): the way
    /// past a transaction pooler when the store's URL names the pooler, or for a store
    /// made from a pool. `Config` when the URL is not one, or asks for TLS in a build
    /// without the `tls` feature.
    ///
    /// ```no_run
    /// # async fn demo(store: backstop_postgres::PgStore) -> backstop_core::Result<()> {
    /// use backstop_postgres::PgListener;
    /// // the store through PgBouncer, the listener to the database itself
    /// let listener = PgListener::with_url(
    ///     &store,
    ///     "postgres://app@db:5432/app?sslmode=verify-full&sslrootcert=/etc/ssl/ca.pem",
    /// )?;
    /// # let _ = listener; Ok(()) }
    /// ```
    pub fn with_url(store: &PgStore, url: &str) -> Result<Self> {
        let (config, settings) =
            crate::tls::TlsSettings::split(url).map_err(|e| e.with_operation("listen"))?;
        let tls = crate::tls::connector(&settings).map_err(|e| e.with_operation("listen"))?;
        Ok(PgListener::with_config(store, config).tls(tls))
    }

    /// Connect with the store's TLS (a listener made by [`PgStore::listener`] does).
    pub(crate) fn tls(mut self, tls: crate::tls::Tls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The channel announcements go to (derived from the schema and table).
    pub fn channel(&self) -> &str {
        &self.channel
    }
}

#[async_trait]
impl Notifier for PgListener {
    async fn notify(&self, event_type: &str) -> Result<()> {
        if self.store_notifies {
            return Ok(()); // announced inside the enqueue transaction, at its commit
        }
        pg_notify(&self.pool, &self.channel, event_type).await
    }

    async fn notify_task(&self, task_id: backstop_core::TaskId, event_type: &str) -> Result<()> {
        if self.store_notifies {
            return Ok(()); // announced inside the enqueue transaction, by id
        }
        pg_notify(
            &self.pool,
            &self.channel,
            &Wake::task_message(task_id, event_type),
        )
        .await
    }

    async fn notify_revoked(&self, task_id: backstop_core::TaskId) -> Result<()> {
        // Always sent: an operators' change is rare, and a second announcement of one
        // (a store that notifies itself, given this listener as its notifier too) costs
        // the engine that holds the task one heartbeat of its lease.
        pg_notify(&self.pool, &self.channel, &Wake::revoked_message(task_id)).await
    }

    async fn listen(&self, wakes: &Wakes) -> Result<()> {
        let failed = |e| pg_err(e).with_operation("listen");
        match &self.tls {
            Some(tls) => {
                let (client, connection) =
                    self.config.connect(tls.clone()).await.map_err(failed)?;
                self.listen_on(client, connection, wakes).await
            }
            None => {
                let (client, connection) = self.config.connect(NoTls).await.map_err(failed)?;
                self.listen_on(client, connection, wakes).await
            }
        }
    }
}

impl PgListener {
    /// `LISTEN` on `client`, then wake `wakes` per notification its `connection` brings.
    async fn listen_on<S, T>(
        &self,
        client: tokio_postgres::Client,
        mut connection: tokio_postgres::Connection<S, T>,
        wakes: &Wakes,
    ) -> Result<()>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        // The connection delivers both the LISTEN's reply and the notifications: drive it
        // here, beside the LISTEN.
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        let listen = client.batch_execute(&self.listen);
        let mut listen = std::pin::pin!(listen);
        let mut listening = false;
        loop {
            tokio::select! {
                r = &mut listen, if !listening => {
                    r.map_err(|e| pg_err(e).with_operation("listen"))?;
                    listening = true;
                    wakes.send(Wake::All);
                }
                m = messages.next() => match m {
                    Some(Ok(AsyncMessage::Notification(n))) => {
                        wakes.send(Wake::from_message(n.payload()));
                    }
                    Some(Ok(_)) => {} // notices
                    Some(Err(e)) => return Err(pg_err(e).with_operation("listen")),
                    None => {
                        return Err(Error::new(
                            ErrorKind::Unavailable,
                            "listen",
                            "the listener's connection was closed by the server",
                        )
                        .with_temporary(true))
                    }
                },
            }
        }
    }
}

/// `NOTIFY` on a pooled connection, outside any enqueue transaction.
pub(crate) async fn pg_notify(pool: &Pool, channel: &str, message: &str) -> Result<()> {
    let client = pool.get().await.map_err(|e| {
        Error::new(
            ErrorKind::Unavailable,
            "notify",
            format!("no PostgreSQL connection: {e}"),
        )
        .with_source(e)
        .with_temporary(true)
    })?;
    // unnamed, one round trip: fine behind a transaction pooler too
    client
        .execute_typed(
            "SELECT pg_notify($1, $2)",
            &[
                (&channel, tokio_postgres::types::Type::TEXT),
                (&message, tokio_postgres::types::Type::TEXT),
            ],
        )
        .await
        .map_err(|e| pg_err(e).with_operation("notify"))?;
    Ok(())
}
