//! SQL text helpers a driver uses: the list statement per filter shape, a schema as a
//! script, the rounds of a batch of marks.

use std::collections::HashSet;
use std::time::Duration;

use super::Value;
use crate::model::{Mark, Status, TaskFilter, TaskId};

/// Split a batch of marks into rounds in which each task appears at most once, keeping
/// the order: round 1 holds the first mark of every task, round 2 the second, and so on.
///
/// A set-based `UPDATE … FROM (the marks)` applies at most one mark per row, and which one
/// is unspecified. The contract says marks apply in order, so a driver runs one statement
/// per round, in order, in one transaction. Almost every batch is a single round.
///
/// ```
/// use backstop_core::{driver::mark_rounds, Lease, Mark};
/// let l = |id| Lease { task_id: id, token: 1 };
/// let marks = [Mark::success(l(1)), Mark::success(l(2)), Mark::release(l(1))];
/// assert_eq!(mark_rounds(&marks), vec![vec![0, 1], vec![2]]);
/// ```
pub fn mark_rounds(marks: &[Mark]) -> Vec<Vec<usize>> {
    let mut rounds: Vec<(HashSet<i64>, Vec<usize>)> = Vec::new();
    for (i, m) in marks.iter().enumerate() {
        let id = m.lease.task_id;
        match rounds.iter_mut().find(|(ids, _)| !ids.contains(&id)) {
            Some((ids, idx)) => {
                ids.insert(id);
                idx.push(i);
            }
            None => rounds.push((HashSet::from([id]), vec![i])),
        }
    }
    rounds.into_iter().map(|(_, idx)| idx).collect()
}

