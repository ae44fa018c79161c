//! The consumer: a child process reading the relay's stream as a member of the suite's
//! consumer group and applying each message through the database inbox. Its effect is
//! one row per message in the effects table, which has no unique key on purpose: a
//! message applied twice leaves two rows, and the driver counts them.

use std::time::Duration;

use backstop::redis::{ConsumerOptions, StreamConsumer};
use backstop::{AnyStore, HandlerError};

use crate::BoxError;

/// The consumer group every consumer process joins.
pub const GROUP: &str = "chaos";
/// An entry pending this long with a consumer is taken over by another (a killed
/// consumer's, or one whose handling failed).
pub const RECLAIM_IDLE: Duration = Duration::from_secs(2);
/// How often each consumer looks for such entries.
pub const RECLAIM_INTERVAL: Duration = Duration::from_millis(500);

/// The consumers' options: short timings, so that faults play out in seconds, and
/// deliveries enough that no fault dead-letters a message.
pub fn options(stream: &str) -> ConsumerOptions {
    ConsumerOptions::new(stream, GROUP)
        .batch(16)
        .block(Duration::from_millis(500))
        .handler_timeout(Duration::from_secs(1))
        .reclaim_idle(RECLAIM_IDLE)
        .reclaim_interval(RECLAIM_INTERVAL)
        .max_deliveries(1000)
        .inbox_retention(None)
}

/// Consume until SIGTERM (graceful) or a signal that ends the process.
pub async fn run(
    store_url: &str,
    redis_url: &str,
    stream: &str,
    effects: &str,
) -> Result<(), BoxError> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let store = crate::worker::connect(store_url).await?;
    let options = options(stream);
    let consumer = match store {
        AnyStore::Sqlite(s) => {
            let sql = format!("INSERT INTO {effects} (msg_id, biz_key) VALUES (?1, ?2)");
            StreamConsumer::start(
                redis_url,
                s,
                backstop::sqlite::sqlite_handler(move |tx, m| {
                    tx.execute(&sql, [&m.id, &m.biz_key])
                        .map_err(HandlerError::retry)?;
                    Ok(())
                }),
                options,
            )?
        }
        AnyStore::Postgres(p) => {
            let sql = format!("INSERT INTO {effects} (msg_id, biz_key) VALUES ($1, $2)");
            StreamConsumer::start(
                redis_url,
                p,
                backstop::postgres::pg_handler(move |tx, m| {
                    let sql = sql.clone();
                    Box::pin(async move {
                        tx.execute(&sql, &[&m.id, &m.biz_key]).await?;
                        Ok(())
                    })
                }),
                options,
            )?
        }
        AnyStore::MySql(my) => {
            let sql = format!("INSERT INTO {effects} (msg_id, biz_key) VALUES (?, ?)");
            StreamConsumer::start(
                redis_url,
                my,
                backstop::mysql::mysql_handler(move |conn, m| {
                    let sql = sql.clone();
                    Box::pin(async move {
                        sqlx::query(sqlx::AssertSqlSafe(sql))
                            .bind(&m.id)
                            .bind(&m.biz_key)
                            .execute(conn)
                            .await?;
                        Ok(())
                    })
                }),
                options,
            )?
        }
        other => return Err(format!("no inbox for {other:?}").into()),
    };
    term.recv().await;
    let counters = consumer.counters();
    consumer.shutdown().await;
    eprintln!("consumer {}: {counters:?}", std::process::id());
    Ok(())
}
