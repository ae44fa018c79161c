//! A case's database outlives the case and serves a later one, emptied by DML. On
//! Galera every DDL statement runs in total order on every node and aborts the open
//! transactions on its tables there; a database per case (its CREATE, the migrations'
//! two dozen statements, its DROP) is thousands of them a run. On one server the same
//! DDL was most of a short case's time (durable MariaDB: migrating a new database took
//! 1.3–1.6 s and dropping it 0.2–0.3 s, a short case 1.6–2 s in all; the queue-then-skip
//! suite went from 79 to 64 s). The suite's own DDL is then the few cases that build
//! tables of their own.
//!
//! A spare is handed out again once the case that held it is gone (2 s after its
//! release, with no connection left on it on any node), after its tables' layout is
//! checked against a freshly migrated database's: tables a case added are dropped, a
//! changed store table costs the database (dropped, and a new one made). The spares
//! left when the process ends stay on the server (`bst_gal_*`, `bst_sp_*`), which the
//! test scripts throw away.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use backstop_core::TaskStore;
use backstop_mysql::{MySqlOptions, MySqlStore};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{AssertSqlSafe, Executor, MySqlPool};

use super::galera_nodes;

/// How long a released database rests before another case may take it: the case's
/// runtime, and the tasks and connections it still had, are gone by then.
const REST: Duration = Duration::from_secs(2);

/// The spares: (the server's URL, the database, when it was released).
static SPARES: Mutex<Vec<(String, String, Instant)>> = Mutex::new(Vec::new());

/// Each table's columns and indexes, as a freshly prepared database has them.
static LAYOUT: tokio::sync::OnceCell<BTreeMap<String, Vec<String>>> =
    tokio::sync::OnceCell::const_new();

/// Keep `name` on `server` (the first node's URL) for a later case.
pub(super) fn release(server: String, name: String) {
    if let Ok(mut spares) = SPARES.lock() {
        spares.push((server, name, Instant::now()));
    }
}

fn rested(server: &str) -> Option<String> {
    let mut spares = SPARES.lock().ok()?;
    let i = spares
        .iter()
        .position(|(on, _, at)| on == server && at.elapsed() >= REST)?;
    Some(spares.swap_remove(i).1)
}

/// A migrated database holding the business table and no rows: a spare emptied, or
/// a new one. `first` is the first node's URL, `nodes` the URL naming every node (on one
/// server, both its URL); `galera` whether they are a Galera cluster's.
pub(super) async fn take(first: &str, nodes: &str, galera: bool) -> String {
    let admin = connect(first, galera).await;
    while let Some(name) = rested(first) {
        match empty(&admin, nodes, &name, galera).await {
            Spare::Ready => {
                admin.close().await;
                return name;
            }
            Spare::Busy => release(first.to_owned(), name),
            Spare::Changed => {
                sqlx::query(AssertSqlSafe(format!("DROP DATABASE IF EXISTS `{name}`")))
                    .execute(&admin)
                    .await
                    .expect("drop a changed spare");
            }
        }
    }
    let name = backstop_testkit::unique_name(if galera { "bst_gal" } else { "bst_sp" });
    sqlx::query(AssertSqlSafe(format!("CREATE DATABASE `{name}`")))
        .execute(&admin)
        .await
        .expect("create a case's database");
    // a node applies the CREATE after node 1 answered it: each waits for it before a
    // store connects there
    for node in galera_nodes(nodes) {
        let pool = connect(&node, galera).await;
        let seen = sqlx::query(AssertSqlSafe(format!("SHOW DATABASES LIKE '{name}'")))
            .fetch_all(&pool)
            .await
            .expect("show databases");
        assert_eq!(seen.len(), 1, "{node} has the case's database");
        pool.close().await;
    }
    let store = MySqlStore::connect_with(
        &format!("{nodes}/{name}"),
        MySqlOptions::default().max_connections(1),
    )
    .await
    .expect("open a store to migrate");
    store.migrate().await.expect("migrate a new database");
    store.pool().close().await;
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE `{name}`.biz_order (k VARCHAR(128) PRIMARY KEY) ENGINE = InnoDB"
    )))
    .execute(&admin)
    .await
    .expect("create biz_order");
    let layout = layout(&admin, &name).await;
    LAYOUT.get_or_init(|| async { layout }).await;
    admin.close().await;
    name
}

