//! The claim and the marks as functions of a write transaction, so that
//! `mark_and_claim` runs both in one.

use backstop_core::driver::prelude::*;
use rusqlite::{params, Connection, OptionalExtension};

use crate::rows::tasks;
use crate::sql::{Sql, PRIORITY_LEVELS};

/// `claim_batch` on the write transaction `tx` at `now`: up to `limit` due tasks of
/// `types` for `owner`.
pub(crate) fn claim_in(
    sql: &Sql,
    tx: &Connection,
    now: i64,
    owner: &str,
    types: &[String],
    limit: i64,
) -> rusqlite::Result<Vec<RawTask>> {
    // which (event type, level) pairs have due tasks, and each type's room under
    // its concurrency limit; then walk only those: the unlimited types' walks in
    // one statement, each limited type's in its own, up to its room
    let mut probe = tx.prepare_cached(&sql.due_levels)?;
    let mut open: (Vec<&String>, Vec<(usize, usize)>) = (Vec::new(), Vec::new());
    let mut limited: Vec<(&String, Vec<usize>, i64, Gate)> = Vec::new();
    for t in types {
        let (levels, gate) = probe.query_row(params![t, now], |r| {
            let levels = (0..PRIORITY_LEVELS)
                .map(|i| r.get::<_, Option<i64>>(i))
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let int = |i: usize| r.get::<_, Option<i64>>(PRIORITY_LEVELS + i);
            let gate = match (int(0)?, int(1)?, int(2)?) {
                (Some(concurrency), Some(rate_limit), Some(rate_window_ms)) => {
                    let gate = Gate {
                        concurrency,
                        rate_limit,
                        rate_window_ms,
                        partitioned: int(5)?.unwrap_or(0) != 0,
                    };
                    // a partitioned type's room is its partitions' (its claim's)
                    let room = match gate.partitioned {
                        true => usize::MAX,
                        false => gate.room(usize::MAX, int(3)?.unwrap_or(0), int(4)?.unwrap_or(0)),
                    };
                    Some((gate, i64::try_from(room).unwrap_or(i64::MAX)))
                }
                _ => None,
            };
            Ok((levels, gate))
        })?;
        let present: Vec<usize> = levels
            .into_iter()
            .flatten()
            .filter_map(|l| usize::try_from(l).ok())
            .collect();
        match gate {
            _ if present.is_empty() => {}
            None => {
                open.1
                    .extend(present.into_iter().map(|l| (open.0.len(), l)));
                open.0.push(t);
            }
            Some((gate, room)) if room > 0 => limited.push((t, present, room, gate)),
            Some(_) => {}
        }
    }
    let mut claimed = Vec::new();
    if !open.1.is_empty() {
        let mut stmt = tx.prepare_cached(&sql.claim_batch(&open.1))?;
        let mut values: Vec<&dyn rusqlite::ToSql> = vec![&owner, &now, &limit];
        values.extend(open.0.iter().map(|t| *t as &dyn rusqlite::ToSql));
        claimed = tasks(&mut stmt, values.as_slice())?;
    }
    for (t, levels, room, gate) in limited {
        let left = (limit - claimed.len() as i64).min(room);
        if left <= 0 {
            break;
        }
        let these = if gate.partitioned {
            let left = usize::try_from(left).unwrap_or(0);
            sql.partitions.claim(tx, owner, now, t, gate, left)?
        } else {
            let walks: Vec<(usize, usize)> = levels.into_iter().map(|l| (0, l)).collect();
            let mut stmt = tx.prepare_cached(&sql.claim_batch(&walks))?;
            tasks(&mut stmt, params![owner, now, left, t])?
        };
        if gate.counts_starts() && !these.is_empty() {
            let mut record = tx.prepare_cached(&sql.rate_record)?;
            for (key, n) in starts_per_key(&these) {
                record.execute(params![t, now, n, key])?;
            }
            tx.prepare_cached(&sql.rate_trim)?
                .execute(params![t, now - gate.rate_window_ms])?;
        }
        claimed.extend(these);
    }
    Ok(claimed)
}

/// `mark` on the write transaction `tx` at `now`: one flag per mark, in order.
pub(crate) fn mark_in(
    sql: &Sql,
    tx: &Connection,
    now: i64,
    marks: &[Mark],
) -> rusqlite::Result<Vec<bool>> {
    marks
        .iter()
        .map(|m| {
            let Lease { task_id, token } = m.lease;
            let n = match &m.action {
                MarkAction::Success => tx
                    .prepare_cached(&sql.mark_success)?
                    .execute(params![now, task_id, token])?,
                MarkAction::Retry { delay, error } => {
                    tx.prepare_cached(&sql.mark_retry)?.execute(params![
                        now,
                        task_id,
                        token,
                        now.saturating_add(millis(*delay)),
                        error
                    ])?
                }
                MarkAction::Fail { error } => tx
                    .prepare_cached(&sql.mark_fail)?
                    .execute(params![now, task_id, token, error])?,
                MarkAction::Release => tx
                    .prepare_cached(&sql.release)?
                    .execute(params![now, task_id, token])?,
                MarkAction::Cancel { reason } => tx
                    .prepare_cached(&sql.mark_cancel)?
                    .execute(params![now, task_id, token, reason])?,
                MarkAction::Snooze { delay, max, error } => {
                    tx.prepare_cached(&sql.mark_snooze)?.execute(params![
                        now,
                        task_id,
                        token,
                        now.saturating_add(millis(*delay)),
                        error,
                        i64::from(*max)
                    ])?
                }
            };
            Ok(n == 1)
        })
        .collect()
}

/// `event_type`'s limits (`gate_read`): `None` when it has none or is paused.
pub(crate) fn gate(sql: &Sql, tx: &Connection, event_type: &str) -> rusqlite::Result<Option<Gate>> {
    tx.prepare_cached(&sql.gate_read)?
        .query_row(params![event_type], |r| {
            Ok(Gate {
                concurrency: r.get(0)?,
                rate_limit: r.get(1)?,
                rate_window_ms: r.get(2)?,
                partitioned: r.get::<_, i64>(3)? != 0,
            })
        })
        .optional()
}
