//! **For backend authors**: versioned migrations. A backend lists its schema's history as
//! numbered [`Migration`]s; [`pending`] says which of them a database still needs, and
//! [`script`] writes the whole history as one script for a person to read.
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
pub const LATEST: u32 = 10;

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

/// The whole history as a script for a person to read or apply with their own tool:
/// `setup` (the version table, a schema), then each migration's statements followed by
/// `record(migration)` (the statement that records it in the version table). Formatted
/// by [`ddl_script`](crate::driver::ddl_script).
pub fn script(setup: &str, all: &[Migration], record: impl Fn(&Migration) -> String) -> String {
    let mut out = crate::driver::ddl_script(&[setup]);
    for m in all {
        let mut parts: Vec<&str> = m.statements.iter().map(String::as_str).collect();
        let record = record(m);
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

/// Check that `all` is numbered 1, 2, 3… up to [`LATEST`] (a backend's own list; a bug
/// if not).
fn check_numbering(all: &[Migration]) -> Result<()> {
    if all.len() != usize::try_from(LATEST).unwrap_or(usize::MAX) {
        return Err(Error::new(
            crate::ErrorKind::Unexpected,
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
                crate::ErrorKind::Unexpected,
                "migrate",
                format!("migration {} has a name with a quote or `;`", m.version),
            ));
        }
        if usize::try_from(m.version).ok() != Some(i + 1) {
            return Err(Error::new(
                crate::ErrorKind::Unexpected,
                "migrate",
                format!("migration {} is numbered {}", i + 1, m.version),
            ));
        }
    }
    Ok(())
}
