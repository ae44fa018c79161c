//! The relay and the consumer on the test Redis (`BACKSTOP_TEST_REDIS_URL`), with the
//! inbox on SQLite: entries, trimming, exactly-once processing, groups, dead letters,
//! take-over of dead consumers' entries, and the start-up drain.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code

mod common;
use common::{conn, redis_url, unique};

use std::time::{Duration, Instant};

use backstop_core::{Engine, EngineConfig, HandlerError, HandlerOptions, Status, TaskStore};
use backstop_redis::redis::{self, Value};
use backstop_redis::{ConsumerOptions, RelayOptions, StreamConsumer, StreamRelay};
use backstop_sqlite::{sqlite_handler, SqliteStore};

const PATIENCE: Duration = Duration::from_secs(20);

async fn cmd(c: &mut redis::aio::MultiplexedConnection, args: &[&str]) -> Value {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(c).await.unwrap()
}

async fn int(c: &mut redis::aio::MultiplexedConnection, args: &[&str]) -> i64 {
    match cmd(c, args).await {
        Value::Int(n) => n,
        other => panic!("{args:?} answered {other:?}"),
    }
}

/// `XRANGE` as (entry id, fields).
async fn range(
    c: &mut redis::aio::MultiplexedConnection,
    stream: &str,
) -> Vec<(String, Vec<(String, String)>)> {
    let v: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query_async(c)
        .await
        .unwrap();
    v
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> &'a str {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no field {name} in {fields:?}"))
}

async fn store() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("db.sqlite"))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    store
        .transaction(|tx| {
            tx.execute_batch(
                "CREATE TABLE effects (msg_id TEXT NOT NULL, grp TEXT NOT NULL, PRIMARY KEY (msg_id, grp))",
            )
            .map_err(|e| backstop_core::Error::new(backstop_core::ErrorKind::Unexpected, "t", e.to_string()))
        })
        .await
        .unwrap();
    (dir, store)
}

/// A handler recording each message's effect once per group (the table's key would
/// refuse a second effect: the inbox must make sure there is none), failing with a
/// retryable error for payload "flaky" and a permanent one for "poison".
fn effect(group: &'static str) -> backstop_sqlite::SqliteHandler {
    sqlite_handler(move |tx, m| {
        match m.payload.as_str() {
            "poison" => return Err(HandlerError::fail("cannot be processed")),
            "flaky" => return Err(HandlerError::retry("downstream down")),
            _ => {}
        }
        tx.execute(
            "INSERT INTO effects (msg_id, grp) VALUES (?1, ?2)",
            [m.id.as_str(), group],
        )?;
        Ok(())
    })
}

async fn effects(store: &SqliteStore, group: &'static str) -> i64 {
    store
        .transaction(move |tx| {
            tx.query_row(
                "SELECT COUNT(*) FROM effects WHERE grp = ?1",
                [group],
                |r| r.get(0),
            )
            .map_err(|e| {
                backstop_core::Error::new(backstop_core::ErrorKind::Unexpected, "t", e.to_string())
            })
        })
        .await
        .unwrap()
}

