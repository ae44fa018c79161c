//! The store's announcements on PostgreSQL, heard by a plain `LISTEN` connection: only
//! at commit, never for a rollback or a duplicate, a single enqueue's by id
//! (`Wake::task_message`); in a burst beside other enqueues under way at most
//! `Throttle::BURST` per event type at once and a trailing one (by type), while a steady
//! producer, one enqueue at a time, is announced at every commit.
//! An engine that has drained a type claims a task named by id.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code

use std::sync::{Arc, Mutex};
use std::time::Duration;

use backstop_core::{NewTask, TaskStore, Wake};
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

/// A store on `store`'s schema that announces nothing (`notify` off).
async fn quiet_beside(store: &PgStore, url: &str) -> PgStore {
    PgStore::connect_with(
        url,
        PgOptions::default()
            .schema(store.options().schema.clone())
            .notify(false),
    )
    .await
    .expect("connect")
}

/// Wait (up to 10 s) until a statement on `schema`'s tables waits for a lock.
async fn waits_for_a_lock(url: &str, schema: &str) {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    tokio::spawn(conn);
    for _ in 0..1000 {
        let row = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'",
                &[&schema],
            )
            .await
            .expect("pg_stat_activity");
        if row.get::<_, i64>(0) > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no statement on {schema} waits for a lock");
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
/// committed one exactly once, by id and event type.
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
    assert_eq!(
        *heard.lock().unwrap(),
        vec![Wake::task_message(e.id, "KEPT")]
    );
}

