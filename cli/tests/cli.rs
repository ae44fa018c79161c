//! The `backstop` command as a script runs it: the real binary against a real database
//! (SQLite always; PostgreSQL and MySQL when their test servers are given), asserting
//! what it prints, its exit codes, and the rows it leaves.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code

mod common;

use std::process::{Command, Stdio};

use backstop::{NewTask, Owner, Status, StoreConfig, TaskStore, TaskStoreExt};
use common::*;

/// A W3C trace context a task carries (`tasks show` prints it).
const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// `tasks list --tag/--meta` filter on tags and metadata (all must match); `tasks show`
/// prints the tags, the metadata, the trace context and the recorded output (and
/// `--json` holds them); a
/// malformed `--meta` or a bad tag exits 2 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_by_tag_and_metadata_and_shows_output() {
    for db in databases("lists_by_tag_and_metadata_and_shows_output").await {
        let tagged = |key: &str, tenant: &str, tags: &[&str]| {
            NewTask::new("REPORT", key)
                .tags(tags.iter().copied())
                .metadata(&serde_json::json!({"tenant": tenant}))
        };
        let a = db
            .store
            .enqueue(
                tagged("r1", "acme", &["daily", "eu"])
                    .traceparent(TRACE)
                    .partition("tenant-acme"),
            )
            .await
            .unwrap()
            .id;
        let b = db
            .store
            .enqueue(tagged("r2", "acme", &["weekly"]))
            .await
            .unwrap()
            .id;
        db.store
            .enqueue(tagged("r3", "globex", &["daily"]))
            .await
            .unwrap();
        let owner = Owner::new("cli-test").unwrap();
        let claimed = db
            .store
            .claim_batch(&owner, &["REPORT".to_owned()], 3)
            .await
            .unwrap();
        let first = claimed.iter().find(|t| t.id == a).unwrap();
        assert!(db
            .store
            .set_output(first.lease(), r#"{"rows":1234}"#)
            .await
            .unwrap());

        let acme = db.json(&["tasks", "list", "--meta", "tenant=acme"]);
        assert_eq!(sorted_ids(&acme), vec![a, b]);
        let both = db.json(&["tasks", "list", "--tag", "daily", "--meta", "tenant=acme"]);
        assert_eq!(sorted_ids(&both), vec![a]);
        assert_eq!(both[0]["tags"], serde_json::json!(["daily", "eu"]));
        assert_eq!(both[0]["metadata"], serde_json::json!({"tenant": "acme"}));
        assert_eq!(both[0]["output"], serde_json::json!({"rows": 1234}));
        assert_eq!(both[0]["traceparent"], TRACE);
        assert_eq!(both[0]["partition"], "tenant-acme");

        let out = db.cli(&["tasks", "show", &a.to_string()]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let text = stdout(&out);
        assert!(text.contains("daily, eu"), "{text}");
        assert!(text.contains(r#"{"tenant":"acme"}"#), "{text}");
        assert!(text.contains(TRACE), "{text}");
        assert!(text.contains("tenant-acme"), "{text}");
        assert!(
            text.contains("output\n") && text.contains("\"rows\": 1234"),
            "{text}"
        );
        let out = db.cli(&["tasks", "show", &b.to_string()]);
        assert!(!stdout(&out).contains("output\n"), "no output recorded");

        let out = db.cli(&["tasks", "list", "--meta", "tenant"]);
        assert_eq!(code(&out), 2);
        assert!(stderr(&out).contains("KEY=VALUE"), "{}", stderr(&out));
        let out = db.cli(&["tasks", "list", "--tag", "a b"]);
        assert_eq!(code(&out), 2);
        assert!(stderr(&out).contains("tag"), "{}", stderr(&out));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_shows_and_resets_failed_tasks() {
    for db in databases("lists_shows_and_resets_failed_tasks").await {
        let a = db
            .failed("SEND_EMAIL", "order-1", "smtp: connection refused")
            .await;
        let b = db
            .failed("SEND_EMAIL", "order-2", "smtp: mailbox full")
            .await;
        let other = db.failed("CHARGE", "order-1", "card declined").await;
        let pending = db
            .store
            .enqueue(NewTask::new("SEND_EMAIL", "order-3"))
            .await
            .unwrap()
            .id;

        // list: filters, table and JSON
        let out = db.cli(&[
            "tasks",
            "list",
            "--status",
            "failed",
            "--event-type",
            "SEND_EMAIL",
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let text = stdout(&out);
        assert!(
            text.contains("smtp: connection refused") && text.contains("smtp: mailbox full"),
            "{text}"
        );
        assert!(
            !text.contains("card declined") && !text.contains("order-3"),
            "{text}"
        );
        let listed = db.json(&["tasks", "list", "--status", "failed", "--error", "mailbox"]);
        assert_eq!(sorted_ids(&listed), vec![b]);
        let by_prefix = db.json(&["tasks", "list", "--key-prefix", "order-1"]);
        assert_eq!(sorted_ids(&by_prefix), vec![a, other], "{by_prefix}");
        assert_eq!(listed[0]["last_error"], "smtp: mailbox full");
        assert_eq!(listed[0]["status"], "failed");
        // keyset paging
        let page = db.json(&[
            "tasks",
            "list",
            "--status",
            "failed",
            "--limit",
            "1",
            "--after",
            &a.to_string(),
        ]);
        assert_eq!(page[0]["id"].as_i64(), Some(b));

        // stats: the backlog by event type
        let stats = db.json(&["stats"]);
        let count = |et: &str, st: &str| {
            stats["counts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["event_type"] == et && c["status"] == st)
                .map(|c| c["count"].as_u64().unwrap())
                .unwrap_or(0)
        };
        assert_eq!(
            (
                count("SEND_EMAIL", "failed"),
                count("CHARGE", "failed"),
                count("SEND_EMAIL", "pending")
            ),
            (2, 1, 1)
        );

        // a dry run changes nothing
        let out = db.cli(&[
            "tasks",
            "reset",
            "--event-type",
            "SEND_EMAIL",
            "--status",
            "failed",
            "--dry-run",
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(
            stdout(&out).contains("would reset 2 task(s)"),
            "{}",
            stdout(&out)
        );
        // a limit below what matches says how many match in all
        let out = db.cli(&[
            "tasks",
            "reset",
            "--status",
            "failed",
            "--limit",
            "2",
            "--dry-run",
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(
            stdout(&out).contains("would reset 2 of 3 matching task(s)"),
            "{}",
            stdout(&out)
        );
        assert_eq!(
            (db.status(a).await, db.status(b).await),
            (Some(Status::Failed), Some(Status::Failed))
        );

        // without a terminal and without --yes: refused, nothing changed
        let out = db.cli(&[
            "tasks",
            "reset",
            "--event-type",
            "SEND_EMAIL",
            "--status",
            "failed",
        ]);
        assert_eq!(code(&out), 2);
        assert!(stderr(&out).contains("--yes"), "{}", stderr(&out));
        assert_eq!(db.status(a).await, Some(Status::Failed));

        // the reset: both SEND_EMAIL tasks, not the CHARGE one; audited
        let done = db.json(&[
            "tasks",
            "reset",
            "--event-type",
            "SEND_EMAIL",
            "--status",
            "failed",
            "--yes",
            "--reason",
            "smtp fixed",
        ]);
        let reset: Vec<i64> = done["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_i64().unwrap())
            .collect();
        assert_eq!(reset, vec![a, b]);
        for id in [a, b] {
            let t = db.store.get(id).await.unwrap().unwrap();
            assert_eq!((t.status, t.attempts), (Status::Pending, 0));
        }
        assert_eq!(db.status(other).await, Some(Status::Failed));
        let shown = db.json(&["tasks", "show", &a.to_string()]);
        assert_eq!(shown["history"][0]["action"], "reset");
        assert_eq!(shown["history"][0]["operator"], "ci-operator");
        assert_eq!(shown["history"][0]["reason"], "smtp fixed");
        let text = stdout(&db.cli(&["tasks", "show", &other.to_string()]));
        assert!(
            text.contains("card declined") && text.contains("1 of 1"),
            "{text}"
        );

        // a second reset of the same filter finds nothing to do
        let again = db.json(&[
            "tasks",
            "reset",
            "--event-type",
            "SEND_EMAIL",
            "--status",
            "failed",
            "--yes",
        ]);
        assert_eq!(again["tasks"].as_array().map(Vec::len), Some(0));
        // one task by id: a pending task cannot be reset (4), a missing one is 3
        assert_eq!(
            code(&db.cli(&["tasks", "reset", &pending.to_string(), "--yes"])),
            4
        );
        assert_eq!(code(&db.cli(&["tasks", "reset", "999999", "--yes"])), 3);
        assert_eq!(code(&db.cli(&["tasks", "show", "999999"])), 3);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_and_deletes_by_id_and_filter() {
    for db in databases("cancels_and_deletes_by_id_and_filter").await {
        let mut ids = Vec::new();
        for k in 0..3 {
            ids.push(
                db.store
                    .enqueue(NewTask::new("NIGHTLY", format!("k{k}")))
                    .await
                    .unwrap()
                    .id,
            );
        }
        let running = db
            .store
            .enqueue(NewTask::new("NIGHTLY", "busy"))
            .await
            .unwrap()
            .id;
        let held = db
            .store
            .claim_by_id(running, &Owner::generate())
            .await
            .unwrap()
            .unwrap();

        // cancel one by id, then the rest of the type by filter (the running one too)
        let out = db.cli(&[
            "tasks",
            "cancel",
            &ids[0].to_string(),
            "--yes",
            "--reason",
            "bad batch",
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_eq!(
            code(&db.cli(&["tasks", "cancel", &ids[0].to_string(), "--yes"])),
            4
        );
        let done = db.json(&["tasks", "cancel", "--event-type", "NIGHTLY", "--yes"]);
        let mut cancelled: Vec<i64> = done["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_i64().unwrap())
            .collect();
        cancelled.sort();
        assert_eq!(cancelled, vec![ids[1], ids[2], running]);
        for id in ids.iter().chain([&running]) {
            assert_eq!(db.status(*id).await, Some(Status::Cancelled));
        }
        // the cancelled holder's completion is refused
        assert!(!db.store.mark_success(held.lease()).await.unwrap());

        // delete: refused by id and filter mixed; by filter it removes every cancelled one
        assert_eq!(
            code(&db.cli(&[
                "tasks",
                "delete",
                &ids[0].to_string(),
                "--status",
                "cancelled"
            ])),
            2
        );
        let dry = db.json(&["tasks", "delete", "--status", "cancelled", "--dry-run"]);
        assert_eq!(dry["tasks"].as_array().map(Vec::len), Some(4));
        assert_eq!(db.status(ids[0]).await, Some(Status::Cancelled));
        let gone = db.json(&[
            "tasks",
            "delete",
            "--status",
            "cancelled",
            "--limit",
            "3",
            "--yes",
        ]);
        assert_eq!(gone["tasks"].as_array().map(Vec::len), Some(3));
        let left = db.json(&["tasks", "list", "--event-type", "NIGHTLY"]);
        assert_eq!(left.as_array().map(Vec::len), Some(1), "the cap of 3 held");
        // the audit stays after the delete
        let log = db.store.audit_log(ids[0]).await.unwrap();
        let actions: Vec<&str> = log.iter().map(|e| e.action.as_str()).collect();
        assert_eq!(actions, vec!["cancel", "delete"]);
        assert_eq!(log[0].reason, "bad batch");

        // no filter at all is refused, before anything is listed
        let out = db.cli(&["tasks", "delete", "--yes"]);
        assert_eq!(code(&out), 2);
        assert!(
            stderr(&out).contains("at least one filter"),
            "{}",
            stderr(&out)
        );

        // a task waiting behind its order key is cancelled too, as the store allows
        let head = db
            .store
            .enqueue(NewTask::new("ORDERED", "o1").order_key("acct-1"))
            .await
            .unwrap()
            .id;
        let behind = db
            .store
            .enqueue(NewTask::new("ORDERED", "o2").order_key("acct-1"))
            .await
            .unwrap()
            .id;
        assert_eq!(db.status(behind).await, Some(Status::Waiting));
        let out = db.cli(&["tasks", "cancel", &behind.to_string(), "--yes"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_eq!(db.status(behind).await, Some(Status::Cancelled));
        assert_eq!(db.status(head).await, Some(Status::Pending));
        let rest = db.json(&["tasks", "cancel", "--event-type", "ORDERED", "--yes"]);
        assert_eq!(rest["tasks"].as_array().map(Vec::len), Some(1), "the head");
        assert_eq!(db.status(head).await, Some(Status::Cancelled));
    }
}

#[tokio::test]
async fn schema_usage_and_missing_databases() {
    let run = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env_remove("BACKSTOP_URL")
            .env_remove("BACKSTOP_TABLE")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // schema: per backend, without connecting (these hosts do not exist)
    for (url, marker) in [
        ("sqlite:nowhere/app.db", "INTEGER PRIMARY KEY AUTOINCREMENT"),
        (
            "postgres://nobody@db.invalid/app",
            "GENERATED BY DEFAULT AS IDENTITY",
        ),
        ("mysql://nobody@db.invalid/app", "ENGINE = InnoDB"),
    ] {
        let out = run(&["--url", url, "--table", "jobs", "schema"]);
        assert_eq!(code(&out), 0, "{url}: {}", stderr(&out));
        let ddl = stdout(&out);
        assert!(
            ddl.contains(marker) && ddl.contains("jobs_audit") && ddl.contains("jobs_inbox"),
            "{ddl}"
        );
        assert!(ddl.trim_end().ends_with(';'));
    }
    // an SQLite schema script applies as printed
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dba.db");
    let ddl = stdout(&run(&["--url", "sqlite:x.db", "schema"]));
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&ddl).unwrap();
    drop(conn);
    let url = format!("sqlite:{}", path.display());
    let out = run(&["--url", &url, "tasks", "list"]);
    assert_eq!(
        (code(&out), stdout(&out).trim()),
        (0, "(no tasks)"),
        "{}",
        stderr(&out)
    );
    // the script recorded every version, so `migrate` finds nothing left to apply
    let out = run(&["--url", &url, "migrate"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let conn = rusqlite::Connection::open(&path).unwrap();
    let versions: Vec<i64> = conn
        .prepare("SELECT version FROM backstop_task_migrations ORDER BY version")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let latest = i64::from(backstop::driver::schema::LATEST);
    assert_eq!(versions, (1..=latest).collect::<Vec<_>>());
    drop(conn);

    // usage errors are 2, with a message
    let out = run(&["stats"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("BACKSTOP_URL"), "{}", stderr(&out));
    assert_eq!(code(&run(&["--url", "mongodb://x", "stats"])), 2);
    assert_eq!(
        code(&run(&["--url", &url, "tasks", "list", "--status", "done"])),
        2
    );
    assert_eq!(
        code(&run(&[
            "--url",
            &url,
            "tasks",
            "list",
            "--older-than",
            "soon"
        ])),
        2
    );
    assert_eq!(code(&run(&["--url", &url, "tasks", "bogus"])), 2);
    let out = run(&[
        "--url",
        &url,
        "tasks",
        "cancel",
        "1",
        "--yes",
        "--operator",
        "bad\nname",
    ]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    // a missing SQLite file is not created by a read
    let missing = dir.path().join("typo.db");
    let out = run(&["--url", &format!("sqlite:{}", missing.display()), "stats"]);
    assert_eq!(code(&out), 2);
    assert!(!missing.exists());
    // an unreachable server is 1, and says so
    let out = run(&["--url", "postgres://nobody@127.0.0.1:1/app", "stats"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
}

/// At a terminal (a pseudo-terminal made by util-linux `script`), an action shows what it
/// would change and asks: anything but yes changes nothing (exit 5), yes applies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_before_changing_at_a_terminal() {
    let db = databases("asks_before_changing_at_a_terminal")
        .await
        .remove(0);
    let id = db.failed("SEND_EMAIL", "order-9", "smtp: timeout").await;
    let at_terminal = |answer: &str| {
        let command = format!(
            "{BIN} --url '{}' --table {} tasks reset --status failed --event-type SEND_EMAIL",
            db.url, db.table
        );
        let mut child = Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("util-linux script");
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(answer.as_bytes()).unwrap();
        drop(stdin);
        child.wait_with_output().unwrap()
    };
    let out = at_terminal("n\n");
    assert_eq!(code(&out), 5, "{}", stdout(&out));
    let screen = stdout(&out);
    assert!(
        screen.contains("Reset 1 task(s)? [y/N]") && screen.contains("smtp: timeout"),
        "{screen}"
    );
    assert_eq!(db.status(id).await, Some(Status::Failed));
    let out = at_terminal("y\n");
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert_eq!(db.status(id).await, Some(Status::Pending));
}

/// `backstop schema` prints a script a DBA can apply as printed, on every backend; it
/// records every version, so `migrate` afterwards finds nothing to apply, and the store
/// works on the tables it made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_script_applies_as_printed() {
    for db in databases("schema_script_applies_as_printed").await {
        let table = format!("{}_dba", db.table);
        let out = Command::new(BIN)
            .args(["--url", &db.url, "--table", &table, "schema"])
            .env_remove("BACKSTOP_URL")
            .env_remove("BACKSTOP_TABLE")
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let ddl = stdout(&out);
        if let Some(path) = db.url.strip_prefix("sqlite:") {
            rusqlite::Connection::open(path)
                .unwrap()
                .execute_batch(&ddl)
                .unwrap();
        } else if db.url.starts_with("postgres") {
            use backstop::postgres::tokio_postgres;
            let (client, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            client.batch_execute(&ddl).await.unwrap();
        } else {
            use sqlx::Connection;
            let mut conn = sqlx::MySqlConnection::connect(&db.url).await.unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(ddl.clone()))
                .execute(&mut conn)
                .await
                .unwrap();
        }
        let store = backstop::connect_with(&db.url, StoreConfig::default().table(table.clone()))
            .await
            .unwrap();
        // the store migrates and runs on the tables the script made
        store.migrate().await.unwrap();
        let e = store.enqueue(NewTask::new("E", "k")).await.unwrap();
        assert!(e.created);
        let again = store.enqueue(NewTask::new("E", "k")).await.unwrap();
        assert_eq!((again.id, again.created), (e.id, false), "{}", db.url);
    }
}

/// `sagas`: list and show; a retry of a parked saga (dry run, refused without --yes, then
/// done and logged), a retry of a running one refused (exit 4), a resolution, an unknown
/// saga (exit 3), a bad status (exit 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_shows_and_commands_sagas() {
    use backstop::{SagaDef, SagaStatus, SagaStep, StepOutcome, StepPhase, StepReport};
    for db in databases("lists_shows_and_commands_sagas").await {
        let def = SagaDef::builder("order")
            .step(SagaStep::new("pay"))
            .build()
            .unwrap();
        let parked = db
            .store
            .start_saga(&def.start("k1", &1).unwrap())
            .await
            .unwrap()
            .id;
        let running = db
            .store
            .start_saga(&def.start("k2", &2).unwrap())
            .await
            .unwrap()
            .id;
        // park k1: its step's task out of attempts
        let pay = db
            .store
            .list(&backstop::TaskFilter::default().biz_key("k1/pay:a"))
            .await
            .unwrap()[0]
            .id;
        let owner = Owner::new("cli-test").unwrap();
        let task = db.store.claim_by_id(pay, &owner).await.unwrap().unwrap();
        let outcome = StepOutcome::Exhausted {
            phase: StepPhase::Action,
            reason: "gateway down".into(),
        };
        let report = StepReport::new(task.lease(), parked, "k1", "pay", outcome);
        db.store.saga_step(&def, &report).await.unwrap();

        let all = db.json(&["sagas", "list"]);
        assert_eq!(all.as_array().unwrap().len(), 2, "{all}");
        let only = db.json(&["sagas", "list", "--status", "parked"]);
        assert_eq!(only[0]["id"], parked, "{only}");
        assert!(only[0]["reason"].as_str().unwrap().contains("gateway down"));
        let text = stdout(&db.cli(&["sagas", "list", "--name", "order"]));
        assert!(text.contains("k1") && text.contains("parked"), "{text}");
        let none = stdout(&db.cli(&["sagas", "list", "--name", "refund"]));
        assert_eq!(none.trim(), "(no sagas)");
        let shown = db.json(&["sagas", "show", &parked.to_string()]);
        assert_eq!(shown["steps"][0]["state"], "action_failed", "{shown}");
        assert_eq!(shown["log"].as_array().unwrap().len(), 0);
        assert_eq!(shown["barrier"], serde_json::json!([]), "{shown}");
        let text = stdout(&db.cli(&["sagas", "show", &parked.to_string()]));
        assert!(text.contains("barrier\n  (no records"), "{text}");

        let id = parked.to_string();
        let out = db.cli(&["sagas", "retry", &id, "--dry-run"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(
            stdout(&out).contains("would retry saga"),
            "{}",
            stdout(&out)
        );
        let out = db.cli(&["sagas", "retry", &id]);
        assert_eq!(code(&out), 2, "no terminal, no --yes: {}", stderr(&out));
        assert_eq!(
            db.status(pay).await,
            Some(Status::Failed),
            "nothing changed"
        );
        let out = db.cli(&[
            "sagas",
            "retry",
            &id,
            "--yes",
            "--reason",
            "gateway is back",
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_eq!(db.status(pay).await, Some(Status::Pending));
        let saga = db.store.saga_by_id(parked).await.unwrap().unwrap();
        assert_eq!(saga.status, SagaStatus::Running);
        let shown = db.json(&["sagas", "show", &id]);
        assert_eq!(shown["log"][0]["action"], "retry", "{shown}");
        assert_eq!(shown["log"][0]["operator"], "ci-operator");
        assert_eq!(shown["log"][0]["reason"], "gateway is back");

        let other = running.to_string();
        let out = db.cli(&["sagas", "retry", &other, "--yes"]);
        assert_eq!(code(&out), 4, "{}", stderr(&out));
        assert!(stderr(&out).contains("is running"), "{}", stderr(&out));
        let out = db.cli(&["sagas", "resolve", &other, "--as", "parked", "--yes"]);
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        let done = db.json(&["sagas", "resolve", &other, "--as", "completed", "--yes"]);
        assert_eq!(done["saga"]["status"], "completed", "{done}");
        let out = db.cli(&["sagas", "show", "999999"]);
        assert_eq!(code(&out), 3, "{}", stderr(&out));
        let out = db.cli(&["sagas", "list", "--status", "stuck"]);
        assert_eq!(code(&out), 2, "{}", stderr(&out));
    }
}

/// `queues`: a pause stops claims of the type (the store's claim passes it by) and is
/// logged with the operator and reason; list shows it paused beside its backlog and a
/// type never paused; resume lets claims take it again; a bad event type is exit 2 and
/// writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pauses_lists_and_resumes_queues() {
    for db in databases("pauses_lists_and_resumes_queues").await {
        let mail = db
            .store
            .enqueue(NewTask::new("SEND_EMAIL", "m1"))
            .await
            .unwrap()
            .id;
        db.store
            .enqueue(NewTask::new("SEND_SMS", "s1"))
            .await
            .unwrap();
        let out = db.cli(&["queues", "pause", "SEND_EMAIL", "--reason", "provider down"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(stdout(&out).contains("it is paused"), "{}", stdout(&out));
        let owner = Owner::new("cli-test").unwrap();
        assert!(db.store.claim_by_id(mail, &owner).await.unwrap().is_none());

        let all = db.json(&["queues", "list"]);
        let rows = all.as_array().unwrap();
        assert_eq!(rows.len(), 2, "{all}");
        assert_eq!(
            (
                &rows[0]["event_type"],
                &rows[0]["paused"],
                &rows[0]["pending"]
            ),
            (&"SEND_EMAIL".into(), &true.into(), &1.into()),
            "{all}"
        );
        assert_eq!(
            (&rows[1]["event_type"], &rows[1]["paused"]),
            (&"SEND_SMS".into(), &false.into()),
            "{all}"
        );
        let text = stdout(&db.cli(&["queues", "list"]));
        assert!(
            text.lines()
                .any(|l| l.starts_with("SEND_EMAIL") && l.contains("paused")),
            "{text}"
        );
        let shown = db.json(&["queues", "show", "SEND_EMAIL"]);
        assert_eq!(
            (&shown["log"][0]["action"], &shown["log"][0]["operator"]),
            (&"pause".into(), &"ci-operator".into()),
            "{shown}"
        );
        assert_eq!(shown["log"][0]["reason"], "provider down");

        let done = db.json(&["queues", "resume", "SEND_EMAIL", "--reason", "back"]);
        assert_eq!(done["paused"], false, "{done}");
        let claimed = db.store.claim_by_id(mail, &owner).await.unwrap();
        assert_eq!(claimed.map(|t| t.status), Some(Status::Running));
        let shown = db.json(&["queues", "show", "SEND_EMAIL"]);
        assert_eq!(shown["log"].as_array().unwrap().len(), 2, "{shown}");

        let out = db.cli(&["queues", "pause", "bad type"]);
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        assert!(stderr(&out).contains("event_type"), "{}", stderr(&out));
        assert_eq!(db.store.queues().await.unwrap().len(), 1, "nothing written");

        // a concurrency limit: set, listed, logged, refused out of bounds, removed
        let out = db.cli(&["queues", "limit", "SEND_SMS", "2", "--reason", "gateway"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(
            stdout(&out).contains("at most 2 at once"),
            "{}",
            stdout(&out)
        );
        let all = db.json(&["queues", "list"]);
        assert_eq!(all[1]["concurrency"], 2, "{all}");
        assert_eq!(all[0]["concurrency"], serde_json::Value::Null, "{all}");
        let text = stdout(&db.cli(&["queues", "list"]));
        assert!(text.contains("LIMIT"), "{text}");
        for bad in ["0", "100001", "many"] {
            let out = db.cli(&["queues", "limit", "SEND_SMS", bad]);
            assert_eq!(code(&out), 2, "{bad}: {}", stderr(&out));
            assert!(stderr(&out).contains("concurrency"), "{}", stderr(&out));
        }
        let sms = db.store.queues().await.unwrap();
        assert_eq!(sms[1].concurrency, Some(2), "nothing written");
        let done = db.json(&["queues", "limit", "SEND_SMS", "off", "--reason", "fixed"]);
        assert_eq!(done["concurrency"], serde_json::Value::Null, "{done}");
        let shown = db.json(&["queues", "show", "SEND_SMS"]);
        let actions: Vec<&str> = shown["log"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["action"].as_str().unwrap())
            .collect();
        assert_eq!(actions, ["concurrency 2", "concurrency off"], "{shown}");

        // a rate limit: set, listed, refused out of bounds, removed
        let out = db.cli(&["queues", "rate", "SEND_SMS", "100/1m", "--reason", "quota"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(
            stdout(&out).contains("at most 100 starts per 60s"),
            "{}",
            stdout(&out)
        );
        let all = db.json(&["queues", "list"]);
        assert_eq!(
            all[1]["rate"],
            serde_json::json!({"starts": 100, "per_secs": 60}),
            "{all}"
        );
        let text = stdout(&db.cli(&["queues", "list"]));
        assert!(text.contains("100 per 60s"), "{text}");
        for bad in ["0/1m", "5/500ms", "5/2d", "many", "5/often"] {
            let out = db.cli(&["queues", "rate", "SEND_SMS", bad]);
            assert_eq!(code(&out), 2, "{bad}: {}", stderr(&out));
            assert!(stderr(&out).contains("rate"), "{bad}: {}", stderr(&out));
        }
        let sms = db.store.queues().await.unwrap();
        assert_eq!(
            sms[1].rate.map(|r| (r.starts, r.per.as_secs())),
            Some((100, 60)),
            "nothing written"
        );
        let done = db.json(&["queues", "rate", "SEND_SMS", "off"]);
        assert_eq!(done["rate"], serde_json::Value::Null, "{done}");

        // partitioned limits: on, listed, a bad state refused, off
        db.cli(&["queues", "limit", "SEND_SMS", "3"]);
        let out = db.cli(&[
            "queues",
            "partition",
            "SEND_SMS",
            "on",
            "--reason",
            "tenants",
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(
            stdout(&out).contains("at most 3 at once per partition key"),
            "{}",
            stdout(&out)
        );
        assert_eq!(db.json(&["queues", "list"])[1]["partitioned"], true);
        let text = stdout(&db.cli(&["queues", "list"]));
        assert!(text.contains("3 at once per partition"), "{text}");
        let out = db.cli(&["queues", "partition", "SEND_SMS", "maybe"]);
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        assert!(stderr(&out).contains("partition"), "{}", stderr(&out));
        assert!(db.store.queues().await.unwrap()[1].partitioned, "unchanged");
        let done = db.json(&["queues", "partition", "SEND_SMS", "off"]);
        assert_eq!(done["partitioned"], false, "{done}");
    }
}

/// `tasks edit`: a dry run changes nothing; without --yes at no terminal it is refused
/// (exit 2); run now makes a delayed task due, a payload edit replaces it, each audited
/// with the operator and reason; a running task is exit 4, a missing one 3, a payload
/// that is not JSON or an edit of nothing 2, writing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_a_waiting_task() {
    for db in databases("edits_a_waiting_task").await {
        let id = db
            .store
            .enqueue(
                NewTask::new("SEND_EMAIL", "later").delay(std::time::Duration::from_secs(3600)),
            )
            .await
            .unwrap()
            .id;
        let due = db.store.get(id).await.unwrap().unwrap().next_run_at;
        let sid = id.to_string();
        let out = db.cli(&["tasks", "edit", &sid, "--run-now", "--dry-run"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(
            stdout(&out).contains("would run_now task"),
            "{}",
            stdout(&out)
        );
        let out = db.cli(&["tasks", "edit", &sid, "--run-now"]);
        assert_eq!(code(&out), 2, "no terminal, no --yes: {}", stderr(&out));
        assert_eq!(db.store.get(id).await.unwrap().unwrap().next_run_at, due);

        let done = db.json(&[
            "tasks",
            "edit",
            &sid,
            "--run-now",
            "--yes",
            "--reason",
            "customer waits",
        ]);
        assert_eq!(done["action"], "run_now", "{done}");
        let t = db.store.get(id).await.unwrap().unwrap();
        assert!(t.next_run_at < due, "due now, not in an hour");
        let out = db.cli(&[
            "tasks",
            "edit",
            &sid,
            "--payload",
            "{\"to\":\"x@y\"}",
            "--yes",
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_eq!(
            db.store.get(id).await.unwrap().unwrap().payload,
            "{\"to\":\"x@y\"}"
        );
        let log = db.store.audit_log(id).await.unwrap();
        let entries: Vec<(&str, &str, &str)> = log
            .iter()
            .map(|e| (e.action.as_str(), e.operator.as_str(), e.reason.as_str()))
            .collect();
        assert_eq!(
            entries,
            [
                ("run_now", "ci-operator", "customer waits"),
                ("edit", "ci-operator", "")
            ]
        );

        for (args, exit) in [
            (vec!["--payload", "{nope"], 2),
            (vec![], 2),
            (vec!["--run-in", "soon"], 2),
        ] {
            let mut all = vec!["tasks", "edit", &sid, "--yes"];
            all.extend(args.iter().copied());
            let out = db.cli(&all);
            assert_eq!(code(&out), exit, "{args:?}: {}", stderr(&out));
        }
        let owner = Owner::new("cli-test").unwrap();
        db.store.claim_by_id(id, &owner).await.unwrap().unwrap();
        let out = db.cli(&["tasks", "edit", &sid, "--run-now", "--yes"]);
        assert_eq!(code(&out), 4, "{}", stderr(&out));
        let out = db.cli(&["tasks", "edit", "999999", "--run-now", "--yes"]);
        assert_eq!(code(&out), 3, "{}", stderr(&out));
        assert_eq!(
            db.store.audit_log(id).await.unwrap().len(),
            2,
            "nothing more"
        );
    }
}
