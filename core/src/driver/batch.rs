//! The batch enqueue: many tasks on one transaction, most of them in multi-row inserts.

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

use super::plain::{is_plain, PLAIN_OWN};
#[cfg(doc)]
use super::plain::{plain_params, plain_row, PlainValue};
use super::statement::{column, row, wrong_answer};
use super::{
    insert_params, Answer, Checked, Dialect, EnqueuePlan, EnqueueSql, EnqueueStep, Inserted, RunAt,
    Statement, TxPlan, Value,
};
use crate::error::{Error, ErrorKind, Result};
use crate::model::{NewTask, Status, TaskId};

/// Most tasks one multi-row insert of a batch enqueue carries.
pub const MAX_INSERT_ROWS: usize = 1000;

/// Most bytes of one multi-row insert's document ([`insert_document`]); a task larger
/// than this goes alone.
pub const MAX_INSERT_BYTES: usize = 4 << 20;

/// The keys of a row of [`insert_document`], each with the index of the
/// [`insert_params`] value it holds: event type, business key, payload, most attempts,
/// backoff strategy, interval (ms), cap (ms), delay (ms), run at (ms since the epoch;
/// `null`: the delay applies), priority, jitter (%), whether a parked task blocks its
/// key, attempt timeout (ms or `null`), tags (`,a,b,` or `null`), metadata (JSON text
/// or `null`), trace context (or `null`), partition key (`""` for none). The rows are pending and have no order key.
pub const INSERT_ROW_KEYS: [(&str, usize); 17] = [
    ("e", 0),
    ("k", 1),
    ("p", 2),
    ("m", 3),
    ("s", 4),
    ("i", 5),
    ("x", 6),
    ("d", 7),
    ("a", 8),
    ("r", 9),
    ("j", 10),
    ("b", 13),
    ("t", 14),
    ("g", 15),
    ("h", 16),
    ("c", 17),
    ("q", 18),
];

/// **For backend authors**: the JSON document a multi-row insert
/// ([`EnqueueSql::insert_rows`]) reads its rows from: an array of one object per task,
/// in order, with the keys of [`INSERT_ROW_KEYS`]. One text parameter whatever the
/// number of rows, so a backend has one statement (PostgreSQL's `json_to_recordset`,
/// MariaDB's `JSON_TABLE`, SQLite's `json_each`), and the server parses one value
/// instead of planning thousands of placeholders.
///
/// ```
/// # use backstop_core::driver::Checked;
/// # fn demo(task: Checked<&backstop_core::NewTask>) {
/// use backstop_core::driver::insert_document;
/// let doc = insert_document(&[task]);
/// let rows: serde_json::Value = serde_json::from_str(&doc).unwrap();
/// assert_eq!(rows[0]["k"], task.biz_key());
/// # }
/// ```
pub fn insert_document(tasks: &[Checked<&NewTask>]) -> String {
    // about 200 bytes of keys and numbers a row
    json_array(tasks, 200, |doc, task| {
        let params = insert_params(task, Status::Pending.code(), RunAt::Millis);
        doc.push('{');
        for (n, (key, at)) in INSERT_ROW_KEYS.iter().enumerate() {
            if n > 0 {
                doc.push(',');
            }
            doc.push('"');
            doc.push_str(key);
            doc.push_str("\":");
            push_json_value(doc, params.get(*at));
        }
        doc.push('}');
    })
}

/// **For backend authors**: the JSON document of a multi-row insert of plain tasks
/// ([`EnqueueSql::insert_plain_rows`]): an array of one array per task, in order, of its
/// own values, [`PLAIN_OWN`] of [`insert_params`] (event type, business key, payload
/// and trace context or `null`): element `i` is [`PlainValue::Own`]`(i)` of
/// [`plain_row`]. The rest of a plain task's row is [`plain_params`].
///
/// ```
/// # use backstop_core::driver::Checked;
/// # fn demo(task: Checked<&backstop_core::NewTask>) {
/// use backstop_core::driver::plain_document;
/// let rows: serde_json::Value = serde_json::from_str(&plain_document(&[task])).unwrap();
/// assert_eq!(rows[0][1], task.biz_key());
/// # }
/// ```
pub fn plain_document(tasks: &[Checked<&NewTask>]) -> String {
    json_array(tasks, 16, |doc, task| {
        let params = insert_params(task, Status::Pending.code(), RunAt::Millis);
        doc.push('[');
        for (n, at) in PLAIN_OWN.iter().enumerate() {
            if n > 0 {
                doc.push(',');
            }
            push_json_value(doc, params.get(*at));
        }
        doc.push(']');
    })
}

