//! The batch enqueue's multi-row inserts: which of a row's values each binds, and their
//! texts.
//!
//! SQLite spends per bound value and per expression of every row (its VM copies each
//! value and evaluates each expression into the record), where the raw insert a user
//! would write binds a row's key and payload and writes the rest as constants. So a
//! chunk binds as little as its tasks allow, taking the first [`LAYOUTS`] entry that
//! fits it:
//! - **plain** tasks (core's `is_plain_params`: the settings of `NewTask::new`, due at
//!   once) have their settings written as constants and the columns whose table default
//!   is their value left out (core's `plain_row_written`, 12 columns instead of 22); each
//!   row binds its key and payload, the event type and trace context bound once when the
//!   chunk shares them, else each row binds those too;
//! - tasks that agree on every other value bind their key and payload, or with them
//!   their due time, the rest bound once;
//! - any other chunk binds every value of every row ([`INSERT_TUPLE`]).
//!
//! Each text exists for 1, 2, 4 … 32 rows and each multiple of 64 up to 1 024 (core's
//! `InsertTexts::stepped`): a batch of 1 000 is three statements. SQLite journals, for
//! each statement of a transaction, the pages it changes (a statement journal, so that a
//! failed statement undoes only itself): fewer statements, fewer pages journaled.

use backstop_core::driver::prelude::*;
use backstop_core::driver::{is_plain_params, plain_row_written};
use backstop_core::Status;

use crate::sql::{now_ms, INSERT_COLUMNS, INSERT_TAIL, INSERT_TUPLE};

/// Most rows of one multi-row insert.
const ROWS_MAX: usize = 1024;

/// Above the powers of two below it, the multi-row inserts take multiples of this.
const ROWS_STEP: usize = 64;

/// A way to bind a chunk's rows: the places (in core's `insert_params`) each row binds,
/// in order, and whether its tasks must be plain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Each row's own values.
    pub own: &'static [usize],
    /// Whether the chunk's tasks must be plain (their settings constants of the text).
    pub plain: bool,
}

impl Layout {
    /// The places bound once, after the rows (the chunk's rows agree on them): of a
    /// plain chunk, its own values (core's `PLAIN_OWN`) not bound per row, its settings
    /// being constants of the text; of another, every value not bound per row.
    fn shared(&self) -> Vec<usize> {
        let places: Vec<usize> = match self.plain {
            true => PLAIN_OWN.to_vec(),
            false => (0..INSERT_PARAMS).collect(),
        };
        places
            .into_iter()
            .filter(|p| !self.own.contains(p))
            .collect()
    }

    /// Whether a chunk fits this layout: its rows agree on every place but the layout's
    /// own (`differs`: the places where some row differs from the first), and the first
    /// row (so every row) is plain if the layout needs it.
    fn fits(&self, first: &[Value<'_>], differs: &[bool; INSERT_PARAMS]) -> bool {
        differs
            .iter()
            .enumerate()
            .all(|(i, d)| !d || self.own.contains(&i))
            && (!self.plain || is_plain_params(first))
    }
}

/// The layouts a chunk may take, fewest values bound per row first.
pub(crate) const LAYOUTS: [Layout; 4] = [
    Layout {
        own: &[1, 2],
        plain: true,
    },
    Layout {
        own: &[0, 1, 2, 17],
        plain: true,
    },
    Layout {
        own: &[1, 2],
        plain: false,
    },
    Layout {
        own: &[1, 2, 7, 8],
        plain: false,
    },
];

/// The one-row `VALUES` tuple of `layout`, and the columns it names: each row's own
/// values ?1… in `own`'s order, then the shared ones ([`Layout::shared`]) in their
/// order, then the clock. (core's `values_rows` keeps the placeholders above the row's
/// count shared by every row.) `None` for a plain layout when a plain setting has no
/// literal.
pub(crate) fn layout_tuple(layout: Layout) -> Option<(String, String)> {
    let (own, shared) = (layout.own, layout.shared());
    let place = |p: usize| match own.iter().position(|&o| o == p) {
        Some(i) => i + 1,
        None => own.len() + shared.iter().position(|&s| s == p).unwrap_or(shared.len()) + 1,
    };
    let clock = own.len() + shared.len() + 1;
    if layout.plain {
        let (columns, values): (Vec<&str>, Vec<String>) = plain_row_written()?
            .into_iter()
            .map(|(column, value)| {
                let value = match value {
                    PlainValue::Own(i) => format!("?{}", place(PLAIN_OWN[i])),
                    PlainValue::Literal(literal) => literal,
                    PlainValue::Now => format!("?{clock}"),
                };
                (column, value)
            })
            .unzip();
        return Some((columns.join(", "), format!("({})", values.join(", "))));
    }
    // INSERT_TUPLE renumbered: ?k is place k − 1, ?20 the clock
    let mut pieces = INSERT_TUPLE.split('?');
    let mut out = pieces.next().unwrap_or_default().to_owned();
    for piece in pieces {
        let digits = piece.bytes().take_while(u8::is_ascii_digit).count();
        let n: usize = piece[..digits].parse().unwrap_or(0);
        let k = match n {
            1..=INSERT_PARAMS => place(n - 1),
            _ => clock,
        };
        out.push_str(&format!("?{k}{}", &piece[digits..]));
    }
    Some((INSERT_COLUMNS.to_owned(), out))
}

/// The batch enqueue's multi-row inserts of one table: a text per layout and row count.
pub(crate) struct RowInserts {
    /// Each layout that has a text, with the places its rows share.
    layouts: Vec<(Layout, Vec<usize>, InsertTexts)>,
    /// Every value of every row bound.
    every: InsertTexts,
}

impl RowInserts {
    /// The inserts into `table` (quoted).
    pub fn new(table: &str) -> RowInserts {
        let texts = |columns: String, tuple: String, per_row: usize| {
            let into = format!("INSERT INTO {table} ({columns})");
            InsertTexts::stepped(ROWS_MAX, ROWS_STEP, move |n| {
                let rows = values_rows(Dialect::Sqlite, &tuple, per_row, n);
                format!("{into} VALUES {rows} {INSERT_TAIL}")
            })
        };
        let layouts = LAYOUTS
            .iter()
            .filter_map(|&layout| {
                let (columns, tuple) = layout_tuple(layout)?;
                let texts = texts(columns, tuple, layout.own.len());
                Some((layout, layout.shared(), texts))
            })
            .collect();
        let every = texts(
            INSERT_COLUMNS.to_owned(),
            INSERT_TUPLE.to_owned(),
            INSERT_PARAMS,
        );
        RowInserts { layouts, every }
    }

