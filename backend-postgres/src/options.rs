//! The options of a PostgreSQL store, and the DDL they make.

use std::time::Duration;

use backstop_core::driver::prelude::*;
use backstop_core::limits;
#[cfg(doc)]
use backstop_core::TaskStore;

use crate::sql::Sql;

/// Options of a [`PgStore`](crate::PgStore): `Default`, then the setters named after the fields.
///
/// ```
/// use backstop_postgres::PgOptions;
/// let options = PgOptions::default().schema("jobs").max_connections(8);
/// assert_eq!(options.schema, "jobs");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PgOptions {
    /// Table name, payload limit, retries.
    pub config: StoreConfig,
    /// The schema holding the table (default `public`; created by `migrate` if missing).
    pub schema: String,
    /// Most pooled connections (default 16).
    pub max_connections: usize,
    /// How long to wait for a pooled connection before failing with a temporary
    /// `Unavailable` error (default 10 s).
    pub acquire_timeout: Duration,
    /// Announce new tasks with `NOTIFY` inside the enqueue transaction (default `true`),
    /// so engines listening through [`PgStore::listener`](crate::PgStore::listener) start them within
    /// milliseconds: a task enqueued alone by its id, which a listening engine that has
    /// drained the type claims by id ([`Wake::Task`](backstop_core::Wake::Task)), a
    /// batch by type. Delivered only at commit; nothing for a duplicate. Turn it off
    /// behind PgBouncer in transaction pooling mode (`LISTEN` does not survive it), or
    /// when no engine listens.
    pub notify: bool,
    /// While other enqueues of the store are under way, each event type is announced at
    /// most 4 times per this window per store (default 5 ms: one announcement regained
    /// every 1.25 ms), plus one trailing announcement when others were held back, a
    /// window after the last of them: `NOTIFY` takes a global lock at commit, held through
    /// the commit's log flush, so transactions that announce together commit one after
    /// the other. An enqueue with none other of the store under way (and few beside the
    /// recent ones) does not wait for that lock behind this store's, and is announced at
    /// its commit whatever the rate: a steady producer, one enqueue at a time, never
    /// waits for a trailing announcement. Zero notifies every enqueue. See
    /// [`Throttle`](backstop_core::driver::Throttle).
    pub notify_window: Duration,
    /// The server is reached through a pooler in transaction mode (PgBouncer's
    /// `pool_mode = transaction`, and poolers like it) (default `false`): statements are
    /// sent unnamed with their parameters' types, one round trip each, since a named
    /// prepared statement does not outlive its transaction there; and
    /// [`PgStore::listener`](crate::PgStore::listener) refuses, since `LISTEN` does not survive it (engines then
    /// poll; or give a listener a direct URL with [`PgListener::with_url`](crate::PgListener::with_url), with
    /// `notify` kept on).
    pub transaction_pooling: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            config: StoreConfig::default(),
            schema: "public".to_owned(),
            max_connections: 16,
            acquire_timeout: Duration::from_secs(10),
            notify: true,
            notify_window: Duration::from_millis(5),
            transaction_pooling: false,
        }
    }
}

impl PgOptions {
    backstop_core::driver::setters! {
        /// See [`config`](Self::config).
        config: StoreConfig,
        /// See [`max_connections`](Self::max_connections).
        max_connections: usize,
        /// See [`acquire_timeout`](Self::acquire_timeout).
        acquire_timeout: Duration,
        /// See [`notify`](Self::notify).
        notify: bool,
        /// See [`notify_window`](Self::notify_window).
        notify_window: Duration,
        /// See [`transaction_pooling`](Self::transaction_pooling).
        transaction_pooling: bool,
    }

    /// Use another schema.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    backstop_core::driver::table_setter!();

    /// The DDL [`migrate`](backstop_core::TaskStore::migrate) runs for these options, as
    /// a script for a DBA ([`SchemaSql::script`](backstop_core::driver::schema::SchemaSql::script)).
    ///
    /// ```
    /// let ddl = backstop_postgres::PgOptions::default().table("jobs").ddl().unwrap();
    /// assert!(ddl.contains("CREATE TABLE IF NOT EXISTS \"public\".\"jobs\""));
    /// assert!(ddl.contains("INSERT INTO \"public\".\"jobs_migrations\""));
    /// ```
    pub fn ddl(&self) -> Result<String> {
        self.validate()?;
        Sql::new(&self.schema, &self.config.table).schema.script()
    }

    pub(crate) fn validate(&self) -> Result<()> {
        self.config.validate()?;
        limits::check_identifier("open_store", "schema name", &self.schema)?;
        if self.max_connections == 0 {
            return Err(Error::config(
                "open_store",
                "max_connections must be at least 1",
            ));
        }
        Ok(())
    }
}
