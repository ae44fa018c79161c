//! Across processes: wake-up latency (commit in A → handler start in B), the relay's
//! throughput next to a raw `XADD` loop, and the consumer's throughput with the inbox
//! next to a raw `XREADGROUP` + insert loop.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use backstop::redis::redis::{self, Value};
use backstop::redis::{ConsumerOptions, RedisNotifier, RelayOptions, StreamConsumer, StreamRelay};
use backstop::{
    handler_fn, AnyStore, Engine, EngineConfig, HandlerError, HandlerOptions, Notifier, Task,
};

use crate::raw::{histogram, record, EVENT, ORDERS, TABLE};
use crate::sys::{self, Row};
use crate::{enqueue_with_order, lat, wait_succeeded, Target};

/// The time between one task's start and the next enqueue in the sparse latency rows,
/// the same for backstop and its peers.
pub const SPARSE_GAP: Duration = Duration::from_millis(20);

fn idle() -> EngineConfig {
    EngineConfig::default()
        .first_poll_delay(Duration::from_secs(3600))
        .poll_interval(Duration::from_secs(3600))
        .retention(None)
}

async fn redis_conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis")
}

fn unique(what: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "bench-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// One task at a time: process A commits a business row + task (and, on Redis, publishes
/// after commit); process B's idle engine (its poller an hour away) is woken and starts
/// it. PostgreSQL: `NOTIFY` in the enqueue transaction; MySQL and SQLite: Redis pub/sub.
/// `back_to_back`: each enqueue right after the previous task's start (a steady
/// producer); otherwise 20 ms apart (as River's and graphile-worker's sparse rows), more
/// than the store's announcement window.
pub async fn wakeup_latency(
    t: &Target,
    redis_url: Option<&str>,
    count: usize,
    back_to_back: bool,
) -> Option<Row> {
    let via_redis = t.backend != "postgres";
    if via_redis && redis_url.is_none() {
        eprintln!(
            "   wake-up latency on {}: no BACKSTOP_BENCH_REDIS_URL",
            t.backend
        );
        return None;
    }
    t.raw.reset().await;
    let store_a = t.store(2).await;
    let store_b = t.store(4).await;
    let channel = unique("wake");
    let notifier = |store: &AnyStore| -> Arc<dyn Notifier> {
        match (store, redis_url) {
            (AnyStore::Postgres(p), _) => Arc::new(p.listener().expect("listener")),
            (_, Some(url)) => {
                Arc::new(RedisNotifier::open(url, channel.clone()).expect("notifier"))
            }
            _ => unreachable!("checked above"),
        }
    };
    let (na, nb) = (notifier(&store_a), notifier(&store_b));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let b = Engine::builder(store_b)
        .config(idle())
        .handler(
            EVENT,
            handler_fn(move |task: Task| {
                let _ = tx.send((task.biz_key.clone(), Instant::now()));
                async { Ok::<_, HandlerError>(()) }
            }),
            HandlerOptions::default(),
        )
        .notifier(Arc::clone(&nb))
        .start()
        .expect("engine B");
    // B listens once a probe wakes it
    'probe: for i in 0.. {
        enqueue_with_order(&store_a, &format!("probe{i}"), None).await;
        na.notify(EVENT).await.expect("notify");
        let until = Instant::now() + Duration::from_millis(200);
        while Instant::now() < until {
            if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(20), rx.recv()).await {
                break 'probe;
            }
        }
        assert!(i < 100, "B never woke");
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    while rx.try_recv().is_ok() {}
    let mut h = histogram();
    let m = sys::Meter::start();
    for i in 0..count {
        let key = format!("w{i}");
        enqueue_with_order(&store_a, &key, None).await;
        let t0 = Instant::now();
        na.notify(EVENT).await.expect("notify"); // after commit (a no-op on PostgreSQL)
        loop {
            let (k, started) = rx.recv().await.expect("handler ran");
            if k == key {
                record(&mut h, started - t0);
                break;
            }
        }
        if !back_to_back {
            // apart by more than the store's announcement window (5 ms)
            tokio::time::sleep(SPARSE_GAP).await;
        }
    }
    let (rss, cpu) = m.stop();
    b.shutdown().await;
    Some(Row {
        backend: t.backend.into(),
        scenario: format!(
            "wake-up latency{} ({count} tasks, commit in A → start in B)",
            if back_to_back { ", back to back" } else { "" }
        ),
        lat: lat(&h),
        rss_mb: rss,
        cpu_s: cpu,
        note: if via_redis {
            "B idle (no poll within the run), woken by Redis pub/sub published after commit".into()
        } else {
            "B idle (no poll within the run), woken by NOTIFY sent in the enqueue transaction"
                .into()
        },
        ..Row::default()
    })
}

