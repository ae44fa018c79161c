//! The outbox relayed to a broker, and a consumer that processes each message once.
//!
//! An **order service** writes each order and its `OrderPlaced` task in one local
//! transaction; its engine runs the [`StreamRelay`] handler, which publishes the task to
//! the Redis stream `orders`. A **payment service** reads the stream as the consumer
//! group `payments` and records each payment through its database inbox: the payment row
//! and the inbox row commit together, so a redelivered or republished message is paid
//! once.
//!
//! ```sh
//! # both services in one process (what scripts/test runs), Redis from BACKSTOP_REDIS_URL
//! BACKSTOP_REDIS_URL=redis://127.0.0.1:6379 cargo run --example relay --all-features
//! # or as two processes, each with its own database file, meeting on the stream `orders`
//! # (the payment service runs until stopped)
//! BACKSTOP_ROLE=payments BACKSTOP_DB=payments.db BACKSTOP_REDIS_URL=… cargo run --example relay --all-features
//! BACKSTOP_ROLE=orders   BACKSTOP_DB=orders.db   BACKSTOP_REDIS_URL=… cargo run --example relay --all-features
//! ```
//!
//! Both services use SQLite here; on PostgreSQL or MySQL the order service is the same
//! (see the `service` example for the transaction on each backend), and the payment
//! handler takes the backend's transaction (`backstop::postgres::pg_handler`,
//! `backstop::mysql::mysql_handler`).

use std::path::Path;
use std::time::{Duration, Instant};

use backstop::redis::{ConsumerOptions, RelayOptions, StreamConsumer, StreamRelay};
use backstop::sqlite::{sqlite_handler, SqliteStore};
use backstop::{
    Engine, EngineConfig, HandlerError, HandlerOptions, NewTask, Status, TaskKind, TaskStore,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const ORDERS: usize = 10;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), BoxError> {
    let redis = std::env::var("BACKSTOP_REDIS_URL")
        .map_err(|_| "set BACKSTOP_REDIS_URL to a Redis server (redis://host:port)")?;
    check_redis(&redis).await?;
    let role = std::env::var("BACKSTOP_ROLE").unwrap_or_default();
    let run = format!("{}", std::process::id());
    // Two processes (a role each) meet on the stream `orders`; both services in one
    // process use a stream of their own run, so runs do not see each other's orders.
    let stream = std::env::var("BACKSTOP_STREAM").unwrap_or_else(|_| {
        if role.is_empty() {
            format!("orders-{run}")
        } else {
            "orders".to_owned()
        }
    });
    let temp = std::env::temp_dir().join(format!("backstop-relay-{run}"));
    std::fs::create_dir_all(&temp)?;
    let db = |default: &str| {
        std::env::var("BACKSTOP_DB")
            .map(Into::into)
            .unwrap_or_else(|_| temp.join(default))
    };
    let result = match role.as_str() {
        "orders" => order_service(&db("orders.db"), &redis, &stream).await,
        "payments" => payment_service(&db("payments.db"), &redis, &stream, None).await,
        "" => {
            // both: payments first (its group reads the stream from the start anyway)
            let payments = {
                let (p, r, s) = (temp.join("payments.db"), redis.clone(), stream.clone());
                tokio::spawn(async move { payment_service(&p, &r, &s, Some(ORDERS)).await })
            };
            match order_service(&temp.join("orders.db"), &redis, &stream).await {
                Ok(()) => payments.await.map_err(|e| e.to_string())?,
                Err(e) => Err(e),
            }
        }
        other => Err(
            format!("BACKSTOP_ROLE must be orders or payments (or unset), not {other:?}").into(),
        ),
    };
    let _ = std::fs::remove_dir_all(&temp);
    result
}

/// Say at once when Redis cannot be reached, rather than after the services' timeouts.
async fn check_redis(url: &str) -> Result<(), BoxError> {
    let client = backstop::redis::redis::Client::open(url)
        .map_err(|e| format!("BACKSTOP_REDIS_URL {url:?} is not a Redis URL: {e}"))?;
    match tokio::time::timeout(
        Duration::from_secs(5),
        client.get_multiplexed_async_connection(),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("cannot reach Redis at {url}: {e}").into()),
        Err(_) => Err(format!("cannot reach Redis at {url}: no answer within 5 s").into()),
    }
}

/// The event the order service publishes: a task kind (its payload type names its event
/// type and business key), relayed to the stream as it is.
#[derive(serde::Serialize, serde::Deserialize)]
struct OrderPlaced {
    order_id: String,
    amount: i64,
}

