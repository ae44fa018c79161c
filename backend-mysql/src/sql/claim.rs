//! The claim's texts, built per call: the probe that opens a claim, the walks of the due
//! rows per priority level, the dead-worker sweep's locking read, and what a locking read
//! does with rows another transaction holds.

use super::*;

impl Sql {
    /// The claim's locking read of the due rows of the `i`th event type of the claim:
    /// [`COLUMNS`] and the statement's `NOW(3)` (which the claim's update stamps as
    /// `updated_at`, so the rows need no read back); binds (event type, limit) once per
    /// priority level. One ordered walk of the `(status, event_type, priority,
    /// next_run_at, id)` index per level, each stopping at the limit (no filesort, so no
    /// row is locked and then skipped); the caller merges them in claim order. What it
    /// does with rows another claim holds: see [`LockWait`].
    ///
    /// Only the levels [`claim_begin`](Self::claim_begin) found due are walked: each walk
    /// is guarded by its level's session variable, a constant to the optimizer, so the
    /// walk of an empty level is an "Impossible WHERE" that reads and locks nothing (not
    /// even the record past its range: another level's head, a running row a mark is
    /// changing). MySQL 8 may evaluate the guard row by row instead; the claim is the
    /// same, an empty level's walk then locks the record past its range.
    ///
    /// Not a single `UPDATE … ORDER BY next_run_at, id LIMIT n`: the update changes
    /// `status`, a column of the index it would scan, so MariaDB and MySQL collect every
    /// due row before applying the LIMIT ("Using buffer"), and each claim would read (and
    /// lock) the whole backlog.
    pub fn pick(&self, wait: LockWait, i: usize) -> String {
        let walks = self.walks(wait, Some(i), ALL_LEVELS);
        let nulls = vec!["NULL"; COLUMN_COUNT].join(", ");
        let limited = Self::limited(i);
        format!(
            "{walks} UNION ALL
             (SELECT {nulls}, NOW(3), 1 FROM DUAL WHERE {limited})"
        )
    }

