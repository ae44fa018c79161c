//! **For backend authors**: versioned migrations. A backend keeps its schema's history as
//! numbered SQL files (`migrations/0001_….sql`, read with [`from_files`]); [`pending`]
//! says which of them a database still needs, and [`script`] writes the whole history as
//! one script for a person to read.
//!
//! # A migration file
//!
//! ```sql
//! -- name: priority and retry jitter
//! --
//! -- Why it is needed, and what it costs (comments are kept out of the statements).
//!
//! ALTER TABLE {tasks} ADD COLUMN priority SMALLINT NOT NULL DEFAULT 2;
//!
//! CREATE INDEX "{table}_ix_claim_pri" ON {tasks} (event_type, priority, next_run_at, id);
//! ```
//!
//! - The file name starts with the version, four digits: `0003_priority_and_retry_jitter.sql`.
//! - The first line names it (`-- name: …`): the name recorded in the version table.
//! - Statements end with `;` at the end of a line; lines starting with `--` are comments.
//! - `{name}` is replaced by the value the backend gives for `name` (the quoted table
//!   names, say: `{tasks}`, `{inbox}`, `{audit}`, `{keys}`, `{handlers}`, the raw
//!   `{table}` for index names, and what else the backend needs, such as `{schema}`). An
//!   unknown placeholder is an error, not SQL.
//!
//! # Rules every backend follows
//!
//! - **A version table** `{table}_migrations (version, name, applied_at)` records each
//!   migration applied, in the same transaction as its statements where the database
//!   has transactional DDL (PostgreSQL, SQLite). MySQL commits each DDL statement by
//!   itself: there a migration is one `ALTER TABLE` (atomic in InnoDB) recorded right
//!   after, and a migration whose `ALTER` had applied before a crash (duplicate column or
//!   key) is recorded as applied.
//! - **Under the migration lock** (an advisory lock, `GET_LOCK`, SQLite's write lock), so
//!   any number of instances may call `migrate` at once: one applies, the others then
//!   find nothing to do.
//! - **Never edited once released.** A change to the schema is a new migration with the
//!   next number. Version 1 is the schema as it was before versioning, written with
//!   `IF NOT EXISTS` throughout, so a table made by an earlier release (which has no
//!   version table) is adopted as it stands.
//! - **Forward only, and old code keeps working.** A migration adds (columns with
//!   defaults, indexes) so instances of the previous release keep running on the new
//!   schema during a rolling deploy. An instance that finds a newer schema than it knows
//!   logs a warning and goes on.

use crate::error::{Error, Result};

/// The newest schema version of this release. A version means the same change on every
/// backend (a change one backend does not need is an empty migration there), so a
/// backend's list ends at this number: [`pending`] refuses one that does not.
pub const LATEST: u32 = 24;

/// One step of a backend's schema history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    /// Its number: 1, 2, 3… without gaps.
    pub version: u32,
    /// What it does, in a few words (recorded in the version table).
    pub name: &'static str,
    /// Its DDL statements, run in order.
    pub statements: Vec<String>,
}

/// A backend's migration file: its name (`0001_tasks.sql`) and its text (`include_str!`).
pub type MigrationFile = (&'static str, &'static str);

/// A backend's schema in its SQL, for one store's tables: the statements of its version
/// table and its migration files with the values of their placeholders. What `migrate`
/// runs ([`migrations`](Self::migrations)) and what a DBA reads
/// ([`script`](Self::script)).
#[derive(Debug, Clone)]
pub struct SchemaSql {
    /// Create the version table if missing.
    pub setup: String,
    /// Read the versions applied (one integer column).
    pub read: String,
    /// Record one migration applied, binding its version and name (and what the backend
    /// needs after them: SQLite its clock).
    pub record: String,
    /// The record in a script for a person: `{version}` and `{name}` filled in.
    pub script_record: String,
    /// The migration files ([`migration_files!`]).
    pub files: &'static [MigrationFile],
    /// The value of each placeholder of the files (`tasks`, `table`…).
    pub vars: Vec<(&'static str, String)>,
}

impl SchemaSql {
    /// The migrations, their placeholders filled in.
    pub fn migrations(&self) -> Result<Vec<Migration>> {
        let vars: Vec<(&str, &str)> = self.vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        from_files(self.files, &vars)
    }

