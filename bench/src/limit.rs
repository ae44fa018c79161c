//! The global concurrency limit's cost: a drain of one type limited to 50 across four
//! engines, against the same drain with the concurrency split per process (13, 13, 12 and
//! 12: 50 in all, each with as many queued) and no limit. Each task's handler works a
//! while (2 ms, and 20 ms as a call to a partner API might), so the drains are bound by
//! their 50 slots and the ratio is the limit's own cost. A limited slot is held from the
//! claim's commit to the outcome's (a task counts as running until its mark), where a
//! process's own slot is free as its handler returns and its queue hides the claims.
//!
//! Each work time runs twice: the same for every task, and spread over half to one and
//! a half times it (the same mean; fixed per task id, so both drains get the same
//! times). Handlers of one length that start together end together, on the same tick of
//! tokio's millisecond timer: their outcomes ride one hand-over, and its tasks start
//! together again, so the slots end in one cohort whose hand-over nothing overlaps. A
//! call to a partner API never takes the same time twice; the spread rows are the
//! realistic case, the fixed ones the worst.
//!
//! The engines poll at the default interval (10 s), as users run them: neither drain
//! waits on a tick (the per-process engines poll as their executors free up; a limited
//! slot is handed on in its outcome's write). The other drains' 5 ms ticks would add,
//! over four engines, 800 claims a second of a type that is full, each finding no room:
//! on MariaDB, 2 ms of the server's time apiece (figures in NOTES.md).

use std::time::Duration;

use backstop::{Audit, QueueChange, TaskStore};

use crate::raw::EVENT;
use crate::sys::Row;
use crate::Target;

/// The limit, and the per-process split of it.
const LIMIT: usize = 50;
const SPLIT: [usize; 4] = [13, 13, 12, 12];
/// What each handler of a drain does: sleep `mean`, or with `spread` a time from half
/// to one and a half times `mean`, uniform over the task ids.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Work {
    pub mean: Duration,
    pub spread: bool,
}

impl Work {
    /// No work: the handler returns at once.
    pub(crate) const NONE: Work = Work {
        mean: Duration::ZERO,
        spread: false,
    };

    /// How long task `id`'s handler works.
    pub(crate) fn of(self, id: i64) -> Duration {
        if !self.spread {
            return self.mean;
        }
        // a multiplicative hash of the id: consecutive ids land far apart in 0..1000
        let u = (id as u64).wrapping_mul(2_654_435_761) % 1000;
        self.mean.mul_f64(0.5 + u as f64 / 1000.0)
    }
}

/// One round: the limited drain, then the per-process one, of `n` tasks whose handlers
/// work as `work` says.
pub(crate) async fn limited_drain(t: &Target, n: usize, work: Work) -> Row {
    let admin = t.store(2).await;
    let limit = QueueChange::Concurrency(Some(LIMIT as u32));
    admin
        .set_queue(EVENT, limit, &Audit::new("bench", "limited drain"))
        .await
        .expect("limit");
    let d = drain(t, &[LIMIT; 4], n, work).await;
    let (limited, rss, cpu) = (d.elapsed, d.rss_mb, d.cpu_s);
    admin
        .set_queue(
            EVENT,
            QueueChange::Concurrency(None),
            &Audit::new("bench", "done"),
        )
        .await
        .expect("unlimit");
    let split = drain(t, &SPLIT, n, work).await.elapsed;
    let tps = |d: Duration| n as f64 / d.as_secs_f64();
    Row {
        backend: t.backend.into(),
        scenario: format!(
            "drain {n} limited to {LIMIT} over 4 engines, handlers of {}{} ms",
            if work.spread { "0.5–1.5 × " } else { "" },
            work.mean.as_millis()
        ),
        tps: Some(tps(limited)),
        base_tps: Some(tps(split)),
        rss_mb: rss,
        cpu_s: cpu,
        note: format!("base: no limit, per-process concurrency {SPLIT:?}"),
        ..Row::default()
    }
}

/// `n` due tasks drained by one engine per entry of `concurrency`, each with that
/// concurrency (and as many queued), handlers working as `work` says.
async fn drain(t: &Target, concurrency: &[usize], n: usize, work: Work) -> crate::Drained {
    t.raw.reset().await;
    t.raw.bulk_insert(n, 0).await;
    let engines: Vec<(usize, usize)> = concurrency.iter().map(|&c| (c, c)).collect();
    let poll = backstop::EngineConfig::default().poll_interval;
    crate::drain_due(t, &engines, n, LIMIT, work, poll, false).await
}
