//! A small pool of SQLite connections whose work runs on tokio's blocking pool.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backstop_core::{Error, ErrorKind, Result};
use rusqlite::Connection;
use tokio::sync::Semaphore;

use crate::conn::db_err;
use crate::Synchronous;

pub(crate) struct Pool {
    shared: Arc<Shared>,
    permits: Semaphore,
}

struct Shared {
    path: Option<PathBuf>,
    settings: Settings,
    idle: Mutex<Vec<Connection>>,
}

/// Per-connection settings of a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    pub busy_timeout: Duration,
    pub synchronous: Synchronous,
}

impl Pool {
    pub fn new(path: Option<PathBuf>, max: usize, settings: Settings) -> Pool {
        Pool {
            shared: Arc::new(Shared {
                path,
                settings,
                idle: Mutex::new(Vec::new()),
            }),
            permits: Semaphore::new(max),
        }
    }

    pub fn path(&self) -> Option<&Path> {
        self.shared.path.as_deref()
    }

    /// Run `f` on a connection on tokio's blocking pool. At most `max` run at once; a
    /// connection is reused after `f` returns (and dropped if `f` panics).
    pub async fn run<T, F>(&self, op: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let _permit =
            self.permits.acquire().await.map_err(|_| {
                Error::new(ErrorKind::Unavailable, op, "the connection pool is closed")
            })?;
        let shared = Arc::clone(&self.shared);
        tokio::task::spawn_blocking(move || {
            let idle = shared
                .idle
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .pop();
            let mut conn = match idle {
                Some(conn) => conn,
                None => open(shared.path.as_deref(), shared.settings, op)?,
            };
            let out = f(&mut conn);
            shared
                .idle
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(conn);
            out
        })
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                op,
                format!("the database call panicked or was cancelled: {e}"),
            )
        })?
    }
}

/// Open a connection to `path` (in memory when `None`): WAL, `settings` applied, a
/// statement cache.
pub(crate) fn open(
    path: Option<&Path>,
    settings: Settings,
    op: &'static str,
) -> Result<Connection> {
    let conn = match path {
        Some(p) => Connection::open(p),
        None => Connection::open_in_memory(),
    }
    .map_err(|e| {
        let where_ = path
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| ":memory:".to_owned());
        Error::new(
            ErrorKind::Unavailable,
            op,
            format!("cannot open SQLite database {where_}: {e}"),
        )
        .with_source(e)
    })?;
    if path.is_some() {
        // WAL: readers never block the writer, the writer never blocks readers.
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(|e| db_err(op, e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::config(
                op,
                format!("SQLite refused WAL journal mode (got {mode:?})"),
            ));
        }
    }
    configure(&conn, settings, op)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// Apply `settings` to `conn` (cheap: no I/O).
pub(crate) fn configure(conn: &Connection, settings: Settings, op: &'static str) -> Result<()> {
    conn.busy_timeout(settings.busy_timeout)
        .map_err(|e| db_err(op, e))?;
    let sync = match settings.synchronous {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", sync)
        .map_err(|e| db_err(op, e))
}