    /// The whole schema as one script for a DBA (see [`script`]).
    pub fn script(&self) -> Result<String> {
        Ok(script(
            &self.setup,
            &self.migrations()?,
            &self.script_record,
        ))
    }
}

/// The migrations of a backend's numbered SQL `files` (see the [module docs](self)), in
/// the order given, each placeholder replaced by its value in `vars`. An error names the
/// file: a malformed one is a bug of the backend.
///
/// ```
/// use backstop_core::driver::schema::from_files;
/// let files = [("0002_audit.sql", "-- name: audit log\n-- why\nCREATE TABLE {audit} (\n    id INT\n);\nCREATE INDEX ix ON {audit} (id);\n")];
/// let m = from_files(&files, &[("audit", "\"t_audit\"")]).unwrap();
/// assert_eq!((m[0].version, m[0].name), (2, "audit log"));
/// assert_eq!(m[0].statements, ["CREATE TABLE \"t_audit\" (\n    id INT\n)", "CREATE INDEX ix ON \"t_audit\" (id)"]);
/// assert!(from_files(&[("0001_x.sql", "-- name: x\nSELECT {nope};")], &[]).is_err());
/// ```
pub fn from_files(files: &[MigrationFile], vars: &[(&str, &str)]) -> Result<Vec<Migration>> {
    files
        .iter()
        .map(|(file, text)| from_file(file, text, vars))
        .collect()
}

fn from_file(file: &str, text: &'static str, vars: &[(&str, &str)]) -> Result<Migration> {
    let bad = |why: String| {
        Error::new(
            crate::error::ErrorKind::Unexpected,
            "migrate",
            format!("migration file {file}: {why}"),
        )
    };
    let version = file
        .split('_')
        .next()
        .and_then(|n| n.parse::<u32>().ok())
        .ok_or_else(|| bad("its name does not start with its version".into()))?;
    let name = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("-- name: "))
        .map(str::trim)
        .ok_or_else(|| bad("its first line is not `-- name: …`".into()))?;
    let mut statements = Vec::new();
    let mut current = String::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with("--")) {
        if current.is_empty() && line.trim().is_empty() {
            continue;
        }
        if !current.is_empty() {
            current.push('\n');
        }
        current.push_str(line.trim_end());
        if let Some(done) = current.strip_suffix(';') {
            statements.push(substitute(done.trim(), vars).map_err(&bad)?);
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        return Err(bad("its last statement does not end with `;`".into()));
    }
    Ok(Migration {
        version,
        name,
        statements,
    })
}

/// `text` with each `{name}` replaced by its value in `vars`.
fn substitute(text: &str, vars: &[(&str, &str)]) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| format!("an unclosed `{{` in {text:?}"))?;
        let name = &after[..close];
        let value = vars
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| *v)
            .ok_or_else(|| format!("unknown placeholder {{{name}}}"))?;
        out.push_str(value);
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The name of the version table of task table `table`.
///
/// ```
/// assert_eq!(backstop_core::driver::schema::version_table("backstop_task"), "backstop_task_migrations");
/// ```
pub fn version_table(table: &str) -> String {
    format!("{table}_migrations")
}