fn xadd(stream: &str, i: usize) -> redis::Cmd {
    let mut c = redis::cmd("XADD");
    c.arg(stream)
        .arg("*")
        .arg("msg_id")
        .arg(format!("m{i}"))
        .arg("event_type")
        .arg(EVENT)
        .arg("biz_key")
        .arg(format!("b{i}"))
        .arg("payload")
        .arg("{}");
    c
}

/// `n` due tasks relayed by an engine (16 at a time) next to `n` `XADD`s from 16 loops.
pub async fn relay_throughput(t: &Target, redis_url: &str, n: usize) -> Row {
    t.raw.reset().await;
    t.raw.bulk_insert(n, 0).await;
    let store = t.store(8).await;
    let stream = unique("relay");
    let relay = StreamRelay::open(redis_url, RelayOptions::new(&stream).trim_interval(None))
        .expect("relay");
    let m = sys::Meter::start();
    let t0 = Instant::now();
    let engine = Engine::builder(store.clone())
        .config(
            EngineConfig::default()
                .first_poll_delay(Duration::ZERO)
                .poll_interval(Duration::from_millis(20))
                .retention(None),
        )
        .handler(EVENT, relay, HandlerOptions::default().concurrency(16))
        .start()
        .expect("engine");
    wait_succeeded(&store, n as u64).await;
    let elapsed = t0.elapsed();
    let (rss, cpu) = m.stop();
    engine.shutdown().await;
    let mut c = redis_conn(redis_url).await;
    let _: Value = redis::cmd("DEL")
        .arg(&stream)
        .query_async(&mut c)
        .await
        .expect("del");

    // raw: the same entries, 16 loops on one multiplexed connection
    let raw_stream = unique("relay-raw");
    let next = Arc::new(AtomicUsize::new(0));
    let r0 = Instant::now();
    let loops: Vec<_> = (0..16)
        .map(|_| {
            let (mut c, next, s) = (c.clone(), Arc::clone(&next), raw_stream.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return;
                    }
                    let _: Value = xadd(&s, i).query_async(&mut c).await.expect("xadd");
                }
            })
        })
        .collect();
    for l in loops {
        l.await.expect("join");
    }
    let raw = r0.elapsed();
    let _: Value = redis::cmd("DEL")
        .arg(&raw_stream)
        .query_async(&mut c)
        .await
        .expect("del");
    Row {
        backend: t.backend.into(),
        scenario: format!("relay {n} tasks → stream"),
        tps: Some(n as f64 / elapsed.as_secs_f64()),
        base_tps: Some(n as f64 / raw.as_secs_f64()),
        rss_mb: rss,
        cpu_s: cpu,
        note: "engine + StreamRelay, concurrency 16 (claim, XADD, mark); raw: XADD from 16 loops"
            .into(),
        ..Row::default()
    }
}

/// Empty the inbox and the effects table.
async fn clear_inbox(store: &AnyStore) {
    let sql = format!("DELETE FROM {TABLE}_inbox");
    let effects = format!("DELETE FROM {ORDERS}");
    match store {
        AnyStore::Sqlite(s) => s
            .transaction(move |tx| {
                tx.execute_batch(&format!("{sql}; {effects};"))
                    .map_err(|e| {
                        backstop::Error::new(
                            backstop::ErrorKind::Unexpected,
                            "bench",
                            e.to_string(),
                        )
                    })
            })
            .await
            .expect("clear"),
        AnyStore::Postgres(p) => p
            .client()
            .await
            .expect("client")
            .batch_execute(&format!("{sql}; {effects};"))
            .await
            .expect("clear"),
        AnyStore::MySql(m) => {
            for q in [sql, effects] {
                sqlx::query(sqlx::AssertSqlSafe(q))
                    .execute(m.pool())
                    .await
                    .expect("clear");
            }
        }
        _ => unreachable!(),
    }
}

