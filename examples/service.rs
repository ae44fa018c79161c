//! An order service that runs unchanged on SQLite, PostgreSQL or MySQL/MariaDB: the database is chosen
//! by the `BACKSTOP_URL` environment variable alone.
//!
//! ```sh
//! cargo run --example service --all-features                                   # SQLite in a temp dir
//! BACKSTOP_URL=postgres://app@localhost/app cargo run --example service --all-features
//! BACKSTOP_URL=mysql://app:secret@localhost/app cargo run --example service --all-features
//! ```
//!
//! Each order is written together with its SHIP_ORDER task in one local transaction —
//! on the backend's native transaction — then run ahead; the handler marks the order
//! shipped (idempotently). The only backend-specific code is that native transaction and
//! the business SQL; the engine, the handler options and the task API are the same.

use std::time::{Duration, Instant};

use backstop::{
    AnyStore, Engine, EngineConfig, Enqueued, HandlerError, HandlerOptions, JsonHandler, NewTask,
    RetryPolicy, Status, Task, TaskKind, TaskStore,
};

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

/// Marks the order shipped. Idempotent: running it twice leaves the same row.
struct ShipOrder(AnyStore);

#[backstop::async_trait]
impl JsonHandler for ShipOrder {
    type Payload = Ship;
    async fn handle(&self, ship: Ship, _task: &Task) -> Result<(), HandlerError> {
        match &self.0 {
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite(s) => {
                let id = ship.order_id.clone();
                s.transaction(move |tx| {
                    tx.execute("UPDATE orders SET shipped = 1 WHERE id = ?1", [&id])?;
                    Ok::<_, BoxError>(())
                })
                .await
                .map_err(HandlerError::retry)?;
            }
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(p) => {
                let client = p.client().await?;
                client
                    .execute(
                        "UPDATE orders SET shipped = true WHERE id = $1",
                        &[&ship.order_id],
                    )
                    .await?;
            }
            #[cfg(feature = "mysql")]
            AnyStore::MySql(m) => {
                backstop::mysql::sqlx::query("UPDATE orders SET shipped = TRUE WHERE id = ?")
                    .bind(&ship.order_id)
                    .execute(m.pool())
                    .await?;
            }
            #[allow(unreachable_patterns)]
            _ => return Err(HandlerError::fail("backend not supported by this example")),
        }
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
    let store = backstop::connect(url).await?;
    store.migrate().await?;
    create_orders_table(&store).await?;
    println!("order service on {}", backend_name(&store));

    let engine = Engine::builder(store.clone())
        .config(
            EngineConfig::default()
                .poll_interval(Duration::from_millis(200))
                .first_poll_delay(Duration::from_millis(200)),
        )
        .kind(
            ShipOrder(store.clone()),
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
        let enqueued = place_order(&store, &order_id, task).await?;
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
    let shipped = shipped_orders(&store, &run_id).await?;
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

/// The business write and the task in ONE local transaction, on the backend's native
/// transaction type.
async fn place_order(
    store: &AnyStore,
    order_id: &str,
    task: NewTask,
) -> Result<Enqueued, BoxError> {
    match store {
        #[cfg(feature = "sqlite")]
        AnyStore::Sqlite(s) => {
            let order_id = order_id.to_owned();
            s.transaction(move |tx| {
                tx.execute(
                    "INSERT INTO orders (id, shipped) VALUES (?1, 0)",
                    [&order_id],
                )?;
                Ok::<_, BoxError>(tx.enqueue(&task)?)
            })
            .await
        }
        #[cfg(feature = "postgres")]
        AnyStore::Postgres(p) => {
            let mut client = p.client().await?;
            let tx = client.transaction().await?;
            tx.execute(
                "INSERT INTO orders (id, shipped) VALUES ($1, false)",
                &[&order_id],
            )
            .await?;
            let enqueued = p.enqueue_tx(&tx, &task).await?;
            tx.commit().await?;
            Ok(enqueued)
        }
        #[cfg(feature = "mysql")]
        AnyStore::MySql(m) => {
            let mut tx = m.pool().begin().await?;
            backstop::mysql::sqlx::query("INSERT INTO orders (id, shipped) VALUES (?, FALSE)")
                .bind(order_id)
                .execute(&mut *tx)
                .await?;
            let enqueued = m.enqueue_tx(&mut tx, &task).await?;
            tx.commit().await?;
            Ok(enqueued)
        }
        #[allow(unreachable_patterns)]
        _ => Err("backend not supported by this example".into()),
    }
}

async fn create_orders_table(store: &AnyStore) -> Result<(), BoxError> {
    match store {
        #[cfg(feature = "sqlite")]
        AnyStore::Sqlite(s) => {
            s.transaction(|tx| {
                tx.execute_batch(
                    "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, shipped INTEGER NOT NULL)",
                )?;
                Ok::<_, BoxError>(())
            })
            .await
        }
        #[cfg(feature = "postgres")]
        AnyStore::Postgres(p) => {
            p.client()
                .await?
                .batch_execute(
                    "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, shipped BOOLEAN NOT NULL)",
                )
                .await?;
            Ok(())
        }
        #[cfg(feature = "mysql")]
        AnyStore::MySql(m) => {
            backstop::mysql::sqlx::query(
                "CREATE TABLE IF NOT EXISTS orders (id VARCHAR(64) PRIMARY KEY, shipped BOOLEAN NOT NULL) ENGINE = InnoDB",
            )
            .execute(m.pool())
            .await?;
            Ok(())
        }
        #[allow(unreachable_patterns)]
        _ => Err("backend not supported by this example".into()),
    }
}

async fn shipped_orders(store: &AnyStore, run_id: &str) -> Result<i64, BoxError> {
    let pattern = format!("{run_id}-%");
    match store {
        #[cfg(feature = "sqlite")]
        AnyStore::Sqlite(s) => {
            s.transaction(move |tx| {
                Ok::<_, BoxError>(tx.query_row(
                    "SELECT COUNT(*) FROM orders WHERE shipped = 1 AND id LIKE ?1",
                    [&pattern],
                    |r| r.get(0),
                )?)
            })
            .await
        }
        #[cfg(feature = "postgres")]
        AnyStore::Postgres(p) => Ok(p
            .client()
            .await?
            .query_one(
                "SELECT count(*) FROM orders WHERE shipped AND id LIKE $1",
                &[&pattern],
            )
            .await?
            .try_get(0)?),
        #[cfg(feature = "mysql")]
        AnyStore::MySql(m) => Ok(backstop::mysql::sqlx::query_scalar(
            "SELECT COUNT(*) FROM orders WHERE shipped AND id LIKE ?",
        )
        .bind(&pattern)
        .fetch_one(m.pool())
        .await?),
        #[allow(unreachable_patterns)]
        _ => Err("backend not supported by this example".into()),
    }
}

fn backend_name(store: &AnyStore) -> &'static str {
    match store {
        #[cfg(feature = "sqlite")]
        AnyStore::Sqlite(_) => "SQLite",
        #[cfg(feature = "postgres")]
        AnyStore::Postgres(_) => "PostgreSQL",
        #[cfg(feature = "mysql")]
        AnyStore::MySql(m) => {
            if m.server_version().contains("MariaDB") {
                "MariaDB"
            } else {
                "MySQL"
            }
        }
        #[allow(unreachable_patterns)]
        _ => "another backend",
    }
}

/// A run id so that repeated runs against one database do not collide.
fn chrono_like_id() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    format!("run{ms}")
}