/// The migrations of `all` a database whose version table holds `applied` needs to reach
/// version `target`, in order.
///
/// - `applied` must be `1..=k` (any order): anything else means the version table was
///   edited by hand or belongs to something else, and is a `Config` error naming `table`.
/// - Versions newer than `all` knows (a newer release migrated this database) are logged
///   as a warning and nothing is applied: the schema is forward compatible.
/// - `target` beyond the newest migration is `InvalidInput`; a `target` at or below the
///   applied version needs nothing (there are no downgrades).
///
/// ```
/// use backstop_core::driver::schema::{pending, Migration};
/// let m = |version| Migration { version, name: "m", statements: vec![] };
/// let all: Vec<Migration> = (1..=backstop_core::driver::schema::LATEST).map(m).collect();
/// let todo: Vec<u32> = pending("t", &[1], &all, 2).unwrap().iter().map(|m| m.version).collect();
/// assert_eq!(todo, vec![2]);
/// assert!(pending("t", &[2], &all, 2).is_err()); // a gap
/// assert!(pending("t", &[], &all, 99).is_err()); // no such version
/// assert!(pending("t", &[1, 2, 3, 4], &all, 2).unwrap().is_empty()); // migrated by a newer release
/// ```
pub fn pending<'m>(
    table: &str,
    applied: &[i64],
    all: &'m [Migration],
    target: u32,
) -> Result<Vec<&'m Migration>> {
    const OP: &str = "migrate";
    check_numbering(all)?;
    let latest = LATEST;
    if target > latest {
        return Err(Error::invalid_input(
            OP,
            format!("no schema version {target}: this release knows versions 1 to {latest}"),
        ));
    }
    let mut versions = applied.to_vec();
    versions.sort_unstable();
    versions.dedup();
    let contiguous = versions
        .iter()
        .enumerate()
        .all(|(i, v)| i64::try_from(i + 1).is_ok_and(|n| n == *v));
    if !contiguous || versions.len() != applied.len() {
        return Err(Error::config(
            OP,
            format!(
                "the version table {} holds versions {applied:?}; expected 1, 2, 3… without \
                 gaps (was it edited by hand?)",
                version_table(table)
            ),
        ));
    }
    let current = versions.last().copied().unwrap_or(0);
    if current > i64::from(latest) {
        tracing::warn!(
            table,
            schema_version = current,
            known = latest,
            "the task table was migrated by a newer release of backstop; running on it \
             unchanged (migrations are forward compatible), upgrade this instance soon"
        );
        return Ok(Vec::new());
    }
    Ok(all
        .iter()
        .filter(|m| i64::from(m.version) > current && m.version <= target)
        .collect())
}

/// A backend's schema as one script for a person to read: `setup` (the version table),
/// then each migration of `all` with the statement that records it, `record` with its
/// `{version}` and `{name}` filled in (`INSERT INTO … VALUES ({version}, '{name}', now())`).
///
/// ```
/// use backstop_core::driver::schema::{script, Migration};
/// let m = Migration { version: 1, name: "tasks", statements: vec!["CREATE TABLE t (id INT)".into()] };
/// let text = script("CREATE TABLE v (version INT)", &[m], "INSERT INTO v VALUES ({version})");
/// assert!(text.contains("-- version 1: tasks\nCREATE TABLE t (id INT);\n\nINSERT INTO v VALUES (1);"));
/// ```
pub fn script(setup: &str, all: &[Migration], record: &str) -> String {
    let mut out = crate::driver::ddl_script(&[setup]);
    for m in all {
        let version = m.version.to_string();
        let vars = [("version", version.as_str()), ("name", m.name)];
        // the template is the backend's own, with these two placeholders only
        let record = substitute(record, &vars).unwrap_or_else(|_| record.to_owned());
        let mut parts: Vec<&str> = m.statements.iter().map(String::as_str).collect();
        parts.push(&record);
        out.push_str(&format!(
            "\n-- version {}: {}\n{}",
            m.version,
            m.name,
            crate::driver::ddl_script(&parts)
        ));
    }
    out
}

/// Log migration `m` applied to `table` (every backend's line for it).
pub fn log_applied(table: &str, m: &Migration) {
    tracing::info!(
        table,
        version = m.version,
        name = m.name,
        "migration applied"
    );
}

