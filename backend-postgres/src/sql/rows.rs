//! The batch enqueue's multi-row inserts: rows from core's `insert_document`, or of
//! plain tasks, their settings as constants, each row's own values from core's
//! `plain_document`.

use backstop_core::driver::{plain_literal, PLAIN_OWN};

use super::MS;

/// The multi-row inserts of `insert_into` (the task table and its columns), each with
/// `on_conflict`, returning the ids; the notifying ones announce each row's event type
/// on the channel $2.
pub(super) struct RowInserts {
    /// $1 core's `insert_document`: a run-at in ms since the epoch.
    pub rows: String,
    pub rows_notify: String,
    /// $1 core's `plain_document`; `None` when a plain setting has no literal (see
    /// [`plain_select`]).
    pub plain: Option<String>,
    pub plain_notify: Option<String>,
}

pub(super) fn row_inserts(insert_into: &str, on_conflict: &str) -> RowInserts {
    let rows = format!(
        "{insert_into}
         SELECT r.e, r.k, r.p, 0, 0, r.m, r.s, r.i, r.x,
            CASE WHEN r.a IS NULL THEN now() + r.d {MS}
                ELSE GREATEST('epoch'::timestamptz + r.a {MS}, now()) END,
            0, now(), now(), r.r, r.j, NULL, r.b, r.t, r.g, r.h, r.c, r.q
         FROM json_to_recordset($1::json) AS r(e text, k text, p text, m bigint, s text,
            i bigint, x bigint, d bigint, a bigint, r smallint, j smallint, b smallint,
            t bigint, g text, h text, c text, q text)
         {on_conflict}"
    );
    let plain = plain_select().map(|select| {
        format!(
            "{insert_into}
             SELECT {select} FROM jsonb_array_elements($1::jsonb) AS r
             {on_conflict}"
        )
    });
    let (rows, rows_notify) = returning(&rows);
    let (plain, plain_notify) = match plain.as_deref().map(returning) {
        Some((rows, notify)) => (Some(rows), Some(notify)),
        None => (None, None),
    };
    RowInserts {
        rows,
        rows_notify,
        plain,
        plain_notify,
    }
}

/// `insert` returning its ids, and as a statement that also announces each row's event
/// type on the channel $2.
fn returning(insert: &str) -> (String, String) {
    (
        format!("{insert} RETURNING id"),
        format!(
            "WITH ins AS ({insert} RETURNING id, event_type)
             SELECT ins.id FROM ins
             CROSS JOIN LATERAL (SELECT pg_notify($2::text, ins.event_type)) AS n"
        ),
    )
}

/// The `SELECT` list of a plain task's row, in the order of the insert's columns (see
/// `Sql::new`'s `insert_into`), from `r`, an element of core's `plain_document` (a
/// `jsonb` array of the row's own values, `PLAIN_OWN`); its settings as constants (core's
/// `plain_params`), due now. `None` when a setting has no literal here.
///
/// A row of the full document names 17 keys the server reads and converts one by one;
/// a plain row's four values are most of a batch's rows: a batch of 1 000 plain tasks
/// inserted in 10.2–11.1 ms against 12.6–16.9 ms from the full document (`psql`,
/// rolled back, 12 runs each).
pub(super) fn plain_select() -> Option<String> {
    // due at once: no delay, no time to run at
    if (plain_literal(7)?, plain_literal(8)?) != ("0".into(), "NULL".into()) {
        return None;
    }
    // the place in `insert_params` of each column after the first three, or the value
    const COLUMNS: [Column; 19] = [
        Column::Place(11),      // status
        Column::Value("0"),     // attempts
        Column::Place(3),       // max_attempts
        Column::Place(4),       // retry_strategy
        Column::Place(5),       // retry_interval_ms
        Column::Place(6),       // retry_max_interval_ms
        Column::Value("now()"), // next_run_at
        Column::Value("0"),     // lease
        Column::Value("now()"), // created_at
        Column::Value("now()"), // updated_at
        Column::Place(9),       // priority
        Column::Place(10),      // retry_jitter_pct
        Column::Place(12),      // order_key
        Column::Place(13),      // order_block
        Column::Place(14),      // timeout_ms
        Column::Place(15),      // tags
        Column::Place(16),      // metadata
        Column::Place(17),      // traceparent
        Column::Place(18),      // partition_key
    ];
    let mut values = vec!["r->>0".to_owned(), "r->>1".to_owned(), "r->>2".to_owned()];
    for column in COLUMNS {
        values.push(match column {
            Column::Value(v) => v.to_owned(),
            Column::Place(i) => match PLAIN_OWN.iter().position(|&own| own == i) {
                Some(at) => format!("r->>{at}"),
                None => plain_literal(i)?,
            },
        });
    }
    Some(values.join(", "))
}

/// A column of the plain row: a place in `insert_params`, or a value of its own.
#[derive(Clone, Copy)]
enum Column {
    Place(usize),
    Value(&'static str),
}

#[cfg(test)]
mod tests {
    /// Every plain setting has a literal; the row's own values are the document's four.
    #[test]
    fn a_plain_row_reads_four_values_from_its_document() {
        let select = super::plain_select().unwrap_or_default();
        assert!(
            select.starts_with("r->>0, r->>1, r->>2, 0, 0, "),
            "{select}"
        );
        assert_eq!(select.matches("r->>").count(), 4, "{select}");
        assert!(
            select.contains(", r->>3, ''"),
            "trace context, then no partition: {select}"
        );
    }
}