    /// The ordered walks of one event type's due rows, one per priority level in
    /// `levels` (a mask, bit `l` for level `l`), with `COLUMNS`, `NOW(3)` and 0; each
    /// guarded by the `i`th type's level variable ([`pick`](Self::pick)), or unguarded
    /// (`None`: the claim of a limited type, in its own transaction). Binds (event type,
    /// limit) once per walked level. A walk costs the server its planning even when its
    /// level is empty (five walks of one due level: 0.85 ms, one walk 0.47 ms on an idle
    /// MariaDB), so a caller that knows the due levels walks only those.
    pub fn walks(&self, wait: LockWait, i: Option<usize>, levels: u32) -> String {
        let t = &self.table;
        let clause = wait.clause();
        (0..PRIORITY_LEVELS)
            .filter(|level| levels & (1 << level) != 0)
            .map(|level| {
                let due = match i {
                    Some(i) => format!("{} AND", Self::due(i, level)),
                    None => String::new(),
                };
                format!(
                    "(SELECT {COLUMNS}, NOW(3), 0 FROM {t} FORCE INDEX (ix_claim_type)
                     WHERE {due} status = 0 AND event_type = ?
                       AND priority = {level} AND next_run_at <= NOW(3)
                     ORDER BY next_run_at, id
                     LIMIT ? FOR UPDATE{clause})"
                )
            })
            .collect::<Vec<_>>()
            .join(" UNION ALL ")
    }

    /// Whether the opening probe found a due task of each of the claim's first `types`
    /// event types, in any level: one column per type, 1 or 0.
    pub fn due_types(&self, types: usize) -> String {
        let columns: Vec<String> = (0..types)
            .map(|i| {
                let levels: Vec<String> = (0..PRIORITY_LEVELS).map(|l| Self::due(i, l)).collect();
                format!(
                    "CAST(({}) OR {} AS SIGNED)",
                    levels.join(" OR "),
                    Self::limited(i)
                )
            })
            .collect();
        format!("SELECT {}", columns.join(", "))
    }

    /// Whether level `level` of the claim's `i`th event type had a due task and the type
    /// is neither paused nor limited, as the opening probe found (its session
    /// variables): a condition on constants, which the optimizer evaluates before it
    /// reads anything.
    fn due(i: usize, level: usize) -> String {
        format!(
            "{} AND FIND_IN_SET('{i}', @backstop_gated) = 0",
            Self::level_due(i, level)
        )
    }

    /// Whether level `level` of the claim's `i`th event type had a due task, paused,
    /// limited or not.
    fn level_due(i: usize, level: usize) -> String {
        format!("FIND_IN_SET('{i}:{level}', @backstop_due) > 0")
    }

    /// Whether the claim's `i`th event type has a concurrency or rate limit, a due task
    /// and, as the probe sees it, room under the limit (a partitioned type's room is its
    /// partitions', left to its claim); a type seen full is left to the re-poll its
    /// ending tasks make. The claim's walks pass such a type by, and its
    /// [`pick`](Self::pick) answers a marker row so the driver claims it apart.
    fn limited(i: usize) -> String {
        let due: Vec<String> = (0..PRIORITY_LEVELS)
            .map(|l| Self::level_due(i, l))
            .collect();
        format!(
            "(FIND_IN_SET('{i}', @backstop_room) > 0 AND ({}))",
            due.join(" OR ")
        )
    }

    /// The statement that opens a claim's transaction: which event types and priority
    /// levels have a due task, which types are paused or limited, and which limited types
    /// have room, into the session variables [`pick`](Self::pick) reads, then `START
    /// TRANSACTION`. One round trip for both, in the text protocol, so the event types
    /// are literals here: `None` if one has a character outside the event type alphabet
    /// (letters, digits, `_ . : -`; the store refuses others before they get here). The
    /// probe runs before the transaction: if it fails, no transaction was opened.
    ///
    /// Each variable is a list (`FIND_IN_SET`'s, comma-separated; empty, never NULL) of
    /// the claim's type positions: `@backstop_due` holds `i:level` for every level of type `i` with a due
    /// task, read in one loose index scan of the claim index (`Using index for
    /// group-by`: a dive or two per event type and level that has pending tasks, no
    /// locks); `@backstop_gated` the types with a queue row that pauses or limits them;
    /// `@backstop_room` the limited types with room. Three subqueries whatever the
    /// number of types: a probe with a subquery per type and level took the server 65 to
    /// 200 ms to parse and plan at 50 types (see `bench/NOTES.md`).
    pub fn claim_begin(&self, event_types: &[String]) -> Option<String> {
        let (t, q, r) = (&self.table, &self.queues_table, &self.rate_table);
        if event_types.is_empty() {
            return Some("START TRANSACTION".to_owned());
        }
        if !event_types
            .iter()
            .all(|e| e.chars().all(is_event_type_char))
        {
            return None;
        }
        let list = event_types
            .iter()
            .map(|e| format!("'{e}'"))
            .collect::<Vec<_>>()
            .join(", ");
        // the type's position in the claim (FIELD counts from 1)
        let at = |column: &str| format!("FIELD({column}, {list}) - 1");
        let (due_at, q_at) = (at("event_type"), at("q.event_type"));
        Some(format!(
            "SELECT
               (SELECT COALESCE(GROUP_CONCAT(CONCAT(i, ':', priority)), '') FROM (
                  SELECT {due_at} AS i, priority, MIN(next_run_at)
                  FROM {t} FORCE INDEX (ix_claim_type)
                  WHERE status = 0 AND event_type IN ({list}) AND next_run_at <= NOW(3)
                  GROUP BY status, event_type, priority) AS due),
               (SELECT COALESCE(GROUP_CONCAT({q_at}), '') FROM {q} q
                WHERE q.event_type IN ({list})
                  AND (q.paused = 1 OR q.concurrency > 0 OR q.rate_limit > 0)),
               (SELECT COALESCE(GROUP_CONCAT({q_at}), '') FROM {q} q
                WHERE q.event_type IN ({list}) AND q.paused = 0
                  AND (q.concurrency > 0 OR q.rate_limit > 0)
                  AND (q.partitioned = 1 OR q.concurrency = 0 OR q.concurrency > (
                      SELECT COUNT(*) FROM {t} FORCE INDEX (ix_claim_type)
                      WHERE status = 3 AND event_type = q.event_type))
                  AND (q.partitioned = 1 OR q.rate_limit = 0 OR q.rate_limit > (
                      SELECT COALESCE(SUM(starts), 0) FROM {r}
                      WHERE event_type = q.event_type
                        AND at > NOW(3) - INTERVAL q.rate_window_ms * 1000 MICROSECOND)))
             INTO @backstop_due, @backstop_gated, @backstop_room; START TRANSACTION"
        ))
    }

    /// The dead-worker sweep's locking read: the oldest running rows not heartbeated for
    /// `older_than`, with whether each has attempts left: older_than µs, limit.
    pub fn pick_dead(&self, wait: LockWait) -> String {
        let t = &self.table;
        format!(
            "SELECT id, attempts < max_attempts FROM {t} FORCE INDEX (ix_updated)
             WHERE status = 3 AND updated_at < NOW(3) - INTERVAL ? MICROSECOND
             ORDER BY updated_at, id
             LIMIT ? FOR UPDATE{}",
            wait.clause()
        )
    }
}

