//! The ledger: what each worker process did, one line per event, appended to its own
//! file with one `write` each (what a `kill -9` interrupts is at most the line being
//! written, never one already written: the page cache outlives the process).
//!
//! A worker records its claims (`C`), the start and end of every handler run (`S`, `E`),
//! every mark it sent with whether the database applied it (`M`), and its own business
//! transactions (`p` before the commit, `P` with its answer), all with the
//! host's clock in milliseconds (the databases run on the same host). The driver reads
//! every worker's file at the end and checks the invariants against the rows.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use backstop_core::{
    Lease, Mark, MarkAction, Owner, Recycled, Result, StoreLayer, Task, TaskId, TaskStore,
};

/// Milliseconds since the epoch on the host's clock.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A worker's ledger file.
pub struct Ledger {
    file: Mutex<File>,
}

impl Ledger {
    /// Open (create) the ledger at `path` for appending.
    pub fn open(path: &Path) -> std::io::Result<Ledger> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Ledger {
            file: Mutex::new(file),
        })
    }

    /// Append one line (one `write`).
    pub fn line(&self, line: String) {
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        // a ledger that cannot be written makes the run's checks fail (missing lines),
        // which is what should happen
        let _ = f.write_all(&bytes);
    }
}

/// What the driver reads back from one ledger line.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// The worker's engine owner name and process id, first line of its file.
    Owner { owner: String, pid: u32 },
    /// A claim sent at `sent` returned this lease at `at`.
    Claim {
        task: TaskId,
        lease: i64,
        sent: i64,
        at: i64,
    },
    /// A handler run started.
    Start {
        task: TaskId,
        lease: i64,
        pid: u32,
        at: i64,
    },
    /// A handler run ended (`ok` or `retry`).
    End {
        task: TaskId,
        lease: i64,
        outcome: String,
        at: i64,
    },
    /// A mark was sent at `sent` and answered at `at`; `applied` is the database's flag,
    /// `None` when the call failed (it may have applied).
    Mark {
        task: TaskId,
        lease: i64,
        action: String,
        applied: Option<bool>,
        sent: i64,
        at: i64,
    },
    /// Graceful shutdown finished.
    Stopped { at: i64 },
    /// The worker's own business transaction for `key` (its task claimed in the
    /// transaction, `Engine::claim_in`): `outcome` `None` before the commit was sent,
    /// then `C` committed, `R` rolled back, `U` the commit's answer lost.
    Produced {
        key: String,
        event_type: String,
        outcome: Option<char>,
    },
}

impl Entry {
    /// Parse one line; `None` for a torn last line (a kill in the middle of a write).
    pub fn parse(line: &str) -> Option<Entry> {
        let f: Vec<&str> = line.split(' ').collect();
        let n = |i: usize| f.get(i).and_then(|v| v.parse::<i64>().ok());
        Some(match *f.first()? {
            "O" if f.len() == 3 => Entry::Owner {
                owner: f[1].to_string(),
                pid: f[2].parse().ok()?,
            },
            "C" if f.len() == 5 => Entry::Claim {
                task: n(1)?,
                lease: n(2)?,
                sent: n(3)?,
                at: n(4)?,
            },
            "S" if f.len() == 5 => Entry::Start {
                task: n(1)?,
                lease: n(2)?,
                pid: f[3].parse().ok()?,
                at: n(4)?,
            },
            "E" if f.len() == 5 => Entry::End {
                task: n(1)?,
                lease: n(2)?,
                outcome: f[3].to_string(),
                at: n(4)?,
            },
            "M" if f.len() == 7 => Entry::Mark {
                task: n(1)?,
                lease: n(2)?,
                action: f[3].to_string(),
                applied: match f[4] {
                    "1" => Some(true),
                    "0" => Some(false),
                    _ => None,
                },
                sent: n(5)?,
                at: n(6)?,
            },
            "G" if f.len() == 2 => Entry::Stopped { at: n(1)? },
            "p" if f.len() == 3 => Entry::Produced {
                key: f[1].to_string(),
                event_type: f[2].to_string(),
                outcome: None,
            },
            "P" if f.len() == 4 => Entry::Produced {
                key: f[1].to_string(),
                event_type: f[2].to_string(),
                outcome: f[3].chars().next(),
            },
            _ => return None,
        })
    }
}

/// Read every ledger file in `dir`: the entries of each, by file name.
pub fn read_dir(dir: &Path) -> std::io::Result<HashMap<String, Vec<Entry>>> {
    let mut out = HashMap::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("ledger-") {
            continue;
        }
        let text = std::fs::read_to_string(e.path())?;
        out.insert(name, text.lines().filter_map(Entry::parse).collect());
    }
    Ok(out)
}

/// The worker's store: the real one, recording claims and marks in the ledger. Every
/// other call is passed through untouched.
#[derive(Clone)]
pub struct LedgerStore<S> {
    pub inner: S,
    pub ledger: std::sync::Arc<Ledger>,
}

impl<S> LedgerStore<S> {
    /// `C` lines: the tasks a claim sent at `sent` took, with their leases.
    fn claims(&self, tasks: &[Task], sent: i64) {
        let at = now_ms();
        for t in tasks {
            self.ledger
                .line(format!("C {} {} {sent} {at}", t.id, t.lease));
        }
    }

