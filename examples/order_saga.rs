//! An order saga across two services, each with its own database, through the relay.
//!
//! - The **order service** (PostgreSQL) writes each order and its `OrderPlaced` task in
//!   one local transaction; its engine relays the task to a Redis stream.
//! - The **fulfilment service** (MariaDB or MySQL) reads the stream as the consumer group
//!   `fulfilment`. Its inbox transaction starts the saga `fulfil` for the order
//!   (`start_saga_tx`): the message is processed once, and the saga started once.
//! - The saga: reserve the stock beside locking the coupon (both compensated), then
//!   charge the card. Each step writes fulfilment's tables in a local transaction
//!   guarded by the participant barrier, so a step run twice writes once and a
//!   compensation of a step that never ran does nothing.
//! - One card is declined on purpose: its payment refuses, so its stock and coupon are
//!   compensated (the stock released, the coupon free again). The other orders complete.
//!
//! At the end the example checks both databases and the barrier's records, and exits
//! non-zero on any difference.
//!
//! ```sh
//! BACKSTOP_POSTGRES_URL=postgres://… BACKSTOP_MYSQL_URL=mysql://…/db \
//! BACKSTOP_REDIS_URL=redis://127.0.0.1:6379 cargo run --example order_saga --all-features
//! ```

use std::time::{Duration, Instant};

use backstop::mysql::{mysql_handler, MySqlOptions, MySqlStore};
use backstop::postgres::{PgOptions, PgStore};
use backstop::redis::{ConsumerOptions, RelayOptions, StreamConsumer, StreamRelay};
use backstop::{
    BranchOp, Engine, EngineConfig, HandlerError, HandlerOptions, NewTask, RetryPolicy, SagaDef,
    SagaStatus, SagaStep, SagaSteps, StepContext, StepError, StoreConfig, TaskKind, TaskStore,
};
use serde::{Deserialize, Serialize};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The card the payment provider declines.
const DECLINED: &str = "4000-0000-0000-0002";
const ORDERS: usize = 4;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn env(name: &str, what: &str) -> Result<String, BoxError> {
    std::env::var(name).map_err(|_| format!("set {name} to {what}").into())
}

/// What the order service publishes, and the saga's input.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct OrderPlaced {
    order_id: String,
    amount: i64,
    card: String,
    sku: String,
    coupon: String,
}

impl TaskKind for OrderPlaced {
    const EVENT_TYPE: &'static str = "OrderPlaced";
    fn biz_key(&self) -> String {
        self.order_id.clone()
    }
}