/// Insert the effect row of `msg_id` (the business write of the consumer benchmark).
fn effect_sql(backend: &str) -> String {
    match backend {
        "postgres" => format!("INSERT INTO {ORDERS} (id) VALUES ($1)"),
        "mysql" => format!("INSERT INTO {ORDERS} (id) VALUES (?)"),
        _ => format!("INSERT INTO {ORDERS} (id) VALUES (?1)"),
    }
}

/// Fill `stream` with `n` entries (pipelined).
async fn fill(c: &mut redis::aio::MultiplexedConnection, stream: &str, n: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut p = redis::pipe();
        for &i in chunk {
            p.add_command(xadd(stream, i));
        }
        let _: Value = p.query_async(c).await.expect("fill");
    }
}

/// `n` stream entries consumed by a `StreamConsumer` (batch 16) through the inbox, each
/// with one business insert, next to a raw loop: `XREADGROUP COUNT 16`, per entry one
/// transaction inserting the inbox row and the business row, `XACK`.
pub async fn consumer_throughput(t: &Target, redis_url: &str, n: usize) -> Row {
    t.raw.reset().await;
    let store = t.store(4).await;
    clear_inbox(&store).await;
    let mut c = redis_conn(redis_url).await;
    let stream = unique("consume");
    fill(&mut c, &stream, n).await;
    let options = ConsumerOptions::new(&stream, "bench")
        .block(Duration::from_millis(100))
        .inbox_retention(None);
    let sql = effect_sql(t.backend);
    let m = sys::Meter::start();
    let t0 = Instant::now();
    let consumer = match &store {
        AnyStore::Sqlite(s) => StreamConsumer::start(
            redis_url,
            s.clone(),
            backstop::sqlite::sqlite_handler(move |tx, m| {
                tx.execute(&sql, [&m.id]).map_err(HandlerError::retry)?;
                Ok(())
            }),
            options,
        ),
        AnyStore::Postgres(p) => StreamConsumer::start(
            redis_url,
            p.clone(),
            backstop::postgres::pg_handler(move |tx, m| {
                let sql = sql.clone();
                Box::pin(async move {
                    tx.execute(&sql, &[&m.id]).await?;
                    Ok(())
                })
            }),
            options,
        ),
        AnyStore::MySql(my) => StreamConsumer::start(
            redis_url,
            my.clone(),
            backstop::mysql::mysql_handler(move |conn, m| {
                let sql = sql.clone();
                Box::pin(async move {
                    sqlx::query(sqlx::AssertSqlSafe(sql))
                        .bind(&m.id)
                        .execute(conn)
                        .await?;
                    Ok(())
                })
            }),
            options,
        ),
        _ => unreachable!(),
    }
    .expect("consumer");
    while (consumer.counters().processed as usize) < n {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = t0.elapsed();
    let (rss, cpu) = m.stop();
    consumer.shutdown().await;

    clear_inbox(&store).await;
    let raw_stream = unique("consume-raw");
    fill(&mut c, &raw_stream, n).await;
    let _: Value = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&raw_stream)
        .arg("raw")
        .arg("0")
        .query_async(&mut c)
        .await
        .expect("group");
    let r0 = Instant::now();
    let mut done = 0;
    while done < n {
        let v: Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg("raw")
            .arg("c")
            .arg("COUNT")
            .arg(16)
            .arg("STREAMS")
            .arg(&raw_stream)
            .arg(">")
            .query_async(&mut c)
            .await
            .expect("read");
        for (id, msg) in entries(&v) {
            raw_inbox_effect(&store, t.backend, &msg).await;
            let _: Value = redis::cmd("XACK")
                .arg(&raw_stream)
                .arg("raw")
                .arg(&id)
                .query_async(&mut c)
                .await
                .expect("ack");
            done += 1;
        }
    }
    let raw = r0.elapsed();
    for s in [&stream, &raw_stream] {
        let _: Value = redis::cmd("DEL")
            .arg(s)
            .query_async(&mut c)
            .await
            .expect("del");
    }
    clear_inbox(&store).await;
    Row {
        backend: t.backend.into(),
        scenario: format!("consume {n} entries through the inbox"),
        tps: Some(n as f64 / elapsed.as_secs_f64()),
        base_tps: Some(n as f64 / raw.as_secs_f64()),
        rss_mb: rss,
        cpu_s: cpu,
        note: "StreamConsumer, batch 16, one business insert per message; raw: XREADGROUP 16 + (inbox insert, business insert) per transaction + XACK".into(),
        ..Row::default()
    }
}