/// a burst of enqueues of one event type, each beside another enqueue of the store
/// under way, is announced at most `Throttle::BURST` times at once (one at each commit
/// while any is in hand), then once more a window after the last enqueue (so it has
/// committed); another event type has its own; with notifications off nothing is
/// announced.
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
    // the enqueue under way beside the burst: a duplicate of a task another transaction
    // wrote and has not committed waits for that transaction
    let mut holder = store.client().await.unwrap();
    let open = holder.transaction().await.unwrap();
    store
        .enqueue_tx(&open, &NewTask::new("HOLD", "k"))
        .await
        .unwrap();
    let waiting = {
        let store = store.clone();
        tokio::spawn(async move { store.enqueue(NewTask::new("HOLD", "k")).await })
    };
    waits_for_a_lock(&url, &store.options().schema).await;
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
    // the leading ones name their task, the trailing one its type only
    let of_type = |text: &str| match Wake::from_message(text) {
        Wake::Task { event_type, .. } | Wake::EventType(event_type) => event_type,
        other => panic!("not an enqueue's announcement: {other:?}"),
    };
    let count = |what: &str| {
        let heard = heard.lock().unwrap();
        heard.iter().filter(|p| of_type(p) == what).count()
    };
    let trailing = || {
        let heard = heard.lock().unwrap();
        heard.iter().filter(|p| p.as_str() == "BURST").count()
    };
    assert_eq!(
        (count("BURST"), count("OTHER")),
        (burst, 1),
        "only the leading ones so far"
    );
    // the trailing one: a window after the last enqueue it covers
    tokio::time::sleep(window + Duration::from_millis(500) - started.elapsed().min(window)).await;
    assert_eq!(count("BURST"), burst + 1, "and one trailing");
    assert_eq!(trailing(), 1, "by type: it covers several tasks");
    assert_eq!(count("OTHER"), 1);
    // the held task: announced at its commit; its duplicate not at all
    open.commit().await.unwrap();
    assert!(!waiting.await.unwrap().unwrap().created);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(count("HOLD"), 1);

    // off: nothing
    let quiet = quiet_beside(&store, &url).await;
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
    use backstop_core::{ErrorKind, Notifier, Wakes};
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
    let e = store
        .enqueue(NewTask::new("TLS_HEARD", "k1"))
        .await
        .unwrap();
    let named = Wake::Task {
        id: e.id,
        event_type: "TLS_HEARD".into(),
    };
    for _ in 0..500 {
        if heard(named.clone()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(heard(named), "{:?}", got.lock().unwrap());
    listening.abort();
}

/// a steady producer — one enqueue at a time, none other of the store under way — is
/// announced at every commit however fast it goes: here through the store's own
/// transaction, the caller's and a batch, each right after the previous one was heard,
/// with a window (a minute) that regains no announcement meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_producer_is_announced_at_every_commit() {
    use backstop_core::driver::Throttle;
    let window = Duration::from_secs(60);
    let Some((store, url)) = store("a_steady_producer_is_announced_at_every_commit", window).await
    else {
        return;
    };
    let channel = store.listener().unwrap().channel().to_owned();
    let (_listening, heard) = listen(&url, &channel).await;
    let rounds = 4 * Throttle::BURST as usize;
    let mut ids = Vec::new();
    for i in 0..rounds {
        let task = NewTask::new("STEADY", format!("k{i}"));
        let committed = std::time::Instant::now();
        match i % 3 {
            0 => ids.push(Some(store.enqueue(task).await.unwrap().id)),
            1 => {
                let mut client = store.client().await.unwrap();
                let tx = client.transaction().await.unwrap();
                ids.push(Some(store.enqueue_tx(&tx, &task).await.unwrap().id));
                tx.commit().await.unwrap();
            }
            _ => {
                let two = [task, NewTask::new("STEADY", format!("k{i}b"))];
                store.enqueue_many(&two).await.unwrap();
                ids.push(None);
            }
        }
        while heard.lock().unwrap().len() < i + 1 {
            assert!(
                committed.elapsed() < Duration::from_secs(5),
                "enqueue {i} not announced at its commit: {:?}",
                heard.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    // a single enqueue's by id, a batch's by type
    let expected: Vec<String> = ids
        .iter()
        .map(|id| match id {
            Some(id) => Wake::task_message(*id, "STEADY"),
            None => "STEADY".to_owned(),
        })
        .collect();
    assert_eq!(*heard.lock().unwrap(), expected);
}

/// An engine woken by a task's announcement claims it by id once its last claim of the
/// type came back short (nothing older was due then); before that it polls the type.
/// Its poller is an hour away, so every start here comes from a wake-up: the first by a
/// poll, the next ones by id. Tasks committed without an announcement (a store with
/// `notify` off) are not claimed ahead of their turn by such a wake-up: they wait for a
/// poll, as they would without it, and every task runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_engine_claims_the_named_task_by_id_once_drained() {
    use backstop_core::{handler_fn, Engine, EngineConfig, HandlerError, HandlerOptions, Task};
    let case = "a_woken_engine_claims_the_named_task_by_id_once_drained";
    let Some((store, url)) = store(case, Duration::ZERO).await else {
        return;
    };
    let (tx, mut started) = tokio::sync::mpsc::unbounded_channel::<String>();
    let engine = Engine::builder(store.clone())
        .config(
            EngineConfig::default()
                .first_poll_delay(Duration::from_secs(3600))
                .poll_interval(Duration::from_secs(3600)),
        )
        .handler(
            "WOKEN",
            handler_fn(move |task: Task| {
                let _ = tx.send(task.biz_key.clone());
                async { Ok::<_, HandlerError>(()) }
            }),
            HandlerOptions::default(),
        )
        .notifier(Arc::new(store.listener().unwrap()))
        .start()
        .unwrap();
    async fn next(started: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> String {
        tokio::time::timeout(Duration::from_secs(10), started.recv())
            .await
            .expect("a start within 10 s")
            .unwrap()
    }
    // the listener's first message (Wake::All) polls every type: none is drained until
    // a claim of it came back short
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut keys = Vec::new();
    for key in ["a", "b", "c"] {
        store.enqueue(NewTask::new("WOKEN", key)).await.unwrap();
        keys.push(next(&mut started).await);
    }
    assert_eq!(keys, ["a", "b", "c"]);
    let c = engine.counters();
    assert_eq!(
        (c.polled, c.woken_claims),
        (1, 2),
        "a polled, b and c by id: {c:?}"
    );

    // three due tasks committed unannounced, then one announced: it is claimed by id
    // and starts; the others wait for a poll, and each task runs once
    let quiet = quiet_beside(&store, &url).await;
    for key in ["old1", "old2", "old3"] {
        quiet.enqueue(NewTask::new("WOKEN", key)).await.unwrap();
    }
    store.enqueue(NewTask::new("WOKEN", "new")).await.unwrap();
    assert_eq!(next(&mut started).await, "new");
    assert_eq!(engine.counters().woken_claims, 3);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(started.try_recv().is_err(), "the others wait for a poll");
    engine.poll_now();
    let mut old: Vec<String> = Vec::new();
    for _ in 0..3 {
        old.push(next(&mut started).await);
    }
    old.sort();
    assert_eq!(old, ["old1", "old2", "old3"]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(started.try_recv().is_err(), "each task once");
    let c = engine.counters();
    assert_eq!((c.polled, c.woken_claims), (4, 3), "{c:?}");
    engine.shutdown().await;
}