    /// `M` lines: each mark sent at `sent`, and whether it applied (`e`: the call failed,
    /// so whether it applied is unknown; a commit whose answer was lost applied, and the
    /// engine's next try of the same mark then finds it done).
    fn marks(&self, marks: &[Mark], answer: Option<&[bool]>, sent: i64) {
        let at = now_ms();
        let flags: Vec<&str> = match answer {
            Some(flags) => flags.iter().map(|f| if *f { "1" } else { "0" }).collect(),
            None => vec!["e"; marks.len()],
        };
        for (m, applied) in marks.iter().zip(flags) {
            let (task, lease, action) = (m.lease.task_id, m.lease.token, action_name(&m.action));
            self.ledger
                .line(format!("M {task} {lease} {action} {applied} {sent} {at}"));
        }
    }
}

fn action_name(a: &MarkAction) -> &'static str {
    match a {
        MarkAction::Success => "success",
        MarkAction::Retry { .. } => "retry",
        MarkAction::Fail { .. } => "fail",
        MarkAction::Cancel { .. } => "cancel",
        MarkAction::Snooze { .. } => "snooze",
        MarkAction::Release => "release",
    }
}

/// Claims and marks are recorded; every other call is forwarded untouched.
#[async_trait]
impl<S: TaskStore> StoreLayer for LedgerStore<S> {
    type Inner = S;
    fn inner(&self) -> &S {
        &self.inner
    }
    async fn on_claim_by_id(&self, id: TaskId, owner: &Owner) -> Result<Option<Task>> {
        let sent = now_ms();
        let got = self.inner.claim_by_id(id, owner).await?;
        self.claims(got.as_slice(), sent);
        Ok(got)
    }
    async fn on_claim_batch(&self, owner: &Owner, types: &[String], n: usize) -> Result<Vec<Task>> {
        let sent = now_ms();
        let got = self.inner.claim_batch(owner, types, n).await?;
        self.claims(&got, sent);
        Ok(got)
    }
    async fn on_heartbeat(&self, leases: &[Lease]) -> Result<Vec<bool>> {
        let sent = now_ms();
        let answer = self.inner.heartbeat(leases).await;
        // `H <sent> <answered> <task:lease:flag> …` (flag `e`: the call failed), for
        // studying a re-run by hand: when its owner last refreshed its lease
        let flags: Vec<String> = match &answer {
            Ok(flags) => leases
                .iter()
                .zip(flags)
                .map(|(l, f)| format!("{}:{}:{}", l.task_id, l.token, u8::from(*f)))
                .collect(),
            Err(_) => leases
                .iter()
                .map(|l| format!("{}:{}:e", l.task_id, l.token))
                .collect(),
        };
        self.ledger
            .line(format!("H {sent} {} {}", now_ms(), flags.join(" ")));
        answer
    }
    async fn on_recycle_dead(&self, older_than: Duration, limit: usize) -> Result<Recycled> {
        let sent = now_ms();
        let answer = self.inner.recycle_dead(older_than, limit).await;
        // `W <sent> <answered> <to pending> <to failed>` (`e`: the call failed), when
        // the sweep recycled something or failed
        match &answer {
            Ok(r) if r.to_pending + r.to_failed > 0 => self.ledger.line(format!(
                "W {sent} {} {} {}",
                now_ms(),
                r.to_pending,
                r.to_failed
            )),
            Ok(_) => {}
            Err(_) => self.ledger.line(format!("W {sent} {} e", now_ms())),
        }
        answer
    }
    async fn on_mark(&self, marks: &[Mark]) -> Result<Vec<bool>> {
        let sent = now_ms();
        let answer = self.inner.mark(marks).await;
        self.marks(marks, answer.as_deref().ok(), sent);
        answer
    }
    async fn on_mark_and_claim(
        &self,
        marks: &[Mark],
        owner: &Owner,
        event_type: &str,
        n: usize,
    ) -> Result<(Vec<bool>, Vec<Task>)> {
        let sent = now_ms();
        let answer = self.inner.mark_and_claim(marks, owner, event_type, n).await;
        self.marks(marks, answer.as_ref().ok().map(|(f, _)| f.as_slice()), sent);
        if let Ok((_, claimed)) = &answer {
            self.claims(claimed, sent);
        }
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_torn_lines_are_dropped() {
        assert_eq!(
            Entry::parse("M 7 3 success 1 100 105"),
            Some(Entry::Mark {
                task: 7,
                lease: 3,
                action: "success".into(),
                applied: Some(true),
                sent: 100,
                at: 105
            })
        );
        assert_eq!(
            Entry::parse("S 7 3 42 100"),
            Some(Entry::Start {
                task: 7,
                lease: 3,
                pid: 42,
                at: 100
            })
        );
        assert_eq!(
            Entry::parse("C 7 3 90 100"),
            Some(Entry::Claim {
                task: 7,
                lease: 3,
                sent: 90,
                at: 100
            })
        );
        assert_eq!(
            Entry::parse("C 7 3 100"),
            None,
            "a claim without its sending"
        );
        assert_eq!(Entry::parse("M 7 3 succ"), None);
        assert_eq!(Entry::parse(""), None);
    }
}
