//! The store's announcements on PostgreSQL, heard by a plain `LISTEN` connection: only
//! at commit, never for a rollback or a duplicate, and at most twice per event type per
//! window in a burst (the leading one and a trailing one at the window's end).
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code

use std::sync::{Arc, Mutex};
use std::time::Duration;

use backstop_core::{NewTask, TaskStore};
use backstop_postgres::{PgOptions, PgStore};
use futures_util::StreamExt;
use tokio_postgres::{AsyncMessage, NoTls};

const URL_VAR: &str = "BACKSTOP_TEST_POSTGRES_URL";

/// A store on a schema of its own, or `None` (printed) when the server is not set and
/// not required.
async fn store(case: &str, window: Duration) -> Option<(PgStore, String)> {
    let url = match backstop_testkit::server_url(URL_VAR) {
        Ok(u) => u,
        Err(e) => {
            assert!(
                !backstop_testkit::required("postgres"),
                "postgres is required: {}",
                e.0
            );
            eprintln!("SKIPPED {case}: {}", e.0);
            return None;
        }
    };
    let schema = backstop_testkit::unique_name("bstn");
    let store = PgStore::connect_with(
        &url,
        PgOptions::default()
            .schema(schema)
            .max_connections(4)
            .notify_window(window),
    )
    .await
    .expect("connect");
    store.migrate().await.expect("migrate");
    Some((store, url))
}

/// Payloads heard on `channel`, collected in the background while the returned client
/// lives.
async fn listen(url: &str, channel: &str) -> (tokio_postgres::Client, Arc<Mutex<Vec<String>>>) {
    let (client, mut conn) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    let heard = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&heard);
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = messages.next().await {
            if let AsyncMessage::Notification(n) = m {
                sink.lock().unwrap().push(n.payload().to_owned());
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN \"{channel}\""))
        .await
        .expect("LISTEN");
    (client, heard)
}

/// announced only at commit: a rolled-back enqueue and a duplicate announce nothing, a
/// committed one exactly once, with its event type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_committed_new_task_is_announced() {
    let Some((store, url)) = store("only_a_committed_new_task_is_announced", Duration::ZERO).await
    else {
        return;
    };
    let channel = store.listener().unwrap().channel().to_owned();
    let (_listening, heard) = listen(&url, &channel).await;

    let mut client = store.client().await.unwrap();
    let tx = client.transaction().await.unwrap();
    store
        .enqueue_tx(&tx, &NewTask::new("ROLLED", "a"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(heard.lock().unwrap().is_empty(), "announced before commit");
    tx.rollback().await.unwrap();

    let tx = client.transaction().await.unwrap();
    let e = store
        .enqueue_tx(&tx, &NewTask::new("KEPT", "a"))
        .await
        .unwrap();
    assert!(e.created);
    tx.commit().await.unwrap();
    let dup = store.enqueue(NewTask::new("KEPT", "a")).await.unwrap();
    assert!(!dup.created);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(*heard.lock().unwrap(), vec!["KEPT".to_owned()]);
}

/// a burst of enqueues of one event type inside one window is announced twice (at the
/// first commit, and once at the window's end); another event type has its own window;
/// with notifications off nothing is announced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_is_announced_twice_per_window() {
    let window = Duration::from_secs(1);
    let Some((store, url)) = store("a_burst_is_announced_twice_per_window", window).await else {
        return;
    };
    let channel = store.listener().unwrap().channel().to_owned();
    let (_listening, heard) = listen(&url, &channel).await;
    let started = std::time::Instant::now();
    for i in 0..20 {
        store
            .enqueue(NewTask::new("BURST", format!("k{i}")))
            .await
            .unwrap();
    }
    store.enqueue(NewTask::new("OTHER", "k")).await.unwrap();
    assert!(
        started.elapsed() < window,
        "the burst must fit in the window"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut got = heard.lock().unwrap().clone();
    got.sort();
    assert_eq!(got, vec!["BURST", "OTHER"], "only the leading ones so far");
    tokio::time::sleep(window + Duration::from_millis(500) - started.elapsed().min(window)).await;
    let got = heard.lock().unwrap().clone();
    assert_eq!(
        got.iter().filter(|p| *p == "BURST").count(),
        2,
        "leading + trailing: {got:?}"
    );
    assert_eq!(got.iter().filter(|p| *p == "OTHER").count(), 1, "{got:?}");

    // off: nothing
    let quiet = PgStore::connect_with(
        &url,
        PgOptions::default()
            .schema(store.options().schema.clone())
            .notify(false),
    )
    .await
    .unwrap();
    let before = heard.lock().unwrap().len();
    quiet.enqueue(NewTask::new("QUIET", "k")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(heard.lock().unwrap().len(), before);
}

/// A listener given a URL of its own (`PgListener::with_url`, the way past a pooler)
/// connects through TLS as the URL asks (the TLS-only user, `sslmode=verify-full`) and
/// hears a committed task's announcement; a URL asking for TLS with a bad `sslmode` is
/// refused as `Config` before connecting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_by_url_connects_through_tls() {
    use backstop_core::{ErrorKind, Notifier, Wake, Wakes};
    let case = "a_listener_by_url_connects_through_tls";
    let Some((store, _)) = store(case, Duration::from_millis(5)).await else {
        return;
    };
    let tls_url = match backstop_testkit::server_url("BACKSTOP_TEST_POSTGRES_TLS_URL") {
        Ok(u) => u,
        Err(e) => {
            assert!(
                !backstop_testkit::required("postgres"),
                "postgres is required: {}",
                e.0
            );
            eprintln!("SKIPPED {case}: {}", e.0);
            return;
        }
    };
    let e = backstop_postgres::PgListener::with_url(&store, "postgres://x@h/db?sslmode=maybe")
        .unwrap_err();
    assert_eq!((e.kind(), e.operation()), (ErrorKind::Config, "listen"));
    let listener = backstop_postgres::PgListener::with_url(&store, &tls_url).unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&got);
    let wakes = Wakes::new(move |w| sink.lock().unwrap().push(w));
    let listening = tokio::spawn(async move { listener.listen(&wakes).await });
    let heard = |w: Wake| got.lock().unwrap().contains(&w);
    for _ in 0..500 {
        if heard(Wake::All) || listening.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        heard(Wake::All),
        "connected and listening: {:?}",
        got.lock().unwrap()
    );
    store
        .enqueue(NewTask::new("TLS_HEARD", "k1"))
        .await
        .unwrap();
    for _ in 0..500 {
        if heard(Wake::EventType("TLS_HEARD".into())) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        heard(Wake::EventType("TLS_HEARD".into())),
        "{:?}",
        got.lock().unwrap()
    );
    listening.abort();
}
