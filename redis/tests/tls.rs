//! Redis over TLS (rustls): `rediss://…?sslrootcert=<ca.pem>`, the URL convention of the
//! database backends. The relay, the key lock and the notifier reach the test server's
//! TLS port with the test CA; with another CA the server's certificate is refused.
//!
//! The server is scripts/test's Redis (`BACKSTOP_TEST_REDIS_TLS_URL`: its TLS port, the
//! test CA), the certificate the one its PostgreSQL and MariaDB use.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code

mod common;
use common::{required, unique};

use backstop_core::{NewTask, Notifier, TaskStore};
use backstop_redis::redis;
use backstop_redis::{KeyLock, RedisNotifier, RelayOptions, StreamRelay};
use backstop_sqlite::SqliteStore;

/// The TLS URL, or `None` (printed) when not set and not required.
fn tls_url(case: &str) -> Option<String> {
    match std::env::var("BACKSTOP_TEST_REDIS_TLS_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            assert!(!required("redis-tls"), "redis-tls is required for {case}");
            eprintln!("SKIPPED {case}: BACKSTOP_TEST_REDIS_TLS_URL is not set");
            None
        }
    }
}

/// One task in a SQLite store of its own, as the relay's handler would get it.
async fn one_task() -> (tempfile::TempDir, backstop_core::Task) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("tls.db")).await.unwrap();
    store.migrate().await.unwrap();
    let e = store
        .enqueue(NewTask::new("ORDER_PLACED", "o1"))
        .await
        .unwrap();
    let task = store.get(e.id).await.unwrap().unwrap();
    (dir, task)
}

/// The relay, a key lock and the notifier over TLS, checked against the test CA; what the
/// relay added is on the server (read back over TLS by redis-rs itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_parts_work_over_tls_with_the_urls_root_certificate() {
    let Some(url) = tls_url("redis_tls") else {
        return;
    };
    let stream = unique("tls");
    let (_dir, task) = one_task().await;
    let relay = StreamRelay::open(&url, RelayOptions::new(&stream)).unwrap();
    relay.publish(&task).await.expect("XADD over TLS");

    let locks = KeyLock::open(&url, unique("tls-lock")).unwrap();
    let guard = locks
        .acquire("k", std::time::Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the lock");
    assert!(locks.release(&guard).await.unwrap());
    RedisNotifier::open(&url, unique("tls-wakes"))
        .unwrap()
        .notify("ORDER_PLACED")
        .await
        .expect("PUBLISH over TLS");

    // read back with redis-rs's own TLS client and the same CA
    let (base, ca) = url.split_once("?sslrootcert=").expect("a CA in the URL");
    let client = redis::Client::build_with_tls(
        base,
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(ca).unwrap()),
        },
    )
    .unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let len: i64 = redis::cmd("XLEN")
        .arg(&stream)
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(len, 1);
}

/// With another CA the server's certificate is refused: the relay's publish fails and
/// says why; nothing is added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_from_another_ca_is_refused() {
    let Some(url) = tls_url("redis_tls_other_ca") else {
        return;
    };
    let other = std::env::var("BACKSTOP_TEST_TLS_OTHER_CA").expect("scripts/test sets it");
    let (base, _) = url.split_once("?sslrootcert=").expect("a CA in the URL");
    let wrong = format!("{base}?sslrootcert={other}");
    let (_dir, task) = one_task().await;
    let stream = unique("tls-refused");
    let relay = StreamRelay::open(&wrong, RelayOptions::new(&stream)).unwrap();
    let e = relay.publish(&task).await.expect_err("refused");
    let msg = e.to_string().to_lowercase();
    assert!(msg.contains("certificate") || msg.contains("issuer"), "{e}");
}