/// `(entry id, msg_id)` of an `XREADGROUP` reply.
fn entries(v: &Value) -> Vec<(String, String)> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        _ => String::new(),
    };
    let mut out = Vec::new();
    let Value::Array(streams) = v else { return out };
    for s in streams {
        let Value::Array(kv) = s else { continue };
        let Some(Value::Array(items)) = kv.get(1) else {
            continue;
        };
        for item in items {
            let Value::Array(parts) = item else { continue };
            let id = parts.first().map(text).unwrap_or_default();
            let Some(Value::Array(fields)) = parts.get(1) else {
                continue;
            };
            let msg = fields
                .chunks(2)
                .find(|p| p.first().map(text).as_deref() == Some("msg_id"))
                .and_then(|p| p.get(1).map(text))
                .unwrap_or_default();
            out.push((id, msg));
        }
    }
    out
}

/// The raw transaction: inbox row (skip when present), business row, commit.
async fn raw_inbox_effect(store: &AnyStore, backend: &str, msg: &str) {
    let inbox = format!("{TABLE}_inbox");
    let effect = effect_sql(backend);
    match store {
        AnyStore::Sqlite(s) => {
            let msg = msg.to_owned();
            s.transaction(move |tx| {
                let n = tx
                    .execute(
                        &format!("INSERT INTO {inbox} (consumer, message_id, processed_at) VALUES ('raw', ?1, 0) ON CONFLICT DO NOTHING"),
                        [&msg],
                    )
                    .map_err(|e| backstop::Error::new(backstop::ErrorKind::Unexpected, "bench", e.to_string()))?;
                if n == 1 {
                    tx.execute(&effect, [&msg]).map_err(|e| {
                        backstop::Error::new(backstop::ErrorKind::Unexpected, "bench", e.to_string())
                    })?;
                }
                Ok::<_, backstop::Error>(())
            })
            .await
            .expect("raw tx");
        }
        AnyStore::Postgres(p) => {
            let mut client = p.client().await.expect("client");
            let tx = client.transaction().await.expect("begin");
            let ins = tx
                .prepare_cached(&format!("INSERT INTO {inbox} (consumer, message_id, processed_at) VALUES ('raw', $1, now()) ON CONFLICT DO NOTHING"))
                .await
                .expect("prepare");
            if tx.execute(&ins, &[&msg]).await.expect("inbox") == 1 {
                let e = tx.prepare_cached(&effect).await.expect("prepare");
                tx.execute(&e, &[&msg]).await.expect("effect");
            }
            tx.commit().await.expect("commit");
        }
        AnyStore::MySql(m) => {
            let mut tx = m.pool().begin().await.expect("begin");
            let n = sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT IGNORE INTO {inbox} (consumer, message_id, processed_at) VALUES ('raw', ?, NOW(3))"
            )))
            .bind(msg)
            .execute(&mut *tx)
            .await
            .expect("inbox")
            .rows_affected();
            if n == 1 {
                sqlx::query(sqlx::AssertSqlSafe(effect))
                    .bind(msg)
                    .execute(&mut *tx)
                    .await
                    .expect("effect");
            }
            tx.commit().await.expect("commit");
        }
        _ => unreachable!(),
    }
}
