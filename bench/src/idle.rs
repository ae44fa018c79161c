//! The database load of idle engines (`--only idle-load`): several instances, each
//! handling many event types, none with anything due. What their polling costs the
//! server, as statements (transactions on PostgreSQL, `Questions` on MariaDB) per second
//! and the server's CPU, and what it costs the engines' process.

use std::time::{Duration, Instant};

use backstop::{
    handler_fn, Audit, Engine, EngineConfig, HandlerError, HandlerOptions, QueueChange, Task,
    TaskStore,
};

use crate::sys::{self, Row};
use crate::Target;

/// The server's statement counter: committed and rolled back transactions of the
/// bench's database on PostgreSQL (the server's other databases count their autovacuum
/// workers' transactions), `Questions` on MariaDB; `None` on SQLite.
async fn statements(t: &Target) -> Option<f64> {
    match t.backend {
        "postgres" => {
            let (c, conn) = tokio_postgres::connect(&t.url, tokio_postgres::NoTls)
                .await
                .ok()?;
            tokio::spawn(conn);
            let row = c
                .query_one(
                    "SELECT (xact_commit + xact_rollback)::float8 FROM pg_stat_database
                     WHERE datname = current_database()",
                    &[],
                )
                .await
                .ok()?;
            Some(row.get(0))
        }
        "mysql" => {
            let pool = sqlx::MySqlPool::connect(&t.url).await.ok()?;
            let (_, v): (String, String) = sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Questions'")
                .fetch_one(&pool)
                .await
                .ok()?;
            pool.close().await;
            v.parse().ok()
        }
        _ => None,
    }
}

/// Apply `change` to the queues of the first `n` idle event types, from a store of its
/// own that is dropped before this returns.
async fn set_queues(t: &Target, n: usize, change: QueueChange) {
    let admin = t.store(1).await;
    for i in 0..n {
        admin
            .set_queue(
                &format!("IDLE_{i}"),
                change,
                &Audit::new("bench", "idle paused"),
            )
            .await
            .expect("set the queue");
    }
}

/// `instances` engines, each handling `types` event types (the first `paused` of them
/// paused), polling every `poll`, idle for `window`: statements/s and CPU of the server
/// and of the engines.
pub async fn idle_load(
    t: &Target,
    types: usize,
    paused: usize,
    instances: usize,
    poll: Duration,
    window: Duration,
) -> Row {
    t.raw.reset().await;
    // Paused from a store of their own, dropped at once: PostgreSQL counts a session's
    // transactions when it ends or up to 10 s after it goes idle, which would land the
    // pauses in the window measured below.
    set_queues(t, paused, QueueChange::Pause).await;
    let mut engines = Vec::new();
    for _ in 0..instances {
        let mut builder = Engine::builder(t.store(2).await).config(
            EngineConfig::default()
                .poll_interval(poll)
                .first_poll_delay(Duration::ZERO)
                .retention(None)
                .backlog_gauges(false),
        );
        for i in 0..types {
            builder = builder.handler(
                format!("IDLE_{i}"),
                handler_fn(|_task: Task| async { Ok::<_, HandlerError>(()) }),
                HandlerOptions::default(),
            );
        }
        engines.push(builder.start().expect("engine"));
    }
    // past the start-up (type registration, the first polls)
    tokio::time::sleep(poll * 2).await;
    let (s0, c0) = (statements(t).await, t.server_cpu());
    let m = sys::Meter::start();
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let secs = t0.elapsed().as_secs_f64();
    let (_, ours) = m.stop();
    let (s1, c1) = (statements(t).await, t.server_cpu());
    for e in engines {
        e.shutdown().await;
    }
    // `reset` leaves the queue settings: the next scenario starts with none paused
    set_queues(t, paused, QueueChange::Resume).await;
    // the two counter reads are statements of their own
    let per_s = match (s0, s1) {
        (Some(a), Some(b)) => format!("{:.1} statements/s", (b - a - 2.0).max(0.0) / secs),
        _ => "statements not counted (no server)".into(),
    };
    let server = if t.backend == "sqlite" {
        String::new()
    } else {
        format!(", server CPU {:.2}% of a core", 100.0 * (c1 - c0) / secs)
    };
    Row {
        backend: t.backend.into(),
        scenario: format!(
            "idle: {types} event type(s){} × {instances} engine(s), poll every {} ms",
            match paused {
                0 => String::new(),
                n if n == types => " paused".to_owned(),
                n => format!(" ({n} paused)"),
            },
            poll.as_millis()
        ),
        note: format!(
            "{per_s}{server}, engines' CPU {:.2}% of a core, over {secs:.0} s",
            100.0 * ours / secs
        ),
        cpu_s: ours,
        ..Row::default()
    }
}
