//! A store's writer node failing under it, on the cluster of `scripts/servers.sh`
//! (`BACKSTOP_TEST_GALERA_URL`, `BACKSTOP_TEST_GALERA_DIR`): node 1 isolated from the
//! others through Galera's own `gmcast.isolate` (as a network partition would cut it
//! off), or killed with `kill -9`; then let back in or started again (its
//! `restart.sh`), and waited for until it is `Synced`.
//!
//! A test binary of its own: cargo runs test binaries one after another, so no case of
//! the conformance suite writes to node 1 while it is down; its two cases take turns.
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

/// The cases take turns: each takes node 1 down.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The cluster's URL and directory, or why the case skips (a panic when it is required).
fn cluster(case: &str) -> Option<(String, String)> {
    match (
        std::env::var("BACKSTOP_TEST_GALERA_URL"),
        std::env::var("BACKSTOP_TEST_GALERA_DIR"),
    ) {
        (Ok(url), Ok(dir)) if !url.is_empty() && !dir.is_empty() => Some((url, dir)),
        _ => {
            assert!(
                !backstop_testkit::required("galera"),
                "galera is required but BACKSTOP_TEST_GALERA_URL or _DIR is not set"
            );
            eprintln!(
                "SKIPPED {case}: BACKSTOP_TEST_GALERA_URL and BACKSTOP_TEST_GALERA_DIR are \
                 not set (scripts/test sets them)"
            );
            None
        }
    }
}

/// The case's turn with node 1, the cluster's directory, and a store on the whole
/// cluster (node 1 first) over a fresh database `db` with its 20 tasks; `None` when the
/// case skips.
async fn on_node_one(
    case: &str,
    db: &str,
) -> Option<(
    tokio::sync::MutexGuard<'static, ()>,
    String,
    MySqlStore,
    Vec<i64>,
)> {
    let (url, dir) = cluster(case)?;
    let turn = SERIAL.lock().await;
    let (store, ids) = store_on_node_one(&url, &dir, db).await;
    Some((turn, dir, store, ids))
}

/// A store on the whole cluster (node 1 first) over a fresh database `db`, migrated,
/// with 20 tasks of type `CUT` and four pooled connections opened on node 1.
async fn store_on_node_one(url: &str, dir: &str, db: &str) -> (MySqlStore, Vec<i64>) {
    node_says(
        dir,
        1,
        &format!("DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}"),
    )
    .expect("the case's database");
    let store = MySqlStore::connect_with(
        &format!("{}/{db}", url.trim_end_matches('/')),
        MySqlOptions::default()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(10)),
    )
    .await
    .expect("open the store");
    store.migrate().await.expect("migrate");
    let mut ids = Vec::new();
    for i in 0..20 {
        let task = NewTask::new("CUT", format!("k{i}"));
        ids.push(store.enqueue(task).await.expect("enqueue").id);
    }
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(store.pool().acquire().await.expect("a connection"));
    }
    drop(held);
    assert_eq!(node(&store).await, "n1", "the store starts on node 1");
    (store, ids)
}

/// The node a connection of `store` is on.
async fn node(store: &MySqlStore) -> String {
    let mut conn = store.pool().acquire().await.expect("a connection");
    sqlx::query_scalar::<_, String>("SELECT @@wsrep_node_name")
        .fetch_one(&mut *conn)
        .await
        .expect("the node's name")
}

