//! A Galera node that leaves the primary component while a store's pooled connections
//! are on it: the cluster of `scripts/servers.sh` (`BACKSTOP_TEST_GALERA_URL`), its
//! node 1 isolated from the others through Galera's own `gmcast.isolate` (as a network
//! partition would cut it off), then let back in and waited for until it is Synced.
//!
//! A test binary of its own: cargo runs test binaries one after another, so no case of
//! the conformance suite writes to node 1 while it is cut off.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code

use std::process::Command;
use std::time::{Duration, Instant};

use backstop_core::{Mark, NewTask, Owner, Status, TaskStore};
use backstop_mysql::{MySqlOptions, MySqlStore};

/// Node `n`'s answer to `sql` through its socket, as root (None: no answer).
fn node_says(dir: &str, n: u8, sql: &str) -> Option<String> {
    let out = Command::new("mariadb")
        .args([
            "--no-defaults",
            "-S",
            &format!("{dir}/n{n}/sock"),
            "-u",
            "root",
        ])
        .args(["-N", "-B", "-e", sql])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn status(dir: &str, n: u8, name: &str) -> String {
    node_says(dir, n, &format!("SHOW STATUS LIKE '{name}'"))
        .and_then(|l| l.split('\t').nth(1).map(str::to_owned))
        .unwrap_or_default()
}

/// Node 1 cut off from the cluster while it lives; let back in, Synced, when dropped.
struct Isolated<'a>(&'a str);

impl<'a> Isolated<'a> {
    fn node_one(dir: &'a str) -> Self {
        node_says(
            dir,
            1,
            "SET GLOBAL wsrep_provider_options = 'gmcast.isolate = 1'",
        )
        .expect("isolate node 1");
        let deadline = Instant::now() + Duration::from_secs(30);
        while status(dir, 1, "wsrep_ready") != "OFF" {
            assert!(Instant::now() < deadline, "node 1 never left the cluster");
            std::thread::sleep(Duration::from_millis(100));
        }
        Isolated(dir)
    }
}

impl Drop for Isolated<'_> {
    fn drop(&mut self) {
        let _ = node_says(
            self.0,
            1,
            "SET GLOBAL wsrep_provider_options = 'gmcast.isolate = 0'",
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while status(self.0, 1, "wsrep_local_state_comment") != "Synced"
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The store's connections are on node 1 (the URL's first) when it leaves the primary
/// component. Its next statement there is refused (MySQL error 1047, temporary); the
/// pool moves to node 2 and closes the connections it opened before (one refusal, not
/// one per pooled connection), and every task is claimed and completed once, on node 2,
/// while node 1 is still cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_leaves_a_node_that_goes_non_primary() {
    let (Ok(url), Ok(dir)) = (
        std::env::var("BACKSTOP_TEST_GALERA_URL"),
        std::env::var("BACKSTOP_TEST_GALERA_DIR"),
    ) else {
        assert!(
            !backstop_testkit::required("galera"),
            "galera is required but BACKSTOP_TEST_GALERA_URL or _DIR is not set"
        );
        eprintln!(
            "SKIPPED a_store_leaves_a_node_that_goes_non_primary: BACKSTOP_TEST_GALERA_URL \
             and BACKSTOP_TEST_GALERA_DIR are not set (scripts/test sets them)"
        );
        return;
    };
    let db = "backstop_nonprimary";
    node_says(
        &dir,
        1,
        &format!("DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}"),
    )
    .expect("the case's database");
    let store = MySqlStore::connect_with(
        &format!("{}/{db}", url.trim_end_matches('/')),
        MySqlOptions::default()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(2)),
    )
    .await
    .expect("open the store");
    store.migrate().await.expect("migrate");
    let node = || async {
        let mut conn = store.pool().acquire().await.expect("a connection");
        sqlx::query_scalar::<_, String>("SELECT @@wsrep_node_name")
            .fetch_one(&mut *conn)
            .await
            .expect("the node's name")
    };
    assert_eq!(node().await, "n1", "the store starts on node 1");
    let owner = Owner::new("nonprimary").expect("owner");
    let types = ["CUT".to_owned()];
    let mut ids = Vec::new();
    for i in 0..20 {
        let task = NewTask::new("CUT", format!("k{i}"));
        ids.push(store.enqueue(task).await.expect("enqueue").id);
    }
    let finish = |got: Vec<backstop_core::Task>| async {
        let marks: Vec<Mark> = got.iter().map(|t| Mark::success(t.lease())).collect();
        let applied = store.mark(&marks).await.expect("mark");
        assert!(applied.iter().all(|a| *a), "each completion applies");
        got.into_iter().map(|t| t.id).collect::<Vec<_>>()
    };
    // the pool's four connections open on node 1
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(store.pool().acquire().await.expect("a connection"));
    }
    drop(held);
    let mut done = finish(
        store
            .claim_batch(&owner, &types, 4)
            .await
            .expect("claim on node 1"),
    )
    .await;

    let cut = Isolated::node_one(&dir);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut errors = 0;
    while done.len() < ids.len() {
        assert!(
            Instant::now() < deadline,
            "{errors} errors, {} of {} done: the store stayed on the cut-off node",
            done.len(),
            ids.len()
        );
        match store.claim_batch(&owner, &types, 4).await {
            Ok(got) => done.extend(finish(got).await),
            Err(e) => {
                assert!(e.is_temporary(), "{e}");
                errors += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    assert_eq!(
        status(&dir, 1, "wsrep_ready"),
        "OFF",
        "node 1 still cut off"
    );
    // the first refusal moves the pool, which closes the other three connections it
    // had opened on node 1 instead of handing each out to be refused in turn
    assert_eq!(errors, 1, "one statement refused on the cut-off node");
    assert_eq!(node().await, "n2", "the store moved to node 2");
    drop(cut);

    done.sort_unstable();
    ids.sort_unstable();
    assert_eq!(done, ids, "each task claimed and completed once");
    for id in ids {
        let t = store.get(id).await.expect("get").expect("the task");
        assert_eq!((t.status, t.attempts), (Status::Succeeded, 1));
    }
}
