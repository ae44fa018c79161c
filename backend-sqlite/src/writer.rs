//! The writer thread: one per database file in this process, shared by every store on
//! the file, running the process's writes one after another on its own connection.
//!
//! SQLite has one write lock per file, so writes are serial whatever we do. Queueing
//! them in-process (FIFO) instead of meeting on SQLite's lock avoids its busy handler,
//! which sleeps in steps of milliseconds. A dedicated thread does better than an async
//! mutex in front of tokio's blocking pool: queued writes run back to back on a thread
//! that never parks between them, where a mutex hand-off wakes the next writer's task,
//! which then wakes a blocking-pool thread — two thread wake-ups per write on a busy
//! file (see `bench/NOTES.md`).
//!
//! **Group commit.** The store's own writes ([`Writer::write`]) that are queued together
//! share one transaction: the thread takes the first, then whatever is already waiting
//! behind it (up to [`MAX_GROUP`], with the same settings), runs each in a savepoint of
//! its own, commits once, and only then answers them. Nothing waits for a group to fill:
//! a lone write commits alone. A write that fails rolls back to its savepoint and is
//! answered with its error; the others in the group are unaffected. If the commit fails,
//! every write in the group gets that error and none of them is applied. Each write still
//! reads the clock after the write lock is held. A draining engine's claim and the marks
//! queued beside it take one commit instead of one each, and pages they both touch go to
//! the WAL once.
//!
//! A caller's own transaction ([`Writer::run`], behind `SqliteStore::transaction`) runs
//! alone, between groups: it gets the connection to open and end its transaction itself.
//!
//! Other processes still meet this process's writes on SQLite's lock (`BEGIN IMMEDIATE`
//! with `busy_timeout`), which is what keeps them correct.

use std::collections::HashMap;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use backstop_core::{Error, ErrorKind, Result};
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::pool::{configure, open, Settings};

/// Most writes in one group transaction. A group holds SQLite's write lock while it runs,
/// so other processes' writes wait for the whole group.
pub(crate) const MAX_GROUP: usize = 32;

/// A job that opens and ends its own transaction.
type Run = Box<dyn FnOnce(Result<&mut Connection>) + Send>;
/// A job that runs inside the group's transaction. It answers its caller at once when it
/// fails; when it succeeds it returns how to answer once the group's commit is known.
type Part = Box<dyn FnOnce(Result<&Connection>) -> Option<Answer> + Send>;
/// Answers a successful part: `None` when its group committed, else the commit's error.
type Answer = Box<dyn FnOnce(Option<&Error>) + Send>;

enum Work {
    Alone(Run),
    Grouped(Part),
}

struct Job {
    op: &'static str,
    settings: Settings,
    work: Work,
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