/// The distinct ids of the tasks whose marks applied (`flags`, one per mark): what a
/// hand-over took out of running ([`Gate::handover_room`](super::Gate::handover_room)
/// counts those of its type).
///
/// ```
/// use backstop_core::driver::applied_ids;
/// use backstop_core::{Lease, Mark};
/// let l = |id| Lease { task_id: id, token: 1 };
/// let marks = [Mark::success(l(3)), Mark::success(l(1)), Mark::release(l(3))];
/// assert_eq!(applied_ids(&marks, &[true, false, true]), vec![3]);
/// ```
pub fn applied_ids(marks: &[Mark], flags: &[bool]) -> Vec<TaskId> {
    let mut ids: Vec<TaskId> = marks
        .iter()
        .zip(flags)
        .filter(|(_, applied)| **applied)
        .map(|(m, _)| m.lease.task_id)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Milliseconds of `d`, saturating at `i64::MAX`.
pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A backend's schema statements as a script for a person to read: one statement per
/// paragraph, each ending in `;`, continuation lines indented by four spaces (closing
/// parentheses flush left). `parts` are the strings the backend executes; statements are
/// split at `;` (schema DDL has no `;` inside literals).
///
/// ```
/// let script = backstop_core::driver::ddl_script(&[
///     "CREATE TABLE t (\n        id INT\n     );\n     CREATE INDEX i\n        ON t (id)",
/// ]);
/// assert_eq!(script, "CREATE TABLE t (\n    id INT\n);\n\nCREATE INDEX i\n    ON t (id);\n");
/// ```
pub fn ddl_script(parts: &[&str]) -> String {
    let mut out = Vec::new();
    for statement in parts.iter().flat_map(|p| p.split(';')) {
        let mut lines = statement.lines().map(str::trim).filter(|l| !l.is_empty());
        let Some(first) = lines.next() else { continue };
        let mut text = first.to_owned();
        for line in lines {
            text.push('\n');
            if !line.starts_with(')') {
                text.push_str("    ");
            }
            text.push_str(line);
        }
        text.push(';');
        out.push(text);
    }
    let mut script = out.join("\n\n");
    script.push('\n');
    script
}

/// One bound value of a list statement (see [`list_sql`]), in placeholder order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListArg<'a> {
    /// A status code.
    Status(i16),
    /// An event type, a business key or an error text.
    Text(&'a str),
    /// `updated_at` older than this: the backend binds what its `older_than` spelling
    /// needs (milliseconds, microseconds, a cutoff).
    Age(Duration),
    /// An id (`id > ?`) or the row limit.
    Int(i64),
}

/// How a backend spells the parts of a list statement that differ.
#[derive(Debug, Clone, Copy)]
pub struct ListDialect {
    /// The placeholder of the n-th argument, from 1: `$1`, `?1`, `?`.
    pub placeholder: fn(usize) -> String,
    /// The condition "`last_error` contains the text bound to `p`".
    pub contains: fn(&str) -> String,
    /// The condition "`biz_key` starts with the text bound to `p`" (exactly: no
    /// wildcards, byte for byte as keys compare).
    pub starts_with: fn(&str) -> String,
    /// The condition "`tags` contains the text `,` + the text bound to `p` + `,`" (a tag:
    /// see [`NewTask::tag`](crate::NewTask::tag)).
    pub has_tag: fn(&str) -> String,
    /// The condition "`metadata` (JSON text) has the top-level key `key` holding a
    /// string equal to the text bound to `p`". `key` is checked (ASCII letters, digits,
    /// `_`, `-`): the backend writes it into its JSON path as a literal.
    pub metadata_is: fn(key: &str, p: &str) -> String,
    /// The condition "`updated_at` is older than the [`ListArg::Age`] bound to `p`".
    pub older_than: fn(&str) -> String,
    /// The order of a list bounded by the backlog (a status other than succeeded, or an
    /// error search): `id`, or an expression of it when the planner would otherwise walk
    /// the primary key from the oldest row to find the few newer ones (PostgreSQL: `id +
    /// 0`, so it reads the status index and sorts what the backlog holds).
    pub backlog_order: &'static str,
    /// The value bound for a [`ListArg::Age`]: what the backend's `older_than` spelling
    /// needs (milliseconds, microseconds, a cutoff on the backend's clock).
    pub age: fn(Duration) -> Value<'static>,
}

/// The statement [`Driver::list`](crate::driver::Driver::list) runs for `filter`: `select` (`SELECT … FROM table`)
/// with only the conditions the filter sets, `ORDER BY id LIMIT`, and the arguments in
/// placeholder order. One statement per shape of filter, so each gets a plan that walks
/// the index its conditions allow (a status index, the key index), not one catch-all plan
/// for every shape that walks the table. An error search without a status skips the
/// succeeded rows (a success clears `last_error`), so it reads the backlog, not the rows
/// retained.
///
/// ```
/// use backstop_core::driver::{list_sql, ListArg, ListDialect};
/// use backstop_core::{Status, TaskFilter};
/// let pg = ListDialect {
///     placeholder: |n| format!("${n}"),
///     contains: |p| format!("strpos(last_error, {p}) > 0"),
///     starts_with: |p| format!("starts_with(biz_key, {p})"),
///     has_tag: |p| format!("strpos(tags, ',' || {p} || ',') > 0"),
///     metadata_is: |k, p| format!("metadata::jsonb ->> '{k}' = {p}"),
///     older_than: |p| format!("updated_at < now() - {p}"),
///     backlog_order: "id + 0",
///     age: |d| backstop_core::driver::Value::BigInt(Some(d.as_millis() as i64)),
/// };
/// let f = TaskFilter::default().status(Status::Failed).limit(50);
/// let (sql, args) = list_sql("SELECT id FROM t", &pg, &f);
/// assert_eq!(sql, "SELECT id FROM t WHERE status = $1 ORDER BY id + 0 LIMIT $2");
/// assert_eq!(args, vec![ListArg::Status(2), ListArg::Int(50)]);
/// ```
pub fn list_sql<'f>(
    select: &str,
    dialect: &ListDialect,
    filter: &'f TaskFilter,
) -> (String, Vec<ListArg<'f>>) {
    let mut args = Vec::new();
    let mut sql = select.to_owned();
    sql.push_str(&where_clause(dialect, filter, &mut args));
    let limit = i64::try_from(filter.limit).unwrap_or(i64::MAX);
    let bounded = match filter.status {
        Some(s) => s != Status::Succeeded,
        None => filter.error_contains.is_some(),
    };
    let order = if bounded { dialect.backlog_order } else { "id" };
    args.push(ListArg::Int(limit));
    sql.push_str(&format!(
        " ORDER BY {order} LIMIT {}",
        (dialect.placeholder)(args.len())
    ));
    (sql, args)
}