enum Spare {
    Ready,
    /// A connection is still on it: another try later.
    Busy,
    /// A store table is not as migrated.
    Changed,
}

async fn empty(admin: &MySqlPool, nodes: &str, name: &str, galera: bool) -> Spare {
    for node in galera_nodes(nodes) {
        let pool = connect(&node, galera).await;
        let on: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM information_schema.processlist WHERE db = ?")
                .bind(name)
                .fetch_one(&pool)
                .await
                .expect("connections on a spare");
        pool.close().await;
        if on > 0 {
            return Spare::Busy;
        }
    }
    let Some(expected) = LAYOUT.get() else {
        return Spare::Changed;
    };
    let found = layout(admin, name).await;
    if expected.iter().any(|(t, l)| found.get(t) != Some(l)) {
        return Spare::Changed;
    }
    let mut conn = admin.acquire().await.expect("a connection");
    conn.execute("SET SESSION foreign_key_checks = 0")
        .await
        .expect("foreign_key_checks");
    for table in found.keys() {
        let sql = if !expected.contains_key(table) {
            format!("DROP TABLE `{name}`.`{table}`")
        } else if table.ends_with("_migrations") {
            continue;
        } else {
            format!("DELETE FROM `{name}`.`{table}`")
        };
        conn.execute(AssertSqlSafe(sql.clone()))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    conn.execute("SET SESSION foreign_key_checks = 1")
        .await
        .expect("foreign_key_checks");
    Spare::Ready
}

/// Each table of `name`: its columns and indexes, one line each, sorted.
async fn layout(admin: &MySqlPool, name: &str) -> BTreeMap<String, Vec<String>> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(table_name AS CHAR), CAST(CONCAT_WS(':', 'c', column_name, \
             ordinal_position, column_type, is_nullable, IFNULL(column_default, '~'), \
             extra) AS CHAR) \
         FROM information_schema.columns WHERE table_schema = ? \
         UNION ALL \
         SELECT CAST(table_name AS CHAR), CAST(CONCAT_WS(':', 'i', index_name, \
             seq_in_index, column_name, non_unique, IFNULL(sub_part, '~')) AS CHAR) \
         FROM information_schema.statistics WHERE table_schema = ?",
    )
    .bind(name)
    .bind(name)
    .fetch_all(admin)
    .await
    .expect("read a database's layout");
    let mut tables: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (table, line) in rows {
        tables.entry(table).or_default().push(line);
    }
    // a version table's rows too: a case may have edited them
    for (table, lines) in tables.iter_mut() {
        if table.ends_with("_migrations") {
            let versions: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT CAST(version AS SIGNED) FROM `{name}`.`{table}`"
            )))
            .fetch_all(admin)
            .await
            .expect("read the applied versions");
            lines.extend(versions.into_iter().map(|v| format!("v:{v}")));
        }
    }
    for lines in tables.values_mut() {
        lines.sort();
    }
    tables
}

/// One connection to `url`; on Galera it sees every write the cluster committed
/// before each statement (`wsrep_sync_wait = 15`).
async fn connect(url: &str, galera: bool) -> MySqlPool {
    MySqlPoolOptions::new()
        .max_connections(1)
        .after_connect(move |conn, _| {
            Box::pin(async move {
                if galera {
                    conn.execute("SET SESSION wsrep_sync_wait = 15").await?;
                }
                Ok(())
            })
        })
        .connect(url)
        .await
        .expect("connect to a Galera node")
}
