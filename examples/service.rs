//! An order service that runs unchanged on SQLite, PostgreSQL or MySQL/MariaDB: the database is chosen
//! by the `BACKSTOP_URL` environment variable alone.
//!
//! ```sh
//! cargo run --example service --all-features                                   # SQLite in a temp dir
//! BACKSTOP_URL=postgres://app@localhost/app cargo run --example service --all-features
//! BACKSTOP_URL=mysql://app:secret@localhost/app cargo run --example service --all-features
//! ```
//!
//! The application talks to its database through sqlx's `Any` driver, its own pool. Each
//! order is written together with its SHIP_ORDER task in one local transaction of that
//! pool — one `enqueue_in` call, whatever the database — then run ahead; the handler
//! marks the order shipped (idempotently). Nothing here names a backend: only the SQL
//! text's placeholders differ (`$1` on PostgreSQL, `?` elsewhere).

use std::time::{Duration, Instant};

use backstop::{
    Engine, EngineConfig, Enqueued, HandlerError, HandlerOptions, JsonHandler, NewTask,
    RetryPolicy, Status, Task, TaskKind, TaskStore, Transactional,
};
use sqlx::AnyPool;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const ORDERS: usize = 20;

/// The task kind: its payload, event type, business key and retry policy in one place.
#[derive(serde::Serialize, serde::Deserialize)]
struct Ship {
    order_id: String,
    item: String,
}

impl TaskKind for Ship {
    const EVENT_TYPE: &'static str = "SHIP_ORDER";
    fn biz_key(&self) -> String {
        self.order_id.clone()
    }
    fn retry() -> RetryPolicy {
        RetryPolicy::exponential(5, Duration::from_millis(200))
    }
}

/// The application's database: its pool, and its SQL for this database.
#[derive(Clone)]
struct Db {
    pool: AnyPool,
    /// `$1` on PostgreSQL, `?` on MySQL and SQLite.
    p1: &'static str,
}

impl Db {
    async fn open(url: &str) -> Result<Db, BoxError> {
        sqlx::any::install_default_drivers();
        // sqlx knows MariaDB by the mysql: scheme
        let url = url.replacen("mariadb:", "mysql:", 1);
        let pool = AnyPool::connect(&url).await?;
        let p1 = if url.starts_with("postgres") {
            "$1"
        } else {
            "?"
        };
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS orders (id VARCHAR(64) PRIMARY KEY, shipped BOOLEAN NOT NULL)",
        )
        .execute(&pool)
        .await?;
        Ok(Db { pool, p1 })
    }

    fn sql(&self, text: &str) -> sqlx::AssertSqlSafe<String> {
        sqlx::AssertSqlSafe(text.replace("{1}", self.p1))
    }
}

/// Marks the order shipped. Idempotent: running it twice leaves the same row.
struct ShipOrder(Db);

#[backstop::async_trait]
impl JsonHandler for ShipOrder {
    type Payload = Ship;
    async fn handle(&self, ship: Ship, _task: &Task) -> Result<(), HandlerError> {
        let db = &self.0;
        sqlx::query(db.sql("UPDATE orders SET shipped = TRUE WHERE id = {1}"))
            .bind(&ship.order_id)
            .execute(&db.pool)
            .await
            .map_err(HandlerError::retry)?;
        let _ = ship.item;
        Ok(())
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let temp = std::env::temp_dir().join(format!("backstop-service-{}", std::process::id()));
    let url = match std::env::var("BACKSTOP_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => format!("sqlite:{}", temp.join("orders.db").display()),
    };
    let result = match std::fs::create_dir_all(&temp) {
        Ok(()) => run(&url).await,
        Err(e) => Err(format!("cannot create {}: {e}", temp.display()).into()),
    };
    let _ = std::fs::remove_dir_all(&temp);
    // errors as a user reads them (Display), not as a debugger does
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run(url: &str) -> Result<(), BoxError> {
    let started = Instant::now();
    // the store first: it creates an SQLite file the application's pool then opens
    let store = backstop::connect(url).await?;
    store.migrate().await?;
    let db = Db::open(url).await?;
    println!("order service on {}", store.dialect());

    let engine = Engine::builder(store.clone())
        .config(
            EngineConfig::default()
                .poll_interval(Duration::from_millis(200))
                .first_poll_delay(Duration::from_millis(200)),
        )
        .kind(
            ShipOrder(db.clone()),
            HandlerOptions::default().concurrency(8),
        )
        .start()?;

    let run_id = chrono_like_id();
    let mut ids = Vec::new();
    for n in 0..ORDERS {
        let order_id = format!("{run_id}-{n}");
        let task = NewTask::of(&Ship {
            order_id: order_id.clone(),
            item: format!("item {n}"),
        });
        let enqueued = place_order(&store, &db, &order_id, task).await?;
        engine.run_now(&enqueued).await; // best effort: never fails; the poller is the safety net
        ids.push(enqueued.id);
    }

    let deadline = Instant::now() + Duration::from_secs(30);
    for id in &ids {
        while store.get(*id).await?.map(|t| t.status) != Some(Status::Succeeded) {
            if Instant::now() > deadline {
                return Err(format!("task {id} did not succeed in time").into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    engine.shutdown().await;
    let shipped: i64 =
        sqlx::query_scalar(db.sql("SELECT COUNT(*) FROM orders WHERE shipped AND id LIKE {1}"))
            .bind(format!("{run_id}-%"))
            .fetch_one(&db.pool)
            .await?;
    let c = engine.counters();
    println!(
        "placed {ORDERS} orders, shipped {shipped}: {} ran ahead, {} by the poller, in {} ms",
        c.run_ahead,
        c.polled,
        started.elapsed().as_millis()
    );
    if shipped != ORDERS as i64 {
        return Err(format!("expected {ORDERS} shipped orders, found {shipped}").into());
    }
    Ok(())
}

/// The business write and the task in ONE local transaction of the application's pool:
/// the same code on every database.
async fn place_order(
    store: &impl Transactional,
    db: &Db,
    order_id: &str,
    task: NewTask,
) -> Result<Enqueued, BoxError> {
    let mut tx = db.pool.begin().await?;
    sqlx::query(db.sql("INSERT INTO orders (id, shipped) VALUES ({1}, FALSE)"))
        .bind(order_id)
        .execute(&mut *tx)
        .await?;
    let enqueued = store.enqueue_in(&mut *tx, &task).await?;
    tx.commit().await?;
    Ok(enqueued)
}

fn chrono_like_id() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    format!("run{ms}")
}