/// The count [`count_matching`](crate::TaskStore::count_matching) runs for `filter` on
/// the task table `tasks` (quoted as the backend writes it): the tasks
/// [`list_sql`] would page through (its conditions; no order, no `limit`), counted up to
/// `cap` rows (`SELECT COUNT(*) FROM (SELECT 1 … LIMIT cap)`), so its cost is bounded
/// whatever the table holds. One row, one column: the count.
///
/// ```
/// use backstop_core::driver::{count_sql, ListArg, ListDialect, Value};
/// use backstop_core::{Status, TaskFilter};
/// let pg = ListDialect {
///     placeholder: |n| format!("${n}"),
///     contains: |p| format!("strpos(last_error, {p}) > 0"),
///     starts_with: |p| format!("starts_with(biz_key, {p})"),
///     has_tag: |p| format!("strpos(tags, ',' || {p} || ',') > 0"),
///     metadata_is: |k, p| format!("metadata::jsonb ->> '{k}' = {p}"),
///     older_than: |p| format!("updated_at < now() - {p}"),
///     backlog_order: "id + 0",
///     age: |d| Value::BigInt(Some(d.as_millis() as i64)),
/// };
/// let f = TaskFilter::default().status(Status::Failed).event_type("E");
/// let (sql, args) = count_sql("t", &pg, &f, 1000);
/// assert_eq!(sql, "SELECT COUNT(*) FROM (SELECT 1 FROM t WHERE status = $1 AND event_type = $2 LIMIT $3) AS m");
/// assert_eq!(args, vec![ListArg::Status(2), ListArg::Text("E"), ListArg::Int(1000)]);
/// ```
pub fn count_sql<'f>(
    tasks: &str,
    dialect: &ListDialect,
    filter: &'f TaskFilter,
    cap: usize,
) -> (String, Vec<ListArg<'f>>) {
    let mut args = Vec::new();
    let conditions = where_clause(dialect, filter, &mut args);
    args.push(ListArg::Int(i64::try_from(cap).unwrap_or(i64::MAX)));
    let sql = format!(
        "SELECT COUNT(*) FROM (SELECT 1 FROM {tasks}{conditions} LIMIT {}) AS m",
        (dialect.placeholder)(args.len())
    );
    (sql, args)
}

/// The values of `args` as [`Statement`](crate::driver::Statement) parameters, an age as
/// `dialect` binds it.
pub fn list_values<'f>(dialect: &ListDialect, args: Vec<ListArg<'f>>) -> Vec<Value<'f>> {
    args.into_iter()
        .map(|a| match a {
            ListArg::Status(s) => Value::SmallInt(Some(s)),
            ListArg::Text(t) => Value::Text(Some(t)),
            ListArg::Age(d) => (dialect.age)(d),
            ListArg::Int(i) => Value::BigInt(Some(i)),
        })
        .collect()
}

/// ` WHERE …` with the conditions `filter` sets (empty when it sets none), binding their
/// arguments into `args`.
fn where_clause<'f>(
    dialect: &ListDialect,
    filter: &'f TaskFilter,
    args: &mut Vec<ListArg<'f>>,
) -> String {
    let mut conditions = Vec::new();
    let bind = |arg: ListArg<'f>, args: &mut Vec<ListArg<'f>>| {
        args.push(arg);
        (dialect.placeholder)(args.len())
    };
    match filter.status {
        Some(s) => conditions.push(format!(
            "status = {}",
            bind(ListArg::Status(s.code()), args)
        )),
        // every status but succeeded, spelled as a list each backend's planner turns into
        // index ranges (`<> 1` is a scan of the status index on SQLite)
        None if filter.error_contains.is_some() => {
            let codes: Vec<String> = Status::ALL
                .iter()
                .filter(|s| **s != Status::Succeeded)
                .map(|s| s.code().to_string())
                .collect();
            conditions.push(format!("status IN ({})", codes.join(", ")))
        }
        None => {}
    }
    if let Some(t) = &filter.event_type {
        conditions.push(format!("event_type = {}", bind(ListArg::Text(t), args)));
    }
    if let Some(k) = &filter.biz_key {
        conditions.push(format!("biz_key = {}", bind(ListArg::Text(k), args)));
    }
    if let Some(prefix) = &filter.biz_key_prefix {
        let p = bind(ListArg::Text(prefix), args);
        conditions.push((dialect.starts_with)(&p));
    }
    if let Some(e) = &filter.error_contains {
        let p = bind(ListArg::Text(e), args);
        conditions.push((dialect.contains)(&p));
    }
    for tag in &filter.tags {
        let p = bind(ListArg::Text(tag), args);
        conditions.push((dialect.has_tag)(&p));
    }
    for (key, value) in &filter.metadata {
        let p = bind(ListArg::Text(value), args);
        conditions.push((dialect.metadata_is)(key, &p));
    }
    if let Some(age) = filter.older_than {
        let p = bind(ListArg::Age(age), args);
        conditions.push((dialect.older_than)(&p));
    }
    if let Some(id) = filter.after_id {
        conditions.push(format!("id > {}", bind(ListArg::Int(id), args)));
    }
    if conditions.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conditions.join(" AND "))
    }
}
