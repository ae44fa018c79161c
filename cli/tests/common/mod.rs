//! What the tests of the `backstop` command share: the real binary, and the databases it
//! runs against (SQLite always; PostgreSQL and MySQL when their test servers are given).
#![allow(clippy::expect_used, clippy::unwrap_used, dead_code)] // test code; each test file uses a part

use std::process::{Command, Output, Stdio};

use backstop::{AnyStore, NewTask, Status, StoreConfig, TaskStore};
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_backstop");

/// A database for one test: its URL and table, and a store on it.
pub struct Db {
    pub url: String,
    pub table: String,
    pub store: AnyStore,
    _dir: Option<tempfile::TempDir>,
}

impl Db {
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(["--url", &self.url, "--table", &self.table])
            .args(args)
            .env_remove("BACKSTOP_URL")
            .env_remove("BACKSTOP_TABLE")
            .env("BACKSTOP_OPERATOR", "ci-operator")
            .stdin(Stdio::null())
            .output()
            .expect("run backstop")
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.cli(&all);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("one JSON document")
    }

    /// A task that failed for good with `error`.
    pub async fn failed(&self, event_type: &str, key: &str, error: &str) -> i64 {
        backstop_testkit::park_failed(&self.store, NewTask::new(event_type, key), error).await
    }

    pub async fn status(&self, id: i64) -> Option<Status> {
        self.store.get(id).await.unwrap().map(|t| t.status)
    }
}

/// The databases to run on: SQLite, and each server named by its URL variable (required
/// when `BACKSTOP_TEST_REQUIRE` names it; skipped with a printed reason otherwise).
pub async fn databases(test: &str) -> Vec<Db> {
    let table = backstop_testkit::unique_name("cli");
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("cli.db").display());
    let mut dbs = vec![(url, Some(dir))];
    for (var, backend) in [
        ("BACKSTOP_TEST_POSTGRES_URL", "postgres"),
        ("BACKSTOP_TEST_MYSQL_URL", "mysql"),
    ] {
        match backstop_testkit::server_url(var) {
            Ok(url) => dbs.push((url, None)),
            Err(why) => {
                assert!(
                    !backstop_testkit::required(backend),
                    "{backend} is required: {}",
                    why.0
                );
                eprintln!("SKIPPED {test} on {backend}: {}", why.0);
            }
        }
    }
    let mut out = Vec::new();
    for (mut url, dir) in dbs {
        if url.starts_with("mysql:") {
            // the test server's URL names no database: one of this test's own
            url = mysql_database(&url, &table).await;
        }
        let store = backstop::connect_with(&url, StoreConfig::default().table(table.clone()))
            .await
            .unwrap();
        let db = Db {
            url,
            table: table.clone(),
            store,
            _dir: dir,
        };
        let m = db.cli(&["migrate"]);
        assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
        out.push(db);
    }
    out
}

/// A database named `name` on the MySQL server at `server` (created if missing), and its
/// URL. Throwaway servers are dropped whole by `scripts/test`.
pub async fn mysql_database(server: &str, name: &str) -> String {
    use sqlx::Connection;
    let mut conn = sqlx::MySqlConnection::connect(server).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE DATABASE IF NOT EXISTS `{name}`"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    format!("{}/{name}", server.trim_end_matches('/'))
}

pub fn code(out: &Output) -> i32 {
    out.status.code().expect("exited")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The ids of a JSON list of tasks, sorted.
pub fn sorted_ids(tasks: &Value) -> Vec<i64> {
    let mut ids: Vec<i64> = tasks
        .as_array()
        .expect("a list")
        .iter()
        .map(|t| t["id"].as_i64().expect("an id"))
        .collect();
    ids.sort_unstable();
    ids
}