async fn until<F: FnMut() -> bool>(what: &str, mut f: F) {
    let deadline = Instant::now() + PATIENCE;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Add one message the way the relay does.
async fn publish(
    c: &mut redis::aio::MultiplexedConnection,
    stream: &str,
    msg_id: &str,
    payload: &str,
) {
    let _: String = redis::cmd("XADD")
        .arg(stream)
        .arg("*")
        .arg("msg_id")
        .arg(msg_id)
        .arg("event_type")
        .arg("ORDER_PLACED")
        .arg("biz_key")
        .arg(format!("order-{msg_id}"))
        .arg("payload")
        .arg(payload)
        .query_async(c)
        .await
        .unwrap();
}

/// Pending entries of `group`.
async fn pending(c: &mut redis::aio::MultiplexedConnection, stream: &str, group: &str) -> i64 {
    match cmd(c, &["XPENDING", stream, group]).await {
        Value::Array(parts) => match parts.first() {
            Some(Value::Int(n)) => *n,
            other => panic!("XPENDING answered {other:?}"),
        },
        other => panic!("XPENDING answered {other:?}"),
    }
}

/// Fast settings for tests.
fn fast(stream: &str, group: &str) -> ConsumerOptions {
    ConsumerOptions::new(stream, group)
        .block(Duration::from_millis(200))
        .handler_timeout(Duration::from_millis(500))
        .reclaim_idle(Duration::from_millis(800))
        .reclaim_interval(Duration::from_millis(100))
        .max_deliveries(3)
}

/// relay: every task handled by the engine becomes one entry with its message id, type,
/// key, payload and the relay's headers; a retried publish of one task carries the same
/// message id (the consumer's inbox removes the duplicate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_publishes_each_task_with_a_stable_message_id() {
    let Some(url) = redis_url("relay_publishes_each_task_with_a_stable_message_id") else {
        return;
    };
    let stream = unique("relay");
    let (_dir, store) = store().await;
    let relay =
        StreamRelay::open(&url, RelayOptions::new(&stream).header("source", "orders")).unwrap();
    let engine = Engine::builder(store.clone())
        .config(EngineConfig::default().retention(None))
        .handler(
            "ORDER_PLACED",
            relay,
            HandlerOptions::default().concurrency(4),
        )
        .start()
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..20 {
        let (e, _) = engine
            .enqueue(
                engine
                    .task("ORDER_PLACED", format!("o{i}"))
                    .payload_raw(format!("{{\"n\":{i}}}")),
            )
            .await
            .unwrap();
        ids.push(e.id);
    }
    for id in &ids {
        let deadline = Instant::now() + PATIENCE;
        while store.get(*id).await.unwrap().unwrap().status != Status::Succeeded {
            assert!(Instant::now() < deadline, "task {id} not relayed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    engine.shutdown().await;
    let mut c = conn(&url).await;
    let entries = range(&mut c, &stream).await;
    assert_eq!(entries.len(), 20);
    let check = StreamRelay::open(&url, RelayOptions::new(&stream)).unwrap();
    for id in &ids {
        let t = store.get(*id).await.unwrap().unwrap();
        let (_, f) = entries
            .iter()
            .find(|(_, f)| field(f, "msg_id") == check.message_id(&t))
            .unwrap_or_else(|| panic!("no entry for task {id}"));
        assert_eq!(field(f, "event_type"), "ORDER_PLACED");
        assert_eq!(field(f, "biz_key"), t.biz_key);
        assert_eq!(field(f, "payload"), t.payload);
        assert_eq!(field(f, "h.source"), "orders");
        // a second publish (a retry after a lost reply) carries the same message id
        check.publish(&t).await.unwrap();
    }
    let again = range(&mut c, &stream).await;
    assert_eq!(again.len(), 40);
    let distinct: std::collections::HashSet<_> = again
        .iter()
        .map(|(_, f)| field(f, "msg_id").to_owned())
        .collect();
    assert_eq!(distinct.len(), 20);
}

/// relay + inbox: a task whose payload holds a branch call (`RelayOptions::branch_field`)
/// is published with the call as headers, and the consumer's inbox runs its handler
/// behind the participant barrier: a compensation that comes first runs nothing, the
/// action after it runs nothing (hanging), another branch's action runs once and its
/// second publication (a second task) nothing; a message without a call runs as ever. A
/// payload whose call is not valid fails its task for good, and publishes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relayed_saga_steps_run_behind_the_consumers_barrier() {
    let Some(url) = redis_url("relayed_saga_steps_run_behind_the_consumers_barrier") else {
        return;
    };
    let stream = unique("branch");
    let (_dir, store) = store().await;
    let relay = StreamRelay::open(&url, RelayOptions::new(&stream).branch_field("branch")).unwrap();
    let engine = Engine::builder(store.clone())
        .config(EngineConfig::default().retention(None))
        .handler("STOCK", relay, HandlerOptions::default().concurrency(1))
        .start()
        .unwrap();
    let call = |branch: &str, op: &str| {
        format!(
            r#"{{"sku": 7, "branch": {{"gid": "saga:order:9", "branch_id": "{branch}", "op": "{op}"}}}}"#
        )
    };
    let payloads = [
        call("stock", "compensate"),
        call("stock", "action"),
        call("coupon", "action"),
        call("coupon", "action"),
        r#"{"sku": 8}"#.to_owned(),
        call("stock", "undo"),
    ];
    let mut tasks = Vec::new();
    for (i, payload) in payloads.iter().enumerate() {
        let (e, _) = engine
            .enqueue(
                engine
                    .task("STOCK", format!("b{i}"))
                    .payload_raw(payload.clone()),
            )
            .await
            .unwrap();
        // one at a time: the stream's order is the order of the calls
        let deadline = Instant::now() + PATIENCE;
        loop {
            let t = store.get(e.id).await.unwrap().unwrap();
            if matches!(t.status, Status::Succeeded | Status::Failed) {
                tasks.push(t);
                break;
            }
            assert!(Instant::now() < deadline, "task {} not relayed", e.id);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    engine.shutdown().await;
    let bad = &tasks[5];
    assert_eq!((bad.status, bad.attempts), (Status::Failed, 1), "{bad:?}");
    let mut c = conn(&url).await;
    let entries = range(&mut c, &stream).await;
    assert_eq!(entries.len(), 5, "the bad call is not published");
    for ((_, f), op) in entries
        .iter()
        .zip(["compensate", "action", "action", "action"])
    {
        assert_eq!(field(f, "h.backstop-gid"), "saga:order:9");
        assert_eq!(field(f, "h.backstop-op"), op);
    }
    assert!(entries[4].1.iter().all(|(k, _)| !k.starts_with("h.")));
    let consumer =
        StreamConsumer::start(&url, store.clone(), effect("stock"), fast(&stream, "stock"))
            .unwrap();
    until("the five entries to be processed", || {
        consumer.counters().processed == 5
    })
    .await;
    consumer.shutdown().await;
    // the first coupon action and the message without a call
    assert_eq!(effects(&store, "stock").await, 2);
    let records = store.barrier_records("saga:order:9").await.unwrap();
    assert_eq!(records.len(), 3, "{records:?}");
}

/// trimming: never without a group; with groups, only below what every group has read
/// and acknowledged (a group's smallest pending id, or the entry after its last
/// delivered one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trim_keeps_every_entry_a_group_still_needs() {
    let Some(url) = redis_url("trim_keeps_every_entry_a_group_still_needs") else {
        return;
    };
    let stream = unique("trim");
    let mut c = conn(&url).await;
    for i in 0..10 {
        publish(&mut c, &stream, &format!("m{i}"), "{}").await;
    }
    let relay = StreamRelay::open(&url, RelayOptions::new(&stream)).unwrap();
    assert_eq!(relay.trim().await.unwrap(), 0, "no group: no trim");
    assert_eq!(int(&mut c, &["XLEN", &stream]).await, 10);
    let ids: Vec<String> = range(&mut c, &stream)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    for g in ["g1", "g2"] {
        cmd(&mut c, &["XGROUP", "CREATE", &stream, g, "0"]).await;
    }
    // g1 reads 6 and acknowledges the first 4 (entries 5 and 6 pending)
    cmd(
        &mut c,
        &[
            "XREADGROUP",
            "GROUP",
            "g1",
            "a",
            "COUNT",
            "6",
            "STREAMS",
            &stream,
            ">",
        ],
    )
    .await;
    for id in &ids[..4] {
        cmd(&mut c, &["XACK", &stream, "g1", id]).await;
    }
    // g2 reads 3 and acknowledges them all
    cmd(
        &mut c,
        &[
            "XREADGROUP",
            "GROUP",
            "g2",
            "b",
            "COUNT",
            "3",
            "STREAMS",
            &stream,
            ">",
        ],
    )
    .await;
    for id in &ids[..3] {
        cmd(&mut c, &["XACK", &stream, "g2", id]).await;
    }
    // g2 still needs entry 4, g1 entry 5: the first 3 go
    assert_eq!(relay.trim().await.unwrap(), 3);
    let left: Vec<String> = range(&mut c, &stream)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(left, ids[3..].to_vec());
    assert_eq!(relay.trim().await.unwrap(), 0, "nothing more is read");
}

/// consumer: each message runs once through the inbox, duplicates (a relay retry) are
/// acknowledged without running, and nothing is left pending. A second group processes
/// every message too (the inbox key includes the group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_processes_each_message_once_per_group() {
    let Some(url) = redis_url("consumer_processes_each_message_once_per_group") else {
        return;
    };
    let stream = unique("once");
    let (_dir, store) = store().await;
    let mut c = conn(&url).await;
    let pay =
        StreamConsumer::start(&url, store.clone(), effect("pay"), fast(&stream, "pay")).unwrap();
    let ship =
        StreamConsumer::start(&url, store.clone(), effect("ship"), fast(&stream, "ship")).unwrap();
    for i in 0..30 {
        publish(&mut c, &stream, &format!("m{i}"), "{}").await;
        if i % 6 == 0 {
            publish(&mut c, &stream, &format!("m{i}"), "{}").await; // a relay retry
        }
    }
    until("both groups to see all 35 entries", || {
        let (p, s) = (pay.counters(), ship.counters());
        p.processed + p.duplicates == 35 && s.processed + s.duplicates == 35
    })
    .await;
    for (consumer, group) in [(&pay, "pay"), (&ship, "ship")] {
        let k = consumer.counters();
        assert_eq!(
            (k.processed, k.duplicates, k.failed, k.dead_lettered),
            (30, 5, 0, 0),
            "{group}"
        );
        assert_eq!(
            effects(&store, if group == "pay" { "pay" } else { "ship" }).await,
            30
        );
    }
    until_pending_zero(&mut c, &stream, &["pay", "ship"]).await;
    pay.shutdown().await;
    ship.shutdown().await;
}

async fn until_pending_zero(
    c: &mut redis::aio::MultiplexedConnection,
    stream: &str,
    groups: &[&str],
) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut total = 0;
        for g in groups {
            total += pending(c, stream, g).await;
        }
        if total == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{total} entries still pending");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// dead letters: a permanent failure goes to the dead-letter stream at once, a message
/// that keeps failing after `max_deliveries`; both with the reason, acknowledged, and
/// the good messages around them processed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_messages_end_in_the_dead_letter_stream() {
    let Some(url) = redis_url("failing_messages_end_in_the_dead_letter_stream") else {
        return;
    };
    let stream = unique("dead");
    let (_dir, store) = store().await;
    let mut c = conn(&url).await;
    let consumer =
        StreamConsumer::start(&url, store.clone(), effect("pay"), fast(&stream, "pay")).unwrap();
    publish(&mut c, &stream, "good-1", "{}").await;
    publish(&mut c, &stream, "poison", "poison").await;
    publish(&mut c, &stream, "flaky", "flaky").await;
    publish(&mut c, &stream, "good-2", "{}").await;
    let dead = format!("{stream}:dead");
    let deadline = Instant::now() + PATIENCE;
    while int(&mut c, &["XLEN", &dead]).await < 2 {
        assert!(
            Instant::now() < deadline,
            "not dead-lettered: {:?}",
            consumer.counters()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let letters = range(&mut c, &dead).await;
    assert_eq!(letters.len(), 2);
    let poison = letters
        .iter()
        .find(|(_, f)| field(f, "msg_id") == "poison")
        .unwrap();
    assert_eq!(field(&poison.1, "dead.reason"), "cannot be processed");
    assert_eq!(field(&poison.1, "dead.deliveries"), "1");
    assert_eq!(field(&poison.1, "dead.group"), "pay");
    let flaky = letters
        .iter()
        .find(|(_, f)| field(f, "msg_id") == "flaky")
        .unwrap();
    assert!(
        field(&flaky.1, "dead.reason").contains("downstream down"),
        "{flaky:?}"
    );
    assert_eq!(field(&flaky.1, "dead.deliveries"), "3");
    assert_eq!(field(&flaky.1, "payload"), "flaky");
    until_pending_zero(&mut c, &stream, &["pay"]).await;
    assert_eq!(effects(&store, "pay").await, 2);
    let k = consumer.counters();
    assert_eq!((k.processed, k.dead_lettered), (2, 2), "{k:?}");
    consumer.shutdown().await;
}

/// take-over: entries delivered to a consumer that died (never acknowledged) are taken
/// over once idle past `reclaim_idle` and processed; a pending entry trimmed from the
/// stream meanwhile is acknowledged away. On start a consumer first drains its own
/// pending entries (delivered to its name before a crash).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_entries_of_dead_consumers_and_of_a_restart_are_processed() {
    let Some(url) = redis_url("pending_entries_of_dead_consumers_and_of_a_restart_are_processed")
    else {
        return;
    };
    let stream = unique("reclaim");
    let (_dir, store) = store().await;
    let mut c = conn(&url).await;
    cmd(
        &mut c,
        &["XGROUP", "CREATE", &stream, "pay", "0", "MKSTREAM"],
    )
    .await;
    for i in 0..6 {
        publish(&mut c, &stream, &format!("m{i}"), "{}").await;
    }
    // a consumer that dies after reading 3; then "me" reads 2 and crashes
    cmd(
        &mut c,
        &[
            "XREADGROUP",
            "GROUP",
            "pay",
            "dead-one",
            "COUNT",
            "3",
            "STREAMS",
            &stream,
            ">",
        ],
    )
    .await;
    cmd(
        &mut c,
        &[
            "XREADGROUP",
            "GROUP",
            "pay",
            "me",
            "COUNT",
            "2",
            "STREAMS",
            &stream,
            ">",
        ],
    )
    .await;
    // the dead one's first entry is trimmed away while pending
    let first = range(&mut c, &stream).await[0].0.clone();
    cmd(&mut c, &["XDEL", &stream, &first]).await;
    assert_eq!(pending(&mut c, &stream, "pay").await, 5);

    let consumer = StreamConsumer::start(
        &url,
        store.clone(),
        effect("pay"),
        fast(&stream, "pay").consumer_name(Some("me".to_owned())),
    )
    .unwrap();
    until_pending_zero(&mut c, &stream, &["pay"]).await;
    // m0 was trimmed: 5 effects (m1..m5)
    assert_eq!(effects(&store, "pay").await, 5);
    let k = consumer.counters();
    assert_eq!(k.processed, 5, "{k:?}");
    assert_eq!(
        k.reclaimed, 2,
        "two live entries of the dead consumer: {k:?}"
    );
    assert_eq!(k.trimmed_acked, 1, "{k:?}");
    consumer.shutdown().await;
}

/// bad options are refused before anything starts: a reclaim idle time not longer than
/// the handler timeout would hand a live consumer's entry to a second one.
#[tokio::test]
async fn consumer_refuses_a_reclaim_idle_within_the_handler_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("db.sqlite"))
        .await
        .unwrap();
    let options = ConsumerOptions::new("s", "g")
        .handler_timeout(Duration::from_secs(30))
        .reclaim_idle(Duration::from_secs(30));
    let e =
        StreamConsumer::start("redis://127.0.0.1:1/", store, effect("pay"), options).unwrap_err();
    assert_eq!(e.kind(), backstop_core::ErrorKind::Config);
    assert!(e.to_string().contains("reclaim_idle"), "{e}");
}