/// A JSON array of one element per task, each written by `element`; sized once for the
/// tasks' texts and `row_bytes` more a task. Written in place, no text of its own per
/// value: the document of a batch of 1 000 is most of a batch enqueue's own time.
fn json_array(
    tasks: &[Checked<&NewTask>],
    row_bytes: usize,
    element: impl Fn(&mut String, Checked<&NewTask>),
) -> String {
    let size: usize = tasks
        .iter()
        .map(|t| t.payload().len() + t.biz_key().len() + t.event_type().len() + row_bytes)
        .sum();
    let mut doc = String::with_capacity(size + 2);
    doc.push('[');
    for (n, &task) in tasks.iter().enumerate() {
        if n > 0 {
            doc.push(',');
        }
        element(&mut doc, task);
    }
    doc.push(']');
    doc
}

/// One value of [`insert_params`] as JSON: a number, a string, or `null` (none, or a
/// place past the end).
fn push_json_value(doc: &mut String, value: Option<&Value>) {
    use std::fmt::Write;
    // (writing to a String cannot fail)
    let _ = match value {
        Some(Value::Text(Some(t))) => {
            push_json_string(doc, t);
            Ok(())
        }
        Some(Value::BigInt(Some(v))) => write!(doc, "{v}"),
        Some(Value::Int(Some(v))) => write!(doc, "{v}"),
        Some(Value::SmallInt(Some(v))) => write!(doc, "{v}"),
        Some(Value::Timestamp(Some(t))) => write!(doc, "{}", t.timestamp_millis()),
        _ => {
            doc.push_str("null");
            Ok(())
        }
    };
}

/// `s` as a JSON string: as it is between quotes when nothing in it needs an escape (a
/// quote, a backslash or a control character), else as `serde_json` escapes it.
fn push_json_string(doc: &mut String, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        doc.push('"');
        doc.push_str(s);
        doc.push('"');
    } else {
        // a str always serializes
        doc.push_str(&serde_json::to_string(s).unwrap_or_default());
    }
}

/// **For backend authors** whose multi-row insert binds every value (not
/// [`insert_document`]): its SQL text for each of a few row counts — 1, 2, 4 … `max`
/// ([`new`](Self::new)), or after the powers of two below a step, its multiples
/// ([`stepped`](Self::stepped)). A backend answers [`EnqueueSql::insert_rows_take`] with
/// [`take`](Self::take) and picks the text with [`get`](Self::get); a connection then
/// caches no more than these few statements, whatever the batches' sizes.
///
/// ```
/// use backstop_core::driver::InsertTexts;
/// let texts = InsertTexts::new(256, |rows| format!("INSERT … {rows} rows"));
/// assert_eq!((texts.take(1000), texts.take(200), texts.take(1)), (256, 128, 1));
/// assert_eq!(texts.get(128), Some("INSERT … 128 rows"));
/// assert_eq!(texts.get(100), None, "only the counts take gives");
/// // 1 000 rows in three inserts: 960, 32 and 8
/// let stepped = InsertTexts::stepped(1024, 64, |rows| format!("INSERT … {rows} rows"));
/// assert_eq!((stepped.take(1000), stepped.take(40), stepped.take(8)), (960, 32, 8));
/// ```
#[derive(Clone)]
pub struct InsertTexts {
    /// The row counts there is a text for, ascending; each text written at its first use
    /// (a text of 1 024 rows binding 19 values each is ~200 kB).
    sizes: Vec<(usize, std::sync::OnceLock<String>)>,
    text: std::sync::Arc<dyn Fn(usize) -> String + Send + Sync>,
}