    /// Run `f` on the writer's connection, after the writes queued before it, alone: `f`
    /// opens and ends its own transaction. The connection gets `settings` first (a no-op
    /// when they are the current ones). The job is queued by this call, not by the first
    /// poll of the future: calls queue in the order they are made.
    pub fn run<T, F>(
        &self,
        op: &'static str,
        settings: Settings,
        f: F,
    ) -> impl Future<Output = Result<T>> + Send + 'static
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let (done, out) = oneshot::channel();
        let run: Run = Box::new(move |conn: Result<&mut Connection>| {
            // the caller may have given up waiting; the write stands either way
            let _ = done.send(conn.and_then(f));
        });
        self.send(op, settings, Work::Alone(run), out)
    }

    /// Run `f` inside a transaction of the writer's connection that it may share with the
    /// writes queued next to it (see the module docs): its changes are committed (or, when
    /// it fails or panics, rolled back) with them, and its result comes back after the
    /// commit. Queued by this call, like [`run`](Self::run).
    pub fn write<T, F>(
        &self,
        op: &'static str,
        settings: Settings,
        f: F,
    ) -> impl Future<Output = Result<T>> + Send + 'static
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let (done, out) = oneshot::channel();
        let part: Part = Box::new(move |conn: Result<&Connection>| match conn.and_then(f) {
            Ok(value) => Some(Box::new(move |failed: Option<&Error>| {
                let _ = done.send(match failed {
                    None => Ok(value),
                    Some(e) => Err(group_failed(e, op)),
                });
            })),
            Err(e) => {
                let _ = done.send(Err(e));
                None
            }
        });
        self.send(op, settings, Work::Grouped(part), out)
    }

    fn send<T: Send + 'static>(
        &self,
        op: &'static str,
        settings: Settings,
        work: Work,
        out: oneshot::Receiver<Result<T>>,
    ) -> impl Future<Output = Result<T>> + Send + 'static {
        let queued = self.jobs.send(Job { op, settings, work }).is_ok();
        async move {
            if !queued {
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
}

/// The writer thread's loop: open the connection on first use (again after a failure
/// or a panic), run the jobs in arrival order, the store's writes in groups.
fn serve(path: &Path, jobs: mpsc::Receiver<Job>) {
    let mut conn: Option<(Connection, Settings)> = None;
    let mut next: Option<Job> = None;
    loop {
        let job = match next.take() {
            Some(job) => job,
            None => match jobs.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        let ready = ready(&mut conn, path, job.settings, job.op);
        let healthy = match job.work {
            Work::Alone(run) => catch_unwind(AssertUnwindSafe(move || run(ready))).is_ok(),
            Work::Grouped(first) => match ready {
                Ok(c) => group(c, &jobs, job.op, job.settings, first, &mut next),
                Err(e) => {
                    // cannot panic: the part is only handed the error
                    let _ = first(Err(e));
                    true
                }
            },
        };
        if !healthy {
            // A job panicked (its transaction rolled back as the panic unwound through
            // it; the caller sees the dropped reply), or a group could not be rolled back
            // cleanly: go on with a fresh connection all the same.
            conn = None;
        }
    }
}

/// Run `first` and the grouped writes queued behind it (a job that cannot join is left
/// in `next`) in one transaction, each in its own savepoint; commit; answer them.
/// Returns `false` when the connection is in doubt.
fn group(
    c: &Connection,
    jobs: &mpsc::Receiver<Job>,
    op: &'static str,
    settings: Settings,
    first: Part,
    next: &mut Option<Job>,
) -> bool {
    if let Err(e) = exec(c, "BEGIN IMMEDIATE") {
        let _ = first(Err(crate::conn::db_err(op, e)));
        return true;
    }
    let mut answers: Vec<Answer> = Vec::new();
    let mut part = Some((op, first));
    let mut size = 0;
    let mut broken = None;
    while let Some((op, run)) = part.take() {
        size += 1;
        // the first part is alone in the transaction: a failure of its own rolls the
        // whole transaction back, so it needs no savepoint (whose journal of every page
        // it first changes would cost a tenth of a batch insert)
        let savepoint = size > 1;
        if savepoint {
            if let Err(e) = exec(c, "SAVEPOINT part") {
                let e = crate::conn::db_err(op, e);
                let _ = run(Err(group_failed(&e, op)));
                broken = Some(e);
                break;
            }
        }
        let ran = catch_unwind(AssertUnwindSafe(|| run(Ok(c))));
        let kept = match ran {
            Ok(Some(answer)) => {
                answers.push(answer);
                true
            }
            // failed (already answered) or panicked (its reply dropped): undo its writes
            Ok(None) | Err(_) => false,
        };
        let end = match (kept, savepoint) {
            (true, true) => exec(c, "RELEASE part"),
            (true, false) => Ok(()),
            (false, true) => exec(c, "ROLLBACK TO part").and_then(|()| exec(c, "RELEASE part")),
            (false, false) => {
                // nothing else in the transaction: undo it all, and the group is over
                // (its one answer already given)
                let _ = exec(c, "ROLLBACK");
                return c.is_autocommit();
            }
        };
        if let Err(e) = end {
            broken = Some(crate::conn::db_err(op, e));
            break;
        }
        if size < MAX_GROUP {
            match jobs.try_recv() {
                Ok(Job {
                    op,
                    settings: s,
                    work: Work::Grouped(run),
                }) if s == settings => part = Some((op, run)),
                Ok(other) => *next = Some(other),
                Err(_) => {}
            }
        }
    }
    let failed = match broken {
        Some(e) => Some(e),
        None => exec(c, "COMMIT").err().map(|e| crate::conn::db_err(op, e)),
    };
    if failed.is_some() && !c.is_autocommit() {
        let _ = exec(c, "ROLLBACK");
    }
    let healthy = c.is_autocommit();
    for answer in answers {
        answer(failed.as_ref());
    }
    healthy
}

/// Run one transaction-control statement (prepared once per connection).
fn exec(c: &Connection, sql: &str) -> rusqlite::Result<()> {
    c.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// The group's failure `e`, told to the write `op` of the group: it says that the write
/// itself may have been fine, and that nothing of it was applied.
fn group_failed(e: &Error, op: &'static str) -> Error {
    Error::new(
        e.kind(),
        op,
        format!(
            "not applied: the transaction this write shared with other queued writes failed ({})",
            e.message()
        ),
    )
    .with_temporary(e.is_temporary())
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

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Synchronous;

    const S: Settings = Settings {
        busy_timeout: Duration::from_secs(5),
        synchronous: Synchronous::Normal,
    };

    fn insert(c: &Connection, v: &str) -> Result<()> {
        c.execute("INSERT INTO t (v) VALUES (?1)", [v])
            .map(|_| ())
            .map_err(|e| crate::conn::db_err("test", e))
    }

    /// The values committed, as a fresh connection sees them.
    fn committed(path: &Path) -> Vec<String> {
        let c = Connection::open(path).expect("open");
        let mut st = c.prepare("SELECT v FROM t ORDER BY v").expect("prepare");
        st.query_map([], |r| r.get(0))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows")
    }

    /// A writer on a fresh file with table `t`, and a job that holds the writer thread
    /// until the returned sender is used (the writes queued meanwhile form one group).
    async fn held_writer(
        dir: &tempfile::TempDir,
    ) -> (
        Arc<Writer>,
        std::path::PathBuf,
        std::sync::mpsc::Sender<()>,
        impl Future<Output = Result<()>>,
    ) {
        let path = dir.path().join("w.db");
        let w = Writer::of(&path).expect("writer");
        w.run("setup", S, |c| {
            c.execute_batch("CREATE TABLE t (v TEXT)")
                .map_err(|e| crate::conn::db_err("setup", e))
        })
        .await
        .expect("setup");
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let (started_tx, started) = oneshot::channel::<()>();
        let held = w.run("hold", S, move |_| {
            let _ = started_tx.send(());
            let _ = gate.recv();
            Ok(())
        });
        let held = tokio::spawn(held);
        started.await.expect("the holding job started");
        let held = async move { held.await.expect("join") };
        (w, path, release, held)
    }

    #[tokio::test]
    async fn queued_writes_share_a_transaction_and_each_failure_stays_its_own() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (w, path, release, held) = held_writer(&dir).await;
        let a = w.write("a", S, |c| insert(c, "a"));
        let b = w.write("b", S, |c| -> Result<()> {
            insert(c, "b")?;
            panic!("b panics after its insert");
        });
        let c = w.write("c", S, |c| {
            insert(c, "c")?;
            Err::<(), _>(Error::new(ErrorKind::Conflict, "c", "c refuses"))
        });
        let other = path.clone();
        let d = w.write("d", S, move |c| {
            insert(c, "d")?;
            let here: i64 = c
                .query_row("SELECT count(*) FROM t WHERE v = 'a'", [], |r| r.get(0))
                .expect("count");
            // (in a transaction, a's row visible here, not yet committed for others)
            Ok((c.is_autocommit(), here, committed(&other)))
        });
        release.send(()).expect("release");
        held.await.expect("held job");
        a.await.expect("a commits");
        assert_eq!(
            committed(&path),
            ["a", "d"],
            "a's answer comes after the commit"
        );
        let b = b.await.expect_err("b panicked");
        assert_eq!(b.kind(), ErrorKind::Unexpected);
        let c = c.await.expect_err("c failed");
        assert_eq!((c.kind(), c.message()), (ErrorKind::Conflict, "c refuses"));
        let (autocommit, seen_here, seen_outside) = d.await.expect("d commits");
        assert!(!autocommit, "d ran inside the group's transaction");
        assert_eq!(seen_here, 1, "d sees a's uncommitted row");
        assert!(seen_outside.is_empty(), "nothing was committed while d ran");
        // the writer goes on
        w.write("e", S, |c| insert(c, "e")).await.expect("e");
        assert_eq!(committed(&path), ["a", "d", "e"]);
    }

    /// The first write of a group runs without a savepoint of its own: when it fails,
    /// the whole transaction is rolled back, and the writes behind it form a group of
    /// their own.
    #[tokio::test]
    async fn a_failed_first_write_of_a_group_is_undone_and_the_next_ones_commit() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (w, path, release, held) = held_writer(&dir).await;
        let a = w.write("a", S, |c| {
            insert(c, "a")?;
            Err::<(), _>(Error::new(ErrorKind::Conflict, "a", "a refuses"))
        });
        let b = w.write("b", S, |c| -> Result<()> {
            insert(c, "b")?;
            panic!("b panics after its insert");
        });
        let c = w.write("c", S, |c| insert(c, "c"));
        let d = w.write("d", S, |c| insert(c, "d"));
        release.send(()).expect("release");
        held.await.expect("held job");
        let a = a.await.expect_err("a failed");
        assert_eq!((a.kind(), a.message()), (ErrorKind::Conflict, "a refuses"));
        assert_eq!(
            b.await.expect_err("b panicked").kind(),
            ErrorKind::Unexpected
        );
        c.await.expect("c commits");
        d.await.expect("d commits");
        assert_eq!(committed(&path), ["c", "d"], "nothing of a or b");
    }

    #[tokio::test]
    async fn a_failed_commit_fails_every_write_of_the_group_and_applies_none() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (w, path, release, held) = held_writer(&dir).await;
        let setup = w.run("fk", S, |c| {
            c.execute_batch(
                "PRAGMA foreign_keys = ON;
                 CREATE TABLE parent (id INTEGER PRIMARY KEY);
                 CREATE TABLE child (p INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);",
            )
            .map_err(|e| crate::conn::db_err("fk", e))
        });
        let a = w.write("a", S, |c| insert(c, "a"));
        let orphan = w.write("orphan", S, |c| {
            // a deferred foreign key: refused by the COMMIT, not by the statement
            c.execute("INSERT INTO child (p) VALUES (42)", [])
                .map(|_| ())
                .map_err(|e| crate::conn::db_err("orphan", e))
        });
        release.send(()).expect("release");
        held.await.expect("held job");
        setup.await.expect("foreign keys set up");
        let a = a.await.expect_err("the group's commit failed");
        let orphan = orphan.await.expect_err("the group's commit failed");
        assert_eq!((a.kind(), a.operation()), (ErrorKind::Conflict, "a"));
        assert!(
            a.message()
                .starts_with("not applied: the transaction this write shared"),
            "the error says the group failed, not the write: {}",
            a.message()
        );
        assert_eq!(orphan.operation(), "orphan");
        assert!(
            committed(&path).is_empty(),
            "nothing of the group was applied"
        );
        w.write("b", S, |c| insert(c, "b"))
            .await
            .expect("the writer goes on");
        assert_eq!(committed(&path), ["b"]);
    }
}