async fn run() -> Result<(), BoxError> {
    let pg_url = env("BACKSTOP_POSTGRES_URL", "a PostgreSQL URL")?;
    let my_url = env("BACKSTOP_MYSQL_URL", "a MariaDB/MySQL URL with a database")?;
    let redis = env("BACKSTOP_REDIS_URL", "a Redis URL")?;
    let run = format!("{}-{}", std::process::id(), chrono::Utc::now().timestamp());
    let stream = format!("orders-{run}");
    let config = StoreConfig::default().table("order_saga");

    // the fulfilment service: its tables, its saga, the consumer that starts it
    let fulfilment =
        MySqlStore::connect_with(&my_url, MySqlOptions::default().config(config.clone())).await?;
    fulfilment.migrate().await?;
    for ddl in [
        "CREATE TABLE IF NOT EXISTS saga_ex_stock (sku VARCHAR(64) PRIMARY KEY, held INT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS saga_ex_coupons (code VARCHAR(64) PRIMARY KEY, order_id VARCHAR(64) NULL)",
        "CREATE TABLE IF NOT EXISTS saga_ex_payments (order_id VARCHAR(64) PRIMARY KEY, amount BIGINT NOT NULL)",
    ] {
        sqlx::query(ddl).execute(fulfilment.pool()).await?;
    }
    let sku = format!("sku-{run}");
    sqlx::query("INSERT INTO saga_ex_stock (sku, held) VALUES (?, 0)")
        .bind(&sku)
        .execute(fulfilment.pool())
        .await?;
    let orders: Vec<OrderPlaced> = (0..ORDERS)
        .map(|n| OrderPlaced {
            order_id: format!("order-{run}-{n}"),
            amount: 100 + n as i64,
            card: if n == 2 {
                DECLINED
            } else {
                "4242-4242-4242-4242"
            }
            .to_owned(),
            sku: sku.clone(),
            coupon: format!("C-{run}-{n}"),
        })
        .collect();
    for o in &orders {
        sqlx::query("INSERT INTO saga_ex_coupons (code, order_id) VALUES (?, NULL)")
            .bind(&o.coupon)
            .execute(fulfilment.pool())
            .await?;
    }
    let def = fulfil()?;
    let fast = EngineConfig::default()
        .poll_interval(Duration::from_millis(100))
        .first_poll_delay(Duration::from_millis(100));
    let saga_engine = Engine::builder(fulfilment.clone())
        .config(fast.clone())
        .saga(def.clone(), steps(&fulfilment), HandlerOptions::default())
        .start()?;
    let consumer = {
        let (store, def) = (fulfilment.clone(), def.clone());
        let handler = mysql_handler(move |conn, message| {
            let (store, def) = (store.clone(), def.clone());
            Box::pin(async move {
                let order: OrderPlaced =
                    serde_json::from_str(&message.payload).map_err(HandlerError::fail)?;
                // the saga starts in the inbox's transaction: once per message
                let start = def
                    .start(&order.order_id, &order)
                    .map_err(HandlerError::fail)?;
                store
                    .start_saga_tx(conn, &start)
                    .await
                    .map_err(HandlerError::retry)?;
                Ok(())
            })
        });
        StreamConsumer::start(
            &redis,
            fulfilment.clone(),
            handler,
            ConsumerOptions::new(&stream, "fulfilment").block(Duration::from_millis(200)),
        )?
    };

    // the order service: each order and its event in one PostgreSQL transaction
    let order_store =
        PgStore::connect_with(&pg_url, PgOptions::default().config(config.clone())).await?;
    order_store.migrate().await?;
    order_store
        .client()
        .await?
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS saga_ex_orders (
                 id TEXT PRIMARY KEY, amount BIGINT NOT NULL, card TEXT NOT NULL)",
        )
        .await?;
    let relay = StreamRelay::open(&redis, RelayOptions::new(&stream))?;
    let order_engine = Engine::builder(order_store.clone())
        .config(fast)
        .handler(OrderPlaced::EVENT_TYPE, relay, HandlerOptions::default())
        .start()?;
    for o in &orders {
        let mut client = order_store.client().await?;
        let tx = client.transaction().await?;
        tx.execute(
            "INSERT INTO saga_ex_orders (id, amount, card) VALUES ($1, $2, $3)",
            &[&o.order_id, &o.amount, &o.card],
        )
        .await?;
        let enqueued = order_store.enqueue_tx(&tx, &NewTask::of(o)).await?;
        tx.commit().await?;
        order_engine.run_now(&enqueued).await;
    }
    println!("orders: placed {ORDERS} orders in PostgreSQL, relayed to stream {stream:?}");

    // wait for every saga to end
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ended = Vec::new();
    for o in &orders {
        loop {
            let saga = fulfilment.saga(def.name(), &o.order_id).await?;
            if let Some(s) = saga.filter(|s| s.status.is_final()) {
                ended.push(s);
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("the saga of {} did not end in time", o.order_id).into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let k = consumer.counters();
    consumer.shutdown().await;
    order_engine.shutdown().await;
    saga_engine.shutdown().await;

    check(&fulfilment, &orders, &ended, &sku).await?;
    println!(
        "fulfilment: {} messages consumed once each through the MariaDB inbox; {} sagas completed, \
         1 compensated (card declined: stock released, coupon free again)",
        k.processed,
        ORDERS - 1
    );
    Ok(())
}

/// `fulfil`: stock beside coupon (both compensated), then payment; quick retries.
fn fulfil() -> backstop::Result<SagaDef> {
    let quick = RetryPolicy::fixed(5, Duration::from_millis(200));
    SagaDef::builder("fulfil")
        .parallel([
            SagaStep::new("stock").compensated().retry(quick),
            SagaStep::new("coupon").compensated().retry(quick),
        ])
        .step(SagaStep::new("payment").retry(quick))
        .build()
}

/// Run `write` on a fulfilment transaction if the barrier lets this call of the step
/// run; the barrier's record commits with the write.
async fn guarded<F>(store: &MySqlStore, cx: &StepContext, write: F) -> Result<bool, StepError>
where
    F: for<'c> FnOnce(
        &'c mut sqlx::MySqlConnection,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<bool, StepError>> + Send + 'c>,
    >,
{
    let mut tx = store.pool().begin().await?;
    let ran = if store.barrier_tx(&mut tx, &cx.branch()?).await?.should_run() {
        write(&mut tx).await?
    } else {
        false
    };
    tx.commit().await?;
    Ok(ran)
}

/// The steps' code: each writes fulfilment's tables behind the barrier.
fn steps(store: &MySqlStore) -> SagaSteps {
    let s = store.clone();
    let stock = move |delta: i32| {
        let s = s.clone();
        move |cx: StepContext| {
            let s = s.clone();
            async move {
                let order: OrderPlaced = cx.input()?;
                let sku = order.sku.clone();
                guarded(&s, &cx, move |tx| {
                    Box::pin(async move {
                        sqlx::query("UPDATE saga_ex_stock SET held = held + ? WHERE sku = ?")
                            .bind(delta)
                            .bind(&sku)
                            .execute(&mut *tx)
                            .await?;
                        Ok(true)
                    })
                })
                .await?;
                Ok::<_, StepError>(())
            }
        }
    };
    let s = store.clone();
    let coupon = move |lock: bool| {
        let s = s.clone();
        move |cx: StepContext| {
            let s = s.clone();
            async move {
                let order: OrderPlaced = cx.input()?;
                let (code, id) = (order.coupon.clone(), order.order_id.clone());
                guarded(&s, &cx, move |tx| {
                    Box::pin(async move {
                        let sql = if lock {
                            "UPDATE saga_ex_coupons SET order_id = ? WHERE code = ? AND order_id IS NULL"
                        } else {
                            "UPDATE saga_ex_coupons SET order_id = NULL WHERE order_id = ? AND code = ?"
                        };
                        sqlx::query(sql).bind(&id).bind(&code).execute(&mut *tx).await?;
                        Ok(true)
                    })
                })
                .await?;
                Ok::<_, StepError>(())
            }
        }
    };
    let s = store.clone();
    let payment = move |cx: StepContext| {
        let s = s.clone();
        async move {
            let order: OrderPlaced = cx.input()?;
            if order.card == DECLINED {
                return Err(StepError::refuse("card declined"));
            }
            guarded(&s, &cx, move |tx| {
                Box::pin(async move {
                    sqlx::query("INSERT INTO saga_ex_payments (order_id, amount) VALUES (?, ?)")
                        .bind(&order.order_id)
                        .bind(order.amount)
                        .execute(&mut *tx)
                        .await?;
                    Ok(true)
                })
            })
            .await?;
            Ok(())
        }
    };
    SagaSteps::new()
        .action("stock", stock(1))
        .compensation("stock", stock(-1))
        .action("coupon", coupon(true))
        .compensation("coupon", coupon(false))
        .action("payment", payment)
}

/// The databases as the sagas left them.
async fn check(
    store: &MySqlStore,
    orders: &[OrderPlaced],
    ended: &[backstop::Saga],
    sku: &str,
) -> Result<(), BoxError> {
    let mut problems = Vec::new();
    for (o, saga) in orders.iter().zip(ended) {
        let declined = o.card == DECLINED;
        let want = if declined {
            SagaStatus::Compensated
        } else {
            SagaStatus::Completed
        };
        if saga.status != want {
            problems.push(format!(
                "{}: saga {} ({:?})",
                o.order_id, saga.status, saga.reason
            ));
        }
        let holder: Option<Option<String>> =
            sqlx::query_scalar("SELECT order_id FROM saga_ex_coupons WHERE code = ?")
                .bind(&o.coupon)
                .fetch_optional(store.pool())
                .await?;
        let want_holder = (!declined).then(|| o.order_id.clone());
        if holder.flatten() != want_holder {
            problems.push(format!(
                "{}: coupon {} not as expected",
                o.order_id, o.coupon
            ));
        }
        let paid: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM saga_ex_payments WHERE order_id = ?")
                .bind(&o.order_id)
                .fetch_one(store.pool())
                .await?;
        if paid != i64::from(!declined) {
            problems.push(format!("{}: {paid} payments", o.order_id));
        }
        // the barrier's records explain what ran: the declined order's stock and coupon
        // were done and undone, its payment never written
        let records = store
            .barrier_records(&format!("saga:fulfil:{}", o.order_id))
            .await?;
        let ops = |branch: &str| {
            let mut ops: Vec<BranchOp> = records
                .iter()
                .filter(|r| r.branch_id == branch)
                .map(|r| r.op)
                .collect();
            ops.sort_by_key(|op| op.as_str());
            ops
        };
        let (stock_ops, payment_ops) = (ops("stock"), ops("payment"));
        let expected = if declined {
            (vec![BranchOp::Action, BranchOp::Compensate], vec![])
        } else {
            (vec![BranchOp::Action], vec![BranchOp::Action])
        };
        if (stock_ops.clone(), payment_ops.clone()) != expected {
            problems.push(format!(
                "{}: barrier records stock {stock_ops:?}, payment {payment_ops:?}",
                o.order_id
            ));
        }
    }
    let held: i32 = sqlx::query_scalar("SELECT held FROM saga_ex_stock WHERE sku = ?")
        .bind(sku)
        .fetch_one(store.pool())
        .await?;
    if held != ORDERS as i32 - 1 {
        problems.push(format!("stock held {held}, expected {}", ORDERS - 1));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; ").into())
    }
}
