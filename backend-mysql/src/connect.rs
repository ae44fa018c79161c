//! The first connection, and MySQL's errors as backstop errors.

use std::time::Duration;

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;
use sqlx::mysql::{MySqlConnectOptions, MySqlDatabaseError};

/// A pooled connection idle at least this long is pinged before it is handed out.
pub(crate) const IDLE_PING_AFTER: Duration = Duration::from_secs(1);

/// The MySQL error number of a database error.
pub(crate) fn error_number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(|e| e.number()),
        _ => None,
    }
}

/// A sqlx error as a backstop error (core's table of MySQL's error numbers). The store
/// names the operation.
pub(crate) fn my_err(e: sqlx::Error) -> Error {
    backstop_core::tx::sqlx_error(e)
}

/// Open one connection outside the pool and close it, so a store that cannot connect
/// says why. The pool reports any failed connect as "pool timed out while waiting for an
/// open connection", and only after its acquire timeout. A refused connection is
/// temporary, and so is a connect timeout. A host that does not resolve, refused
/// credentials or a missing database are configuration errors. The message names the
/// server and the user, never the password.
pub(crate) async fn first_connection(
    connect: &MySqlConnectOptions,
    timeout: Duration,
) -> Result<()> {
    const OP: &str = "open_store";
    let server = format!(
        "{}:{} as user {:?}",
        connect.get_host(),
        connect.get_port(),
        connect.get_username()
    );
    let attempt = sqlx::ConnectOptions::connect(connect);
    let e = match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(conn)) => {
            let _ = sqlx::Connection::close(conn).await;
            return Ok(());
        }
        Ok(Err(e)) => e,
        Err(_) => {
            return Err(ConnectFailure::TimedOut.error(
                "MySQL",
                &server,
                format!("no answer in {timeout:?}"),
            ))
        }
    };
    let cause = match &e {
        sqlx::Error::Tls(_) => Some(ConnectFailure::Tls),
        sqlx::Error::Io(io) => {
            ConnectFailure::of_io(io).or_else(|| ConnectFailure::of_tls(&io.to_string()))
        }
        sqlx::Error::Database(_) => match error_number(&e) {
            Some(1045) => Some(ConnectFailure::AccessDenied),
            Some(1049) => Some(ConnectFailure::UnknownDatabase),
            _ => None,
        },
        _ => None,
    };
    Err(match cause {
        Some(cause) => {
            let detail = e.to_string();
            cause.error("MySQL", &server, detail).with_source(e)
        }
        None => my_err(e).with_operation(OP),
    })
}

/// What every pooled connection runs once, when it opens: READ COMMITTED (no gap locks
/// to deadlock with inserts), and on a Galera node (`wsrep_on`) a check that the node
/// may serve (`wsrep_ready`: it belongs to the cluster's primary component; refused, the
/// pool tries again, on the next node of a URL naming several) and
/// `wsrep_sync_wait = 7`: each read, update, delete and insert first waits until the node
/// has applied every write-set the cluster committed before it. Without it a completion
/// on one node may not yet see its claim made on another (and be refused as a lost
/// lease), and a duplicate key may go unseen until the commit fails certification.
///
/// A store whose connections go to `every_node` also replicates each statement of a
/// transaction as it runs (streaming replication, one statement a fragment): its row
/// changes are certified and applied on every node, their locks held there, before the
/// next statement. Without it two nodes' transactions writing one row both committed
/// under load (the guide's Scale-out chapter): a lock held on one node only orders
/// nothing, and certification at `COMMIT` let the conflict through.
pub(crate) async fn session_setup(
    conn: &mut sqlx::MySqlConnection,
    every_node: bool,
) -> sqlx::Result<()> {
    use sqlx::Executor;
    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .await?;
    if !is_galera(&mut *conn).await? {
        return Ok(());
    }
    let ready: Option<(String, String)> = sqlx::query_as("SHOW STATUS LIKE 'wsrep_ready'")
        .fetch_optional(&mut *conn)
        .await?;
    if !matches!(ready, Some((_, on)) if on.eq_ignore_ascii_case("ON")) {
        return Err(sqlx::Error::Protocol(
            "this Galera node is not ready (wsrep_ready is OFF: it is not part of the primary component)"
                .into(),
        ));
    }
    conn.execute("SET SESSION wsrep_sync_wait = 7").await?;
    if every_node {
        conn.execute(
            "SET SESSION wsrep_trx_fragment_unit = 'statements', wsrep_trx_fragment_size = 1",
        )
        .await?;
    }
    Ok(())
}

/// Whether a node serves, read on a new connection: `Some(true)` in the primary
/// component (`wsrep_ready`) and caught up with the cluster (`wsrep_local_state` 4,
/// `Synced`), `Some(false)` in the primary component but a joiner still applying what it
/// missed or a donor, `None` outside it. A server without Galera: `Some(true)`.
pub(crate) async fn node_state(conn: &mut sqlx::MySqlConnection) -> sqlx::Result<Option<bool>> {
    if !is_galera(&mut *conn).await? {
        return Ok(Some(true));
    }
    let rows: Vec<(String, String)> =
        sqlx::query_as("SHOW STATUS WHERE Variable_name IN ('wsrep_ready', 'wsrep_local_state')")
            .fetch_all(&mut *conn)
            .await?;
    let value = |name: &str| {
        rows.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    if !value("wsrep_ready").is_some_and(|v| v.eq_ignore_ascii_case("ON")) {
        return Ok(None);
    }
    Ok(Some(value("wsrep_local_state") == Some("4")))
}

/// Whether the server is a Galera cluster's node (`wsrep_on`; MySQL has no such variable).
pub(crate) async fn is_galera<'c, E>(conn: E) -> sqlx::Result<bool>
where
    E: sqlx::Executor<'c, Database = sqlx::MySql>,
{
    let wsrep: Option<(String, String)> = sqlx::query_as("SHOW VARIABLES LIKE 'wsrep_on'")
        .fetch_optional(conn)
        .await?;
    Ok(matches!(wsrep, Some((_, on)) if on.eq_ignore_ascii_case("ON")))
}