impl std::fmt::Debug for InsertTexts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sizes: Vec<usize> = self.sizes.iter().map(|(n, _)| *n).collect();
        f.debug_struct("InsertTexts")
            .field("sizes", &sizes)
            .finish()
    }
}

impl InsertTexts {
    /// The texts of 1, 2, 4 … rows, up to the largest power of two at most `max`:
    /// `text(rows)` each.
    pub fn new(max: usize, text: impl Fn(usize) -> String + Send + Sync + 'static) -> Self {
        let top = usize::BITS - 1 - max.max(1).leading_zeros();
        Self::of((0..=top).map(|p| 1 << p), text)
    }

    /// The texts of 1, 2, 4 … rows below `step` (a power of two), then of each multiple
    /// of `step` up to `max`: a batch takes at most one text of each size below the step
    /// after its multiples (1 000 rows: 960, 32, 8), where powers of two alone take one
    /// of each (512, 256, 128, 64, 32, 8).
    pub fn stepped(
        max: usize,
        step: usize,
        text: impl Fn(usize) -> String + Send + Sync + 'static,
    ) -> Self {
        let step = step.max(1).next_power_of_two();
        let below = (0..).map(|p| 1 << p).take_while(|&n| n < step && n <= max);
        let multiples = (1..).map(|m| m * step).take_while(|&n| n <= max);
        Self::of(below.chain(multiples), text)
    }

    fn of(
        sizes: impl Iterator<Item = usize>,
        text: impl Fn(usize) -> String + Send + Sync + 'static,
    ) -> Self {
        let mut sizes: Vec<_> = sizes.map(|n| (n, std::sync::OnceLock::new())).collect();
        if sizes.is_empty() {
            sizes.push((1, std::sync::OnceLock::new()));
        }
        InsertTexts {
            sizes,
            text: std::sync::Arc::new(text),
        }
    }

    /// How many of `n` ready tasks the next insert takes: the largest count with a text
    /// that is at most `n` (at least the smallest, 1).
    pub fn take(&self, n: usize) -> usize {
        let at = self.sizes.partition_point(|(size, _)| *size <= n);
        self.sizes
            .get(at.saturating_sub(1))
            .map_or(1, |(size, _)| *size)
    }

    /// The text for `rows` rows, if there is one (a count [`take`](Self::take) gave).
    pub fn get(&self, rows: usize) -> Option<&str> {
        let at = self
            .sizes
            .binary_search_by_key(&rows, |(size, _)| *size)
            .ok()?;
        let (_, text) = self.sizes.get(at)?;
        Some(text.get_or_init(|| (self.text)(rows)).as_str())
    }
}

/// **For backend authors**: `rows` copies of the one-row `VALUES` tuple `tuple`, joined
/// by commas, for a multi-row insert binding [`insert_params`] of each row in turn.
/// Numbered placeholders (`$k` on PostgreSQL, `?k` on SQLite) up to `per_row` are
/// renumbered to row `r`'s own (`k + r × per_row`); those above `per_row` are shared by
/// every row and follow all of them (`k - per_row + rows × per_row`). MySQL's `?` are
/// positional: each row binds its own in turn.
///
/// ```
/// use backstop_core::driver::{values_rows, Dialect};
/// assert_eq!(values_rows(Dialect::Sqlite, "(?1, ?2, ?3)", 2, 2), "(?1, ?2, ?5), (?3, ?4, ?5)");
/// assert_eq!(values_rows(Dialect::Postgres, "($1, now())", 1, 3), "($1, now()), ($2, now()), ($3, now())");
/// assert_eq!(values_rows(Dialect::MySql, "(?, ?)", 2, 2), "(?, ?), (?, ?)");
/// ```
pub fn values_rows(dialect: Dialect, tuple: &str, per_row: usize, rows: usize) -> String {
    let sigil = match dialect {
        Dialect::Postgres => Some('$'),
        Dialect::Sqlite => Some('?'),
        Dialect::MySql | Dialect::Other => None,
    };
    let mut out = String::with_capacity((tuple.len() + 8) * rows);
    for r in 0..rows {
        if r > 0 {
            out.push_str(", ");
        }
        let Some(sigil) = sigil else {
            out.push_str(tuple);
            continue;
        };
        let mut chars = tuple.chars().peekable();
        while let Some(c) = chars.next() {
            out.push(c);
            if c != sigil {
                continue;
            }
            let mut digits = String::new();
            while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                digits.push(*d);
                chars.next();
            }
            match digits.parse::<usize>() {
                Ok(k) if k <= per_row => out.push_str(&(k + r * per_row).to_string()),
                Ok(k) => out.push_str(&(k - per_row + rows * per_row).to_string()),
                Err(_) => out.push_str(&digits),
            }
        }
    }
    out
}