/// key lock: exclusive while held; released only by its own token (an expired lock
/// taken by another holder is left alone); bad TTLs refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_lock_is_exclusive_and_released_by_its_holder_only() {
    let Some(url) = redis_url("key_lock_is_exclusive_and_released_by_its_holder_only") else {
        return;
    };
    let locks = backstop_redis::KeyLock::open(&url, format!("{}:", unique("lock"))).unwrap();
    let a = locks
        .acquire("k", Duration::from_secs(10))
        .await
        .unwrap()
        .expect("free");
    assert!(locks
        .acquire("k", Duration::from_secs(10))
        .await
        .unwrap()
        .is_none());
    assert!(locks.release(&a).await.unwrap());
    // expired, then taken by b: a's late release must not free b's lock
    let a = locks
        .acquire("k", Duration::from_millis(50))
        .await
        .unwrap()
        .expect("free");
    tokio::time::sleep(Duration::from_millis(120)).await;
    let b = locks
        .acquire("k", Duration::from_secs(10))
        .await
        .unwrap()
        .expect("expired");
    assert!(!locks.release(&a).await.unwrap());
    assert!(
        locks
            .acquire("k", Duration::from_secs(10))
            .await
            .unwrap()
            .is_none(),
        "b still holds it"
    );
    assert!(locks.release(&b).await.unwrap());
    let e = locks.acquire("k", Duration::ZERO).await.unwrap_err();
    assert_eq!(e.kind(), backstop_core::ErrorKind::InvalidInput);
}