impl TaskKind for OrderPlaced {
    const EVENT_TYPE: &'static str = "OrderPlaced";
    fn biz_key(&self) -> String {
        self.order_id.clone()
    }
}

/// Places orders: each order row and its `OrderPlaced` task commit together; the engine
/// relays the tasks to the stream.
async fn order_service(db: &Path, redis: &str, stream: &str) -> Result<(), BoxError> {
    let store = SqliteStore::open(db).await?;
    store.migrate().await?;
    store
        .transaction(|tx| {
            tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, amount INTEGER NOT NULL)",
            )?;
            Ok::<_, BoxError>(())
        })
        .await?;
    let relay = StreamRelay::open(redis, RelayOptions::new(stream).header("source", "orders"))?;
    let engine = Engine::builder(store.clone())
        .config(EngineConfig::default().first_poll_delay(Duration::from_millis(200)))
        .handler(
            OrderPlaced::EVENT_TYPE,
            relay,
            HandlerOptions::default().concurrency(4),
        )
        .start()?;

    let mut tasks = Vec::new();
    for n in 0..ORDERS {
        let order_id = format!("order-{n}");
        let task = NewTask::of(&OrderPlaced {
            order_id: order_id.clone(),
            amount: 100 + n as i64,
        });
        let enqueued = place_order(&store, order_id, 100 + n as i64, task).await?;
        engine.run_now(&enqueued).await; // best effort: the poller is the safety net
        tasks.push(enqueued.id);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for id in &tasks {
        while store.get(*id).await?.map(|t| t.status) != Some(Status::Succeeded) {
            if Instant::now() > deadline {
                return Err(format!("task {id} was not relayed in time").into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // A relay retry after a lost reply publishes a task twice; do it on purpose once to
    // show the payment service ignoring the duplicate.
    if let Some(first) = store.get(tasks[0]).await? {
        StreamRelay::open(redis, RelayOptions::new(stream))?
            .publish(&first)
            .await?;
    }
    engine.shutdown().await;
    println!(
        "orders: placed and relayed {ORDERS} orders to stream {stream:?} (one published twice)"
    );
    Ok(())
}

/// The business row and the task in one local transaction.
async fn place_order(
    store: &SqliteStore,
    order_id: String,
    amount: i64,
    task: NewTask,
) -> Result<backstop::Enqueued, BoxError> {
    store
        .transaction(move |tx| {
            tx.execute(
                "INSERT INTO orders (id, amount) VALUES (?1, ?2)",
                (&order_id, amount),
            )?;
            Ok::<_, BoxError>(tx.enqueue(&task)?)
        })
        .await
}

/// Records a payment per order, once: the payment row commits with the inbox row.
async fn payment_service(
    db: &Path,
    redis: &str,
    stream: &str,
    stop_after: Option<usize>,
) -> Result<(), BoxError> {
    let store = SqliteStore::open(db).await?;
    store.migrate().await?;
    store
        .transaction(|tx| {
            tx.execute_batch(
                "CREATE TABLE IF NOT EXISTS payments (order_id TEXT PRIMARY KEY, message_id TEXT NOT NULL)",
            )?;
            Ok::<_, BoxError>(())
        })
        .await?;
    let handler = sqlite_handler(|tx, message| {
        // the primary key would refuse a second payment: the inbox sees to it that
        // there is none
        tx.execute(
            "INSERT INTO payments (order_id, message_id) VALUES (?1, ?2)",
            [&message.biz_key, &message.id],
        )
        .map_err(HandlerError::retry)?;
        Ok(())
    });
    let consumer = StreamConsumer::start(
        redis,
        store.clone(),
        handler,
        ConsumerOptions::new(stream, "payments").block(Duration::from_millis(500)),
    )?;
    println!(
        "payments: consuming stream {stream:?} as {}",
        consumer.name()
    );
    let Some(expected) = stop_after else {
        // a standalone service runs until killed
        loop {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let k = consumer.counters();
        if k.processed as usize >= expected && k.duplicates >= 1 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("payments: only {k:?} in time").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let paid: i64 = store
        .transaction(|tx| {
            Ok::<_, BoxError>(tx.query_row("SELECT COUNT(*) FROM payments", [], |r| r.get(0))?)
        })
        .await?;
    let k = consumer.counters();
    consumer.shutdown().await;
    println!(
        "payments: {paid} orders paid once each; {} duplicate delivery ignored by the inbox",
        k.duplicates
    );
    if paid != expected as i64 {
        return Err(format!("expected {expected} payments, found {paid}").into());
    }
    Ok(())
}