/// **For backend authors**: [`insert_params`] of each of `tasks` in turn (pending), the
/// parameters of a multi-row insert made with [`values_rows`].
pub fn rows_params<'a>(tasks: &[Checked<&'a NewTask>], run_at: RunAt) -> Vec<Value<'a>> {
    tasks
        .iter()
        .flat_map(|&t| insert_params(t, Status::Pending.code(), run_at))
        .collect()
}

/// What an [`EnqueueBatch`] waits for the answer of.
enum Step<'a> {
    /// Nothing: take the next piece of work.
    Idle,
    /// A multi-row insert of these tasks (indexes into the batch).
    Rows(Vec<usize>),
    /// The read of who holds task `i`'s key, after a multi-row insert skipped some.
    Holder(usize),
    /// Task `i` enqueued on its own.
    Single(usize, Box<EnqueuePlan<'a>>),
}

/// **For backend authors**: a batch enqueue as a sequence of [`Statement`]s, without
/// I/O, as [`EnqueuePlan`] is for one task: a [`TxPlan`] whose output is each task's
/// [`Inserted`]. All on one transaction, the caller's or the store's.
///
/// The answers are those of the tasks enqueued one by one in the batch's order:
///
/// - Tasks without an order key whose `(event_type, biz_key)` no other task of the
///   batch names go in multi-row inserts ([`EnqueueSql::insert_rows`]) of up to
///   [`MAX_INSERT_ROWS`] tasks and [`MAX_INSERT_BYTES`]. Their keys appear once, so
///   enqueueing them first changes no answer.
/// - When an insert skips rows (a key already held), each task of the chunk has its
///   key's holder read: a row the insert made is the task's; the others are enqueued on
///   their own. An insert that fails whole on a held key ([`Answer::DuplicateKey`]) is
///   tried again in halves, down to single tasks.
/// - The rest (an order key, a key named twice in the batch, a backend without
///   multi-row inserts) are enqueued on their own ([`EnqueuePlan`]), in the batch's
///   order: the second task of a key meets the first as its duplicate.
pub struct EnqueueBatch<'a> {
    sql: &'a dyn EnqueueSql,
    tasks: Vec<Checked<&'a NewTask>>,
    out: Vec<Option<Inserted>>,
    chunks: VecDeque<Vec<usize>>,
    /// The document of the multi-row insert in flight.
    doc: String,
    /// Whether the backend has a multi-row insert of plain tasks, asked once.
    plain_rows: bool,
    /// Whether the multi-row insert in flight is of plain tasks ([`plain_document`]).
    plain_doc: bool,
    holders: VecDeque<usize>,
    /// Ids a multi-row insert made whose task is not known yet.
    made: HashSet<TaskId>,
    singles: BTreeSet<usize>,
    step: Step<'a>,
}

