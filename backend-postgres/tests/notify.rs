//! The store's announcements on PostgreSQL, heard by a plain `LISTEN` connection: only
//! at commit, never for a rollback or a duplicate; in a burst at most `Throttle::BURST`
//! per event type at once and a trailing one, while a steady producer is announced at
//! every commit.
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

/// a burst of enqueues of one event type is announced at most `Throttle::BURST` times
/// at once (one at each commit while any is in hand), then once more a window after the
/// last enqueue (so it has committed); another event type has its own; with
/// notifications off nothing is announced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_is_announced_a_few_times_then_once_more() {
    use backstop_core::driver::Throttle;
    let window = Duration::from_secs(4);
    let per = window / Throttle::BURST;
    let burst = Throttle::BURST as usize;
    let Some((store, url)) = store("a_burst_is_announced_a_few_times_then_once_more", window).await
    else {
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
        started.elapsed() < per / 2,
        "the burst must end well before an announcement is regained"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let count = |what: &str| heard.lock().unwrap().iter().filter(|p| *p == what).count();
    assert_eq!(
        (count("BURST"), count("OTHER")),
        (burst, 1),
        "only the leading ones so far"
    );
    // the trailing one: a window after the last enqueue it covers
    tokio::time::sleep(window + Duration::from_millis(500) - started.elapsed().min(window)).await;
    assert_eq!(count("BURST"), burst + 1, "and one trailing");
    assert_eq!(count("OTHER"), 1);

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

/// a steady producer, each enqueue after the previous one was heard and apart by more
/// than window / `Throttle::BURST`, is announced at every commit: none waits for a
/// trailing announcement, though each comes within the window of the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_producer_is_announced_at_every_commit() {
    use backstop_core::driver::Throttle;
    let window = Duration::from_millis(800);
    let per = window / Throttle::BURST;
    let Some((store, url)) = store("a_steady_producer_is_announced_at_every_commit", window).await
    else {
        return;
    };
    let channel = store.listener().unwrap().channel().to_owned();
    let (_listening, heard) = listen(&url, &channel).await;
    for i in 0..12 {
        let committed = std::time::Instant::now();
        store
            .enqueue(NewTask::new("STEADY", format!("k{i}")))
            .await
            .unwrap();
        // heard well before a trailing announcement could come (per / 2 at the soonest
        // after this one, with half of one regained)
        while heard.lock().unwrap().len() < i + 1 {
            assert!(
                committed.elapsed() < per / 2,
                "enqueue {i} not announced at its commit: {:?}",
                heard.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(per + Duration::from_millis(20)).await;
    }
}