/// The migration files of a backend, its folder `dir` relative to the file the macro is
/// called from: one file per version of this release, named as every backend names it.
/// A new migration is a file in each backend's folder and its name here.
#[doc(hidden)]
#[macro_export]
macro_rules! __migration_files {
    ($dir:literal) => {
        &[
            $crate::__migration_file!($dir, "0001_tasks_inbox_and_audit_log.sql"),
            $crate::__migration_file!($dir, "0002_unique_key_leads_with_biz_key.sql"),
            $crate::__migration_file!($dir, "0003_priority_and_retry_jitter.sql"),
            $crate::__migration_file!($dir, "0004_dedup_rules.sql"),
            $crate::__migration_file!($dir, "0005_order_keys.sql"),
            $crate::__migration_file!($dir, "0006_per_task_timeout.sql"),
            $crate::__migration_file!($dir, "0007_handled_event_types.sql"),
            $crate::__migration_file!($dir, "0008_oldest_due_index_out_of_reach_of_claims.sql"),
            $crate::__migration_file!(
                $dir,
                "0009_order_index_untouched_by_tasks_without_a_key.sql"
            ),
            $crate::__migration_file!($dir, "0010_claim_token_unindexed.sql"),
            $crate::__migration_file!($dir, "0011_participant_barrier.sql"),
            $crate::__migration_file!($dir, "0012_saga_state.sql"),
            $crate::__migration_file!($dir, "0013_saga_steps.sql"),
            $crate::__migration_file!($dir, "0014_snoozes.sql"),
            $crate::__migration_file!($dir, "0015_queues.sql"),
            $crate::__migration_file!($dir, "0016_queue_concurrency.sql"),
            $crate::__migration_file!($dir, "0017_tags_metadata_output.sql"),
            $crate::__migration_file!($dir, "0018_rate_limits.sql"),
            $crate::__migration_file!($dir, "0019_trace_context.sql"),
            $crate::__migration_file!($dir, "0020_partitions.sql"),
            $crate::__migration_file!($dir, "0021_status_index_only_where_it_serves.sql"),
            $crate::__migration_file!($dir, "0022_claim_turns.sql"),
            $crate::__migration_file!($dir, "0023_stored_key_status.sql"),
            $crate::__migration_file!($dir, "0024_key_lock_writes_its_row.sql"),
        ]
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __migration_file {
    ($dir:literal, $file:literal) => {
        ($file, include_str!(concat!($dir, "/", $file)))
    };
}

/// Every migration file of a backend, read at build time from its folder (relative to
/// the file that names it): `const MIGRATIONS: &[MigrationFile] =
/// migration_files!("../migrations");`. The files' names are this release's, the same
/// on every backend; a backend lacking one does not build.
#[doc(inline)]
pub use crate::__migration_files as migration_files;

/// Check that `all` is numbered 1, 2, 3… up to [`LATEST`] (a backend's own list; a bug
/// if not).
fn check_numbering(all: &[Migration]) -> Result<()> {
    if all.len() != usize::try_from(LATEST).unwrap_or(usize::MAX) {
        return Err(Error::new(
            crate::error::ErrorKind::Unexpected,
            "migrate",
            format!(
                "the backend lists {} migrations; this release has {LATEST}",
                all.len()
            ),
        ));
    }
    for (i, m) in all.iter().enumerate() {
        // the name is written into SQL literals and scripts split at `;`
        if m.name.contains(['\'', ';', '\\']) {
            return Err(Error::new(
                crate::error::ErrorKind::Unexpected,
                "migrate",
                format!("migration {} has a name with a quote or `;`", m.version),
            ));
        }
        if usize::try_from(m.version).ok() != Some(i + 1) {
            return Err(Error::new(
                crate::error::ErrorKind::Unexpected,
                "migrate",
                format!("migration {} is numbered {}", i + 1, m.version),
            ));
        }
    }
    Ok(())
}
