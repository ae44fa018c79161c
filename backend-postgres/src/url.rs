//! The store's options in a URL (`postgres://…?schema=jobs&notify=false`), for
//! `backstop::connect`.

use std::sync::Arc;

use backstop_core::driver::{UrlOptions, UrlStore};
use backstop_core::{async_trait, Notifier, Result, StoreConfig};

use crate::{PgOptions, PgStore};

impl PgOptions {
    /// The options a URL's query sets (`max_connections`, `acquire_timeout`, `schema`,
    /// `notify`, `transaction_pooling`, `table`) over the defaults with `config`, and the
    /// URL left for tokio-postgres (its own parameters, `sslmode=…`, kept). A bad value
    /// is a `Config` error naming it.
    ///
    /// ```
    /// use backstop_postgres::PgOptions;
    /// let (url, o) = PgOptions::from_url("postgres://db/app?schema=jobs&sslmode=require", Default::default()).unwrap();
    /// assert_eq!((url.as_str(), o.schema.as_str()), ("postgres://db/app?sslmode=require", "jobs"));
    /// ```
    pub fn from_url(url: &str, mut config: StoreConfig) -> Result<(String, PgOptions)> {
        let mut q = UrlOptions::parse(url);
        q.table(&mut config);
        let mut o = PgOptions::default().config(config);
        if let Some(n) = q.count("max_connections")? {
            o = o.max_connections(n as usize);
        }
        if let Some(d) = q.duration("acquire_timeout")? {
            o = o.acquire_timeout(d);
        }
        if let Some(schema) = q.take("schema") {
            o = o.schema(schema);
        }
        if let Some(notify) = q.flag("notify")? {
            o = o.notify(notify);
        }
        if let Some(pooling) = q.flag("transaction_pooling")? {
            o = o.transaction_pooling(pooling);
        }
        Ok((q.url(), o))
    }
}

#[async_trait]
impl UrlStore for PgStore {
    const NAME: &'static str = "PostgreSQL";
    const SCHEMES: &'static [&'static str] = &["postgres", "postgresql"];
    const OPTIONS: &'static [&'static str] = &[
        "max_connections",
        "acquire_timeout",
        "schema",
        "notify",
        "transaction_pooling",
    ];

    async fn open_url(url: &str, config: StoreConfig) -> Result<Self> {
        let (url, options) = PgOptions::from_url(url, config)?;
        PgStore::connect_with(&url, options).await
    }

    fn ddl_url(url: &str, config: &StoreConfig) -> Result<String> {
        PgOptions::from_url(url, config.clone())?.1.ddl()
    }

    /// `LISTEN`/`NOTIFY` ([`PgStore::listener`]) when the store announces its tasks;
    /// `None` behind a transaction pooler (`transaction_pooling`), where `LISTEN` does
    /// not survive: engines then find new tasks by polling, and a log line says so.
    fn native_notifier(&self) -> Result<Option<Arc<dyn Notifier>>> {
        if self.options().transaction_pooling {
            tracing::warn!(
                "PostgreSQL through a transaction pooler: no LISTEN, so engines find new \
                 tasks by polling (give a listener a direct URL with \
                 PgListener::with_url for wake-ups)"
            );
            return Ok(None);
        }
        if !self.options().notify {
            return Ok(None);
        }
        Ok(Some(Arc::new(self.listener()?)))
    }
}
