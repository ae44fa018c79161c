//! The options of a MySQL store, and the DDL they make.

use std::time::Duration;

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;

use crate::claim::ClaimStrategy;
use crate::sql::Sql;

/// Options of a [`MySqlStore`](crate::MySqlStore): `Default`, then the setters named after the fields.
///
/// ```
/// use backstop_mysql::{ClaimStrategy, MySqlOptions};
/// let options = MySqlOptions::default().claim_strategy(ClaimStrategy::SkipLocked);
/// assert_eq!(options.max_connections, 16);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MySqlOptions {
    /// Table name, payload limit (the payload column is `MEDIUMTEXT`), retries.
    pub config: StoreConfig,
    /// The claim strategy (default [`ClaimStrategy::Auto`]).
    pub claim_strategy: ClaimStrategy,
    /// Most pooled connections (default 16).
    pub max_connections: u32,
    /// How long to wait for a pooled connection (default 10 s).
    pub acquire_timeout: Duration,
    /// With a URL naming several servers (a Galera cluster's nodes): spread the pool's
    /// connections over every node, one new connection on the next (default `false`:
    /// every connection on one node, the first of the URL that serves, and the next
    /// only when that one fails; back to the first once it serves again). Spread, each
    /// connection replicates every statement of a transaction as it runs (streaming
    /// replication, a fragment a statement), so a write's row locks hold on every node
    /// before the next statement: without it two nodes' transactions writing one row
    /// both committed under load, and limits let claims through. Spread, the store
    /// passes the whole conformance suite but is slower (0.94× of one writer node with 1
    /// engine, 0.75× with 4) and buys no throughput, so one writer node is the default;
    /// your application's own transactions may use any node. See the guide's Scale-out
    /// chapter.
    pub every_node: bool,
}

impl Default for MySqlOptions {
    fn default() -> Self {
        Self {
            config: StoreConfig::default(),
            claim_strategy: ClaimStrategy::Auto,
            max_connections: 16,
            acquire_timeout: Duration::from_secs(10),
            every_node: false,
        }
    }
}

impl MySqlOptions {
    backstop_core::driver::setters! {
        /// See [`config`](Self::config).
        config: StoreConfig,
        /// See [`claim_strategy`](Self::claim_strategy).
        claim_strategy: ClaimStrategy,
        /// See [`max_connections`](Self::max_connections).
        max_connections: u32,
        /// See [`acquire_timeout`](Self::acquire_timeout).
        acquire_timeout: Duration,
        /// See [`every_node`](Self::every_node).
        every_node: bool,
    }

    backstop_core::driver::table_setter!();

    /// The DDL [`migrate`](backstop_core::TaskStore::migrate) runs for these options, as
    /// a script for a DBA ([`SchemaSql::script`](backstop_core::driver::schema::SchemaSql::script)).
    ///
    /// ```
    /// let ddl = backstop_mysql::MySqlOptions::default().table("jobs").ddl().unwrap();
    /// assert!(ddl.contains("CREATE TABLE IF NOT EXISTS `jobs`"));
    /// assert!(ddl.contains("INSERT INTO `jobs_migrations`"));
    /// ```
    pub fn ddl(&self) -> Result<String> {
        self.config.validate()?;
        Sql::new(&self.config.table).schema.script()
    }
}
