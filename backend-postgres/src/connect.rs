//! The first connection, and PostgreSQL's errors as backstop errors.

use std::time::Duration;

use backstop_core::driver::prelude::*;
#[cfg(doc)]
use backstop_core::TaskStore;
use tokio_postgres::error::SqlState;

use crate::tls;

/// Map a tokio-postgres error to a backstop error, classifying the transient ones as
/// temporary and the rolled-back conflicts as contention. (The store names the operation.)
/// Open one connection outside the pool and close it, so a store that cannot connect
/// says why. The pool reports a failed connect as "error occurred while creating a new
/// object: error connecting to server", with the cause only in its source chain. A
/// refused connection and a connect timeout are temporary. A host that does not resolve,
/// refused credentials or a missing database are configuration errors. The message
/// names the server and the user, never the password.
pub(crate) async fn first_connection(
    config: &tokio_postgres::Config,
    tls: &tls::Tls,
    timeout: Duration,
) -> Result<()> {
    const OP: &str = "open_store";
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .zip(config.get_ports().iter().chain(std::iter::repeat(&5432)))
        .map(|(h, p)| match h {
            tokio_postgres::config::Host::Tcp(name) => format!("{name}:{p}"),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(dir) => format!("{}:{p}", dir.display()),
        })
        .collect();
    let server = format!(
        "{} as user {:?}",
        hosts.join(","),
        config.get_user().unwrap_or("(default)")
    );
    let e = match tokio::time::timeout(timeout, config.connect(tls.clone())).await {
        Ok(Ok((client, connection))) => {
            drop(client);
            // the connection ends once its client is gone
            let _ = connection.await;
            return Ok(());
        }
        Ok(Err(e)) => e,
        Err(_) => {
            return Err(ConnectFailure::TimedOut.error(
                "PostgreSQL",
                &server,
                format!("no answer in {timeout:?}"),
            ))
        }
    };
    let io = std::iter::successors(std::error::Error::source(&e), |s| s.source())
        .find_map(|s| s.downcast_ref::<std::io::Error>());
    let cause = match (e.code(), io) {
        (Some(c), _) if *c == SqlState::INVALID_CATALOG_NAME => {
            Some(ConnectFailure::UnknownDatabase)
        }
        (Some(c), _)
            if *c == SqlState::INVALID_PASSWORD
                || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            // pg_hba.conf refusing an unencrypted connection is about TLS
            tls_failure(&e).or(Some(ConnectFailure::AccessDenied))
        }
        (None, Some(io)) => ConnectFailure::of_io(io).or_else(|| tls_failure(&e)),
        (None, None) => tls_failure(&e),
        _ => None,
    };
    let detail = match (e.as_db_error(), io) {
        (Some(db), _) => db.message().to_owned(),
        (None, Some(io)) => io.to_string(),
        (None, None) => e.to_string(),
    };
    Err(match cause {
        Some(cause) => cause.error("PostgreSQL", &server, detail).with_source(e),
        None => pg_err(e).with_operation(OP),
    })
}

pub(crate) fn pg_err(e: tokio_postgres::Error) -> Error {
    let (kind, what) = match e.code() {
        None if e.is_closed() => (
            ErrorKind::Unavailable,
            "the connection is closed".to_owned(),
        ),
        None => (
            ErrorKind::Unavailable,
            "PostgreSQL connection failed".to_owned(),
        ),
        Some(code) => {
            let (kind, hint) = backstop_core::driver::postgres_error_kind(code.code());
            (kind, format!("PostgreSQL error {}{hint}", code.code()))
        }
    };
    Error::new(kind, "postgres", format!("{what}: {e}")).with_source(e)
}

/// A TLS failure of a first connection, read from the error and its sources (see
/// [`ConnectFailure::of_tls`]).
pub(crate) fn tls_failure(e: &tokio_postgres::Error) -> Option<ConnectFailure> {
    std::iter::successors(Some(e as &dyn std::error::Error), |s| s.source())
        .find_map(|s| ConnectFailure::of_tls(&s.to_string()))
}
