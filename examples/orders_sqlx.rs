//! An axum order service on PostgreSQL whose handler writes the order and enqueues its
//! task in ONE sqlx transaction: the application's own `sqlx::PgPool`, the task table
//! beside its tables.
//!
//! ```sh
//! BACKSTOP_URL=postgres://app@localhost/app cargo run --example orders_sqlx --features postgres-sqlx
//! ```
//!
//! The example starts the service on a free port, places orders through HTTP as a client
//! would (one of them refused after its writes, so its transaction rolls back), waits
//! until every task of a placed order has run, and checks that the refused order left
//! neither a row nor a task.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use backstop::{
    AnyStore, Engine, EngineConfig, HandlerError, HandlerOptions, JsonHandler, NewTask, Status,
    Task, TaskKind, TaskStore, Transactional,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The task: ship an order.
#[derive(serde::Serialize, serde::Deserialize)]
struct Ship {
    order_id: String,
}

impl TaskKind for Ship {
    const EVENT_TYPE: &'static str = "SHIP_ORDER_SQLX";
    fn biz_key(&self) -> String {
        self.order_id.clone()
    }
}

/// Marks the order shipped, on the application's pool. Idempotent.
struct ShipOrder(sqlx::PgPool);

#[backstop::async_trait]
impl JsonHandler for ShipOrder {
    type Payload = Ship;
    async fn handle(&self, ship: Ship, _task: &Task) -> Result<(), HandlerError> {
        sqlx::query("UPDATE sqlx_orders SET shipped = true WHERE id = $1")
            .bind(&ship.order_id)
            .execute(&self.0)
            .await
            .map_err(HandlerError::retry)?;
        Ok(())
    }
}

struct App {
    pool: sqlx::PgPool,
    store: AnyStore,
    engine: Engine<AnyStore>,
}

/// `POST /orders/{id}`: the order row and its task in one transaction, then the task is
/// run at once (the poller is the safety net). An id starting with `refuse-` is refused
/// after both writes: the transaction rolls back and leaves nothing.
async fn place_order(
    State(app): State<Arc<App>>,
    Path(order_id): Path<String>,
) -> (StatusCode, String) {
    match place(&app, &order_id).await {
        Ok(Some(task_id)) => (
            StatusCode::CREATED,
            format!("order {order_id}: task {task_id}"),
        ),
        Ok(None) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("order {order_id} refused"),
        ),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("error: {e}")),
    }
}

async fn place(app: &App, order_id: &str) -> Result<Option<i64>, BoxError> {
    let mut tx = app.pool.begin().await?;
    sqlx::query("INSERT INTO sqlx_orders (id, shipped) VALUES ($1, false)")
        .bind(order_id)
        .execute(&mut *tx)
        .await?;
    let task = NewTask::of(&Ship {
        order_id: order_id.to_owned(),
    });
    let enqueued = app.store.enqueue_in(&mut *tx, &task).await?;
    if order_id.starts_with("refuse-") {
        tx.rollback().await?;
        return Ok(None);
    }
    tx.commit().await?;
    app.engine.run_now(&enqueued).await;
    Ok(Some(enqueued.id))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), BoxError> {
    let url = std::env::var("BACKSTOP_URL")
        .ok()
        .filter(|u| u.starts_with("postgres"))
        .ok_or("set BACKSTOP_URL to a postgres:// URL")?;
    let pool = sqlx::PgPool::connect(&url).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS sqlx_orders (id TEXT PRIMARY KEY, shipped BOOLEAN NOT NULL)",
    )
    .execute(&pool)
    .await?;
    let store = backstop::connect(&url).await?;
    store.migrate().await?;
    let engine = Engine::builder(store.clone())
        .config(EngineConfig::default().poll_interval(Duration::from_millis(200)))
        .kind(ShipOrder(pool.clone()), HandlerOptions::default())
        .start()?;
    let app = Arc::new(App {
        pool: pool.clone(),
        store: store.clone(),
        engine,
    });

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let router = Router::new()
        .route("/orders/{id}", post(place_order))
        .with_state(Arc::clone(&app));
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    println!("order service on http://{addr}");

    let run_id = std::process::id();
    let mut placed = Vec::new();
    for n in 0..5 {
        let id = format!("o{run_id}-{n}");
        let reply = post_to(addr, &format!("/orders/{id}")).await?;
        println!("POST /orders/{id} -> {reply}");
        placed.push(id);
    }
    let refused = format!("refuse-{run_id}");
    println!(
        "POST /orders/{refused} -> {}",
        post_to(addr, &format!("/orders/{refused}")).await?
    );

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let shipped: i64 =
            sqlx::query_scalar("SELECT count(*) FROM sqlx_orders WHERE id = ANY($1) AND shipped")
                .bind(&placed)
                .fetch_one(&pool)
                .await?;
        if shipped == placed.len() as i64 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{shipped} of {} orders shipped in time", placed.len()).into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let filter = backstop::TaskFilter::default()
        .event_type(Ship::EVENT_TYPE)
        .biz_key(refused.clone());
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM sqlx_orders WHERE id = $1")
        .bind(&refused)
        .fetch_one(&pool)
        .await?;
    if left != 0 || !store.list(&filter).await?.is_empty() {
        return Err("the refused order left a row or a task".into());
    }
    // after shutdown: a handler's write (shipped) commits before its task's outcome,
    // which the engine writes in batches a moment later; shutdown writes what is left
    app.engine.shutdown().await;
    for id in &placed {
        let filter = backstop::TaskFilter::default()
            .event_type(Ship::EVENT_TYPE)
            .biz_key(id.clone());
        let tasks = store.list(&filter).await?;
        if tasks.len() != 1 || tasks[0].status != Status::Succeeded {
            return Err(format!("order {id}: expected one succeeded task").into());
        }
    }
    let c = app.engine.counters();
    println!(
        "{} orders shipped ({} ran ahead, {} by the poller); the refused one left nothing",
        placed.len(),
        c.run_ahead,
        c.polled
    );
    server.abort();
    Ok(())
}

/// A bare HTTP/1.1 `POST` with no body; the response's status line and body.
async fn post_to(addr: std::net::SocketAddr, path: &str) -> Result<String, BoxError> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response.lines().next().unwrap_or_default().to_owned();
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    Ok(format!("{status}: {body}"))
}
