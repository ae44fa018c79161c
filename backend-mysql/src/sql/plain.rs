//! The text of a plain task's row in the batch enqueue's multi-row inserts: its settings
//! as constants, the columns whose table default is its value left out.

use backstop_core::driver::{plain_row_written, PlainValue};

/// The columns of a plain task's row (core's `plain_row_written`) and its one-row
/// `VALUES` tuple: its settings as constants, due now, bound only its event type, key,
/// payload and trace context (core's `PLAIN_OWN`); `None` when a setting has no literal.
///
/// A column whose table default (core's `TABLE_DEFAULTS`) is the plain value is left
/// out, for the table to fill: MariaDB spends per column of every row (its
/// `fill_record` and `Item::save_in_field`), and a plain row names 12 columns instead
/// of 22.
pub(super) fn plain_tuple() -> Option<(String, String)> {
    let (columns, values): (Vec<&str>, Vec<String>) = plain_row_written()?
        .into_iter()
        .map(|(column, value)| {
            let value = match value {
                PlainValue::Own(_) => "?".to_owned(),
                PlainValue::Literal(literal) => literal,
                PlainValue::Now => "NOW(3)".to_owned(),
            };
            (column, value)
        })
        .unzip();
    Some((columns.join(", "), format!("({})", values.join(", "))))
}

#[cfg(test)]
mod tests {
    /// A plain task's settings all have literals: its rows bind four values each, and
    /// name only the columns whose default is not the plain value.
    #[test]
    fn a_plain_row_binds_its_own_four_values() {
        let (columns, tuple) = super::plain_tuple().expect("every plain setting has a literal");
        assert_eq!(tuple.matches('?').count(), 4, "{tuple}");
        assert_eq!(
            columns.split(", ").collect::<Vec<_>>(),
            [
                "next_run_at",
                "created_at",
                "updated_at",
                "event_type",
                "biz_key",
                "payload",
                "max_attempts",
                "retry_strategy",
                "retry_interval_ms",
                "retry_max_interval_ms",
                "retry_jitter_pct",
                "traceparent"
            ]
        );
        assert_eq!(
            tuple.matches(", ").count() + 1,
            12,
            "a value per column: {tuple}"
        );
    }
}
