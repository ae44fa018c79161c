//! The writer thread: one per database file in this process, shared by every store on
//! the file, running the process's writes one after another on its own connection.
//!
//! SQLite has one write lock per file, so writes are serial whatever we do. Queueing
//! them in-process (FIFO) instead of meeting on SQLite's lock avoids its busy handler,
//! which sleeps in steps of milliseconds. A dedicated thread does better than an async
//! mutex in front of tokio's blocking pool: queued writes run back to back on a thread
//! that never parks between them, where a mutex hand-off wakes the next writer's task,
//! which then wakes a blocking-pool thread — two thread wake-ups per write on a busy
//! file. Measured on a 2-core machine draining tasks (claims and marks alternating on the
//! lock), that hand-off was a fifth of the time.
//!
//! Other processes still meet this process's writes on SQLite's lock (`BEGIN IMMEDIATE`
//! with `busy_timeout`), which is what keeps them correct.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use backstop_core::{Error, ErrorKind, Result};
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::pool::{configure, open, Settings};

type Run = Box<dyn FnOnce(Result<&mut Connection>) + Send>;

struct Job {
    op: &'static str,
    settings: Settings,
    run: Run,
}

/// A handle on the writer thread of one database file. The thread ends (closing its
/// connection) when the last handle is dropped.
pub(crate) struct Writer {
    jobs: mpsc::Sender<Job>,
}

impl Writer {
    /// The writer of the database file at `path` (keyed by its canonical path): the
    /// running one, or a new thread.
    pub fn of(path: &Path) -> Result<Arc<Writer>> {
        type Registry = Mutex<HashMap<PathBuf, Weak<Writer>>>;
        static WRITERS: OnceLock<Registry> = OnceLock::new();
        let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let mut writers = WRITERS
            .get_or_init(Registry::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        writers.retain(|_, w| w.strong_count() > 0);
        if let Some(w) = writers.get(&key).and_then(Weak::upgrade) {
            return Ok(w);
        }
        let (tx, rx) = mpsc::channel::<Job>();
        let file = key.clone();
        std::thread::Builder::new()
            .name("backstop-sqlite-writer".into())
            .spawn(move || serve(&file, rx))
            .map_err(|e| {
                Error::new(
                    ErrorKind::Unavailable,
                    "open_store",
                    format!("cannot start the SQLite writer thread: {e}"),
                )
                .with_source(e)
            })?;
        let w = Arc::new(Writer { jobs: tx });
        writers.insert(key, Arc::downgrade(&w));
        Ok(w)
    }

    /// Run `f` on the writer's connection, after the writes queued before it. The
    /// connection gets `settings` first (a no-op when they are the current ones).
    pub async fn run<T, F>(&self, op: &'static str, settings: Settings, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let (done, out) = oneshot::channel();
        let job = Job {
            op,
            settings,
            run: Box::new(move |conn: Result<&mut Connection>| {
                // the caller may have given up waiting; the write stands either way
                let _ = done.send(conn.and_then(f));
            }),
        };
        if self.jobs.send(job).is_err() {
            return Err(Error::new(
                ErrorKind::Unavailable,
                op,
                "the SQLite writer thread has stopped",
            ));
        }
        out.await.map_err(|_| {
            Error::new(
                ErrorKind::Unexpected,
                op,
                "the database call panicked on the writer thread",
            )
        })?
    }
}

/// The writer thread's loop: open the connection on first use (again after a failure
/// or a panic), run each job in arrival order.
fn serve(path: &Path, jobs: mpsc::Receiver<Job>) {
    let mut conn: Option<(Connection, Settings)> = None;
    while let Ok(job) = jobs.recv() {
        let ready = ready(&mut conn, path, job.settings, job.op);
        let ran = catch_unwind(AssertUnwindSafe(move || (job.run)(ready)));
        if ran.is_err() {
            // The job's transaction rolled back as the panic unwound through it; start
            // over on a fresh connection all the same. The caller sees the dropped reply.
            conn = None;
        }
    }
}

/// The connection with `settings` applied, opened if needed.
fn ready<'c>(
    conn: &'c mut Option<(Connection, Settings)>,
    path: &Path,
    settings: Settings,
    op: &'static str,
) -> Result<&'c mut Connection> {
    match conn {
        Some((_, current)) if *current == settings => {}
        Some((c, current)) => {
            configure(c, settings, op)?;
            *current = settings;
        }
        None => *conn = Some((open(Some(path), settings, op)?, settings)),
    }
    match conn {
        Some((c, _)) => Ok(c),
        None => Err(Error::new(
            ErrorKind::Unexpected,
            op,
            "the writer connection is missing",
        )),
    }
}
