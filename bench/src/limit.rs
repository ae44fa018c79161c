//! The global concurrency limit's cost: a drain of one type limited to 50 across four
//! engines, against the same drain with the concurrency split per process (13, 13, 12 and
//! 12: 50 in all, each with as many queued) and no limit. Each task's handler works a
//! while (2 ms, and 20 ms as a call to a partner API might), so the drains are bound by
//! their 50 slots and the ratio is the limit's own cost. A limited slot is held from the
//! claim's commit to the outcome's (a task counts as running until its mark), where a
//! process's own slot is free as its handler returns and its queue hides the claims.
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
/// One round: the limited drain, then the per-process one, of `n` tasks whose handlers
/// work `work`.
pub(crate) async fn limited_drain(t: &Target, n: usize, work: Duration) -> Row {
    let admin = t.store(2).await;
    let limit = QueueChange::Concurrency(Some(LIMIT as u32));
    admin
        .set_queue(EVENT, limit, &Audit::new("bench", "limited drain"))
        .await
        .expect("limit");
    let (limited, rss, cpu) = drain(t, &[LIMIT; 4], n, work).await;
    admin
        .set_queue(
            EVENT,
            QueueChange::Concurrency(None),
            &Audit::new("bench", "done"),
        )
        .await
        .expect("unlimit");
    let (split, _, _) = drain(t, &SPLIT, n, work).await;
    let tps = |d: Duration| n as f64 / d.as_secs_f64();
    Row {
        backend: t.backend.into(),
        scenario: format!(
            "drain {n} limited to {LIMIT} over 4 engines, handlers of {} ms",
            work.as_millis()
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
/// concurrency (and as many queued), handlers working `work`.
async fn drain(
    t: &Target,
    concurrency: &[usize],
    n: usize,
    work: Duration,
) -> (Duration, f64, f64) {
    t.raw.reset().await;
    t.raw.bulk_insert(n, 0).await;
    let engines: Vec<(usize, usize)> = concurrency.iter().map(|&c| (c, c)).collect();
    let poll = backstop::EngineConfig::default().poll_interval;
    crate::drain_due(t, &engines, n, LIMIT, work, poll).await
}