/// Claim and complete the tasks of `store` until none is left, each error temporary:
/// the ids done and the errors met.
async fn drain(store: &MySqlStore, owner: &Owner, within: Duration) -> (Vec<i64>, usize) {
    let types = ["CUT".to_owned()];
    let deadline = Instant::now() + within;
    let (mut done, mut errors) = (Vec::new(), 0);
    loop {
        assert!(
            Instant::now() < deadline,
            "{errors} errors, {} done: the store stayed on the failed node",
            done.len()
        );
        match store.claim_batch(owner, &types, 4).await {
            Ok(got) if got.is_empty() => return (done, errors),
            Ok(got) => {
                let marks: Vec<Mark> = got.iter().map(|t| Mark::success(t.lease())).collect();
                let applied = store.mark(&marks).await.expect("mark");
                assert!(applied.iter().all(|a| *a), "each completion applies");
                done.extend(got.into_iter().map(|t| t.id));
            }
            Err(e) => {
                assert!(e.is_temporary(), "{e}");
                errors += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Each of `ids` succeeded at its first attempt.
async fn each_once(store: &MySqlStore, mut done: Vec<i64>, mut ids: Vec<i64>) {
    done.sort_unstable();
    ids.sort_unstable();
    assert_eq!(done, ids, "each task claimed and completed once");
    for id in ids {
        let t = store.get(id).await.expect("get").expect("the task");
        assert_eq!((t.status, t.attempts), (Status::Succeeded, 1));
    }
}

/// Node 1 is back: wait (up to 12 s: a fail-back election every 5 s) until the store's
/// connections are on it again, run one more task there, and check that each of `ids`
/// (with it) succeeded at its first attempt.
async fn back_on_node_one_and_each_ran_once(
    store: &MySqlStore,
    owner: &Owner,
    mut done: Vec<i64>,
    mut ids: Vec<i64>,
) {
    let back = Instant::now();
    while node(store).await != "n1" {
        assert!(
            back.elapsed() < Duration::from_secs(12),
            "the store stayed on node 2 after node 1 came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let late = store
        .enqueue(NewTask::new("CUT", "after"))
        .await
        .expect("enqueue on node 1");
    ids.push(late.id);
    done.extend(drain(store, owner, Duration::from_secs(10)).await.0);
    each_once(store, done, ids).await;
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
/// while node 1 is still cut off. Once node 1 is back and `Synced`, the store goes back
/// to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_leaves_a_node_that_goes_non_primary() {
    let Some((_turn, dir, store, ids)) = on_node_one(
        "a_store_leaves_a_node_that_goes_non_primary",
        "backstop_nonprimary",
    )
    .await
    else {
        return;
    };
    let owner = Owner::new("nonprimary").expect("owner");

    let cut = Isolated::node_one(&dir);
    let (done, errors) = drain(&store, &owner, Duration::from_secs(30)).await;
    assert_eq!(
        status(&dir, 1, "wsrep_ready"),
        "OFF",
        "node 1 still cut off"
    );
    // the first refusal moves the pool, which closes the other three connections it
    // had opened on node 1 instead of handing each out to be refused in turn
    assert_eq!(errors, 1, "one statement refused on the cut-off node");
    assert_eq!(node(&store).await, "n2", "the store moved to node 2");
    drop(cut);

    // node 1 is back and Synced: at a fail-back election the store's connections go
    // back to it, so every process writes to one node again
    back_on_node_one_and_each_ran_once(&store, &owner, done, ids).await;
}

/// Node 1 killed with `kill -9` while the store's four pooled connections are on it.
/// The first statement on them fails (its connection broke); a check of the node is
/// refused, so the pool moves to node 2 at once and closes the other three, not after
/// its acquire timeout (10 s), and every task is claimed and completed once there.
/// Node 1, started again, rejoins (IST) and the store goes back to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_leaves_a_node_killed_under_it_and_comes_back() {
    let Some((_turn, dir, store, ids)) = on_node_one(
        "a_store_leaves_a_node_killed_under_it_and_comes_back",
        "backstop_killed",
    )
    .await
    else {
        return;
    };
    let owner = Owner::new("killed").expect("owner");
    let restart = format!("{dir}/n1/restart.sh");
    // started again (and waited for until Synced) however the case ends
    struct Restart(String);
    impl Drop for Restart {
        fn drop(&mut self) {
            let _ = Command::new(&self.0).status();
        }
    }
    let pid = std::fs::read_to_string(format!("{dir}/n1/pid")).expect("node 1's pid");
    let killed = Command::new("kill")
        .args(["-9", pid.trim()])
        .status()
        .expect("kill");
    assert!(killed.success(), "kill -9 node 1");
    let restarting = Restart(restart);
    let at = Instant::now();
    let (done, errors) = drain(&store, &owner, Duration::from_secs(30)).await;
    let took = at.elapsed();
    // one broken statement, and the pool is on node 2; the claims there wait while the
    // cluster waits out node 1 (Galera's suspect timeout, 5 s), not for the pool's
    // acquire timeout on a node that refuses connections
    assert_eq!(errors, 1, "one statement failed on the killed node");
    assert!(
        took < Duration::from_secs(9),
        "the store took {took:?} to leave the killed node (its acquire timeout is 10 s)"
    );
    assert_eq!(node(&store).await, "n2", "the store moved to node 2");

    let waited = tokio::task::spawn_blocking(move || drop(restarting));
    waited.await.expect("node 1 started again");
    assert_eq!(
        status(&dir, 1, "wsrep_local_state_comment"),
        "Synced",
        "node 1 rejoined"
    );
    back_on_node_one_and_each_ran_once(&store, &owner, done, ids).await;
}