/// What a claim's locking read does with rows another transaction holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockWait {
    /// Wait for them (up to `innodb_lock_wait_timeout`).
    Queue,
    /// Wait up to this many seconds, then fail with 1205 (MariaDB's `WAIT n`).
    UpTo(u32),
    /// Pass them over.
    Skip,
}

impl LockWait {
    /// The clause after `FOR UPDATE`.
    pub(crate) fn clause(self) -> String {
        match self {
            LockWait::Queue => String::new(),
            LockWait::UpTo(s) => format!(" WAIT {s}"),
            LockWait::Skip => " SKIP LOCKED".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_types_answers_one_column_per_type_over_its_levels() {
        let sql = Sql::new("t").due_types(2);
        assert_eq!(sql.matches(" AS SIGNED)").count(), 2, "{sql}");
        for i in 0..2 {
            for level in 0..PRIORITY_LEVELS {
                assert!(sql.contains(&format!("'{i}:{level}'")), "{sql}");
            }
        }
        assert!(!sql.contains("'2:0'"), "{sql}");
    }

    #[test]
    fn claim_begin_probes_every_type_in_three_subqueries_then_opens_the_transaction() {
        let sql = Sql::new("t");
        let begin = sql
            .claim_begin(&["a.b".to_owned(), "c:d-e_f".to_owned()])
            .expect("valid event types");
        assert!(begin.ends_with("; START TRANSACTION"), "{begin}");
        assert!(begin.contains("IN ('a.b', 'c:d-e_f')"), "{begin}");
        assert!(
            begin.contains("INTO @backstop_due, @backstop_gated, @backstop_room;"),
            "{begin}"
        );
        for i in 0..2 {
            for level in 0..PRIORITY_LEVELS {
                let due = format!("FIND_IN_SET('{i}:{level}', @backstop_due)");
                assert!(sql.pick(LockWait::Skip, i).contains(&due), "{due} read");
            }
        }
        // the text does not grow a subquery per type
        let many: Vec<String> = (0..50).map(|i| format!("T{i}")).collect();
        let long = sql.claim_begin(&many).expect("valid event types");
        assert_eq!(
            long.matches("SELECT").count(),
            begin.matches("SELECT").count()
        );
        assert_eq!(sql.claim_begin(&[]).as_deref(), Some("START TRANSACTION"));
    }

    #[test]
    fn claim_begin_refuses_what_could_break_out_of_a_literal() {
        let sql = Sql::new("t");
        for bad in ["a'b", "a\\b", "a b", "é"] {
            assert_eq!(sql.claim_begin(&[bad.to_owned()]), None, "{bad}");
        }
    }
}