impl<'a> EnqueueBatch<'a> {
    /// The batch of `tasks` (checked) in `sql`'s statements.
    pub fn new(sql: &'a dyn EnqueueSql, tasks: Checked<&'a [NewTask]>) -> Self {
        let tasks: Vec<Checked<&'a NewTask>> = tasks.each().collect();
        // the tasks whose key another task of the batch names too: one look-up a task
        let mut first_of: HashMap<(&str, &str), usize> = HashMap::with_capacity(tasks.len());
        let mut named_twice = vec![false; tasks.len()];
        for (i, t) in tasks.iter().enumerate() {
            match first_of.entry((t.event_type(), t.biz_key())) {
                Entry::Occupied(first) => {
                    named_twice[*first.get()] = true;
                    named_twice[i] = true;
                }
                Entry::Vacant(slot) => {
                    slot.insert(i);
                }
            }
        }
        // asked once with no rows: whether the backend has a multi-row insert at all
        let multi_row = sql.inserts_rows();
        let (mut chunks, mut singles) = (VecDeque::new(), BTreeSet::new());
        let (mut chunk, mut bytes) = (Vec::new(), 0);
        for (i, t) in tasks.iter().enumerate() {
            if !multi_row || t.order().is_some() || named_twice[i] {
                singles.insert(i);
                continue;
            }
            // the row's size in the document, near enough: its texts and the numbers
            let size = t.payload().len()
                + t.biz_key().len()
                + t.event_type().len()
                + t.tags_column().map_or(0, str::len)
                + t.metadata_json().map_or(0, str::len)
                + t.trace_context().map_or(0, str::len)
                + t.partition_key().map_or(0, str::len)
                + 160;
            if !chunk.is_empty()
                && (chunk.len() == MAX_INSERT_ROWS || bytes + size > MAX_INSERT_BYTES)
            {
                chunks.push_back(std::mem::take(&mut chunk));
                bytes = 0;
            }
            chunk.push(i);
            bytes += size;
        }
        if !chunk.is_empty() {
            chunks.push_back(chunk);
        }
        EnqueueBatch {
            sql,
            out: vec![None; tasks.len()],
            tasks,
            chunks,
            doc: String::new(),
            plain_rows: multi_row && sql.inserts_plain_rows(),
            plain_doc: false,
            holders: VecDeque::new(),
            made: HashSet::new(),
            singles,
            step: Step::Idle,
        }
    }
}

impl<'a> TxPlan for EnqueueBatch<'a> {
    type Output = Vec<Inserted>;

