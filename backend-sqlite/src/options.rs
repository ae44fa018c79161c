//! The options of a SQLite store, and the DDL they make.

use std::time::Duration;

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;

use crate::sql::Sql;

/// How durable a commit is (SQLite's `PRAGMA synchronous` in WAL mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Synchronous {
    /// Every commit is synced to disk before it returns: survives power loss. The default.
    #[default]
    Full,
    /// Commits survive a crash of the process but the last ones may be lost on power
    /// loss or an OS crash. Much faster on slow disks.
    Normal,
}

/// Options of a [`SqliteStore`](crate::SqliteStore): `Default`, then the setters named after the fields.
///
/// ```
/// use std::time::Duration;
/// use backstop_sqlite::{SqliteOptions, Synchronous};
///
/// let options = SqliteOptions::default()
///     .table("orders_outbox")
///     .synchronous(Synchronous::Normal)
///     .busy_timeout(Duration::from_secs(10));
/// assert_eq!(options.config.table, "orders_outbox");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// Table name and payload limit.
    pub config: StoreConfig,
    /// Most pooled connections open at once (default 8). Reads run on them in parallel;
    /// writes take turns on SQLite's single write lock (on the writer thread's own
    /// connection when writers are queued).
    pub max_connections: usize,
    /// How long a statement waits for the write lock before failing with a temporary
    /// `Unavailable` error (default 5 s).
    pub busy_timeout: Duration,
    /// Commit durability (default [`Synchronous::Full`]).
    pub synchronous: Synchronous,
    /// Queue this process's writes of the database file in FIFO order on one writer
    /// thread, before they ask SQLite for the write lock (default `true`). SQLite's busy
    /// handler waits in steps of milliseconds, so writers that meet on the lock lose far
    /// more time than the lock is held; queueing in-process avoids that, and the thread
    /// runs queued writes back to back. The store's own writes that are queued together
    /// share one transaction (group commit: each in a savepoint of its own, so one
    /// failing write never undoes another; every one answered after the commit), so a
    /// claim and the marks queued next to it cost one commit. Every store on the same
    /// file in this process shares the thread and its connection (each write runs with
    /// its own store's `busy_timeout` and `synchronous`); other processes still meet on
    /// SQLite's lock (`BEGIN IMMEDIATE`, `busy_timeout`), which is what keeps them
    /// correct. With `false`, writes run on the pool like reads, one transaction each.
    /// An in-memory store never queues (its one connection is the database).
    pub queue_writers: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            config: StoreConfig::default(),
            max_connections: 8,
            busy_timeout: Duration::from_secs(5),
            synchronous: Synchronous::Full,
            queue_writers: true,
        }
    }
}

impl SqliteOptions {
    backstop_core::driver::setters! {
        /// See [`config`](Self::config).
        config: StoreConfig,
        /// See [`max_connections`](Self::max_connections).
        max_connections: usize,
        /// See [`busy_timeout`](Self::busy_timeout).
        busy_timeout: Duration,
        /// See [`synchronous`](Self::synchronous).
        synchronous: Synchronous,
        /// See [`queue_writers`](Self::queue_writers).
        queue_writers: bool,
    }

    backstop_core::driver::table_setter!();

    /// The DDL [`migrate`](backstop_core::TaskStore::migrate) runs for these options, as
    /// a script for a DBA ([`SchemaSql::script`](backstop_core::driver::schema::SchemaSql::script)).
    ///
    /// ```
    /// let ddl = backstop_sqlite::SqliteOptions::default().table("jobs").ddl().unwrap();
    /// assert!(ddl.contains("CREATE TABLE IF NOT EXISTS \"jobs\""));
    /// assert!(ddl.contains("INSERT INTO \"jobs_migrations\""));
    /// ```
    pub fn ddl(&self) -> Result<String> {
        self.config.validate()?;
        Sql::new(&self.config.table).schema.script()
    }
}