    /// How many of `n` ready tasks the next insert takes.
    pub fn take(&self, n: usize) -> usize {
        self.every.take(n)
    }

    /// The insert of `tasks` (a count [`take`](Self::take) gave), in the first layout
    /// that fits them: each row's own values, then the shared ones once, then the clock.
    pub fn statement<'a>(&'a self, tasks: &[Checked<&'a NewTask>]) -> Option<Statement<'a>> {
        let rows: Vec<Vec<Value<'a>>> = tasks
            .iter()
            .map(|&t| insert_params(t, Status::Pending.code(), RunAt::Millis))
            .collect();
        let first = rows.first()?;
        // each place compared once a row, until a row differs there
        let mut differs = [false; INSERT_PARAMS];
        for r in rows.iter().skip(1) {
            for (i, d) in differs.iter_mut().enumerate() {
                *d = *d || r.get(i) != first.get(i);
            }
        }
        let fitting = self
            .layouts
            .iter()
            .find(|(layout, _, _)| layout.fits(first, &differs));
        let (text, mut params) = match fitting {
            Some((layout, shared, texts)) => {
                let mut params: Vec<Value<'a>> =
                    Vec::with_capacity(rows.len() * layout.own.len() + shared.len() + 1);
                for r in &rows {
                    params.extend(layout.own.iter().filter_map(|&i| r.get(i).copied()));
                }
                params.extend(shared.iter().filter_map(|&i| first.get(i).copied()));
                (texts.get(tasks.len())?, params)
            }
            None => (
                self.every.get(tasks.len())?,
                rows.into_iter().flatten().collect(),
            ),
        };
        params.push(Value::BigInt(Some(now_ms())));
        Some(Statement::new(text, params, Returns::Rows))
    }
}

#[cfg(test)]
mod tests {
    use super::{layout_tuple, Layout, LAYOUTS};
    use crate::sql::{INSERT_COLUMNS, INSERT_TUPLE};

    #[test]
    fn a_shared_layout_numbers_the_rows_values_first_then_the_shared_then_the_clock() {
        let every: Vec<usize> = (0..19).collect();
        let every: &'static [usize] = every.leak();
        let tuple = |own, plain| layout_tuple(Layout { own, plain }).expect("a tuple");
        assert_eq!(
            tuple(every, false),
            (INSERT_COLUMNS.to_owned(), INSERT_TUPLE.to_owned()),
            "every value its row's own"
        );
        assert_eq!(
            tuple(&[1, 2, 7, 8], false).1,
            "(?5, ?1, ?2, ?12, 0, ?6, ?7, ?8, ?9, COALESCE(max(?4, ?20), ?20 + ?3), 0,
    ?20, ?20, ?10, ?11, ?13, ?14, ?15, ?16, ?17, ?18, ?19)"
        );
        assert_eq!(
            tuple(&[1, 2], false).1,
            "(?3, ?1, ?2, ?12, 0, ?4, ?5, ?6, ?7, COALESCE(max(?9, ?20), ?20 + ?8), 0,
    ?20, ?20, ?10, ?11, ?13, ?14, ?15, ?16, ?17, ?18, ?19)"
        );
    }

    /// A plain row names 12 columns, its settings constants; it binds its key and
    /// payload, then the chunk's event type and trace context once, then the clock.
    #[test]
    fn a_plain_layout_binds_only_what_differs_and_leaves_defaults_to_the_table() {
        let (columns, tuple) = layout_tuple(LAYOUTS[0]).expect("every plain setting has a literal");
        assert_eq!(
            columns,
            "next_run_at, created_at, updated_at, event_type, biz_key, payload, max_attempts, \
             retry_strategy, retry_interval_ms, retry_max_interval_ms, retry_jitter_pct, \
             traceparent"
        );
        assert_eq!(
            tuple,
            "(?5, ?5, ?5, ?3, ?1, ?2, 5, 'EXPONENTIAL', 10000, 86400000, 25, ?4)"
        );
        let (_, tuple) = layout_tuple(LAYOUTS[1]).expect("a tuple");
        assert_eq!(
            tuple,
            "(?5, ?5, ?5, ?1, ?2, ?3, 5, 'EXPONENTIAL', 10000, 86400000, 25, ?4)"
        );
    }
}