    /// The next statement to run, or `None` when the batch is done.
    fn next_statement(&mut self) -> Result<Option<Statement<'_>>> {
        loop {
            match &mut self.step {
                Step::Idle => {}
                Step::Single(i, plan) => match plan.next()? {
                    Some(statement) => return Ok(Some(statement)),
                    None => {
                        let i = *i;
                        let Step::Single(_, plan) = std::mem::replace(&mut self.step, Step::Idle)
                        else {
                            continue;
                        };
                        self.out[i] = Some(plan.finish()?);
                        continue;
                    }
                },
                Step::Rows(_) | Step::Holder(_) => return Err(unanswered()),
            }
            if let Some(mut chunk) = self.chunks.pop_front() {
                let take = self.sql.insert_rows_take(chunk.len()).clamp(1, chunk.len());
                if take < chunk.len() {
                    self.chunks.push_front(chunk.split_off(take));
                }
                self.doc.clear();
                self.plain_doc = false;
                if self.sql.insert_rows_document() {
                    let tasks: Vec<_> = chunk.iter().map(|&i| self.tasks[i]).collect();
                    self.plain_doc = self.plain_rows && tasks.iter().all(|&t| is_plain(t));
                    self.doc = match self.plain_doc {
                        true => plain_document(&tasks),
                        false => insert_document(&tasks),
                    };
                }
                self.step = Step::Rows(chunk);
                break;
            }
            if let Some(i) = self.holders.pop_front() {
                let task = self.tasks[i];
                let step = EnqueueStep::ReadExisting(task);
                let params = step.params(self.sql.run_at());
                self.step = Step::Holder(i);
                return Ok(Some(self.sql.statement(step, params)));
            }
            let Some(i) = self.singles.pop_first() else {
                return Ok(None);
            };
            self.step = Step::Single(i, Box::new(EnqueuePlan::new(self.sql, self.tasks[i])));
        }
        // the multi-row insert of the chunk just taken
        let chunk = match &self.step {
            Step::Rows(chunk) => chunk,
            _ => return Err(unanswered()),
        };
        let tasks: Vec<_> = chunk.iter().map(|&i| self.tasks[i]).collect();
        match self.plain_doc {
            true => self.sql.insert_plain_rows(&self.doc, &tasks),
            false => self.sql.insert_rows(&self.doc, &tasks),
        }
        .map(Some)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Unexpected,
                "enqueue_many",
                "the backend's multi-row insert went away",
            )
        })
    }

    /// The answer of the statement [`next_statement`](Self::next_statement) gave last.
    fn answer(&mut self, answer: Answer) -> Result<()> {
        match std::mem::replace(&mut self.step, Step::Idle) {
            Step::Idle => Err(unanswered()),
            Step::Single(i, mut plan) => {
                let answered = plan.answer(answer);
                self.step = Step::Single(i, plan);
                answered
            }
            Step::Rows(chunk) => {
                let rows = match answer {
                    Answer::Rows(rows) => rows,
                    Answer::DuplicateKey if chunk.len() > 1 => {
                        let (a, b) = chunk.split_at(chunk.len() / 2);
                        self.chunks.push_front(b.to_vec());
                        self.chunks.push_front(a.to_vec());
                        return Ok(());
                    }
                    Answer::DuplicateKey => {
                        self.singles.extend(chunk);
                        return Ok(());
                    }
                    other => return Err(wrong_answer(&other, "rows")),
                };
                let mut ids = rows
                    .iter()
                    .map(|r| column(r, 0))
                    .collect::<Result<Vec<_>>>()?;
                if ids.len() == chunk.len() {
                    // every row made, its ids increasing down the list
                    ids.sort_unstable();
                    for (i, id) in chunk.into_iter().zip(ids) {
                        self.out[i] = Some(Inserted::created(id));
                    }
                } else {
                    self.made.extend(ids);
                    self.holders.extend(chunk);
                }
                Ok(())
            }
            Step::Holder(i) => {
                let holder = row(&answer)?.map(|r| column(r, 0)).transpose()?;
                match holder {
                    Some(id) if self.made.remove(&id) => self.out[i] = Some(Inserted::created(id)),
                    _ => {
                        self.singles.insert(i);
                    }
                }
                Ok(())
            }
        }
    }

    /// What each task's enqueue did, in the batch's order, once
    /// [`next_statement`](Self::next_statement) said it is done.
    fn finish(self) -> Result<Vec<Inserted>> {
        if !matches!(self.step, Step::Idle) {
            return Err(unfinished());
        }
        self.out
            .into_iter()
            .map(|o| o.ok_or_else(unfinished))
            .collect()
    }
}

fn unanswered() -> Error {
    Error::new(
        ErrorKind::Unexpected,
        "enqueue_many",
        "a statement of the batch was not answered, or answered twice",
    )
}