/// key lock in the consumer: a message whose business key another holder locked is left
/// pending (not run, not acknowledged), the others run; taken over again and again past
/// `max_deliveries` (3) while the lock is held, it is not dead-lettered (a delivery that
/// found its key locked does not count); once the lock is released the message is taken
/// over and runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_leaves_a_locked_business_key_pending() {
    let Some(url) = redis_url("a_consumer_leaves_a_locked_business_key_pending") else {
        return;
    };
    let stream = unique("locked");
    let (_dir, store) = store().await;
    let mut c = conn(&url).await;
    let outside =
        backstop_redis::KeyLock::open(&url, format!("backstop:lock:{stream}:pay:")).unwrap();
    let held = outside
        .acquire("order-m1", Duration::from_secs(30))
        .await
        .unwrap()
        .expect("free");
    let consumer = StreamConsumer::start(
        &url,
        store.clone(),
        effect("pay"),
        fast(&stream, "pay").key_lock(Some(Duration::from_secs(5))),
    )
    .unwrap();
    for i in 0..3 {
        publish(&mut c, &stream, &format!("m{i}"), "{}").await;
    }
    until("the two free keys", || consumer.counters().processed == 2).await;
    // past reclaim_idle (0.8 s) four times: still locked, more deliveries than 3
    tokio::time::sleep(Duration::from_millis(4000)).await;
    let k = consumer.counters();
    assert!(k.lock_busy >= 4, "{k:?}");
    assert_eq!(k.dead_lettered, 0, "{k:?}");
    assert_eq!(k.processed, 2);
    assert_eq!(pending(&mut c, &stream, "pay").await, 1);
    assert!(outside.release(&held).await.unwrap());
    until_pending_zero(&mut c, &stream, &["pay"]).await;
    assert_eq!(effects(&store, "pay").await, 3);
    assert_eq!(consumer.counters().dead_lettered, 0);
    assert_eq!(int(&mut c, &["XLEN", &format!("{stream}:dead")]).await, 0);
    consumer.shutdown().await;
}