fn unfinished() -> Error {
    Error::new(
        ErrorKind::Unexpected,
        "enqueue_many",
        "the batch's statements were not all run",
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::driver::enqueue::tests::Names;

    /// A table of keys, answering the statements of [`Names`] as a database would: new
    /// ids increasing, a multi-row insert's rows sent back in reverse; `all_or_nothing`
    /// makes a multi-row insert fail whole on a held key, as one without `IGNORE` would.
    #[derive(Default)]
    struct Table {
        keys: HashMap<String, TaskId>,
        next: TaskId,
        all_or_nothing: bool,
        log: Vec<String>,
    }

    fn text(v: &Value<'_>) -> String {
        match v {
            Value::Text(Some(t)) => (*t).to_owned(),
            other => panic!("not text: {other:?}"),
        }
    }

    impl Table {
        fn answer(&mut self, s: &Statement<'_>) -> Answer {
            let p = s.params();
            let key = |at: usize| format!("{}/{}", text(&p[at]), text(&p[at + 1]));
            if s.sql() != "rows" {
                self.log.push(s.sql().to_owned());
            }
            match s.sql() {
                "insert" | "insert waiting" => match self.keys.get(&key(0)) {
                    Some(_) => Answer::Row(None),
                    None => Answer::Row(Some(vec![self.make(key(0))])),
                },
                "existing" => Answer::Row(self.keys.get(&key(0)).map(|&id| vec![id, 0, 0])),
                "lock" => Answer::Row(Some(vec![1])),
                "blocker" | "next" | "promote" | "release" | "replace" | "drop" => {
                    Answer::Row(None)
                }
                rows => {
                    assert_eq!(rows, "rows");
                    let doc: Vec<serde_json::Value> = serde_json::from_str(&text(&p[0])).unwrap();
                    self.log.push(format!("rows {}", doc.len()));
                    let keys: Vec<String> = doc
                        .iter()
                        .map(|r| {
                            format!("{}/{}", r["e"].as_str().unwrap(), r["k"].as_str().unwrap())
                        })
                        .collect();
                    let held = keys.iter().any(|k| self.keys.contains_key(k));
                    if held && self.all_or_nothing {
                        return Answer::DuplicateKey;
                    }
                    let mut made: Vec<Vec<i64>> = Vec::new();
                    for k in keys {
                        if !self.keys.contains_key(&k) {
                            made.push(vec![self.make(k)]);
                        }
                    }
                    made.reverse();
                    Answer::Rows(made)
                }
            }
        }

        fn make(&mut self, key: String) -> TaskId {
            self.next += 1;
            self.keys.insert(key, self.next);
            self.next
        }

        fn run(&mut self, tasks: &[NewTask]) -> Vec<Inserted> {
            let mut batch = EnqueueBatch::new(&Names, Checked::new(tasks));
            while let Some(s) = batch.next_statement().unwrap() {
                let answer = self.answer(&s);
                batch.answer(answer).unwrap();
            }
            batch.finish().unwrap()
        }

        /// The log, runs of one statement counted: `existing ×3`.
        fn steps(&self) -> Vec<String> {
            let mut out: Vec<(String, usize)> = Vec::new();
            for s in &self.log {
                match out.last_mut() {
                    Some((last, n)) if last == s => *n += 1,
                    _ => out.push((s.clone(), 1)),
                }
            }
            out.into_iter()
                .map(|(s, n)| if n == 1 { s } else { format!("{s} ×{n}") })
                .collect()
        }
    }

    fn tasks(prefix: &str, n: usize) -> Vec<NewTask> {
        (0..n)
            .map(|i| NewTask::new("E", format!("{prefix}{i}")))
            .collect()
    }

    #[test]
    fn a_batch_goes_in_chunks_of_the_most_rows_and_each_task_gets_its_own_id() {
        let mut table = Table::default();
        let batch = tasks("k", 2500);
        let got = table.run(&batch);
        assert_eq!(table.steps(), ["rows 1000 ×2", "rows 500"]);
        for (t, i) in batch.iter().zip(&got) {
            assert!(i.created);
            assert_eq!(table.keys[&format!("E/{}", t.biz_key())], i.id);
        }
    }

    #[test]
    fn large_payloads_cut_a_chunk_by_its_bytes() {
        let mut table = Table::default();
        let batch: Vec<NewTask> = (0..100)
            .map(|i| NewTask::new("E", format!("k{i}")).json(&"x".repeat(60_000)))
            .collect();
        let got = table.run(&batch);
        // 60 kB and a little each: 69 fit in MAX_INSERT_BYTES (4 MiB)
        assert_eq!(table.steps(), ["rows 69", "rows 31"]);
        assert!(got.iter().all(|g| g.created));
        let doc = insert_document(&[Checked::new(&batch[0])]);
        assert!(
            doc.len() <= 60_000 + 160,
            "the size estimate holds: {}",
            doc.len()
        );
    }

    #[test]
    fn the_document_holds_each_value_of_the_insert() {
        let at = chrono::DateTime::from_timestamp_millis(1_700_000_000_123).unwrap();
        let task = NewTask::new("E", "k\"1")
            .json(&serde_json::json!({"a": [1, "é"]}))
            .run_at(at)
            .timeout(std::time::Duration::from_millis(1500));
        let doc: serde_json::Value =
            serde_json::from_str(&insert_document(&[Checked::new(&task)])).unwrap();
        let row = &doc[0];
        assert_eq!(row["e"], "E");
        assert_eq!(row["k"], "k\"1");
        assert_eq!(row["p"], task.payload());
        assert_eq!(row["a"], 1_700_000_000_123_i64);
        assert_eq!(row["t"], 1500);
        assert_eq!(row["d"], 0);
        assert_eq!(row["m"], i64::from(task.retry_policy().max_attempts));
        assert_eq!(row.as_object().unwrap().len(), INSERT_ROW_KEYS.len());
        // each text as JSON reads it back, whether written as it is or escaped
        for key in [
            "plain-é",
            "back\\slash",
            "line\nfeed",
            "\u{1}\u{1f}\u{7f}",
            "",
            "tab\t\"q\"",
        ] {
            let task = NewTask::new("E", key);
            let doc: serde_json::Value =
                serde_json::from_str(&insert_document(&[Checked::new(&task)])).unwrap();
            assert_eq!(doc[0]["k"], key);
        }
    }

    #[test]
    fn the_plain_document_holds_each_tasks_own_values() {
        let traced = NewTask::new("mail", "m\"2").payload_raw("[1]");
        let traced = traced.traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        let plain = NewTask::new("mail", "m-1").payload_raw("{}");
        let doc = plain_document(&[Checked::new(&plain), Checked::new(&traced)]);
        assert_eq!(
            doc,
            r#"[["mail","m-1","{}",null],["mail","m\"2","[1]","00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"]]"#
        );
    }

    #[test]
    fn a_held_key_has_its_chunk_read_and_is_enqueued_on_its_own() {
        let mut table = Table::default();
        table.make("E/k5".to_owned());
        let got = table.run(&tasks("k", 8));
        assert_eq!(
            table.steps(),
            ["rows 8", "existing ×8", "insert", "existing"]
        );
        assert_eq!((got[5].id, got[5].created), (1, false));
        for (i, g) in got.iter().enumerate().filter(|(i, _)| *i != 5) {
            assert_eq!((g.id, g.created), (table.keys[&format!("E/k{i}")], true));
        }
    }

    #[test]
    fn an_insert_refused_whole_is_halved_down_to_the_held_key() {
        let mut table = Table {
            all_or_nothing: true,
            ..Table::default()
        };
        table.make("E/k5".to_owned());
        let got = table.run(&tasks("k", 8));
        assert_eq!(
            table.steps(),
            // k0–3 made; k4–7 refused, k4–5 refused, k4 made, k5 refused, k6–7 made
            [
                "rows 8",
                "rows 4 ×2",
                "rows 2",
                "rows 1 ×2",
                "rows 2",
                "insert",
                "existing"
            ]
        );
        assert_eq!((got[5].id, got[5].created), (1, false));
        assert_eq!(got.iter().filter(|g| g.created).count(), 7);
    }

    #[test]
    fn order_keys_and_keys_named_twice_follow_one_by_one_in_the_batch_order() {
        let mut table = Table::default();
        let mut batch = tasks("k", 4);
        batch.insert(1, NewTask::new("E", "twice"));
        batch.insert(2, NewTask::new("E", "o").order_key("line"));
        batch.push(NewTask::new("E", "twice"));
        let got = table.run(&batch);
        assert_eq!(table.steps()[0], "rows 4");
        assert_eq!(table.steps()[1], "insert", "twice, the first");
        assert_eq!(
            table.steps().last().map(String::as_str),
            Some("existing"),
            "twice, again"
        );
        assert!(got[1].created && got[2].created);
        assert_eq!((got[6].id, got[6].created), (got[1].id, false));
    }
}
